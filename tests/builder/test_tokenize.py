"""The tokenize stage: its keys, its tokenizer file, what it does to a partition, and builds."""

import hashlib
import json
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.cli import datapipe_in_process, on_session_cluster
from helpers.text import documents, expected_ids, npy, train_tokenizer, write_jsonl

from datapipe.builder.config import load_pipeline, parse_pipeline
from datapipe.builder.config_parts import TokenizeArgs
from datapipe.builder.stages import run_stage
from datapipe.builder.tokenize_stage import TokenizerFile, pipeline_tokenizer, read_tokenizer
from datapipe.errors import ConfigError
from datapipe.versioning.verify import verify_version

LABEL = "stages[0].tokenize"


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    """A byte-level BPE of a few hundred ids with <|endoftext|> and <s>, as tokenizer.json."""
    return train_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizers" / "bpe.json")


def stage_of(**args):
    text = "name: t\nsource: {path: a.jsonl, format: jsonl}\nstages:\n"
    text += f"  - tokenize: {json.dumps(args)}\nsample: {{key: id, fields: {{tokens: tokens}}}}\n"
    return parse_pipeline(text, "t.yaml").stages[0]


def run(frame, bpe, **args):
    stage = stage_of(tokenizer=str(bpe), **args)
    file = read_tokenizer(stage.args, LABEL, "/")
    return run_stage(stage, LABEL, frame, "/", tokenizer=file)


def test_keys_and_defaults():
    args = stage_of(tokenizer="tok.json").args
    assert (args.field, args.eos, args.bos, args.min_tokens) == ("text", True, False, 1)
    assert args.eos_token is None and args.bos_token is None
    with pytest.raises(ConfigError, match="a pipeline tokenizes once"):
        parse_pipeline(
            "name: t\nsource: {path: a.jsonl, format: jsonl}\nstages:\n"
            "  - tokenize: {tokenizer: a.json}\n  - tokenize: {tokenizer: a.json}\n"
            "sample: {key: id, fields: {tokens: tokens}}\n",
            "t.yaml",
        )
    with pytest.raises(ConfigError, match=r"t.yaml:4: stages\[0\]\.tokenize\.eos_tokn"):
        stage_of(tokenizer="a.json", eos_tokn="</s>")

    def shards(fmt, fields="{tokens: tokens}"):
        text = "name: t\nsource: {path: a.jsonl, format: jsonl}\n"
        text += f"sample: {{key: id, fields: {fields}}}\nshards: {{format: {fmt}}}\n"
        return parse_pipeline(text, "t.yaml").shards.format

    assert shards("megatron") == shards("tokens") == "tokens"
    with pytest.raises(ConfigError, match=r"t.yaml:4: shards: format tokens writes .* 'tokens'"):
        shards("tokens", "{ids: tokens}")


def test_every_document_is_the_direct_encode_with_eos(bpe):
    docs = documents(200)
    frame = pd.DataFrame({"id": [f"d{i}" for i in range(200)], "text": docs})
    out = run(frame, bpe)
    assert out.dropped == 0 and not out.rejected and list(out.frame["text"]) == docs
    for text, tokens in zip(docs, out.frame["tokens"], strict=True):
        assert tokens.dtype == np.uint16 and tokens.tolist() == expected_ids(bpe, text)
    # the long document is kept whole
    assert len(out.frame["tokens"].iloc[2]) > 2000


def test_bos_min_tokens_and_named_specials(bpe):
    docs = ["hello world", "", "the data"]
    frame = pd.DataFrame({"id": ["a", "b", "c"], "body": docs})
    out = run(frame, bpe, field="body", bos=True, min_tokens=3)
    # "" gives <s> <|endoftext|> only: dropped and counted
    assert out.dropped == 1 and list(out.frame["id"]) == ["a", "c"]
    assert out.frame["tokens"].iloc[0].tolist() == expected_ids(bpe, "hello world", bos=True)
    out = run(frame, bpe, field="body", eos=False, eos_token="<s>", min_tokens=0)
    assert out.frame["tokens"].iloc[1].tolist() == []
    named = run(frame, bpe, field="body", eos_token="<s>")
    assert named.frame["tokens"].iloc[0].tolist()[-1] == expected_ids(bpe, "", bos=True)[0]


def test_null_and_undecodable_text_is_quarantined_with_the_reason(bpe):
    frame = pd.DataFrame(
        {"id": ["a", "b", "c", "d", "e"], "text": ["fine", None, float("nan"), b"\xff\xfe", b"ok"]}
    )
    out = run(frame, bpe)
    assert list(out.frame["id"]) == ["a", "e"]
    reasons = {r.row: r.reason for r in out.rejected}
    assert reasons[1] == "no text: 'text' is null" and reasons[2] == "no text: 'text' is null"
    assert "not UTF-8 text (invalid start byte at byte 0)" in reasons[3]
    assert out.frame["tokens"].iloc[1].tolist() == expected_ids(bpe, "ok")


