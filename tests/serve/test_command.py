"""`datapipe serve` as a user runs it: it prints the URL it listens on, serves, and warns off
loopback."""

import re
import subprocess
import urllib.error
import urllib.request

import pytest
from helpers.cli import INSTALLED


def test_serve_prints_its_url_and_answers_there(store):
    proc = subprocess.Popen(
        [str(INSTALLED), "serve", store.url, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert url, line
        # loopback: never through a proxy
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with direct.open(url.group(0) + "d/shapes", timeout=30) as page:
            assert page.status == 200 and b"shape024" not in page.read()
            assert page.headers["x-content-type-options"] == "nosniff"
        for name in ("localhost", "127.0.0.1"):
            named = urllib.request.Request(url.group(0), headers={"Host": f"{name}:1"})
            assert direct.open(named, timeout=30).status == 200
        # a page of evil.example whose name was rebound to 127.0.0.1 sends its own name: refused
        rebound = urllib.request.Request(
            url.group(0) + "d/shapes", headers={"Host": "evil.example"}
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            direct.open(rebound, timeout=30)
        assert (
            refused.value.code == 400
            and refused.value.headers["x-content-type-options"] == "nosniff"
        )
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "warning" not in proc.stderr.read()


def test_serve_off_loopback_warns_that_anyone_can_read_the_data(store):
    # 192.0.2.1 (TEST-NET-1) is on no interface here: it warns, then fails to listen, naming the
    # address
    out = subprocess.run(
        [str(INSTALLED), "serve", store.url, "--host", "192.0.2.1", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "warning: listening on 192.0.2.1: anyone who can reach port" in out.stderr
    assert "--host 192.0.2.1 --port 0: cannot listen there" in out.stderr
