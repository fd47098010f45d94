"""datapipe serve against hostile input: traversal URLs, script keys, fake images, huge fields,
broken files."""

import pytest
from helpers.serve_stores import SCRIPT_KEY, SCRIPT_TEXT, raw_get, shapes, write

from datapipe.serve.app import CSP
from datapipe.versioning.store import Store

TRAVERSALS = [
    "/d/..",
    "/d/%2e%2e",
    "/d/..%2F..%2Fetc%2Fpasswd",
    "/d/%2Fetc%2Fpasswd",
    "/d/shapes%00",
    "/d/%00",
    "/d/shapes/v/..%2F..%2Fshapes",
    "/d/shapes/v/%2Ftmp",
    "/d/shapes/v/latest%00",
    "/d/shapes/v/..",
    "/d/shapes/v/latest/s/99/0",
    "/d/shapes/v/latest/s/0/99",
    "/d/shapes/v/latest/s/-1/0",
    "/d/shapes/v/latest/s/0/0/..%2F..%2Fmanifest.json/thumb",
    "/d/shapes/v/latest/samples?page=-1",
    "/d/shapes/v/latest/samples?split=..",
    "/static/..%2Fapp.py",
    "/static/style.css%00",
    "/etc/passwd",
    "//etc/passwd",
    "/d/shapes/v/0000000000/s/0/0",
]


@pytest.mark.parametrize("url", TRAVERSALS)
def test_paths_that_the_store_does_not_list_are_404(client, url):
    status, headers, text = raw_get(client.app, url)
    assert status == 404, text
    assert (
        "Traceback" not in text
        and "root:" not in text
        and headers["x-content-type-options"] == "nosniff"
    )


def test_every_response_has_nosniff_and_a_csp_without_inline_script(client, store):
    v = store.resolve("shapes", "latest")
    for url in (
        "/",
        "/d/shapes",
        f"/d/shapes/v/{v}",
        "/d/nope",
        "/static/style.css",
        f"/d/shapes/v/{v}/s/0/0/png/thumb",
    ):
        headers = client.get(url).headers
        assert headers["x-content-type-options"] == "nosniff", url
        assert headers["content-security-policy"] == CSP
    assert "unsafe-inline" not in CSP and "script-src" not in CSP and "default-src 'none'" in CSP


def test_the_server_listens_on_loopback_unless_told(store):
    from datapipe.cli.serve import is_loopback, serve

    host = next(p for p in serve.params if p.name == "host")
    assert host.default == "127.0.0.1" and is_loopback(host.default)
    assert is_loopback("::1") and is_loopback("localhost") and not is_loopback("0.0.0.0")


def test_keys_and_text_from_the_data_are_escaped(hostile_client, hostile):
    base = f"/d/evil/v/{hostile.resolve('evil', 'latest')}"
    for url in (base + "/samples", base + "/s/0/0"):
        page = hostile_client.get(url)
        assert page.status_code == 200
        assert SCRIPT_KEY not in page.text and "&lt;script&gt;alert(1)" in page.text
        assert SCRIPT_TEXT not in page.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
        assert "<img src=x" not in page.text and "&lt;img src=x onerror=alert(2)&gt;" in page.text
        assert "<script" not in page.text


def test_bytes_that_pillow_does_not_identify_are_binary_never_an_image(hostile_client, hostile):
    base = f"/d/evil/v/{hostile.resolve('evil', 'latest')}"
    page = hostile_client.get(base + "/s/0/0")
    assert "binary, 18 bytes" in page.text and "/thumb" not in page.text
    assert hostile_client.get(base + "/s/0/0/png/thumb").status_code == 404
    assert hostile_client.get(base + "/s/0/0/txt/thumb").status_code == 404
    assert hostile_client.get(base + "/s/0/1/png/thumb").status_code == 200


def test_a_huge_field_is_cut_with_its_size(hostile_client, hostile):
    page = hostile_client.get(f"/d/evil/v/{hostile.resolve('evil', 'latest')}/s/0/1")
    assert page.status_code == 200 and len(page.text) < 100_000
    assert "cut: 1.0 MB in all" in page.text


def test_a_corrupt_shard_is_an_error_page_naming_it_and_the_server_goes_on(hostile_client, hostile):
    m = hostile.manifest("broken", hostile.resolve("broken", "latest"))
    base = f"/d/broken/v/{m.version}"
    for url in (base + "/samples", base + "/s/0/0", base + "/s/0/0/png/thumb"):
        page = hostile_client.get(url)
        assert page.status_code == 500
        assert m.shards[0].path in page.text and "does not match the hash" in page.text
        assert "Traceback" not in page.text
    # the other samples of that shard still read
    assert hostile_client.get(base + "/s/0/1").status_code == 200
    assert hostile_client.get("/").status_code == 200


@pytest.mark.broken_manifests
def test_a_malformed_manifest_is_an_error_page_naming_the_file(tmp_path):
    from starlette.testclient import TestClient

    from datapipe.serve import create_app

    store = Store(str(tmp_path / "store"))
    m = write(store, "bad", shapes(3), {"png": "bytes"})
    write(store, "good", shapes(3), {"png": "bytes"})
    manifest = tmp_path / "store" / "bad" / "versions" / m.version / "manifest.json"
    manifest.write_text('{"name": "bad", "shards": 7')
    with TestClient(create_app(store), raise_server_exceptions=False) as client:
        home = client.get("/")
        assert home.status_code == 200 and "good" in home.text and str(manifest) in home.text
        page = client.get(f"/d/bad/v/{m.version}")
        assert (
            page.status_code == 500 and str(manifest) in page.text and "Traceback" not in page.text
        )
        assert client.get("/d/good").status_code == 200


def test_a_damaged_quarantine_file_is_an_error_page_naming_it(tmp_path):
    from starlette.testclient import TestClient

    from datapipe.serve import create_app

    store = Store(str(tmp_path / "store"))
    m = write(
        store, "q", shapes(3), {"png": "bytes"}, rejects=[("source", "bad", "a.csv", 1, "{}")]
    )
    parquet = tmp_path / "store" / "q" / "versions" / m.version / "rejected.parquet"
    parquet.write_bytes(b"PAR1 not parquet at all")
    with TestClient(create_app(store), raise_server_exceptions=False) as client:
        page = client.get(f"/d/q/v/{m.version}/quarantine")
        assert (
            page.status_code == 500 and str(parquet) in page.text and "Traceback" not in page.text
        )
        assert client.get(f"/d/q/v/{m.version}").status_code == 200
