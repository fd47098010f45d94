"""`datapipe build` end to end: every stage, every source format, accounting, quarantine.

What a build makes is tested on threads in this process (the `in_process` client a small build
gets); what depends on worker processes (the same bytes whatever the workers, errors raised on a
worker, the digits example) on a real LocalCluster."""

import contextlib
import os

import pandas as pd
import pytest

from datapipe.errors import BuildError, ConfigError
from datapipe.versioning.manifest import REJECTED_NAME
from datapipe.versioning.store import Store


def accounting_holds(manifest) -> None:
    stages = manifest.stages
    for s in stages:
        assert s.rows_in == s.rows_out + s.dropped + s.rejected, s
    for a, b in zip(stages, stages[1:], strict=False):
        assert a.rows_out == b.rows_in
    assert stages[-1].rows_out == manifest.samples
    assert sum(s.rejected for s in stages) == manifest.rejected_rows
    assert stages[0].rows_in == manifest.samples + sum(s.dropped + s.rejected for s in stages)


def test_digits_example_through_the_cli(digits_built):
    """The session's digits build: `datapipe build digits.yaml --json` (in process, on the session's
    cluster)."""
    from helpers.cli import datapipe_in_process

    summary = digits_built.summary
    assert summary["samples"] == 1773 and summary["rejected"] == 7 and summary["shards"] > 1
    seconds = summary["seconds"]  # where the wall time went: start-up, each pass, the whole build
    assert {"start", "write shards", "total"} <= set(seconds) and seconds["total"] >= sum(
        v for k, v in seconds.items() if k != "total"
    ) > 0
    by_stage = {s["stage"]: s for s in summary["stages"]}
    assert by_stage["source"]["rejected"] == 1  # the malformed line
    assert by_stage["stages[0].dropna"]["dropped"] == 12  # missing labels
    assert by_stage["stages[3].dedupe"]["dropped"] == 9  # duplicate ids
    assert by_stage["stages[6].validate"]["rejected"] == 6  # label 12
    store = Store(str(digits_built.store))
    result_manifest = store.manifest("digits", summary["version"])
    accounting_holds(result_manifest)
    assert result_manifest.fields == {"cls": "int", "json": "json", "png": "bytes"}
    quarantine = pd.read_parquet(
        store.path("digits", "versions", summary["version"], REJECTED_NAME)
    )
    assert len(quarantine) == 7
    malformed = quarantine[quarantine.stage == "source"].iloc[0]
    assert (malformed.source, malformed.row, malformed.reason) == (
        "raw/digits-0.csv",
        41,
        "expected 4 fields, saw 5",
    )
    assert set(quarantine[quarantine.stage != "source"].reason) == {"label: 12 is above max 9"}
    assert summary["url"] == f"store/digits@{summary['version']}"  # the store as given to --out
    verify = datapipe_in_process("verify", summary["url"], cwd=digits_built.project)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_digits_samples_decode_and_tfrecord_twin_matches(project, dask_client, digits_built):
    project.digits()
    tfr = project.build("digits_tfrecord.yaml", client=dask_client)
    session = Store(str(digits_built.store))  # the webdataset build: the session's
    wds = session.manifest("digits", digits_built.version)
    a, b = project.samples(wds, session), project.samples(tfr)
    assert [s["__key__"] for s in a] == [s["__key__"] for s in b]
    assert all(s["png"].startswith(b"\x89PNG") for s in a)
    assert [int(s["cls"]) for s in a] == [int(s["cls"][0]) for s in b]
    assert all(0 <= int(s["cls"]) <= 9 for s in a)
    assert tfr.manifest.shard_format == "tfrecord" and tfr.manifest.stages == wds.stages


def write_people(project, files: int = 3, rows: int = 400) -> None:
    n = 0
    for f in range(files):
        lines = ["id,age,score,name"]
        for _ in range(rows):
            lines.append(f"p{n:05d},{n % 90},{(n * 37 % 1000) / 10},name {n}")
            n += 1
        project.write(f"raw/people-{f}.csv", "\n".join(lines) + "\n")


