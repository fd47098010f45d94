"""`datapipe build` through the command line: user mistakes as `error:` lines before any cluster
starts, --tag, --memory-limit, the plain-text summary and log lines when stderr is not a terminal,
and the progress bars when it is.

Every case runs the command in process (``cli_here``: the same command code, exit code and output,
without an interpreter start per case), but the progress bars: they need the installed command on a
pseudo-terminal."""

import subprocess

import pytest
from helpers.cli import INSTALLED, datapipe_in_process

SIMPLE = """\
name: simple
source:
  path: raw/a.csv
  format: csv
  options: {options}
stages:
  - dropna: {{columns: [v]}}
{extra}sample:
  key: id
  fields: {{cls: v}}
"""


def cli_here(project, *args: str) -> subprocess.CompletedProcess:
    """`datapipe build ARGS` in process (an exception it lets out fails the test, as a traceback
    would)."""
    return datapipe_in_process("build", *args, cwd=project.root)


def started_nothing(out: subprocess.CompletedProcess) -> bool:
    """No Dask pass ran (the LineProgress prints 'PASS: N tasks' for each)."""
    return " tasks" not in out.stderr and "dask dashboard" not in out.stderr


def user_error(out: subprocess.CompletedProcess, *parts: str) -> None:
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr and out.stderr.startswith("error: "), out.stderr
    for part in parts:
        assert part in out.stderr, (part, out.stderr)
    assert started_nothing(out)


@pytest.fixture
def simple(project):
    project.write("raw/a.csv", "id,v\nk1,1\nk2,2\nk3,\n")

    def write(options: str = "{}", extra: str = "") -> None:
        project.pipeline(SIMPLE.format(options=options, extra=extra))

    return write


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ("{blocksize: lots}", "pipeline.yaml:5: source.options.blocksize: not a size"),
        ("{blocksize: 0}", "pipeline.yaml:5: source.options.blocksize: must be at least 1 byte"),
        (
            "{files_per_partition: many}",
            "pipeline.yaml:5: source.options.files_per_partition: must be a whole number",
        ),
        (
            "{encodin: latin-1}",
            "pipeline.yaml:5: source.options.encodin: the csv reader does not take this option",
        ),
        (
            "\n    sep: ';'\n    chunksize: 10",
            "pipeline.yaml:7: source.options.chunksize: the csv reader does not take",
        ),
    ],
)
def test_bad_source_options_name_key_and_line(project, simple, options, expected):
    simple(options)
    user_error(cli_here(project, "pipeline.yaml"), expected)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (
            "import os\nx = undefined_name\n",
            "importing module 'brokencode' failed (NameError: name 'undefined_name'",
        ),
        (
            "raise RuntimeError('no config file')\n",
            "importing module 'brokencode' failed (RuntimeError: no config file)",
        ),
        ("def fix(df)\n    return df\n", "module 'brokencode' has a syntax error"),
        (
            "def other(df):\n    return df\n",
            "module 'brokencode' has no function 'fix' (it has: other)",
        ),
    ],
)
def test_map_modules_that_cannot_give_the_function_fail_before_the_cluster(
    project, simple, code, expected
):
    project.write("brokencode.py", code)
    simple(extra="  - map: brokencode:fix\n")
    user_error(cli_here(project, "pipeline.yaml"), "pipeline.yaml:8: stages[1].map: ", expected)


def test_missing_map_module_names_stage_and_line(project, simple):
    simple(extra="  - filter: 'v > 0'\n  - map: nowhere.to.be:found\n")
    user_error(
        cli_here(project, "pipeline.yaml"),
        "pipeline.yaml:9: stages[2].map: cannot find module 'nowhere.to.be'",
    )


