"""assemble_manifest: a new version's manifest from a build's pieces."""

from datapipe.versioning.manifest import REJECTED_NAME, Lineage, ShardEntry, StageCounts, assemble_manifest

SHARD = ShardEntry("shard-000000.tar", 3, 3072, "a" * 64, "shard-000000.tar.idx", 40, "b" * 64)


def test_field_kinds_of_every_partition_are_merged_in_name_order():
    m = assemble_manifest(
        "toy",
        "webdataset",
        [SHARD],
        [StageCounts("source", 3, 3)],
        [{"png": {"bytes"}, "cls": {"int"}}, {"cls": {"str"}}, {}],
        Lineage(seed=7),
    )
    assert m.fields == {"cls": "int|str", "png": "bytes"} and list(m.fields) == ["cls", "png"]
    assert m.shards == (SHARD,) and m.samples == 3 and m.lineage.seed == 7
    assert m.rejected is None and m.rejected_rows == 0


def test_rejected_rows_name_the_quarantine():
    stages = (StageCounts("source", 5, 4, 0, 1), StageCounts("stages[0].validate", 4, 3, 0, 1))
    m = assemble_manifest("toy", "tfrecord", iter([SHARD]), iter(stages), iter([]), Lineage())
    assert m.rejected == REJECTED_NAME and m.rejected_rows == 2 and m.stages == stages and m.fields == {}
    assert m.with_id().version == assemble_manifest("toy", "tfrecord", [SHARD], stages, [], Lineage()).with_id().version