PEOPLE = """\
    name: people
    source:
      path: raw/people-*.csv
      format: csv
      options: {{blocksize: {blocksize}}}
    stages:
      - filter: "age >= 5"
    sample:
      key: id
      fields: {{cls: age, txt: name, json: [age, score]}}
    shards:
      format: {fmt}
      max_bytes: {max_bytes}
      shuffle_seed: {seed}
    """


def people(blocksize: str, fmt: str, seed: str) -> str:
    """The people pipeline; shards small enough that each format writes several, and every partition
    feeds several: ~57 tar shards (512-byte headers make a sample ~3 KB), ~7 TFRecord ones (a sample
    ~100 bytes)."""
    return PEOPLE.format(
        blocksize=blocksize, fmt=fmt, seed=seed, max_bytes="64KB" if fmt == "webdataset" else "20KB"
    )


@pytest.fixture(scope="module")
def clients_of():
    """Clients of two LocalClusters, of 1 and of 3 worker processes, shared by the tests below (a
    LocalCluster takes seconds to start)."""
    from distributed import Client, LocalCluster

    with contextlib.ExitStack() as stack:
        clients = {}
        for workers in (1, 3):
            cluster = stack.enter_context(
                LocalCluster(
                    n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
                )
            )
            clients[workers] = stack.enter_context(Client(cluster))
        yield clients


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
def test_same_version_and_bytes_whatever_the_workers_and_blocksize(project, clients_of, fmt):
    write_people(project)
    ids, shard_bytes = set(), set()
    # keep_encoded: the write pass uses the measure pass's encoded blocks, or reads the source again
    for workers, blocksize, keep in [
        (1, "4KB", True),
        (3, "4KB", False),
        (1, "1MB", False),
        (3, "1MB", True),
    ]:
        project.pipeline(people(blocksize, fmt, "null"))
        result = project.build(client=clients_of[workers], keep_encoded=keep)
        ids.add(result.manifest.version)
        directory = project.store.path("people", "versions", result.manifest.version)
        shard_bytes.add(
            tuple(
                open(os.path.join(directory, e.path), "rb").read() for e in result.manifest.shards
            )
        )
    assert len(ids) == 1 and len(shard_bytes) == 1
    # shard boundaries to place, wherever the partitions end
    assert len(result.manifest.shards) >= 5
    from datapipe.builder.config import load_pipeline
    from datapipe.builder.source.opening import partitioned_source

    project.pipeline(people("4KB", fmt, "null"))
    parts = partitioned_source(
        load_pipeline(project.root / "pipeline.yaml").pipeline.source, str(project.root)
    ).parts
    assert len(parts) >= 2 * 3  # more than one partition per worker


def test_shuffle_is_seeded_and_independent_of_partitioning(project, in_process):
    write_people(project)
    keys = {}
    for seed, blocksize in [("null", "1MB"), ("7", "1MB"), ("7", "4KB"), ("8", "1MB")]:
        project.pipeline(people(blocksize, "webdataset", seed))
        result = project.build(client=in_process, keep_encoded=blocksize == "1MB")
        keys[(seed, blocksize)] = (
            [s["__key__"] for s in project.samples(result)],
            result.manifest.version,
        )
    plain, _ = keys[("null", "1MB")]
    assert plain == sorted(plain)
    assert keys[("7", "1MB")] == keys[("7", "4KB")]
    assert keys[("7", "1MB")][0] != plain and sorted(keys[("7", "1MB")][0]) == plain
    assert keys[("8", "1MB")][0] != keys[("7", "1MB")][0]


def test_rebuild_makes_the_same_version_and_only_moves_refs(project, in_process):
    write_people(project, files=1, rows=50)
    project.pipeline(people("1MB", "webdataset", "null"))
    first = project.build(client=in_process)
    shard = project.store.path(
        "people", "versions", first.manifest.version, first.manifest.shards[0].path
    )
    mtime = os.stat(shard).st_mtime_ns
    again = project.build(client=in_process, tags=["v1"])
    assert again.manifest.version == first.manifest.version and os.stat(shard).st_mtime_ns == mtime
    assert project.store.refs("people") == {
        "latest": first.manifest.version,
        "v1": first.manifest.version,
    }