def test_a_missing_or_numeric_column_names_the_near_one(bpe):
    frame = pd.DataFrame({"id": ["a"], "Text": ["x"], "n": [1]})
    with pytest.raises(ConfigError, match=r"field: no column 'text'; did you mean 'Text'"):
        run(frame, bpe)
    with pytest.raises(ConfigError, match="column 'n' holds int64, not text"):
        run(frame, bpe, field="n")


def test_bad_tokenizer_files_are_named(bpe, tmp_path):
    args = TokenizeArgs(tokenizer="nope.json")
    with pytest.raises(ConfigError, match=r"tokenize\.tokenizer: cannot read 'nope.json'"):
        read_tokenizer(args, LABEL, str(tmp_path))
    for name, content in [("a.json", "{not json"), ("b.json", '{"a": 1}'), ("c.txt", "\xff")]:
        (tmp_path / name).write_text(content)
        with pytest.raises(ConfigError, match=f"{name} is not a Hugging Face tokenizer.json"):
            read_tokenizer(TokenizeArgs(tokenizer=name), LABEL, str(tmp_path))
    with pytest.raises(ConfigError, match=r"eos_token: '<\|endoftext\|' is not in the vocab"):
        read_tokenizer(TokenizeArgs(tokenizer=str(bpe), eos_token="<|endoftext|"), LABEL, "/")
    plain = train_tokenizer(tmp_path / "plain.json", specials=("<pad>",))
    with pytest.raises(ConfigError, match=r"does not say which token is its BOS .*<pad>"):
        read_tokenizer(TokenizeArgs(tokenizer=str(plain), bos=True, eos=False), LABEL, "/")


def test_the_file_decides_the_dtype_and_ids(bpe):
    file = read_tokenizer(TokenizeArgs(tokenizer=str(bpe), bos=True), LABEL, "/")
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(bpe))
    assert file.eos_id == tokenizer.token_to_id("<|endoftext|>") and file.dtype == np.uint16
    assert file.bos_id == tokenizer.token_to_id("<s>") and file.vocab_size <= 400
    wide = TokenizerFile(file.data, file.sha256, "x", 70_000, file.eos_id, None)
    assert wide.dtype == np.int32


