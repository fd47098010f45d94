"""A misspelt store folder or dataset name: said so, with the near name there is, by every command
that takes one."""

from __future__ import annotations

import pytest
from helpers.cli import datapipe_in_process as run
from sample_data import make_dataset


@pytest.mark.parametrize("command", ["info", "log", "verify", "gc", "du"])
def test_a_store_folder_that_does_not_exist_is_said_so_with_the_near_one(tmp_path, command):
    make_dataset(tmp_path / "storage", name="cars")
    out = run(command, "storag/cars", cwd=tmp_path)
    assert out.returncode == 3 and out.stderr == (
        f"error: storag: no such store: the folder {tmp_path / 'storag'} does not exist; "
        "did you mean 'storage'?\n"
    )


def test_ls_du_and_a_dataset_name_get_the_same_answers(tmp_path):
    make_dataset(tmp_path / "data" / "storage", name="cars")
    for args in (("ls", "data/storag"), ("du", "data/storag")):
        out = run(*args, cwd=tmp_path)
        assert out.returncode == 3 and out.stderr == (
            f"error: data/storag: no such store: the folder {tmp_path / 'data/storag'} does not "
            "exist; did you mean 'data/storage'?\n"
        ), args
    out = run("info", "data/storage/Cars", cwd=tmp_path)
    assert out.returncode == 3 and out.stderr == (
        "error: data/storage: no dataset 'Cars'; did you mean 'cars'? (datasets here: cars)\n"
    )
    out = run("du", "data/storage/cras", cwd=tmp_path)
    assert out.returncode == 3 and "no dataset 'cras'; did you mean 'cars'?" in out.stderr
    out = run("info", "elsewhere/cars", cwd=tmp_path)  # nothing near: where the store should be
    assert out.returncode == 3 and out.stderr == (
        f"error: elsewhere: no such store: the folder {tmp_path / 'elsewhere'} does not exist; "
        "give the store the build wrote to (build --out, default storage)\n"
    )


def test_an_object_store_prefix_gets_the_same_answer(tmp_path):
    make_dataset("memory://misspelt/storage", name="cars")  # fsspec's in-memory object store
    out = run("info", "memory://misspelt/storag/cars", cwd=tmp_path)
    assert out.returncode == 3 and out.stderr == (
        "error: memory://misspelt/storag: no such store: the folder memory://misspelt/storag does "
        "not exist; did you mean 'memory://misspelt/storage'?\n"
    )
