"""datapipe serve's pages over a small store: what each one shows, read through the store and index
code."""

import re

from datapipe.loader.dataset import open_dataset
from datapipe.serve.samples import read_sample


def latest(store, name):
    return store.resolve(name, "latest")


def test_the_store_page_lists_each_dataset_with_its_latest_version(client, store):
    page = client.get("/")
    assert page.status_code == 200
    assert "shapes" in page.text and "numbers" in page.text
    assert latest(store, "shapes")[:12] in page.text and "v2" in page.text and ">24<" in page.text


def test_the_dataset_page_has_the_versions_newest_first_with_the_changes(client, store):
    page = client.get("/d/shapes")
    v1, v2 = store.resolve("shapes", "v1"), store.resolve("shapes", "v2")
    assert page.status_code == 200
    assert page.text.index(v2[:12]) < page.text.index(v1[:12])
    assert "+4" in page.text and "~1" in page.text and "-0" in page.text


def test_the_version_page_shows_fields_stages_charts_lineage_and_the_loader_line(client, store):
    v = latest(store, "shapes")
    page = client.get(f"/d/shapes/v/{v[:8]}")
    assert page.status_code == 200
    for text in (
        "png",
        "npy",
        "json",
        "clean",
        "validate",
        "<svg",
        "<rect",
        f"datapipe.Loader(&#39;{store.url}/shapes@{v[:12]}&#39;)",
    ):
        assert text in page.text, text
    assert client.get("/d/shapes/v/v1").status_code == 200  # a tag names a version too


def test_the_samples_grid_pages_searches_by_key_prefix_and_shows_thumbnails(client, store):
    base = f"/d/shapes/v/{latest(store, 'shapes')}"
    page = client.get(base + "/samples")
    keys = re.findall(r'class="key" href="[^"]+">(shape\d+)<', page.text)
    assert keys == [f"shape{i:03d}" for i in range(24)]
    # npy shape and dtype, JSON pretty
    assert "float32 [3]" in page.text and "&#34;name&#34;" in page.text
    search = client.get(base + "/samples", params={"q": "shape01"})
    assert re.findall(r'class="key" href="[^"]+">(shape\d+)<', search.text) == [
        f"shape01{i}" for i in range(10)
    ]
    thumbs = re.findall(r'<img src="([^"]+)"', page.text)
    assert len(thumbs) == 24
    thumb = client.get(thumbs[0])
    assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/png"
    assert thumb.content.startswith(b"\x89PNG")
    assert client.get(base + "/samples", params={"page": 1}).text.count('class="cell"') == 0
    assert "No samples" in client.get(base + "/samples", params={"q": "zzz"}).text


def test_a_sample_page_has_every_field_its_shard_and_byte_offset(client, store):
    base = f"/d/shapes/v/{latest(store, 'shapes')}"
    ds = open_dataset(f"{store.url}/shapes", lease_ttl=None)
    start = int(ds.index(1).sample_start[2])
    page = client.get(base + "/s/1/2")
    assert page.status_code == 200
    assert "shape010" in page.text and f"at byte {start}" in page.text and "shard 1" in page.text
    # the byte range alone gives the same sample as the loader
    assert read_sample(ds, 1, 2) == ds[10]


def test_tfrecord_versions_read_by_byte_range_too(client, store):
    base = f"/d/numbers/v/{latest(store, 'numbers')}"
    page = client.get(base + "/samples")
    assert page.status_code == 200 and "row 9" in page.text and "13.5" in page.text
    ds = open_dataset(f"{store.url}/numbers", lease_ttl=None)
    assert read_sample(ds, 2, 1) == ds[9]


def test_no_request_writes_to_the_store(client, store):
    import os

    def files():
        return sorted(
            (p, os.path.getmtime(os.path.join(p, f))) for p, _, fs in os.walk(store.url) for f in fs
        )

    before = files()
    v = latest(store, "shapes")
    for url in (
        "/",
        "/d/shapes",
        f"/d/shapes/v/{v}",
        f"/d/shapes/v/{v}/samples",
        f"/d/shapes/v/{v}/s/0/0",
    ):
        assert client.get(url).status_code == 200
    assert files() == before


def test_the_quarantine_page_lists_the_rejected_rows_by_stage_and_reason(client, store):
    base = f"/d/shapes/v/{latest(store, 'shapes')}"
    assert "the 3 rejected rows" in client.get(base).text
    page = client.get(base + "/quarantine")
    assert page.status_code == 200 and "3 of 3 rows" in page.text and "raw/b.csv" in page.text
    assert "&lt;script&gt;alert(3)&lt;/script&gt;" in page.text and "<script>" not in page.text
    stage = client.get(base + "/quarantine", params={"stage": "source"})
    assert (
        "1 of 3 rows" in stage.text
        and "unparseable line" in stage.text
        and "raw/a.csv" not in stage.text
    )
    reason = client.get(base + "/quarantine", params={"reason": "JSON"})
    assert "1 of 3 rows" in reason.text and "meta is not JSON" in reason.text
    assert client.get(base + "/quarantine", params={"stage": "nope"}).status_code == 404
    v1 = client.get(f"/d/shapes/v/{store.resolve('shapes', 'v1')}/quarantine")
    assert v1.status_code == 200 and "0 of 0 rows" in v1.text


