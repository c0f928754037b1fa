"""Which rows pass a search's filters, kept per filter for ``SQLiteStore``'s searches: reading them from ``chunks``
(no index on collection, type or source) scans the whole table, about 0.1–0.2 s per filtered search at 100,000
chunks.

A rowid's chunk (its collection, type and source) never changes (rowids are never reused: ``_vectors``), so
whether row ``r`` passes a filter, once read from committed rows, stays true for the life of the index: a kept
mask only grows, by the rows past the last one it covers (``rowid > seen``, a range of the table's key). Rows
deleted since are left to the searches' live rows. At most ``LIMIT`` filters are kept (the least recently used
out first); the masks are read-only, replaced whole.
"""

from __future__ import annotations

import json
import sqlite3

import numpy as np

from zhiku.cache import Cache
from zhiku.stores._vectors import match_sources
from zhiku.types import Filters

LIMIT = 16  # filters kept (a mask is one byte per row: 1 MB each at 1M chunks)


def _where(conn: sqlite3.Connection, filters: Filters) -> tuple[str, list[object]]:
    """The SQL condition on ``chunks`` of ``filters`` and its parameters ("" when there is no filter)."""
    sql, params = "", list[object]()
    for column, value in (("collection", filters.collection), ("doc_type", filters.doc_type)):
        if value is not None:
            sql += f" AND {column} = ?"
            params.append(value)
    if filters.source_glob is not None:
        sources = match_sources(
            (s for (s,) in conn.execute("SELECT DISTINCT source FROM documents")), filters.source_glob
        )
        sql += " AND source IN (SELECT value FROM json_each(?))"
        params.append(json.dumps(sources))
    return sql, params


class FilterMasks:
    """Rows ``1…top`` passing a filter (by rowid − 1), per filter."""

    def __init__(self) -> None:
        self._masks: Cache[tuple[int, np.ndarray]] = Cache(LIMIT)

    def clear(self) -> None:
        self._masks.clear()

    def mask(self, conn: sqlite3.Connection, top: int, filters: Filters) -> np.ndarray | None:
        """The rows ``1…top`` passing ``filters`` (None: no filter), read-only; only rows past those already known
        are read from ``chunks``."""
        if filters.collection is None and filters.doc_type is None and filters.source_glob is None:
            return None
        key = (filters.collection, filters.doc_type, filters.source_glob)
        seen, known = self._masks.get(key) or (0, np.zeros(0, bool))
        if seen >= top:
            return known[:top]
        sql, params = _where(conn, filters)
        rows = np.fromiter(
            (r for (r,) in conn.execute(f"SELECT rowid FROM chunks WHERE rowid > ?{sql}", [seen, *params])),
            dtype=np.int64,
        )
        mask = np.zeros(top, bool)
        mask[:seen] = known
        mask[rows[rows <= top] - 1] = True
        mask.flags.writeable = False
        self._masks.put(key, (top, mask))
        return mask
