"""`import datapipe` stays light: no torch, dask, distributed, s3fs or web framework."""

import subprocess
import sys

HEAVY = ("torch", "dask", "distributed", "s3fs", "starlette", "uvicorn", "jinja2")


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