def test_parquet_jsonl_and_files_sources(project, in_process):
    frame = pd.DataFrame(
        {
            "id": [f"r{i}" for i in range(300)],
            "x": range(300),
            "blob": [bytes([i % 256]) * 3 for i in range(300)],
        }
    )
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pandas(frame), project.root / "t.parquet", row_group_size=64)
    project.pipeline("""\
        name: pq
        source: {path: t.parquet, format: parquet}
        sample: {key: id, fields: {cls: x, bin: blob}}
        """)
    result = project.build(client=in_process)
    samples = project.samples(result)
    assert len(samples) == 300 and samples[5] == {"__key__": "r5", "cls": b"5", "bin": b"\x05" * 3}

    project.write(
        "raw/a.jsonl",
        '{"id": "j1", "v": [1, 2]}\n{"id": "j2", "v": {"k": 3}}\nnot '
        'json\n[1]\n{"id": "j3", "v": null}\n',
    )
    project.pipeline("""\
        name: js
        source: {path: raw/*.jsonl, format: jsonl}
        sample: {key: id, fields: {json: v}}
        max_rejected: 1
        """)
    result = project.build(client=in_process)
    samples = project.samples(result)
    assert [(s["__key__"], s["json"]) for s in samples] == [("j1", b"[1,2]"), ("j2", b'{"k":3}')]
    stages = {s.stage: s for s in result.manifest.stages}
    assert stages["source"].rejected == 2 and stages["sample"].rejected == 1  # j3 has no value
    accounting_holds(result.manifest)

    for cls in ("cat", "dog"):
        for i in range(3):
            project.write(f"images/{cls}/{i}.jpg", bytes([i]) * (10 + i))
    project.pipeline("""\
        name: pets
        source: {path: "images/*/*.jpg", format: files, options: {files_per_partition: 2}}
        stages:
          - map: petcode:add_key
        sample: {key: key, fields: {jpg: bytes, cls: parent}}
        """)
    project.write(
        "petcode.py",
        "def add_key(df):\n    df = df.copy()\n"
        "    df['key'] = df['parent'] + '_' + df['name'].str.replace('.jpg', '')\n"
        "    return df\n",
    )
    result = project.build(client=in_process)
    samples = project.samples(result)
    assert [s["__key__"] for s in samples] == ["cat_0", "cat_1", "cat_2", "dog_0", "dog_1", "dog_2"]
    assert samples[4]["jpg"] == b"\x01" * 11 and samples[4]["cls"] == b"dog"
    assert [s.path for s in result.manifest.lineage.sources][0] == "images/cat/0.jpg"


def test_dirty_csv_is_quarantined_row_by_row(project, in_process):
    project.write("raw/d.csv", b'id,n\na,1\nb,2,3\nc,\xff\xfe\nd,x\ne,"5"\nf,6\n')
    project.pipeline("""\
        name: dirty
        source: {path: raw/d.csv, format: csv, options: {dtype: {n: int64}}}
        sample: {key: id, fields: {cls: n}}
        max_rejected: 0.9
        """)
    result = project.build(client=in_process)
    assert [s["__key__"] for s in project.samples(result)] == ["a", "e", "f"]
    quarantine = pd.read_parquet(
        project.store.path("dirty", "versions", result.manifest.version, REJECTED_NAME)
    )
    reasons = dict(zip(quarantine.row, quarantine.reason, strict=False))
    assert reasons[2] == "expected 2 fields, saw 3"
    assert "invalid utf-8" in reasons[3].lower()
    assert "'x' is not int64" in reasons[4]
    accounting_holds(result.manifest)


