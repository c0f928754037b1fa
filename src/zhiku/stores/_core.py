"""The compiled search core (``_zcore.c``, an optional extension built by ``pip install`` where a C compiler is
present) fed from ``SQLiteStore``'s snapshots: BM25's sums, both channels' tops, the fill and z-score fusion of a
hybrid search in one call, after the dense product numpy computes as the numpy path does. Same results as the
numpy path, float for float (tests/test_zcore.py, bench/search_parity.py). ``available()`` is False when the
extension is not built: the numpy path then serves every search."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from zhiku.stores._bm25 import BM25Snapshot
from zhiku.stores._vector_files import rowids_of
from zhiku.stores._vectors import VectorSnapshot
from zhiku.types import Filters, Ranking

try:
    from zhiku.stores import _zcore  # type: ignore[attr-defined]
except ImportError:  # not built (no C compiler at install): the numpy path
    _zcore = None

Fused = tuple[str, float, int | None, float | None, int | None, float | None]  # id, score, bm25/dense rank, score
Allowed = tuple[np.ndarray, np.ndarray]  # uint8: the live file rows filters allow, the rowids they allow
FILTERS_KEPT = 16  # filters whose allowed rows a CoreIndex keeps


def available() -> bool:
    """Whether the extension is built and importable."""
    return _zcore is not None


@dataclass(frozen=True)
class CoreIndex:
    """What the core reads besides the snapshots' own arrays, made once per pair of snapshots."""

    bm25: BM25Snapshot
    vectors: VectorSnapshot
    row_rowid: np.ndarray  # int64 by file row
    rowid_row: np.ndarray  # int64 by rowid (-1: none)
    idrank: np.ndarray  # int32 by rowid: the rank of its chunk id (ties by chunk id)
    names: list[Any]  # chunk id (str) by rowid, None where none
    live: np.ndarray  # uint8 by file row
    by_filter: dict[Filters, Allowed | None] = field(default_factory=dict, compare=False, repr=False)  # ``allowed``

    def allowed(self, filters: Filters, masks: Callable[[], tuple[np.ndarray, np.ndarray]]) -> Allowed | None:
        """The live file rows and the rowids ``filters`` allow, from ``masks()`` (BM25's filter mask by rowid − 1,
        the dense channel's by file row) the first time, then kept per filter for this pair of snapshots (a
        rowid's collection, source and type never change); None when they allow no row (the numpy path answers)."""
        kept = self.by_filter.get(filters, _NOT_KEPT)  # (no lock: a filter computed twice is the same)
        if kept is not _NOT_KEPT:
            return kept  # type: ignore[return-value]
        bm25_mask, rows_mask = masks()
        rows = (self.vectors.live[: self.vectors.rows] & rows_mask).view(np.uint8)
        rowids = np.zeros(self.idrank.size, np.uint8)
        rowids[1 : bm25_mask.size + 1] = bm25_mask[: self.idrank.size - 1]
        out = (rows, rowids) if rows.any() and rowids.any() else None
        if len(self.by_filter) >= FILTERS_KEPT:
            self.by_filter.clear()
        self.by_filter[filters] = out
        return out


_NOT_KEPT = object()


@dataclass(frozen=True)
class CoreResult:
    """One call's channels (rankings with rowids), the fused items (None when not fused here) with how many BM25
    candidates got their exact cosine, and the call's phase times (seconds: BM25, the dense top, fusion)."""

    bm25: Ranking
    dense: Ranking
    fused: list[Fused] | None
    filled: int
    seconds: tuple[float, float, float]


_lock = threading.Lock()


def core_index(
    bm25: BM25Snapshot, vectors: VectorSnapshot, table: np.ndarray, kept: list[CoreIndex]
) -> CoreIndex | None:
    """The ``CoreIndex`` of these snapshots (``table``: chunk ids as bytes by rowid, ``ChunkIds.table``), or None
    when a live row has no chunk id in it (the numpy path then leaves such a row out; the core cannot). ``kept``:
    the store's own last one (replaced here), so that stores searched in turn do not rebuild each other's and a
    closed store's snapshots are not held."""
    last = kept[0] if kept else None
    if last is not None and last.bm25 is bm25 and last.vectors is vectors:
        return last
    with _lock:
        top = max(bm25.top, vectors.top)
        if table.size < top + 1:
            return None
        rows = vectors.rows
        row_rowid = rowids_of(vectors.layout, vectors.ids, np.arange(rows, dtype=np.int64))
        live = np.ascontiguousarray(vectors.live[:rows])
        ids = table[: top + 1]
        if (ids[row_rowid[live]] == b"").any() or (ids[: bm25.live.size][bm25.live] == b"").any():
            return None
        rowid_row = np.full(top + 1, -1, np.int64)
        ok = (row_rowid >= 1) & (row_rowid <= top)
        rowid_row[row_rowid[ok]] = np.flatnonzero(ok)
        idrank = np.empty(ids.size, np.int32)
        idrank[np.argsort(ids, kind="stable")] = np.arange(ids.size, dtype=np.int32)  # bytes order = str order
        names = [b.decode() if b else None for b in ids.tolist()]
        out = CoreIndex(bm25, vectors, row_rowid, rowid_row, idrank, names, live.view(np.uint8))
        kept[:] = [out]
        return out


@dataclass(frozen=True)
class Fusion:
    """How the core fuses (``RetrievalSettings``'s): the channels' weights and ``fill_dense``."""

    bm25_weight: float
    dense_weight: float
    fill: bool


NO_FUSION = Fusion(0.0, 0.0, False)


def hybrid(
    ix: CoreIndex,
    scores: np.ndarray,
    terms: list[tuple[np.ndarray, np.ndarray]],
    depth: int,
    keep: int,
    fusion: Fusion | None,
    before: tuple[float, float] = (0.0, 0.0),
    allowed: Allowed | None = None,
    dots: tuple[np.ndarray, np.ndarray] | None = None,
) -> CoreResult:
    """One compiled call (``_zcore.c``) over the dense product ``scores`` (by file row) and the query terms' scored
    postings (in query order): ``depth`` candidates per channel, and with ``fusion`` the best ``keep`` fused.
    ``before``: seconds spent on BM25 and dense before the call (added to its phases); ``allowed``: what filters
    allow (``CoreIndex.allowed``); ``dots``: the float32 rows and the unit query of a screened search, whose
    ``scores`` hold only the screened rows (−inf elsewhere): the fill computes any other cosine it needs."""
    assert _zcore is not None
    f = fusion or NO_FUSION
    live, rowids = allowed if allowed is not None else (ix.live, None)
    # no channel ranks more rows than there are rowids: the same results, and the C int sizes never overflow
    depth, keep = min(depth, ix.idrank.size), min(keep, 2 * ix.idrank.size)
    args = (live, ix.row_rowid, ix.rowid_row, ix.idrank, ix.names, terms, depth, depth, keep)
    more = (rowids, *dots) if dots is not None else (rowids,)
    got = _zcore.hybrid(scores, *args, f.bm25_weight, f.dense_weight, f.fill, fusion is not None, *more)
    bi, bs, br, di, ds, dr, fused, filled, t_bm25, t_dense, t_fusion = got
    seconds = (before[0] + t_bm25, before[1] + t_dense, t_fusion)
    return CoreResult(Ranking(bi, bs, br), Ranking(di, ds, dr), fused, filled, seconds)
