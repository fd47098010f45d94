"""Small batches are read and collated a few at a time, then cut apart (loader/batches.py): the
batches are the same as read one by one, for every kind of field, in storage order, shuffled,
padded; user decoders never run ahead."""

import numpy as np
import pytest
from sample_data import SIZES

import datapipe
from datapipe.loader import batches as batches_module
from datapipe.loader.batches import CHUNK_BATCHES, BatchSource, cut


def contents(batch: dict) -> list:
    data, offsets = (np.asarray(v) for v in batch["bin"])
    ragged = [
        data[a:b].tobytes()
        for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)
    ]
    return [
        list(batch["__key__"]),
        np.asarray(batch["cls"]).tolist(),
        ragged,
        list(batch["key_text"]),
    ]


@pytest.mark.parametrize("shuffle, drop_last", [(False, True), (True, True), (True, "pad")])
def test_batches_read_a_few_at_a_time_equal_batches_read_one_by_one(
    toy, monkeypatch, shuffle, drop_last
):
    def epoch() -> list:
        loader = datapipe.Loader(
            toy,
            batch_size=2,
            shuffle=shuffle,
            seed=7,
            rank=1,
            world_size=2,
            num_workers=0,
            drop_last=drop_last,
            fields=["bin", "cls"],
            decode={"bin": "ragged"},
        )
        source = loader.batch_source()
        chunk = source.chunk_batches(False)
        out = []
        # chunks, and a last one cut short
        assert len(loader) > 2 * CHUNK_BATCHES and len(loader) % CHUNK_BATCHES
        for batch in loader:
            batch["key_text"] = [k.upper() for k in batch["__key__"]]
            out.append(contents(batch))
        return chunk, out

    chunk, chunked = epoch()
    monkeypatch.setattr(batches_module, "CHUNK_BATCHES", 1)
    one, one_by_one = epoch()
    assert chunk == CHUNK_BATCHES and one == 1
    assert chunked == one_by_one
    batches = -(-sum(SIZES) // 4) if drop_last == "pad" else sum(SIZES) // 4  # 2 ranks x 2 samples
    assert len(chunked) == batches and all(len(b[0]) == 2 for b in chunked)


def count(payload: bytes) -> int:
    return len(payload)


def test_user_decoders_and_images_are_not_read_ahead(toy):
    loader = datapipe.Loader(toy, batch_size=3, num_workers=0, decode={"bin": count})
    assert loader.batch_source().chunk_batches(False) == 1
    loader = datapipe.Loader(toy, batch_size=3, num_workers=0)
    source: BatchSource = loader.batch_source()
    assert source.chunk_batches(False) == CHUNK_BATCHES and source.chunk_batches(True) == 1


def test_cut_gives_views_and_offsets_from_zero():
    data = np.arange(10, dtype=np.uint8)
    batch = {
        "__key__": ["a", "b", "c", "d"],
        "cls": np.array([1, 2, 3, 4]),
        "bin": (data, np.array([0, 1, 3, 6, 10])),
        "text": ["w", "x", "y", "z"],
    }
    first, second = cut(batch, [1, 3])
    assert (
        first["__key__"] == ["a"]
        and second["cls"].tolist() == [2, 3, 4]
        and second["text"] == ["x", "y", "z"]
    )
    assert first["bin"][0].tolist() == [0] and first["bin"][1].tolist() == [0, 1]
    assert second["bin"][0].tolist() == list(range(1, 10)) and second["bin"][1].tolist() == [
        0,
        2,
        5,
        9,
    ]
    assert np.shares_memory(second["bin"][0], data) and np.shares_memory(
        second["cls"], batch["cls"]
    )
