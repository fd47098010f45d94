"""A misspelt field asked of the Loader gets the near one, as a misspelt column does in a build."""

from __future__ import annotations

import pytest
from sample_data import make_dataset

from datapipe.errors import ConfigError
from datapipe.loader.loader import Loader


def test_a_misspelt_field_gets_the_near_one(tmp_path):
    url = make_dataset(tmp_path / "storage")
    with pytest.raises(
        ConfigError,
        match=r"^no field 'CLS' in this dataset; did you mean 'cls'\? \(fields: bin, cls\)$",
    ):
        Loader(url, batch_size=2, fields=["CLS"], num_workers=0)
    with pytest.raises(ConfigError, match=r"^no field 'label' in this dataset \(fields: "):
        Loader(url, batch_size=2, fields=["label"], num_workers=0)  # nothing near: the list
