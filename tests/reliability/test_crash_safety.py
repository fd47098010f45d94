"""kill -9 `datapipe build` in every phase of the commit protocol, and kill Dask workers under it:
every ref still names a complete version that verifies, no partial version is listed, a rerun gives
the same version id, and gc removes every leftover.

Random kill moments alone miss the commit: on a small build the partial version appears at ~75% of
the wall time and the shards, the manifest and the ref are written in well under a second. So most
kills are triggered by what the store shows, polled every millisecond (before the partial directory
exists, once it exists, after the first shard, after the n-th shard, once the manifest exists but
before the ref moved, once the shards moved under the version id), and the rest land at random
moments. Each trial reports the phase its kill actually landed in (a kill is never instant).

The builds that are killed run the installed command: every other one on a Dask cluster of its own
(`--workers 2`, killed with its workers), the rest on threads in the one process (the digits are
small enough for that), as a user's builds run; the commit protocol is the same code either way. The
checks after each kill (`ls`, `verify`, `gc`, the rerun) run the commands in process, the rerun on
the session's Dask cluster, and so does the build whose Dask worker is killed (on an embedded
cluster of its own).
"""

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import crash_moments, last_json, leftovers
from helpers.cli import datapipe_in_process, datapipe_process, on_session_cluster
from helpers.versions import commit_token_child, commit_tokens, token_samples

from datapipe.versioning.gc import collect
from datapipe.versioning.store import Store
from datapipe.versioning.verify import verify_version


def start_build(project, store, *extra):
    return datapipe_process(
        "build",
        "digits.yaml",
        "--out",
        str(store),
        *extra,
        cwd=project,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def running_in_group(pgid: int) -> bool:
    """Whether a process of group ``pgid`` is still running (not a zombie); True where /proc cannot
    tell."""
    if not os.path.isdir("/proc/self"):
        return True
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):  # gone meanwhile
            continue
        if int(group) == pgid and state != "Z":
            return True
    return False


