"""W6's data: W5's token version built by ``datapipe build`` and LitData's chunks of its tokens,
each made once and reused while its inputs are the same (issue 32).

- The version: ``token_ours.PIPELINE`` (W5's JSONL parts, the ``tokenize`` stage with the
  50,000-id tokenizer, 256 MB token shards) built with 2 workers into ``DIR/built`` and kept;
  ``DIR/built.json`` records the text's and the tokenizer's sha256, and a store whose record
  matches is reused.
- LitData's chunks: ``benchmarks.pack_peers optimize`` of the version's shards into
  ``DIR/litdata``, in a fresh interpreter, reused while ``DIR/litdata.json`` names the same
  version.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from benchmarks import building, token_ours

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZER = "bpe-50k"


def _record(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _write_record(path: str, record: dict) -> None:
    with open(path, "w") as f:
        json.dump(record, f, indent=1)


def version(
    workdir: str, jsonl: str, text_sha256: str, tokenizer: dict, timeout: float, log
) -> dict:
    """The token version (built unless a matching one is kept): its URL, build record and the
    facts the readers need (``describe``)."""
    store = os.path.join(workdir, "built")
    name = f"w5-{TOKENIZER}"
    want = {"text_sha256": text_sha256, "tokenizer_sha256": tokenizer["sha256"], "name": name}
    record = _record(store + ".json")
    if record is None or {k: record.get(k) for k in want} != want or not os.path.isdir(store):
        os.makedirs(workdir, exist_ok=True)
        pipeline = os.path.join(workdir, f"{name}.yaml")
        with open(pipeline, "w") as f:
            f.write(
                token_ours.PIPELINE.format(tokenizer=TOKENIZER, jsonl=jsonl, path=tokenizer["path"])
            )
        log(f"  datapipe build of {name} into {store} (2 workers)")
        built = building.build(pipeline, store, 2, timeout, keep=True)
        record = {**want, "build_seconds": built["seconds"]}
        _write_record(store + ".json", record)
    url = f"{store}/{name}"
    return {**describe(url), "build_seconds": record["build_seconds"]}


def describe(url: str) -> dict:
    """The version's id, shard paths, token dtype, end-of-text id, documents and tokens."""
    import datapipe

    ds = datapipe.open_dataset(url, lease_ttl=None)
    try:
        shards = [ds.shard_path(i) for i in range(len(ds.shard_sizes))]
        reader = ds.files.reader(0)
        tokenizer = ds.manifest.lineage.tokenizer
        return {
            "url": url,
            "version": ds.version,
            "shards": shards,
            "dtype": str(reader.dtype.newbyteorder("=")),
            "eos": int(tokenizer.eos_id),
            "documents": len(ds),
            "tokens": sum(int(s.tokens) for s in ds.shards),
            "bin_bytes": sum(os.path.getsize(p) for p in shards),
        }
    finally:
        ds.close()


def litdata_chunks(workdir: str, data: dict, timeout: float, log) -> dict:
    """LitData's optimized chunks of the version's tokens (made unless kept): {dir, seconds,
    tokens, chunks, disk_bytes}."""
    out = os.path.join(workdir, "litdata")
    record = _record(out + ".json")
    if record is None or record.get("version") != data["version"] or not os.path.isdir(out):
        log(f"  LitData optimize of {len(data['shards'])} shard(s) into {out} (2 workers)")
        made = _optimize(out, data["shards"], timeout)
        record = {"version": data["version"], **made}
        _write_record(out + ".json", record)
    return {"dir": out, **record}


def _optimize(out: str, shards: list[str], timeout: float) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
    }
    cmd = [sys.executable, "-m", "benchmarks.pack_peers", "optimize", out, *shards]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    found = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    if done.returncode != 0 or not found:
        raise RuntimeError(f"{' '.join(cmd[:5])} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return json.loads(found[-1][len("RESULT ") :])
