"""Scoring one BM25 query over the postings segments (``_bm25``), exactly as FTS5's ``bm25()`` ranked it.

Short postings are added into one dense float64 score per row. Long postings (frequent terms) are the cost at
scale, so they are skipped where they cannot change the top k (MaxScore): the k-th best score from the short
terms alone is a lower bound θ of the final k-th score; a long term adds at most its bound (its idf times the
term-frequency part at its highest tf in its shortest row), so the long terms whose bounds sum below θ cannot
lift a row that has none of the other terms into the top k, and the rows whose partial score plus that sum stay
below θ cannot get there either. The few rows left are then scored exactly, term by term in query order (the
same floating-point sums as scoring every row), reading the skipped terms' postings only to find those rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from zhiku.cache import Cache

K1 = 1.2  # FTS5's bm25() constants: changing them changes every ranking
B = 0.75
IDF_FLOOR = 1e-6
LONG_FRACTION = 64  # a term in more than 1/64 of the rows (and in more than LONG_MIN) has a long postings list
LONG_MIN = 4096
_MARGIN = 1e-9  # relative slack on every bound (floating-point sums in another order)
_SEARCH_COST = 24  # a binary search costs about this many steps of a scan
CACHE_POSTINGS = 2_000_000  # postings of query terms a snapshot keeps (scored: 16 bytes each)
SLACK_SHARE = 0.75  # skipped terms may add at most this share of θ: the rows left to score exactly stay few


@dataclass(frozen=True)
class QueryTerm:
    """A query term's postings over the segments (``(rows, tfs)`` per segment, rows ascending, segments in rowid
    order) and statistics."""

    term: str
    parts: tuple[tuple[np.ndarray, np.ndarray], ...]
    df: int  # live rows containing it
    max_tf: int
    min_dl: int
    memo: list[tuple[object, ...]] = field(default_factory=list, compare=False, repr=False)  # see ``scored``

    @property
    def size(self) -> int:
        """Postings over every segment (live or not)."""
        return sum(r.size for r, _ in self.parts)

    def idf(self, n: int) -> float:
        idf = math.log((n - self.df + 0.5) / (self.df + 0.5))
        return idf if idf > 0 else IDF_FLOOR

    def scored(self, n: int, norm: np.ndarray, live: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """All live rows containing the term (int64) and its score in each (``weights``), kept for the next query
        with the same ``n``, ``norm`` and ``live`` (a snapshot's: ``BM25Snapshot`` keeps its terms); read-only, as
        concurrent queries share them."""
        kept = self._kept(n, norm, live)
        if kept is not None:
            return kept
        rows, tfs = self.gathered(live)
        each = weights(self.idf(n), tfs, norm[rows])
        rows.setflags(write=False)
        each.setflags(write=False)
        self.memo[:] = [(norm, live, n, rows, each)]
        return rows, each

    def _kept(self, n: int, norm: np.ndarray, live: np.ndarray | None) -> tuple[np.ndarray, np.ndarray] | None:
        """The rows and scores ``scored`` kept for these ``n``, ``norm`` and ``live`` (the same objects), if any."""
        memo = self.memo[0] if self.memo else None
        if memo is not None and memo[0] is norm and memo[1] is live and memo[2] == n:
            return memo[3], memo[4]  # type: ignore[return-value]
        return None

    def gathered(self, live: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """All live rows containing the term (int64) and their tfs (float64)."""
        rows = np.concatenate([r for r, _ in self.parts]).astype(np.int64)
        tfs = np.concatenate([t for _, t in self.parts])
        if live is not None:
            keep = live[rows]
            rows, tfs = rows[keep], tfs[keep]
        return rows, tfs.astype(np.float64)

    def found_in(
        self, cand: np.ndarray, slot: Callable[[], np.ndarray], n: int, norm: np.ndarray, live: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The candidates containing the term (indexes into ``cand``, rows sorted) and its score in each: from its
        scored rows when this query or an earlier one computed them (``scored``), else from the postings. Few
        candidates against a long list are looked up by binary search (reading a few pages of the postings);
        otherwise the list is scanned through ``slot()`` (row → index into ``cand``, -1 elsewhere)."""
        kept = self._kept(n, norm, live)
        if kept is not None:
            at, found = _lookup(cand, 0, cand.size, kept[0], slot)
            return at, kept[1][found]
        ats, scores, idf = [], [], self.idf(n)
        for rows, tfs in self.parts:  # a row is in one part: one score per term
            if rows.size == 0:
                continue
            a, b = np.searchsorted(cand, (int(rows[0]), int(rows[-1]) + 1))
            if a == b:
                continue
            at, found = _lookup(cand, int(a), int(b), rows, slot)
            ats.append(at)
            scores.append(weights(idf, tfs[found].astype(np.float64), norm[cand[at]]))
        if not ats:
            return np.empty(0, np.int64), np.empty(0, np.float64)
        return np.concatenate(ats), np.concatenate(scores)


def _lookup(
    cand: np.ndarray, a: int, b: int, rows: np.ndarray, slot: Callable[[], np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Which of ``cand[a:b]`` are in ``rows`` (sorted): their indexes into ``cand`` and into ``rows``."""
    if rows.size == 0 or a == b:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    if (b - a) * _SEARCH_COST < rows.size:
        pos = np.searchsorted(rows, cand[a:b].astype(rows.dtype))
        hit = rows[np.minimum(pos, rows.size - 1)] == cand[a:b]
        return np.arange(a, b)[hit], pos[hit]
    at = slot()[rows]
    found = np.flatnonzero(at >= 0)
    return at[found], found


class TermCache(Cache[QueryTerm]):
    """A snapshot's query terms (postings, df and their scores once computed), kept for the next queries: the
    snapshot is immutable, so they stay right for its life (a new version is a new snapshot, with a new cache).
    Bounded by postings held (``budget``; 16 bytes each once scored); a term longer than 1/16 of the budget is not
    kept."""

    def __init__(self, budget: int = CACHE_POSTINGS) -> None:
        super().__init__(budget, lambda t: t.size if t.size * 16 <= budget else budget + 1)


def dead_in(rows: np.ndarray, dead: np.ndarray, live: np.ndarray) -> int:
    """How many of ``rows`` (sorted) are not live (``dead``: the sorted rowids that are not; ``live`` by rowid):
    by binary search when the dead rows in their range are few (reading a few pages of the postings), else by
    scanning them."""
    if rows.size == 0 or dead.size == 0:
        return 0
    a, b = np.searchsorted(dead, (int(rows[0]), int(rows[-1]) + 1))
    if a == b:
        return 0
    if (b - a) * _SEARCH_COST < rows.size:
        pos = np.searchsorted(rows, dead[a:b].astype(np.uint32))
        return int(np.count_nonzero(rows[np.minimum(pos, rows.size - 1)] == dead[a:b]))
    return int(rows.size - np.count_nonzero(live[rows]))


def weights(idf: float, tfs: np.ndarray, norm: np.ndarray) -> np.ndarray:
    """FTS5's per-term score, in its order of operations (identical floats)."""
    out: np.ndarray = idf * ((tfs * (K1 + 1.0)) / (tfs + norm))
    return out


def score(
    terms: Sequence[QueryTerm],
    n: int,
    avgdl: float,
    norm: np.ndarray,
    live: np.ndarray | None,
    mask: np.ndarray | None,
    top_k: int,
) -> tuple[np.ndarray, np.ndarray]:
    """``(rowids, scores)`` of the best ``top_k`` rows (ties with the k-th included), unordered. ``terms`` in query
    order, each with ``df > 0``; ``norm`` by rowid; ``live``/``mask`` (by rowid, None: all) the rows allowed."""
    long_df = max(LONG_MIN, n // LONG_FRACTION)
    short = [t for t in terms if t.df <= long_df]
    long = [t for t in terms if t.df > long_df]
    if not long or not short:
        return _every_row(terms, n, norm, live, mask, top_k)
    partial = _summed(short, n, norm, live, mask)
    nonzero = partial[partial > 0]
    if nonzero.size < top_k:
        return _every_row(terms, n, norm, live, mask, top_k)
    theta = float(np.partition(nonzero, nonzero.size - top_k)[nonzero.size - top_k])
    bounds = sorted(((_bound(t, n, avgdl), i) for i, t in enumerate(long)), key=lambda b: b[0])
    slack, skipped = 0.0, set()
    for bound, i in bounds:
        if slack + bound >= theta * SLACK_SHARE:
            break
        slack += bound
        skipped.add(i)
    if not skipped:
        return _every_row(terms, n, norm, live, mask, top_k)
    partial += _summed([t for i, t in enumerate(long) if i not in skipped], n, norm, live, mask)
    cand = np.flatnonzero(partial >= theta - slack - theta * _MARGIN)
    slots: list[np.ndarray] = []

    def slot() -> np.ndarray:  # row → index into cand, made when a term's list is scanned
        if not slots:
            slots.append(np.full(norm.size, -1, np.int32))
            slots[0][cand] = np.arange(cand.size, dtype=np.int32)
        return slots[0]

    found = [t.found_in(cand, slot, n, norm, live) for t in terms]
    # query order: the same sums as _every_row, for the candidates only (bincount adds in its input's order)
    at, each = np.concatenate([a for a, _ in found]), np.concatenate([w for _, w in found])
    exact = np.bincount(at, weights=each, minlength=cand.size)
    return _best(cand, exact, top_k)


def _bound(t: QueryTerm, n: int, avgdl: float) -> float:
    """The most ``t`` can add to any row's score."""
    tf = float(t.max_tf)
    return t.idf(n) * ((tf * (K1 + 1.0)) / (tf + K1 * (1 - B + B * t.min_dl / avgdl))) * (1 + _MARGIN)


def _every_row(
    terms: Sequence[QueryTerm],
    n: int,
    norm: np.ndarray,
    live: np.ndarray | None,
    mask: np.ndarray | None,
    top_k: int,
) -> tuple[np.ndarray, np.ndarray]:
    scores = _summed(terms, n, norm, live, mask)
    hits = np.flatnonzero(scores)
    return _best(hits, scores[hits], top_k)


def _summed(
    terms: Sequence[QueryTerm], n: int, norm: np.ndarray, live: np.ndarray | None, mask: np.ndarray | None
) -> np.ndarray:
    """Every row's score from ``terms`` (added in their order), 0 outside ``mask``. One ``bincount`` over the terms'
    postings concatenated in query order adds each row's term scores in that order, from 0: the same floats as
    adding term after term."""
    parts = [t.scored(n, norm, live) for t in terms]
    if not parts:
        return np.zeros(norm.size, np.float64)
    rows = np.concatenate([r for r, _ in parts]) if len(parts) > 1 else parts[0][0]
    each = np.concatenate([w for _, w in parts]) if len(parts) > 1 else parts[0][1]
    scores: np.ndarray = np.bincount(rows, weights=each, minlength=norm.size)
    if mask is not None:
        scores[~mask] = 0.0
    return scores


def _best(rows: np.ndarray, scores: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``top_k`` best of ``rows`` (positive scores), with every row tied with the k-th."""
    keep = scores > 0
    rows, scores = rows[keep], scores[keep]
    if rows.size > top_k:
        cut = rows.size - top_k
        best = scores >= np.partition(scores, cut)[cut]
        rows, scores = rows[best], scores[best]
    return rows, scores
