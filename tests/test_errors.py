"""The error tree: one root, distinct exit codes, messages that name the place."""

import inspect

import datapipe.errors as errors


def test_every_error_derives_from_the_root_and_has_its_own_exit_code():
    classes = [
        c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, Exception)
    ]
    assert all(issubclass(c, errors.DatapipeError) for c in classes)
    own = [c for c in classes if "exit_code" in vars(c)]
    codes = [c.exit_code for c in own]
    assert len(codes) == len(set(codes)) and 0 not in codes


def test_shard_corrupt_error_names_shard_and_offset():
    e = errors.ShardCorruptError("s/shard-1.tar", "bad header", 1536)
    assert str(e) == "s/shard-1.tar at byte 1536: bad header"
    assert (e.shard, e.offset, e.exit_code) == ("s/shard-1.tar", 1536, 4)
