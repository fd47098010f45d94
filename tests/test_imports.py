"""`import datapipe` stays light: no torch, dask, distributed, s3fs, tokenizers or web framework."""

import subprocess
import sys

HEAVY = ("torch", "dask", "distributed", "s3fs", "starlette", "uvicorn", "jinja2", "tokenizers")


def test_import_datapipe_is_light():
    code = f"import sys, datapipe; print([m for m in {HEAVY!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_formats_and_cli_do_not_pull_heavy_modules():
    code = (
        "import sys, datapipe.formats.shards, datapipe.cli.main; print([m for "
        f"m in {HEAVY!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_loader_api_does_not_pull_torch_until_it_iterates():
    code = (
        "import sys, datapipe; datapipe.Loader, datapipe.open_dataset; "
        f"print([m for m in {HEAVY!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_opening_a_dataset_reads_its_manifest_without_pydantic(tmp_path):
    # a manifest is read by typed_json in plain Python: pydantic's import and schema build would
    # cost every process that opens a dataset (each CLI call, each training run) a tenth of a second
    from sample_data import make_dataset

    url = make_dataset(tmp_path / "store")
    code = (
        f"import sys, datapipe; ds = datapipe.open_dataset({str(url)!r}); assert len(ds); "
        "print([m for m in ('pydantic', 'pydantic_core') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