def kill_group(proc) -> None:
    """SIGKILL the build and everything it started (its Dask scheduler lives in it; the workers are
    in its group).

    Waits until no process of the group is left running, so nothing writes into the store while the
    test looks at it. Zombies count as gone: the killed workers' parent is dead, and in a container
    the init process may take a second or more to reap them."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        if not running_in_group(proc.pid):
            return
        time.sleep(0.05)
    raise AssertionError(f"processes of build group {proc.pid} survived SIGKILL")


@dataclass
class StoreState:
    """What a store of the digits dataset shows at one instant."""

    partial: bool = False  # a .partial-* directory exists
    shards: int = 0  # shard files (final names) in the partial directories
    version_dirs: int = 0  # version directories, with or without a manifest
    manifests: int = 0  # version directories with a manifest
    ref: bool = False  # refs/latest exists
    temporaries: list[str] = field(default_factory=list)


# shard-000000.tar, train-000000.tar, shard-000000.bin (a token shard)
SHARD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*-\d{6}\.(tar|tfrecord|bin)$")


def look(store: Path) -> StoreState:
    """One pass over the store with os.scandir: cheap enough to poll every millisecond."""
    state = StoreState()
    versions = store / "digits" / "versions"
    try:
        entries = list(os.scandir(versions))
    except FileNotFoundError:
        return state
    for entry in entries:
        if entry.name.startswith(".partial-"):
            state.partial = True
            try:
                state.shards += sum(1 for e in os.scandir(entry.path) if SHARD.match(e.name))
            except FileNotFoundError:
                pass
        elif not entry.name.startswith("."):
            state.version_dirs += 1
            state.manifests += os.path.exists(os.path.join(entry.path, "manifest.json"))
    state.ref = os.path.exists(store / "digits" / "refs" / "latest")
    return state


def landed(state: StoreState) -> str:
    """The phase of the build a kill landed in, read from what it left."""
    if state.ref:
        return "after the ref moved"
    if state.manifests:
        return "manifest written, ref not moved"
    if state.version_dirs:
        return "shards moved under the version id, no manifest"
    if state.partial:
        return f"partial version with {state.shards} shards"
    return "before the partial version existed"


@dataclass(frozen=True)
class Timeline:
    """When each phase began in an undisturbed build, in seconds from its start."""

    partial: float
    first_shard: float
    manifest: float
    total: float
    shards: int


@pytest.fixture(scope="module")
def reference(tmp_path_factory, copy_digits):
    """The digits project, the version id of an undisturbed build and that build's timeline (it is
    watched the same way the kills are triggered)."""
    project = copy_digits(
        tmp_path_factory.mktemp("digits"), "digits.yaml", "digits_tfrecord.yaml", "digits_code.py"
    )
    store = project / "reference-store"
    start = time.monotonic()
    proc = datapipe_process(
        "build",
        "digits.yaml",
        "--out",
        str(store),
        "--json",
        cwd=project,
        stdout=subprocess.PIPE,
        text=True,
    )
    seen: dict[str, float] = {}
    shards = 0
    while proc.poll() is None:
        state, now = look(store), time.monotonic() - start
        shards = max(shards, state.shards)
        for phase, reached in (
            ("partial", state.partial),
            ("first_shard", state.shards > 0),
            ("manifest", state.manifests > 0),
        ):
            if reached:
                seen.setdefault(phase, now)
        time.sleep(0.001)
    out, _ = proc.communicate()
    assert proc.returncode == 0
    version = json.loads(out.strip().splitlines()[-1])["version"]
    summary = json.loads(out.strip().splitlines()[-1])
    timeline = Timeline(
        partial=seen["partial"],
        first_shard=seen.get("first_shard", seen["partial"]),
        manifest=seen.get("manifest", seen["partial"]),
        total=time.monotonic() - start,
        shards=summary["shards"],
    )
    print(f"\nreference build: {timeline}")
    return project, version, timeline


TRIGGERS = [
    "random moment before the partial version",
    "partial version exists",
    "first shard written",
    "n-th shard written",
    "manifest exists",
    "random moment",
    "version directory exists",
]


def kill_when(
    proc, store: Path, trigger: str, timeline: Timeline, rng: random.Random, n: int
) -> None:
    """Poll the store every millisecond and SIGKILL the build when ``trigger`` holds (or it has
    ended).

    As the reference build is watched: a poll without a pause takes a core from the build on 2 cores
    (slowing it by a third), and a millisecond is well inside the shortest phase (~10 ms)."""
    start = time.monotonic()
    if trigger == "random moment before the partial version":
        at = rng.uniform(0.1, 0.9) * timeline.partial
    elif trigger == "random moment":
        at = rng.uniform(0.05, 1.0) * timeline.total
    else:
        at = None
    while proc.poll() is None:
        if at is not None:
            if time.monotonic() - start >= at:
                break
            time.sleep(0.005)
            continue
        state = look(store)
        if (
            trigger == "partial version exists"
            and state.partial
            or trigger == "first shard written"
            and state.shards >= 1
            or trigger == "n-th shard written"
            and state.shards >= n
            or trigger == "manifest exists"
            and state.manifests
            or trigger == "version directory exists"
            and state.version_dirs
        ):
            break
        time.sleep(0.001)
    kill_group(proc)


def consistent(project, store, reference_version) -> list[str]:
    """ls lists only complete versions (no partial); every ref names one that `datapipe verify`
    accepts."""
    listed = json.loads(datapipe_in_process("ls", str(store), "--json", cwd=project).stdout or "[]")
    versions = [r["version"] for r in listed]
    # anything listed is the whole version
    assert all(v == reference_version for v in versions), versions
    assert not any("partial" in json.dumps(r) for r in listed)
    refs_dir = store / "digits" / "refs"
    for ref in refs_dir.iterdir() if refs_dir.exists() else ():
        if ref.name.startswith("."):
            continue  # a temporary file of an interrupted ref write: not a ref (gc removes it)
        assert ref.read_text().strip() in versions, f"ref {ref.name} names an unlisted version"
        out = datapipe_in_process("verify", f"{store}/digits@{ref.name}", cwd=project)
        assert out.returncode == 0, out.stdout + out.stderr
    return versions


def rerun(project, store, version, scheduler: str) -> None:
    out = datapipe_in_process(
        "build",
        "digits.yaml",
        "--out",
        str(store),
        *on_session_cluster(scheduler),
        "--json",
        cwd=project,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert last_json(out)["version"] == version


def gc(project, store) -> list[str]:
    """Run `datapipe gc`; the paths it removed."""
    out = datapipe_in_process("gc", f"{store}/digits", cwd=project)
    # killed before it wrote anything: nothing to collect
    if not (store / "digits" / "versions").exists():
        # (no store folder yet at all: said so instead)
        said = "no dataset 'digits'" in out.stderr or "no such store" in out.stderr
        assert out.returncode == 3 and said, out.stderr
        return []
    assert out.returncode == 0, out.stderr
    return [
        line.removeprefix("removed ")
        for line in out.stdout.splitlines()
        if line.startswith("removed ")
    ]


@pytest.mark.slow
def test_kill_9_in_every_phase_leaves_only_complete_versions(reference, tmp_path, dask_client):
    project, version, timeline = reference
    scheduler = dask_client.scheduler.address
    rng = random.Random(8)
    moments = crash_moments(5)
    report = []
    for i in range(moments):
        trigger = TRIGGERS[i % len(TRIGGERS)]
        # the n-th shard: the middle one first, then spread over the write pass
        n = max(1, (timeline.shards // 2 + 7 * (i // len(TRIGGERS))) % timeline.shards)
        store = tmp_path / f"store-{i}"
        # odd trials: a cluster of its own, killed with its workers
        cluster = ("--workers", "2") if i % 2 else ()
        kill_when(start_build(project, store, *cluster), store, trigger, timeline, rng, n)
        state = look(store)
        left = leftovers(store)
        phase = landed(state)
        consistent(project, store, version)
        if state.partial and not state.ref:
            assert left, f"{phase}: the killed build left nothing for gc"
        # even trials: gc right after the kill, then the rerun; odd trials: the rerun over the
        # leftovers, then gc
        if i % 2:
            rerun(project, store, version, scheduler)
        removed = gc(project, store)
        if left:
            assert removed, f"{phase}: gc removed nothing, though {left} were left"
        for path in left:  # each leftover went, itself or with the directory holding it...
            gone = any(
                str(store / path) == r or str(store / path).startswith(r + "/") for r in removed
            )
            # ...or it was the version directory the killed build had begun and the rerun completed
            # (verified below)
            completed = (
                i % 2
                and path == f"digits/versions/{version}"
                and (store / path / "manifest.json").exists()
            )
            assert gone or completed, (phase, path, removed)
        if not i % 2:
            rerun(project, store, version, scheduler)
        assert leftovers(store) == []
        assert consistent(project, store, version) == [version]
        assert (store / "digits" / "refs" / "latest").read_text().strip() == version
        report.append(
            (
                trigger,
                "cluster" if cluster else "threads",
                phase,
                "rerun, gc" if i % 2 else "gc, rerun",
                len(left),
                len(removed),
            )
        )
        shutil.rmtree(store)
    print("\ntrigger | build on | landed in | order | leftovers | gc removed")
    for row in report:
        print(" | ".join(map(str, row)))
    landed_phases = {row[2] for row in report}
    if moments >= 5:  # the sweep reached the commit, not only the passes before it
        assert any(
            p.startswith("partial version with") and p != "partial version with 0 shards"
            for p in landed_phases
        ), landed_phases


KILLER = """
import os, signal
from pathlib import Path
from digits_code import pixels_to_png

