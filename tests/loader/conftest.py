import pytest
from sample_data import make_dataset


@pytest.fixture
def toy(tmp_path) -> str:
    return make_dataset(tmp_path / "store")