def test_encoding_starts_no_thread_and_forks_without_warning(bpe):
    # Rayon would start RAYON_NUM_THREADS threads at the first batch; a fork after that warns
    code = textwrap.dedent(f"""
        import os, pandas as pd
        from datapipe.builder.config_parts import TokenizeArgs
        from datapipe.builder.tokenize_stage import read_tokenizer, tokenize
        def threads():
            return [l for l in open("/proc/self/status") if l.startswith("Threads")][0]
        args = TokenizeArgs(tokenizer={str(bpe)!r})
        file = read_tokenizer(args, "s", "/")
        before = threads()
        frame = pd.DataFrame({{"text": ["some text here"] * 5000}})
        tokenize(frame, args, "s", file)
        assert threads() == before, (before, threads())
        pid = os.fork()
        if pid == 0:
            tokenize(frame, args, "s", file)
            os._exit(0)
        assert os.waitpid(pid, 0)[1] == 0
        """)
    env = {"RAYON_NUM_THREADS": "4", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert "fork" not in out.stderr and "TOKENIZERS_PARALLELISM" not in out.stderr


def web_pipeline(
    root, fields="{tokens: tokens, txt: text, url: url}", shards="{max_bytes: 64KB}", **stage
):
    args = {"tokenizer": "tokenizers/bpe.json", **stage}
    (root / "pipeline.yaml").write_text(
        "name: web\nsource: {path: raw/web-*.jsonl, format: jsonl}\nstages:\n"
        f"  - tokenize: {json.dumps(args)}\n"
        f"sample: {{key: id, fields: {fields}}}\nshards: {shards}\n"
    )


def test_a_build_writes_each_documents_tokens_as_npy(project, in_process, bpe):
    docs = documents(300)
    docs[5] = None
    write_jsonl(project.root / "raw" / "web-0.jsonl", docs[:150])
    write_jsonl(project.root / "raw" / "web-1.jsonl", docs[150:], start=150)
    (project.root / "tokenizers").mkdir()
    (project.root / "tokenizers" / "bpe.json").write_bytes(bpe.read_bytes())
    web_pipeline(project.root, min_tokens=2)
    result = project.build(client=in_process)
    samples = {s["__key__"]: s for s in project.samples(result)}
    # d00001 is empty (only the eos: dropped), d00005 is null (quarantined)
    assert len(samples) == 298 and "d00001" not in samples and "d00005" not in samples
    for i, text in enumerate(docs):
        if i not in (1, 5):
            sample = samples[f"d{i:05d}"]
            assert npy(sample["tokens"]).tolist() == expected_ids(bpe, text)
            assert sample["txt"].decode() == text
    stage = next(s for s in result.manifest.stages if s.stage == LABEL)
    assert (stage.rows_in, stage.dropped, stage.rejected) == (300, 1, 1)
    assert result.manifest.rejected_rows == 1


def test_build_errors_name_the_file_and_line_without_traceback(project):
    write_jsonl(project.root / "raw" / "web-0.jsonl", ["a b"])
    (project.root / "tokenizers").mkdir()
    (project.root / "tokenizers" / "bpe.json").write_text("{}")
    web_pipeline(project.root)
    out = datapipe_in_process("build", "pipeline.yaml", cwd=project.root)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "pipeline.yaml:4: stages[0].tokenize.tokenizer: tokenizers/bpe.json is not a" in (
        out.stderr
    )
    with pytest.raises(ConfigError, match=r"pipeline.yaml:4: stages\[0\]\.tokenize\.tokenizer"):
        pipeline_tokenizer(load_pipeline(project.root / "pipeline.yaml"))


def web_project(project, bpe, docs):
    write_jsonl(project.root / "raw" / "web-0.jsonl", docs[: len(docs) // 2])
    write_jsonl(project.root / "raw" / "web-1.jsonl", docs[len(docs) // 2 :], len(docs) // 2)
    (project.root / "tokenizers").mkdir(exist_ok=True)
    (project.root / "tokenizers" / "bpe.json").write_bytes(bpe.read_bytes())
    web_pipeline(project.root)


def test_the_version_keeps_its_tokenizer_and_check_names_a_new_one(project, dask_client, bpe):
    web_project(project, bpe, documents(100))
    # token shards: check reads their documents back to compare them
    web_pipeline(project.root, "{tokens: tokens, url: url}", "{format: tokens, max_bytes: 4KB}")
    first = project.build(client=dask_client).manifest
    tokenizer = first.lineage.tokenizer
    data = bpe.read_bytes()
    assert (tokenizer.file, tokenizer.bytes) == ("tokenizer.json", len(data))
    assert tokenizer.sha256 == hashlib.sha256(data).hexdigest()
    assert tokenizer.library == metadata.version("tokenizers") and tokenizer.dtype == "uint16"
    assert (tokenizer.eos_id, tokenizer.bos_id) == (expected_ids(bpe, "")[0], None)
    directory = project.root / "store" / "web" / "versions" / first.version
    assert (directory / "tokenizer.json").read_bytes() == data
    assert not verify_version(project.store, "web", first)
    (directory / "tokenizer.json").write_bytes(data + b" ")
    assert [p.kind for p in verify_version(project.store, "web", first)] == ["mismatch"]
    (directory / "tokenizer.json").write_bytes(data)

    # another tokenizer file: a new version, and check says why
    train_tokenizer(project.root / "tokenizers" / "bpe.json", vocab_size=350)
    cli = (
        "check",
        "pipeline.yaml",
        "--out",
        "store",
        *on_session_cluster(dask_client.scheduler.address),
    )
    out = datapipe_in_process(*cli, cwd=project.root)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert "  lineage: tokenizer file changed: sha256 " in out.stdout
    second = project.build(client=dask_client).manifest
    assert second.version != first.version
    kept = Path(project.store.path("web", "versions", second.version, "tokenizer.json"))
    assert kept.read_bytes() == (project.root / "tokenizers" / "bpe.json").read_bytes() != data


def test_an_empty_partition_without_columns_passes(bpe):
    out = run(pd.DataFrame(), bpe)
    assert len(out.frame) == 0 and list(out.frame.columns) == ["tokens"]


def test_token_shards_read_back_in_megatron_and_datapipe(project, in_process, bpe):
    import warnings

    with warnings.catch_warnings():  # it warns that Transformer Engine and Apex are missing
        warnings.simplefilter("ignore")
        from megatron.core.datasets.indexed_dataset import IndexedDataset

    from datapipe.formats.shards import open_shard

    docs = documents(300)
    web_project(project, bpe, docs)
    fields, shards = "{tokens: tokens, url: url}", "{format: megatron, max_bytes: 8KB}"
    web_pipeline(project.root, fields, shards, min_tokens=2)

    manifest = project.build(client=in_process).manifest
    assert manifest.shard_format == "tokens" and len(manifest.shards) >= 2
    assert manifest.fields == {"tokens": "npy", "url": "str"}
    directory = Path(project.store.path("web", "versions", manifest.version))
    ids, keys, origins = [], [], []
    for entry in manifest.shards:
        dataset = IndexedDataset(str(directory / entry.path)[: -len(".bin")])
        shard_ids = [dataset[i].tolist() for i in range(len(dataset))]
        # the manifest counts each shard's documents and tokens
        assert (entry.samples, entry.tokens) == (len(shard_ids), sum(map(len, shard_ids)))
        ids += shard_ids
        del dataset
        with open_shard(directory / entry.path) as reader:
            keys += reader.keys()
            origins += [reader.origin(i) for i in range(len(reader))]
            assert bytes(reader[0]["url"]).startswith(b"https://example.org/")
    kept = [(f"d{i:05d}", t) for i, t in enumerate(docs) if i != 1]  # d00001 is empty: dropped
    assert keys == [k for k, _ in kept]
    # each document's file and row there, counted from 1 as the quarantine counts them
    half = len(docs) // 2
    assert origins == [
        (f"raw/web-{int(i >= half)}.jsonl", i % half + 1) for i in range(len(docs)) if i != 1
    ]
    assert ids == [expected_ids(bpe, t) for _, t in kept]
    assert manifest.tokens == sum(map(len, ids))
    assert not verify_version(project.store, "web", manifest)


def test_datapipe_schema_shows_the_tokens_column(project, bpe):
    web_project(project, bpe, documents(20))
    out = datapipe_in_process("schema", "pipeline.yaml", "--json", cwd=project.root)
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    (step,) = shown["stages"]
    assert step["added"] == ["tokens"] and step["out"] == step["in"] > 0
    tokens = next(c for c in shown["columns"] if c["name"] == "tokens")
    assert tokens["stage"] == "stages[0].tokenize"


def test_the_text_example_builds_into_token_shards(project, in_process):
    pipelines = Path(__file__).parents[2] / "pipelines"
    out = project.root / "raw" / "text"
    subprocess.run(
        [sys.executable, str(pipelines / "prepare_text.py"), "--out", str(out)],
        check=True,
        capture_output=True,
    )
    (project.root / "text.yaml").write_bytes((pipelines / "text.yaml").read_bytes())
    manifest = project.build("text.yaml", client=in_process).manifest
    assert manifest.shard_format == "tokens" and manifest.lineage.tokenizer.eos_id == 0
    texts = {}
    for path in sorted(out.glob("docs-*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            texts[row["id"]] = row["text"]
    samples = project.samples(manifest)
    assert len(samples) == manifest.samples == len(texts) - manifest.stages[1].dropped
    bpe = out / "bpe.json"
    for sample in samples[::25]:
        assert sample["tokens"].tolist() == expected_ids(bpe, texts[sample["__key__"]])


def test_first_rows_follow_the_files_partitions_before():
    from datapipe.builder.source.base import Part
    from datapipe.builder.token_origins import first_rows

    parts = [Part(0, 0), Part(1, 0, 100), Part(2, 1), Part(3, 0, 200), Part(4, 1, 50)]
    assert first_rows(parts, [10, 20, 5, 7, 1]) == [0, 10, 0, 30, 5]


def test_without_tokenizers_the_pipeline_says_what_to_install(monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "tokenizers" else find_spec(name, *a),
    )
    with pytest.raises(ConfigError, match=r"t.yaml:4: stages\[0\]\.tokenize: .*'datapipe\[text\]'"):
        stage_of(tokenizer="a.json")


def test_token_shards_of_stored_bytes_link_all_their_files(project, in_process, bpe):
    """A full build whose token shards equal a stored version's keeps each shard's four files as
    that version's (the same inodes), the companions with the shard."""
    web_project(project, bpe, documents(120))
    web_pipeline(project.root, "{tokens: tokens, url: url}", "{format: tokens, max_bytes: 4KB}")
    first = project.build(client=in_process).manifest
    # another pipeline key, the same documents: a new version of the same shard bytes
    text = (project.root / "pipeline.yaml").read_text()
    (project.root / "pipeline.yaml").write_text(text + "max_rejected: 0.5\n")
    second = project.build(client=in_process).manifest
    assert second.version != first.version and len(first.shards) >= 2
    versions = project.root / "store" / "web" / "versions"
    for a, b in zip(first.shards, second.shards, strict=True):
        assert a.sha256 == b.sha256 and a.companions == b.companions
        for suffix in (".bin", ".idx", ".docs", ".bin.idx"):
            name_a, name_b = a.path.replace(".bin", suffix), b.path.replace(".bin", suffix)
            old, new = versions / first.version / name_a, versions / second.version / name_b
            assert old.stat().st_ino == new.stat().st_ino, suffix
    assert not verify_version(project.store, "web", second)
