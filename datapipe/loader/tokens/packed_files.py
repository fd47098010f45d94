"""The files of packed rows: a window's documents read from its token shards, its plan kept for
the next reads, and a batch's pieces gathered from the mapped ``.bin`` files."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from datapipe.formats.tokens.reader import TokensShardReader
from datapipe.loader.dataset import Dataset
from datapipe.loader.schedule import _rng, groups
from datapipe.loader.shard_files import held_together
from datapipe.loader.tokens.pack import Pack
from datapipe.loader.tokens.rows import ARRAYS, BatchPieces, ShardIds, assemble, split_batches
from datapipe.loader.tokens.window import WindowDocs, WindowPlan

SHARD_BITS = 32  # a mix's shard codes: source << SHARD_BITS | shard
SHARDS = (1 << SHARD_BITS) - 1
PLANS_KEPT = 3  # windows whose plans a process keeps (a batch spans one or two)


class _WindowPages:
    """A window as CachePins sees a shard: pages to drop."""

    def __init__(self, files: PackedFiles, window: int) -> None:
        self.files, self.window = files, window

    def drop_pages(self) -> None:
        """Give back the resident pages of the window's shards."""
        self.files.drop_pages(self.window)


class PackedFiles:
    """The Files of a PackedSet: rows read window by window from the token shards' ``.bin``."""

    def __init__(
        self, dataset: Dataset, pack: Pack, seed: int, shuffle: bool, window: int, source: str
    ) -> None:
        self.dataset, self.pack, self.seed, self.shuffle = dataset, pack, seed, shuffle
        self.window, self.source = window, source
        self.windows = -(-len(dataset.shard_sizes) // window)
        tokenizer = dataset.manifest.lineage.tokenizer
        self.pad_id = int(tokenizer.eos_id) if tokenizer and tokenizer.eos_id is not None else 0
        # the last windows read: each one's plan and, once asked, its documents' (source, key)
        self._plans: OrderedDict[int, tuple[WindowPlan, list[tuple[str, str]]]] = OrderedDict()
        self._populated: set[int] = set()  # shards whose pages were mapped at once, not dropped

    @property
    def remote(self) -> bool:
        """Whether the token shards come through the local cache (a remote store's)."""
        return bool(self.dataset.files.remote)

    def __len__(self) -> int:
        return self.windows

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_plans"] = OrderedDict()  # made again where used
        state["_populated"] = set()
        return state

    def check(self) -> None:
        """Fail now, naming the shard, when one is missing."""
        self.dataset.files.check()

    def part(self, shard: int) -> tuple[PackedFiles, int]:
        """Itself: a window is one part."""
        return self, shard

    def shards(self, window: int) -> range:
        """The dataset's shard numbers in window ``window``."""
        return range(window * self.window, min((window + 1) * self.window, self.windows_end))

    @property
    def windows_end(self) -> int:
        """The dataset's shard count."""
        return len(self.dataset.shard_sizes)

    def reader(self, window: int) -> _WindowPages:
        """What CachePins drops the pages of, for window ``window``."""
        return _WindowPages(self, window)

    def shard(self, shard: int) -> TokensShardReader:
        """Shard ``shard`` of the dataset, opened."""
        reader = self.dataset.files.reader(shard)
        assert isinstance(reader, TokensShardReader)
        return reader

    def drop_pages(self, window: int) -> None:
        """Give back the resident pages of the window's open shards."""
        self._populated.difference_update(self.shards(window))
        for shard in self.shards(window):
            reader = self.dataset.files.open_reader(shard)
            if reader is not None:
                reader.drop_pages()

    def fetch(self, window: int) -> tuple[Any, ...]:
        """The cached, verified copies of the window's shards and their files (held until
        closed): what the download-ahead holds for a window."""
        files = self.dataset.files
        return held_together(
            lambda shard=shard: files.fetch(shard) for shard in self.shards(window)
        )

    def release(self, window: int) -> None:
        """Done with the window for now: its shards unmapped, their cached copies evictable."""
        for shard in self.shards(window):
            self.dataset.files.release(shard)

    def held(self) -> list[int]:
        """Windows with a shard whose cached copy this process holds open."""
        held = set(self.dataset.files.held())
        return [w for w in range(self.windows) if held.intersection(self.shards(w))]

    def docs(self, window: int) -> WindowDocs:
        """The window's documents in packing order."""
        shards, numbers, offsets, lengths = [], [], [], []
        for shard in self.shards(window):
            reader = self.shard(shard)
            lengths.append(reader.lengths)
            offsets.append(reader.offsets())
            numbers.append(np.arange(len(reader), dtype=np.int64))
            shards.append(np.full(len(reader), shard, dtype=np.int64))
        docs = WindowDocs(*(np.concatenate(a) for a in (shards, numbers, offsets, lengths)))
        if not self.shuffle:
            return docs
        order = _rng(self.seed, 0x9AC4, window).permutation(len(docs.length))
        return WindowDocs(*(a[order] for a in (docs.shard, docs.number, docs.offset, docs.length)))

    def plan(self, window: int) -> WindowPlan:
        """The rows of window ``window`` (kept for the next few reads)."""
        return self._window(window)[0]

    def _window(self, window: int) -> tuple[WindowPlan, list[tuple[str, str]]]:
        """Window ``window``'s plan and its documents' names (filled on first use), kept."""
        kept = self._plans.get(window)
        if kept is None:
            kept = self._plans[window] = (WindowPlan(self.docs(window), self.pack), [])
            while len(self._plans) > PLANS_KEPT:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(window)
        return kept

    def pieces(self, windows: np.ndarray, rows: np.ndarray, slots: np.ndarray) -> BatchPieces:
        """The pieces of rows ``rows`` of ``windows``, the rows placed at batch rows ``slots``."""
        parts, names = self.window_pieces(windows, rows, slots)
        return sorted_pieces(parts, names)

    def window_pieces(
        self, windows: np.ndarray, rows: np.ndarray, slots: np.ndarray, code: int = 0
    ) -> tuple[list[tuple[np.ndarray, ...]], list[tuple[str, str]]]:
        """Per window of ``windows``, its rows' pieces as arrays in ``ARRAYS`` order (each window's
        sorted by row and column), shards numbered from ``code``; and the pieces' (source, key)."""
        parts: list[tuple[np.ndarray, ...]] = []
        names: list[tuple[str, str]] = []
        for window, where in groups(np.asarray(windows)):
            plan, named = self._window(window)
            p = plan.pieces(np.asarray(rows)[where])
            d = plan.docs
            row = np.asarray(slots)[where][p.row]
            first, doc = p.first, p.doc
            parts.append(
                (
                    row,
                    p.column,
                    d.shard[doc] + code,
                    d.offset[doc] + first,
                    first,
                    p.end,
                    d.length[doc],
                )
            )
            if not named:
                named.extend(self._names(plan.docs))
            names.extend(named[i] for i in doc.tolist())
        return parts, names

    def _names(self, docs: WindowDocs) -> list[tuple[str, str]]:
        """(source, key) of each of ``docs``, in their order."""
        out: list[tuple[str, str]] = [("", "")] * len(docs.shard)
        for shard, where in groups(docs.shard):
            keys = self.shard(shard).key_array()[docs.number[where]].tolist()
            for slot, key in zip(np.arange(len(out))[where].tolist(), keys, strict=True):
                out[slot] = (self.source, key.decode() if isinstance(key, bytes) else str(key))
        return out

    def ids(self, shard: int) -> np.ndarray:
        """Shard ``shard``'s token ids, its pages mapped at once the first time since they were
        last dropped (rows read all over a window would fault them in a few at a time)."""
        reader = self.shard(shard)
        if shard not in self._populated:
            self._populated.add(shard)
            reader.populate_pages()
        return reader.ids()

    def read_rows(
        self, windows: np.ndarray, rows: np.ndarray, sizes: list[int] | None = None
    ) -> Iterator[dict[str, Any]]:
        """The batches of these rows (of these windows), in this order: consecutive batches of
        ``sizes`` rows (one batch of all by default)."""
        owner = np.zeros(len(rows), dtype=np.int64)
        return read_mixed_rows([self], owner, np.asarray(windows), np.asarray(rows), sizes)

    def keys_of(self, windows: np.ndarray, rows: np.ndarray) -> list[Any]:
        """Each row's pieces (source, key, first token, end token), no token read."""
        pieces = self.pieces(windows, rows, np.arange(len(rows)))
        per_row: list[list[tuple[str, str, int, int]]] = [[] for _ in range(len(rows))]
        size = self.pack.length
        for r, c, f, e, name in zip(
            pieces.row.tolist(),
            pieces.column.tolist(),
            pieces.first.tolist(),
            pieces.end.tolist(),
            pieces.names,
            strict=True,
        ):
            if c < size:
                per_row[r].append((*name, f, min(e, f + size - c)))
        return per_row


def sorted_pieces(parts: list[tuple[np.ndarray, ...]], names: list[tuple[str, str]]) -> BatchPieces:
    """Pieces of several windows (or sources) as one BatchPieces, sorted by row and column (one
    window's are already)."""
    if len(parts) == 1:
        return BatchPieces(*parts[0], names)
    if not parts:
        return BatchPieces(*(np.empty(0, np.int64) for _ in ARRAYS), [])
    arrays = [np.concatenate(a) for a in zip(*parts, strict=True)]
    order = np.lexsort((arrays[1], arrays[0]))
    return BatchPieces(*(a[order] for a in arrays), [names[i] for i in order.tolist()])


def read_mixed_rows(
    parts: Sequence[PackedFiles],
    owner: np.ndarray,
    numbers: np.ndarray,
    rows: np.ndarray,
    sizes: list[int] | None = None,
) -> Iterator[dict[str, Any]]:
    """Batches of rows of several sources: row i is row ``rows[i]`` of window ``numbers[i]`` of
    ``parts[owner[i]]``; consecutive batches of ``sizes`` rows (one of all by default), their
    pieces found at once (most of that cost is per call) and each assembled as it is taken (its
    shards must stay open until then)."""
    sizes = [len(owner)] if sizes is None else sizes
    pack, pad_id = parts[0].pack, parts[0].pad_id
    # the batches' shards' ids, looked up once for them all
    ids = ShardIds(lambda code: parts[code >> SHARD_BITS].ids(code & SHARDS))

    if len(parts) == 1:  # one dataset: its pieces are the batch's
        pieces = parts[0].pieces(numbers, rows, np.arange(len(owner)))
        split = split_batches(pieces, sizes)
        return (assemble(p, n, pack, ids, pad_id) for p, n in zip(split, sizes, strict=True))
    arrays: list[tuple[np.ndarray, ...]] = []
    names: list[tuple[str, str]] = []
    slots = np.arange(len(owner))
    for p, where in groups(np.asarray(owner)):
        found = parts[p].window_pieces(numbers[where], rows[where], slots[where], p << SHARD_BITS)
        arrays.extend(found[0])
        names.extend(found[1])

    split = split_batches(sorted_pieces(arrays, names), sizes)
    return (assemble(p, n, pack, ids, pad_id) for p, n in zip(split, sizes, strict=True))
