"""The in-memory dense index behind ``SQLiteStore``: a float32 matrix with parallel filter columns.

SQLite holds the vectors durably (one float32 BLOB per chunk); this module serves exact (brute-force)
cosine search from a numpy matrix (``bench/vector_search.py``: 64 ms p50 at 100k x 1024, 20 ms at 100k x 384,
on 2 cores under load average 12; bench/RESULTS.md).
Rows are appended into spare capacity (doubling) and compacted on removal. Filters are boolean masks
over interned integer columns, so a search has no per-chunk Python loop.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence

import numpy as np

from zhiku.numeric import l2_normalise
from zhiku.types import Filters, ScoredId

_MIN_CAPACITY = 64


def match_sources(sources: Iterable[str], glob: str) -> list[str]:
    """The sources matching an fnmatch-style glob (``*``, ``?``, ``[seq]``, ``[!seq]``), case-sensitive.

    BM25 and dense search both filter through this function, so they always agree on what a glob means.
    """
    return [s for s in sources if fnmatch.fnmatchcase(s, glob)]


class _Interner:
    """Strings to dense integer codes (a column of codes is cheap to mask with numpy)."""

    def __init__(self, names: Sequence[str] = ()) -> None:
        self.names = list(names)
        self._codes = {name: i for i, name in enumerate(self.names)}

    def code(self, name: str) -> int:
        code = self._codes.get(name)
        if code is None:
            code = self._codes[name] = len(self.names)
            self.names.append(name)
        return code

    def get(self, name: str) -> int | None:
        return self._codes.get(name)


def _intern_column(values: Sequence[str]) -> tuple[_Interner, np.ndarray]:
    if not values:
        return _Interner(), np.empty(0, np.int32)
    names, codes = np.unique(np.asarray(values, dtype=object), return_inverse=True)
    return _Interner([str(n) for n in names]), codes.astype(np.int32).reshape(-1)


class VectorIndex:
    """Unit vectors of every chunk plus the columns dense-search filters need.

    Rows have no order; results are sorted by score, then chunk id.
    """

    _FIELDS = ("ids", "doc", "collection", "doc_type", "source")

    def __init__(self, dim: int, capacity: int = 0) -> None:
        self.dim = dim
        self._n = 0
        self._matrix = np.empty((capacity, dim), np.float32)
        self._ids = np.empty(capacity, object)
        self._codes = {f: np.empty(capacity, np.int32) for f in self._FIELDS[1:]}
        self._names = {f: _Interner() for f in self._FIELDS[1:]}

    def __len__(self) -> int:
        return self._n

    @classmethod
    def build(
        cls,
        dim: int,
        matrix: np.ndarray,
        ids: Sequence[str],
        doc_ids: Sequence[str],
        collections: Sequence[str],
        doc_types: Sequence[str],
        sources: Sequence[str],
    ) -> VectorIndex:
        """An index over ``matrix`` (``(n, dim)`` writable float32, normalised in place) and its row columns."""
        n = matrix.shape[0]
        index = cls(dim, 0)
        index._matrix = l2_normalise(matrix, in_place=True) if n else np.empty((0, dim), np.float32)
        index._ids = np.asarray(list(ids) if n else [], dtype=object).reshape(-1)
        for field, values in zip(cls._FIELDS[1:], (doc_ids, collections, doc_types, sources), strict=False):
            index._names[field], index._codes[field] = _intern_column(values)
        index._n = n
        return index

    # --- updates ---------------------------------------------------------------------------------
    def add(
        self, doc_id: str, collection: str, doc_type: str, source: str, ids: Sequence[str], vectors: np.ndarray
    ) -> None:
        """Append the chunks of one document (``vectors``: ``(len(ids), dim)``)."""
        k = len(ids)
        if k == 0:
            return
        self._reserve(k)
        lo, hi = self._n, self._n + k
        self._matrix[lo:hi] = l2_normalise(vectors)
        self._ids[lo:hi] = list(ids)
        for field, value in (("doc", doc_id), ("collection", collection), ("doc_type", doc_type), ("source", source)):
            self._codes[field][lo:hi] = self._names[field].code(value)
        self._n = hi

    def remove(self, doc_id: str) -> None:
        """Drop every row of a document, compacting the arrays."""
        code = self._names["doc"].get(doc_id)
        if code is None or self._n == 0:
            return
        keep = np.flatnonzero(self._codes["doc"][: self._n] != code)
        if keep.size == self._n:
            return
        m = keep.size
        self._matrix[:m] = self._matrix[keep]
        self._ids[:m] = self._ids[keep]
        self._ids[m : self._n] = None
        for column in self._codes.values():
            column[:m] = column[keep]
        self._n = m

    def _reserve(self, extra: int) -> None:
        need = self._n + extra
        capacity = self._matrix.shape[0]
        if need <= capacity:
            return
        capacity = max(need, 2 * capacity, _MIN_CAPACITY)
        matrix = np.empty((capacity, self.dim), np.float32)
        matrix[: self._n] = self._matrix[: self._n]
        self._matrix = matrix
        ids = np.empty(capacity, object)
        ids[: self._n] = self._ids[: self._n]
        self._ids = ids
        for field, column in self._codes.items():
            grown = np.empty(capacity, np.int32)
            grown[: self._n] = column[: self._n]
            self._codes[field] = grown

    # --- search ----------------------------------------------------------------------------------
    def _mask(self, filters: Filters) -> np.ndarray | None:
        """Rows passing ``filters``: None for no restriction, else a boolean array (maybe all False)."""
        n = self._n
        mask: np.ndarray | None = None
        for field, value in (("collection", filters.collection), ("doc_type", filters.doc_type)):
            if value is None:
                continue
            code = self._names[field].get(value)
            if code is None:
                return np.zeros(n, bool)
            part = self._codes[field][:n] == code
            mask = part if mask is None else mask & part
        if filters.source_glob is not None:
            names = self._names["source"]
            codes = [names.get(s) for s in match_sources(names.names, filters.source_glob)]
            part = np.isin(self._codes["source"][:n], np.asarray(codes, np.int32))
            mask = part if mask is None else mask & part
        return mask

    def search(self, query: np.ndarray, top_k: int, filters: Filters = Filters()) -> list[ScoredId]:
        """The ``top_k`` rows most cosine-similar to ``query`` (shape ``(dim,)``), best first."""
        if top_k < 1 or self._n == 0:
            return []
        scores = self._matrix[: self._n] @ l2_normalise(query)
        mask = self._mask(filters)
        rows = np.arange(self._n) if mask is None else np.flatnonzero(mask)
        if rows.size == 0:
            return []
        candidate_scores = scores[rows]
        if top_k < rows.size:
            best = np.argpartition(-candidate_scores, top_k - 1)[:top_k]
            rows, candidate_scores = rows[best], candidate_scores[best]
        ids = self._ids[rows]
        order = sorted(range(rows.size), key=lambda i: (-candidate_scores[i], ids[i]))
        return [ScoredId(str(ids[i]), float(candidate_scores[i]), rank) for rank, i in enumerate(order, 1)]