def test_column_types_come_from_the_first_mib_not_from_each_partition(project, in_process):
    rows = [f"k{i:05d},{i}" for i in range(3000)] + ["k99999,2.5"]
    project.write("raw/n.csv", "id,n\n" + "\n".join(rows) + "\n")
    project.pipeline("""\
        name: typed
        source: {path: raw/n.csv, format: csv, options: {blocksize: 8KB}}
        sample: {key: id, fields: {cls: n}}
        """)
    result = project.build(client=in_process)
    assert result.manifest.fields == {"cls": "float"}  # 2.5 in the sample makes the column float64
    assert project.samples(result)[1]["cls"] == b"1.0"  # in every partition, not only the last one


def test_duplicate_sample_keys_are_quarantined_keeping_the_first(project, in_process):
    project.write("raw/a.csv", "id,v\nk1,1\nk2,2\nk1,3\n")
    project.write("raw/b.csv", "id,v\nk2,4\nk3,5\n")
    project.pipeline("""\
        name: dups
        source: {path: raw/*.csv, format: csv}
        sample: {key: id, fields: {cls: v}}
        max_rejected: 0.5
        """)
    result = project.build(client=in_process)
    assert [(s["__key__"], s["cls"]) for s in project.samples(result)] == [
        ("k1", b"1"),
        ("k2", b"2"),
        ("k3", b"5"),
    ]
    quarantine = pd.read_parquet(
        project.store.path("dups", "versions", result.manifest.version, REJECTED_NAME)
    )
    assert sorted(zip(quarantine.source, quarantine.row, strict=False)) == [
        ("raw/a.csv", 3),
        ("raw/b.csv", 1),
    ]
    assert all("duplicate sample key" in r for r in quarantine.reason)
    accounting_holds(result.manifest)


def test_too_many_rejects_fail_the_build_keep_the_quarantine_and_move_no_ref(project, in_process):
    project.write("raw/a.csv", "id,v\nk1,1\nk2,x\nk3,y\n")
    project.pipeline("""\
        name: strict
        source: {path: raw/a.csv, format: csv, options: {dtype: {v: int64}}}
        sample: {key: id, fields: {cls: v}}
        max_rejected: 0.1
        """)
    with pytest.raises(BuildError, match=r"2 of 3 rows rejected .* over max_rejected 10.00%") as e:
        project.build(client=in_process)
    message = str(e.value)
    assert "\n  2  source: column 'v': … is not int64" in message  # the top reasons, a line each
    path = message.split("(kept in ")[1].split(")\n")[0]
    assert len(pd.read_parquet(path)) == 2
    assert project.store.refs("strict") == {} and project.store.versions("strict") == []


def test_mistakes_found_while_running_name_the_field(project, dask_client):
    project.write("raw/a.csv", "id,v\nk1,1\n")
    project.pipeline("""\
        name: bad
        source: {path: raw/a.csv, format: csv}
        stages:
          - filter: "w > 1"
        sample: {key: id, fields: {cls: v}}
        """)
    with pytest.raises(ConfigError, match=r"stages\[0\]\.filter: cannot evaluate 'w > 1'"):
        project.build(client=dask_client)
    project.pipeline("""\
        name: bad
        source: {path: raw/a.csv, format: csv}
        sample: {key: id, fields: {cls: nope}}
        """)
    with pytest.raises(ConfigError, match=r"sample.fields.cls: no column 'nope'"):
        project.build(client=dask_client)
    project.pipeline("""\
        name: bad
        source: {path: raw/missing-*.csv, format: csv}
        sample: {key: id, fields: {cls: v}}
        """)
    with pytest.raises(Exception, match=r"source.path: 'raw/missing-\*.csv' matches no files"):
        project.build(client=dask_client)
    project.pipeline("""\
        name: bad
        source: {path: raw/a.csv, format: csv}
        stages:
          - map: nomodule_here:f
        sample: {key: id, fields: {cls: v}}
        """)
    with pytest.raises(ConfigError, match=r"stages\[0\]\.map: cannot find module 'nomodule_here'"):
        project.build(client=dask_client)