def pixels_then_die(frame):
    marker = Path(__file__).with_name("{marker}")
    if {always} or not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)  # the Dask worker process running this task dies
    return pixels_to_png(frame)
"""


@pytest.mark.parametrize("always", [False, True])
def test_a_dask_worker_killed_mid_build(reference, tmp_path, always):
    """A store that already holds a version: a build whose worker dies either fails clearly and
    moves no ref, or recovers and moves the ref to a complete version; the old version stays intact
    either way."""
    project, version, _ = reference
    work = tmp_path / "project"
    shutil.copytree(project, work, ignore=shutil.ignore_patterns("*store*", "__pycache__"))
    store = tmp_path / "store"
    shutil.copytree(project / "reference-store", store)
    assert (store / "digits" / "refs" / "latest").read_text().strip() == version
    # a module name of its own per case: this process keeps the first module of a name it imported
    killer = f"killer_{'always' if always else 'once'}"
    (work / f"{killer}.py").write_text(KILLER.format(marker="killed-once", always=always))
    pipeline = (
        (work / "digits.yaml")
        .read_text()
        .replace("digits_code:pixels_to_png", f"{killer}:pixels_then_die")
    )
    (work / "digits.yaml").write_text(pipeline)
    # in process, on an embedded cluster of its own (its workers are the ones that die, not the
    # session's)
    out = datapipe_in_process(
        "build", "digits.yaml", "--out", str(store), "--workers", "2", "--json", cwd=work
    )
    latest = (store / "digits" / "refs" / "latest").read_text().strip()
    if always:  # every try dies: a clear failure, and no ref moves
        assert out.returncode == 8 and "a Dask worker died" in out.stderr
        assert latest == version
        assert [
            r["version"]
            for r in json.loads(datapipe_in_process("ls", str(store), "--json", cwd=work).stdout)
        ] == [version]
    # Dask reruns the lost task on a fresh worker: the build recovers and the ref moves to its
    # version
    else:
        assert out.returncode == 0, out.stderr
        new = last_json(out)["version"]
        assert new != version and latest == new  # other code, another version
        assert datapipe_in_process("verify", f"{store}/digits@latest", cwd=work).returncode == 0
    # the old one
    assert datapipe_in_process("verify", f"{store}/digits@{version[:12]}", cwd=work).returncode == 0
    assert leftovers(store) == []  # a failed build removes its partial version itself


ROWS = """\
name: digits
source: {path: raw/*.csv, format: csv}
sample: {key: id, fields: {cls: label, txt: text}}
shards: {max_bytes: 20KB}
"""


def write_rows(project: Path, n: int, rows: int = 150) -> None:
    lines = ["id,label,text"] + [
        f"f{n:03d}r{i:04d},{i % 10},{'x' * (40 + (n * 7 + i) % 90)}" for i in range(rows)
    ]
    (project / "raw").mkdir(parents=True, exist_ok=True)
    (project / "raw" / f"f{n:03d}.csv").write_text("\n".join(lines) + "\n")


@pytest.mark.slow
def test_kill_9_in_an_incremental_build_keeps_the_parent_whole(tmp_path):
    """A rebuild hard-links the parent's shards into its partial version: killed at any point, the
    parent still verifies, no listed version is partial, gc removes only the leftovers (the parent's
    files keep one link), and a rerun gives the version a build from scratch gives."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "rows.yaml").write_text(ROWS)
    for n in range(0, 40, 2):
        write_rows(project, n)
    base = tmp_path / "base"
    assert (
        datapipe_in_process("build", "rows.yaml", "--out", str(base), cwd=project).returncode == 0
    )
    parent = (base / "digits" / "refs" / "latest").read_text().strip()
    write_rows(project, 19)  # one file in the middle of the source order
    fresh = datapipe_in_process(
        "build", "rows.yaml", "--out", str(tmp_path / "fresh"), "--json", cwd=project
    )
    expected = last_json(fresh)["version"]
    rng = random.Random(3)
    phases = []
    for i, trigger in enumerate(
        ["partial version exists", "first shard written", "n-th shard written", "random moment"][
            : max(2, crash_moments(4))
        ]
    ):
        store = tmp_path / f"store-{i}"
        shutil.copytree(base, store)
        proc = datapipe_process(
            "build",
            "rows.yaml",
            "--out",
            str(store),
            "--workers",
            "2",
            cwd=project,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        kill_when(proc, store, trigger, Timeline(0.0, 0.0, 0.0, 1.5, 1), rng, 3)
        state, latest = look(store), (store / "digits" / "refs" / "latest").read_text().strip()
        phases.append(
            "after the ref moved"
            if latest == expected
            else "manifest written, ref not moved"
            if state.manifests > 1
            else "shards moved under the version id"
            if state.version_dirs > 1
            else f"partial version with {state.shards} shards"
            if state.partial
            else "before the partial"
        )
        assert latest in (parent, expected)
        listed = [
            r["version"] for r in json.loads(datapipe_in_process("ls", str(store), "--json").stdout)
        ]
        assert parent in listed and set(listed) <= {parent, expected}
        for version in listed:
            out = datapipe_in_process("verify", f"{store}/digits@{version}")
            assert out.returncode == 0, out.stdout + out.stderr
        assert datapipe_in_process("gc", f"{store}/digits").returncode == 0
        assert leftovers(store) == []
        if latest == parent:  # no version shares the parent's files now
            shards = list((store / "digits" / "versions" / parent).glob("*.tar"))
            assert shards and all(os.stat(s).st_nlink == 1 for s in shards)
        out = datapipe_in_process("build", "rows.yaml", "--out", str(store), "--json", cwd=project)
        assert out.returncode == 0, out.stderr[-2000:]
        assert last_json(out)["version"] == expected
        assert last_json(out)["incremental"]["parent"] in (parent, expected)
    print("\nincremental kills landed in:", phases)


# a child of the store's token version, committed by the versioning writer in a process of its
# own (the build does not write token shards yet): NEW shards written, then the parent's reused
TOKEN_CHILD = """
import sys
sys.path.insert(0, sys.argv[2])
from helpers.versions import commit_token_child
from datapipe.versioning.store import Store
store = Store(sys.argv[1])
parent = store.manifest("digits", store.resolve("digits"))
commit_token_child(store, parent, new=int(sys.argv[3]), name="digits")
"""


def landed_over_parent(state: StoreState, ref_moved: bool) -> str:
    """The phase a kill landed in, in a store that held a version (and its ref) before."""
    if ref_moved:
        return "after the ref moved"
    if state.manifests > 1:
        return "manifest written, ref not moved"
    if state.version_dirs > 1:
        return "files moved under the version id, no manifest"
    return f"partial version with {state.shards} shards" if state.partial else "before the partial"


@pytest.mark.slow
def test_kill_9_in_a_token_commit_leaves_no_version_without_its_companions(tmp_path):
    """A token shard is four files; killed anywhere in a commit that writes some and hard-links the
    parent's, every listed version still verifies with every companion, gc removes the
    leftovers (the parent's files keep one link), and the commit done again gives the same id."""
    base, new = Store(str(tmp_path / "base")), 40
    parent = commit_tokens(base, [token_samples(i) for i in range(3)], name="digits")
    fresh = Store(str(tmp_path / "fresh"))
    shutil.copytree(tmp_path / "base", tmp_path / "fresh")
    expected = commit_token_child(fresh, parent, new, name="digits").version
    phases = []
    # what the store shows when the kill is sent: the parent's directory is always there
    triggers = [
        lambda state: state.partial,
        lambda state: state.shards >= new // 2,
        lambda state: state.version_dirs > 1,  # the files move in, the manifest comes last
        lambda state: state.manifests > 1,
        lambda state: state.shards >= 1,
    ]
    for i, trigger in enumerate(triggers[: max(3, crash_moments(5))]):
        root = tmp_path / f"store-{i}"
        shutil.copytree(tmp_path / "base", root)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                TOKEN_CHILD,
                str(root),
                str(Path(__file__).parents[1]),
                str(new),
            ],
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        while proc.poll() is None and not trigger(look(root)):
            time.sleep(0.001)
        kill_group(proc)
        store = Store(str(root))
        phases.append(landed_over_parent(look(root), store.resolve("digits") == expected))
        assert store.resolve("digits") in (parent.version, expected)
        assert parent.version in store.versions("digits")
        for version in store.versions("digits"):
            assert version in (parent.version, expected)
            assert verify_version(store, "digits", store.manifest("digits", version)) == []
        collect(store, "digits")
        assert leftovers(root) == []
        if expected not in store.versions("digits"):  # nothing shares the parent's files now
            kept = list((root / "digits" / "versions" / parent.version).glob("shard-*"))
            assert len(kept) == 3 * 4 and all(os.stat(f).st_nlink == 1 for f in kept)
        assert commit_token_child(store, parent, new, name="digits").version == expected
        assert verify_version(store, "digits", store.manifest("digits", expected)) == []
    print("\ntoken commit kills landed in:", phases)