def test_the_diff_page_shows_added_removed_and_both_sides_of_a_changed_sample(client, store):
    v1, v2 = store.resolve("shapes", "v1"), store.resolve("shapes", "v2")
    page = client.get("/d/shapes/diff")  # latest against its parent
    assert page.status_code == 200
    assert "+4 added" in page.text and "-0 removed" in page.text and "~1 changed" in page.text
    assert "19 unchanged" in page.text
    for key in ("shape020", "shape023"):
        assert key in page.text
    assert (
        f"/d/shapes/v/{v1}/s/0/5/png/thumb" in page.text
        and f"/d/shapes/v/{v2}/s/0/5/png/thumb" in page.text
    )
    back = client.get("/d/shapes/diff", params={"a": "v2", "b": "v1"})
    assert "-4 removed" in back.text and "+0 added" in back.text
    assert client.get("/d/numbers/diff").status_code == 404  # no parent to compare with
    assert client.get("/d/shapes/diff", params={"a": "../x"}).status_code == 404


def test_failed_builds_quarantines_are_listed_and_shown(client):
    from datapipe.builder.accounting import FAILED_QUARANTINE
    from datapipe.serve.changes import FAILED_QUARANTINE as SERVED

    assert SERVED == FAILED_QUARANTINE
    name = "20261201T101500Z-0badf00d.parquet"
    assert f"/d/shapes/failed/{name}" in client.get("/d/shapes").text
    page = client.get(f"/d/shapes/failed/{name}")
    assert page.status_code == 200 and "1 of 1 rows" in page.text and "x out of range" in page.text
    assert "raw/c.csv" in page.text
    assert client.get("/d/shapes/failed/other.parquet").status_code == 404
    assert client.get("/d/numbers/failed/" + name).status_code == 404


def test_the_grid_pages_through_every_sample_once(client, store):
    base = f"/d/many/v/{latest(store, 'many')}/samples"
    seen, url = [], base
    while url:
        page = client.get(url)
        seen += re.findall(r'class="key" href="[^"]+">(m\d+)<', page.text)
        following = re.search(r'rel="next" href="([^"]+)"', page.text)
        url = following.group(1).replace("&amp;", "&") if following else None
    assert seen == [f"m{i:03d}" for i in range(100)]


def test_the_parent_graph_puts_a_branch_in_its_own_lane():
    from datapipe.serve.charts import parent_graph

    # c and b both children of a (b built from a again, not on latest's chain); d a root of its own
    nodes, edges = parent_graph(
        [("c", "a", ["latest"]), ("b", "a", []), ("a", None, ["v1"]), ("d", None, [])]
    )
    lanes = {n.version: n.lane for n in nodes}
    assert lanes["c"] == lanes["a"] == 0 and lanes["b"] == 1
    assert sorted((child.version, parent.version) for child, parent in edges) == [
        ("b", "a"),
        ("c", "a"),
    ]
    assert [n.row for n in nodes] == [0, 1, 2, 3]


def test_the_dataset_page_draws_the_parent_graph(client, store):
    page = client.get("/d/shapes")
    assert (
        '<svg class="graph"' in page.text
        and page.text.count("<circle") == 2
        and "<line" in page.text
    )
    assert "(latest, v2)" in page.text


def test_pages_are_answered_side_by_side(store, monkeypatch):
    """Two thumbnails must be in the making at once to get past the barrier: a server that answered
    one page at a time would time the first out (a 500) while the second waited."""
    import asyncio
    import threading

    import httpx2

    from datapipe.serve import create_app, samples

    barrier = threading.Barrier(2, timeout=60)
    real = samples._thumbnail

    def meet(data):
        barrier.wait()
        return real(data)

    monkeypatch.setattr(samples, "_thumbnail", meet)
    app = create_app(store)
    base = f"/d/shapes/v/{latest(store, 'shapes')}"

    async def two_thumbnails():
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            grid = await client.get(base + "/samples")
            first, second = re.findall(r'<img src="([^"]+)"', grid.text)[:2]
            return await asyncio.gather(
                client.get(first.replace("&amp;", "&")), client.get(second.replace("&amp;", "&"))
            )

    for answer in asyncio.run(two_thumbnails()):
        assert answer.status_code == 200 and answer.content.startswith(b"\x89PNG")