def test_cli_errors_name_key_and_line_without_traceback(project):
    project.pipeline("""\
        name: bad
        source: {path: raw/a.csv, format: csv}
        sample: {key: id, fields: {cls: v}}
        shards: {max_sample: 3}
        """)
    from helpers.cli import datapipe_in_process

    out = datapipe_in_process("build", "pipeline.yaml", cwd=project.root)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "pipeline.yaml:4" in out.stderr and "shards.max_sample" in out.stderr


def test_memory_store_builds_with_thread_workers(project):
    import uuid

    from datapipe.builder.config import load_pipeline
    from datapipe.builder.run import Execution, build
    from datapipe.versioning.store import Store

    project.write("raw/a.csv", "id,v\nk1,1\nk2,2\n")
    project.pipeline("""\
        name: mem
        source: {path: raw/a.csv, format: csv}
        sample: {key: id, fields: {cls: v}}
        """)
    store = Store(f"memory://stores/{uuid.uuid4().hex}")
    result = build(
        load_pipeline(project.root / "pipeline.yaml"), store, execution=Execution(workers=2)
    )
    assert (
        store.read_ref("mem", "latest") == result.manifest.version and result.manifest.samples == 2
    )


def quoted_newlines(rows: int, prefix: str = "r") -> str:
    lines = ["id,text,label"]
    for i in range(rows):
        text = (
            f'"line one of {i}\nline two, with ""quotes"" and a comma\n\nthree"'
            if i % 3 == 0
            else f"plain {i}"
        )
        lines.append(f"{prefix}{i:04d},{text},{i % 10}")
    return "\n".join(lines) + "\n"


QUOTED = """\
    name: quoted
    source:
      path: raw/*.csv
      format: csv
      options: {{blocksize: {blocksize}, header: {header}, names: {names}}}
    sample:
      key: {key}
      fields: {{txt: {text}, cls: {label}}}
    shards: {{max_bytes: 8KB}}
    """


@pytest.mark.parametrize("header", ["quoted newlines", "no header row"])
def test_csv_quirks_give_one_version_whatever_the_blocksize(project, in_process, header):
    if header == "quoted newlines":
        project.write("raw/a.csv", quoted_newlines(300))
        project.write("raw/b.csv", quoted_newlines(30, "s"))
        fmt = dict(header=0, names="null", key="id", text="text", label="label")
    else:
        project.write("raw/a.csv", "".join(f"r{i:04d},value {i},{i % 10}\n" for i in range(300)))
        project.write("raw/b.csv", "".join(f"s{i:04d},value {i},{i % 10}\n" for i in range(30)))
        fmt = dict(header="null", names="[id, text, label]", key="id", text="text", label="label")
    versions = set()
    for blocksize in ("1KB", "300B", "1MB"):
        project.pipeline(QUOTED.format(blocksize=blocksize, **fmt))
        result = project.build(client=in_process, keep_encoded=blocksize == "1MB")
        assert result.manifest.samples == 330 and result.manifest.rejected_rows == 0, blocksize
        accounting_holds(result.manifest)
        versions.add(result.manifest.version)
    assert len(versions) == 1
    first = project.samples(result)[0]
    if header == "quoted newlines":
        assert first["txt"] == b'line one of 0\nline two, with "quotes" and a comma\n\nthree'
    assert first["__key__"] == "r0000" and first["cls"] == b"0"


def test_files_source_split_by_bytes_gives_the_same_version(project, in_process):
    for i in range(12):
        project.write(f"img/{'ab'[i % 2]}/f{i:02d}.bin", bytes([i]) * (500 + 300 * i))
    project.write(
        "keys.py",
        "def add(df):\n    df = df.copy()\n    df['key'] = df['name'].str[:-4]\n    return df\n",
    )
    versions = set()
    # 2KB: at most two files a partition
    for options in ("{blocksize: 2KB}", "{files_per_partition: 3}", "{}"):
        project.pipeline(f"""\
            name: blobs
            source: {{path: "img/*/*.bin", format: files, options: {options}}}
            stages:
              - map: keys:add
            sample: {{key: key, fields: {{bin: bytes, cls: parent}}}}
            max_rejected: 0
            """)
        result = project.build(client=in_process)
        assert result.manifest.samples == 12
        versions.add(result.manifest.version)
    assert len(versions) == 1
    samples = project.samples(result)
    assert [s["__key__"] for s in samples] == [f"f{i:02d}" for i in range(0, 12, 2)] + [
        f"f{i:02d}" for i in range(1, 12, 2)
    ]
    assert samples[1]["bin"] == bytes([2]) * 1100 and samples[1]["cls"] == b"a"