def test_out_that_is_a_file_fails_before_the_build(project, simple):
    simple()
    project.write("afile", "not a store")
    user_error(
        cli_here(project, "pipeline.yaml", "--out", "afile"),
        "afile: the store is a file, not a directory",
    )
    user_error(cli_here(project, "pipeline.yaml", "--out", "afile/sub"), "is under a file")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--memory-limit", "lots"], "--memory-limit lots: not a size"),
        (
            ["--memory-limit", "2GB", "--scheduler", "tcp://127.0.0.1:1"],
            "--memory-limit sizes the workers of the embedded",
        ),
        (
            ["--scheduler", "tcp://127.0.0.1:1", "--scheduler-timeout", "0"],
            "--scheduler-timeout 0: must be more than 0",
        ),
        (["--tag", "bad tag!"], "bad tag!"),
    ],
)
def test_bad_command_line_options(project, simple, args, expected):
    simple()
    out = cli_here(project, "pipeline.yaml", *args)
    assert out.returncode == 2 and "Traceback" not in out.stderr and expected in out.stderr, (
        out.stderr
    )
    assert started_nothing(out)


MEMORY_PROBE = """\
import os

from distributed import get_worker


def probe(df):
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "limits.txt"), "a") as f:
        f.write(f"{get_worker().memory_manager.memory_limit}\\n")
    return df
"""


def test_tags_memory_limit_and_plain_output(project, simple):
    project.write("probe.py", MEMORY_PROBE)
    simple(extra="  - map: probe:probe\n")
    # the embedded cluster (this process's), not the session's: the point is what its workers get
    out = cli_here(
        project,
        "pipeline.yaml",
        "--workers",
        "2",
        "--memory-limit",
        "1.5GiB",
        "--tag",
        "v1",
        "--tag",
        "best",
        "--out",
        "store",
    )
    assert out.returncode == 0, out.stderr
    # the workers got the limit
    limits = {int(x) for x in (project.root / "limits.txt").read_text().split()}
    assert limits == {int(1.5 * 2**30)}
    # --tag: both tags and latest point at the new version
    version = out.stdout.strip().splitlines()[-2].removeprefix("version ")
    assert project.store.refs("simple") == {"latest": version, "v1": version, "best": version}
    # plain summary on stdout: the counts table, totals, version and the URL last
    lines = out.stdout.strip().splitlines()
    assert lines[0].split() == ["stage", "in", "out", "dropped", "rejected"]
    table = {line.split()[0]: [int(n) for n in line.split()[1:]] for line in lines[1:5]}
    assert table == {
        "source": [3, 3, 0, 0],
        "stages[0].dropna": [3, 2, 1, 0],
        "stages[1].map": [2, 2, 0, 0],
        "sample": [2, 2, 0, 0],
    }
    assert lines[5].startswith("2 samples in 1 shards, ") and lines[5].endswith(
        "0 rows quarantined"
    )
    # the store as given to --out
    assert lines[-1] == f"store/simple@{version}" and len(version) > 8
    # plain log lines on stderr (not a terminal): one per pass, with its task count, no progress
    # bars
    log = out.stderr.splitlines()
    assert "clean, encode and measure: 1 tasks" in log or "clean and measure: 1 tasks" in log, log
    assert "write shards: 1 tasks" in log and not any("\r" in line or "━" in line for line in log)
    # DATAPIPE_DASHBOARD=0 (tests/conftest.py): none served
    assert not any("dashboard" in line for line in log)


def test_progress_bars_on_a_terminal(project, simple):
    """stderr a terminal (a pseudo-terminal here): a rich bar per pass that ends complete, the
    dashboard link."""
    import os
    import pty

    simple()
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [str(INSTALLED), "build", "pipeline.yaml", "--workers", "1", "--out", "store"],
            stdout=subprocess.PIPE,
            stderr=follower,
            text=True,
            cwd=project.root,
            timeout=300,
            # DATAPIPE_DASHBOARD unset: the dashboard is on by default
            env={
                **{k: v for k, v in os.environ.items() if k != "DATAPIPE_DASHBOARD"},
                "COLUMNS": "100",
                "TERM": "xterm-256color",
            },
        )
        os.close(follower)
        follower = None
        screen = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed with the process
                break
            if not chunk:
                break
            screen += chunk
    finally:
        if follower is not None:
            os.close(follower)
        os.close(leader)
    assert done.returncode == 0, screen[-2000:]
    text = screen.decode(errors="replace")
    assert "dask dashboard: http://" in text and "━" in text  # rich's bar characters
    for phase in ("measure", "write shards"):
        assert any(
            phase in line and "1/1" in line for line in text.replace("\r", "\n").splitlines()
        ), text[-2000:]
    assert done.stdout.strip().splitlines()[-1].startswith("store/simple@")
