"""Scoring one BM25 query over the postings segments (``_bm25``): every query term's postings scored (once per
snapshot, then kept) and added into one float64 score per row with one ``bincount``.

The formula is SQLite FTS5's ``bm25()`` (the ranking this index replaced): ``k1 = 1.2``, ``b = 0.75``,
``idf = log((N − n + 0.5) / (n + 0.5))`` floored at 10⁻⁶.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

K1 = 1.2  # FTS5's bm25() constants: changing them changes every ranking
B = 0.75
IDF_FLOOR = 1e-6
_SEARCH_COST = 24  # a binary search costs about this many steps of a scan
CACHE_POSTINGS = 2_000_000  # postings of query terms a snapshot keeps (scored: 16 bytes each)


@dataclass(frozen=True)
class QueryTerm:
    """A query term's postings over the segments (``(rows, tfs)`` per segment, rows ascending, segments in rowid
    order) and how many live rows contain it."""

    term: str
    parts: tuple[tuple[np.ndarray, np.ndarray], ...]
    df: int
    memo: list[tuple[object, ...]] = field(default_factory=list, compare=False, repr=False)  # see ``scored``

    @property
    def size(self) -> int:
        """Postings over every segment (live or not)."""
        return sum(r.size for r, _ in self.parts)

    def idf(self, n: int) -> float:
        idf = math.log((n - self.df + 0.5) / (self.df + 0.5))
        return idf if idf > 0 else IDF_FLOOR

    def scored(self, n: int, norm: np.ndarray, live: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """All live rows containing the term (int64) and its score in each, kept for the next query with the same
        ``n``, ``norm`` and ``live`` (a snapshot's: ``BM25Snapshot`` keeps its terms); read-only, as concurrent
        queries share them."""
        memo = self.memo[0] if self.memo else None
        if memo is not None and memo[0] is norm and memo[1] is live and memo[2] == n:
            return memo[3], memo[4]  # type: ignore[return-value]
        rows = np.concatenate([r for r, _ in self.parts]).astype(np.int64)
        tfs = np.concatenate([t for _, t in self.parts]).astype(np.float64)
        if live is not None:
            keep = live[rows]
            rows, tfs = rows[keep], tfs[keep]
        each = self.idf(n) * (tfs * (K1 + 1.0)) / (tfs + norm[rows])
        rows.setflags(write=False)
        each.setflags(write=False)
        self.memo[:] = [(norm, live, n, rows, each)]
        return rows, each


class TermCache:
    """A snapshot's query terms (postings, df and their scores once computed), kept for the next queries: the
    snapshot is immutable, so they stay right for its life (a new version is a new snapshot, with a new cache).
    Bounded by postings held (``budget``; 16 bytes each once scored): past it, it starts again empty. A term
    longer than 1/16 of the budget is not kept. No lock: a lost entry is recomputed."""

    def __init__(self, budget: int = CACHE_POSTINGS) -> None:
        self.budget = budget
        self._terms: dict[str, QueryTerm] = {}
        self._used = 0

    def get(self, term: str) -> QueryTerm | None:
        return self._terms.get(term)

    def put(self, found: QueryTerm) -> None:
        size = found.size
        if size * 16 > self.budget:
            return
        if self._used + size > self.budget:
            self._terms, self._used = {}, 0
        self._terms[found.term] = found
        self._used += size


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


def score(
    terms: Sequence[QueryTerm],
    n: int,
    norm: np.ndarray,
    live: np.ndarray | None,
    mask: np.ndarray | None,
    top_k: int,
) -> tuple[np.ndarray, np.ndarray]:
    """``(rowids, scores)`` of the best ``top_k`` rows (every row tied with the k-th included), unordered.
    ``terms``: each with ``df > 0``; ``norm`` by rowid; ``live``/``mask`` (by rowid, None: all) the rows allowed."""
    parts = [t.scored(n, norm, live) for t in terms]
    if not parts:
        return np.empty(0, np.int64), np.empty(0, np.float64)
    rows = np.concatenate([r for r, _ in parts])
    each = np.concatenate([w for _, w in parts])
    scores = np.bincount(rows, weights=each, minlength=norm.size)
    if mask is not None:
        scores[~mask] = 0.0
    hits = np.flatnonzero(scores > 0)
    found = scores[hits]
    if hits.size > top_k:
        cut = hits.size - top_k
        best = found >= np.partition(found, cut)[cut]
        hits, found = hits[best], found[best]
    return hits, found