TOKENS = """\
    name: web
    source:
      path: raw/web-*.jsonl
      format: jsonl
      options: {{blocksize: {blocksize}}}
    stages:
      - tokenize: {{tokenizer: bpe.json, min_tokens: 2}}
    sample:
      key: id
      fields: {{tokens: tokens, url: url}}
    shards:
      format: {fmt}
      max_bytes: {max_bytes}
    """


def tokens(blocksize: str, fmt: str) -> str:
    """The token pipeline, in shards small enough for several (token shards hold only the ids)."""
    return TOKENS.format(
        blocksize=blocksize, fmt=fmt, max_bytes="32KB" if fmt == "webdataset" else "8KB"
    )


def write_web(project, files: int = 4, docs: int = 120) -> None:
    """JSONL files of generated documents (three empty: dropped) and the tokenizer of the test."""
    from helpers.text import documents, train_tokenizer, write_jsonl

    texts = documents(files * docs, seed=3)
    texts[7] = texts[200] = ""
    for f in range(files):
        write_jsonl(project.root / f"raw/web-{f}.jsonl", texts[f * docs : (f + 1) * docs], f * docs)
    if not (project.root / "bpe.json").exists():
        train_tokenizer(project.root / "bpe.json")


@pytest.mark.parametrize("fmt", ["webdataset", "tokens"])
def test_a_token_pipeline_gives_the_same_bytes_whatever_the_workers_and_blocksize(
    project, clients_of, fmt
):
    write_web(project)
    ids, shard_bytes = set(), set()
    for workers, blocksize, keep in [(1, "8KB", True), (3, "8KB", False), (3, "1MB", True)]:
        project.pipeline(tokens(blocksize, fmt))
        result = project.build(client=clients_of[workers], keep_encoded=keep)
        ids.add(result.manifest.version)
        directory = project.store.path("web", "versions", result.manifest.version)
        shard_bytes.add(
            tuple(
                open(f"{directory}/{name}", "rb").read()
                for e in result.manifest.shards
                for name in e.stored_files()
            )
        )
    assert len(ids) == 1 and len(shard_bytes) == 1
    assert len(result.manifest.shards) >= 3
    accounting_holds(result.manifest)
    assert result.manifest.stages[1].dropped == 3  # the empty documents 1, 7 and 200


@pytest.mark.parametrize("fmt", ["webdataset", "tokens"])
def test_a_token_rebuild_tokenizes_only_the_changed_partitions(project, in_process, tmp_path, fmt):
    from helpers.text import write_jsonl

    write_web(project)
    project.pipeline(tokens("1MB", fmt))
    first = project.build(client=in_process)
    write_jsonl(project.root / "raw/web-2.jsonl", ["a new document", "and another"], 240)
    again = project.build(client=in_process)
    assert again.incremental.parent == first.manifest.version
    assert again.incremental.partitions.measured == 1
    assert again.incremental.partitions.reused == 3
    # the version a build from scratch gives
    scratch = Store(str(tmp_path / "scratch"))
    from datapipe.builder.config import load_pipeline
    from datapipe.builder.run import Execution, build

    fresh = build(load_pipeline(project.root / "pipeline.yaml"), scratch, execution=Execution())
    assert fresh.manifest.version == again.manifest.version
    assert fresh.incremental.parent is None
    assert again.incremental.shards.reused > 0  # the shards before web-2's documents, linked

    def plain(samples):
        return [{k: getattr(v, "tolist", lambda v=v: v)() for k, v in s.items()} for s in samples]

    assert plain(project.samples(again)) == plain(project.samples(fresh.manifest, scratch))
