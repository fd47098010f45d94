"""A gc that races a reader taking leases and a writer sharing shards, in a second process, loses
nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers.versions import commit_first, commit_sharing

from datapipe.versioning.gc import collect
from datapipe.versioning.store import Store
from datapipe.versioning.verify import verify_version

# opens every version (oldest first) under a lease and commits a version sharing the oldest one's
# shards, while the parent process runs gc; then reads every version it opened again, in full
RACER = """
import json, sys
sys.path.insert(0, sys.argv[2])
from helpers.versions import FMT, FIELDS, shard_samples
from datapipe.errors import NotFoundError
from datapipe.loader.dataset import open_dataset
from datapipe.versioning.manifest import Manifest
from datapipe.versioning.store import Store

store, versions = Store(sys.argv[1]), sys.argv[3:]
held, gone, committed = {}, [], None
print("started", flush=True)
for version in versions:
    try:
        ds = open_dataset(f"{sys.argv[1]}/toy@{version}")
    except NotFoundError:
        gone.append(version)
        continue
    held[version] = (ds, [ds[i]["bin"] for i in range(len(ds))])
try:
    writer = store.begin("toy")
    oldest = store.manifest("toy", versions[0])
    shards = [writer.share_shard(e, versions[0]) for e in oldest.shards[:2]]
    shards.append(writer.write_shard(2, shard_samples(2, 99), FMT))
    committed = writer.commit(Manifest(name="toy", shard_format="webdataset", fields=FIELDS,
                                       shards=tuple(shards)), refs=("racer",)).version
except NotFoundError:
    pass
sys.stdin.readline()  # the gc is over
for version, (ds, payloads) in held.items():
    assert [ds[i]["bin"] for i in range(len(ds))] == payloads, version
    ds.close()
print(json.dumps({"held": sorted(held), "gone": gone, "committed": committed}), flush=True)
"""


def test_gc_racing_a_reader_and_a_sharing_writer_loses_nothing(tmp_path):
    store = Store(str(tmp_path / "storage"))
    versions = [commit_first(store)]
    for i in range(1, 6):
        versions.append(commit_sharing(store, versions[-1], rewrite={(i - 1) % 3: i}))
    ids = [m.version for m in versions]
    racer = subprocess.Popen(
        [sys.executable, "-c", RACER, store.url, str(Path(__file__).parents[1]), *ids],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert racer.stdout.readline() == "started\n"
        collect(store, "toy", keep_last=1)  # while the racer opens and commits
        out, err = racer.communicate("go\n", timeout=120)
    finally:
        racer.kill()
    assert racer.returncode == 0, err
    result = json.loads(out)
    assert sorted(result["held"] + result["gone"]) == sorted(ids)
    survivors = store.versions("toy")
    # every version opened under a lease is still whole
    assert set(result["held"]) <= set(survivors)
    for version in result["held"] + ([result["committed"]] if result["committed"] else []):
        assert verify_version(store, "toy", store.manifest("toy", version)) == [], version
    final = collect(store, "toy", keep_last=1)  # the racer's leases are gone: now the rest goes
    from datapipe.versioning.leases import read_leases

    # latest, and the racer's tagged version
    assert len(store.versions("toy")) <= 2, (final.plan.kept, read_leases(store, "toy"), result)
