"""Chunk ids by rowid for ``SQLiteStore``'s searches, without a SQL query per search.

Rowids are never reused, so rowid → chunk id never changes once read: it is only extended. Rankings read the
rowids they have not seen into bounded maps; once they have read a quarter of the index (or at ``warm()``), every
id is read into one list by rowid (~0.1 s at 100,000 chunks). Chunk id → rowid is a hint (a rewritten document
moves its chunks): callers keep it only if the rowid is live. Dict operations are atomic in CPython: no lock.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from itertools import repeat

import numpy as np

LIMIT = 200_000  # rowids kept in the maps (about 25 MB of keys and ids); past it they start again empty
TABLE_MAX = 250_000  # rowids up to which every chunk id is held in one list (and a map back: ~100 bytes a rowid)


class ChunkIds:
    """rowid → chunk id (exact) and chunk id → rowid (a hint), filled from committed rows."""

    def __init__(self) -> None:
        self._maps: tuple[dict[int, str], dict[str, int]] = ({}, {})
        # (covered, ids by rowid up to it (None: no chunk), each id's newest rowid)
        self._table: tuple[int, list[str | None], dict[str, int]] | None = None
        self._read = 0  # rows read one ranking at a time (the list is read once this reaches top / 4)

    def clear(self) -> None:
        self._maps, self._table, self._read = ({}, {}), None, 0

    def _current(self) -> tuple[dict[int, str], dict[str, int]]:
        maps = self._maps
        if len(maps[0]) > LIMIT or len(maps[1]) > LIMIT:
            maps = self._maps = ({}, {})
        return maps

    def names(self, conn: sqlite3.Connection, rowids: Sequence[int], top: int) -> list[str | None]:
        """The chunk id of each rowid (None: deleted before it was read)."""
        table = self.table(conn, top) if self._table is not None or self._read * 4 >= top else None
        if table is not None:
            return list(map(table[1].__getitem__, rowids))
        by_row, by_id = self._current()
        missing = [r for r in rowids if r not in by_row]
        self._read += len(missing)
        if missing:
            _read(conn, "rowid", missing, by_row, by_id)
        return [by_row.get(r) for r in rowids]

    def seen(self, chunk_ids: Sequence[str], rowids: Sequence[int]) -> None:
        """Remember where these chunk ids are (a hint for ``rows_hint``; the list's map already holds them)."""
        if self._table is None:
            self._current()[1].update(zip(chunk_ids, rowids, strict=True))

    def table(self, conn: sqlite3.Connection, top: int) -> tuple[int, list[str | None], dict[str, int]] | None:
        """Every chunk id of rowids ``1…top`` and the map back, read once then extended (None past ``TABLE_MAX``)."""
        table = self._table
        if table is not None and table[0] >= top:
            return table
        if top > TABLE_MAX:
            return None
        # the column from its covering index, later the rows past it, added in place
        sql = "SELECT rowid, chunk_id FROM chunks" + ("" if table is None else f" WHERE rowid > {table[0]}")
        rows = conn.execute(sql).fetchall()
        ids, back = (list[str | None](), dict[str, int]()) if table is None else table[1:]
        covered = max(top, max((r for r, _ in rows), default=0))  # every committed rowid up to here is read
        ids.extend([None] * (covered + 1 - len(ids)))
        for rowid, chunk_id in rows:
            ids[rowid] = chunk_id
            back[chunk_id] = rowid
        self._table = (covered, ids, back)
        return self._table

    def rows_hint(self, chunk_ids: Sequence[str]) -> np.ndarray:
        """The rowid each chunk id was last seen at (-1: never seen); check it is live before trusting it."""
        by_id = self._current()[1] if self._table is None else self._table[2]
        return np.fromiter(map(by_id.get, chunk_ids, repeat(-1)), np.int64, len(chunk_ids))

    def rows_now(self, conn: sqlite3.Connection, chunk_ids: Sequence[str]) -> dict[str, int]:
        """The current rowids of ``chunk_ids`` (those stored), read from SQLite, and remembered."""
        return {c: r for r, c in _read(conn, "chunk_id", chunk_ids, *self._current())}


def _read(
    conn: sqlite3.Connection, column: str, values: Sequence[object], by_row: dict[int, str], by_id: dict[str, int]
) -> list[tuple[int, str]]:
    """The ``(rowid, chunk_id)`` of the chunks whose ``column`` is one of ``values``, remembered in both maps."""
    found = conn.execute(
        f"SELECT rowid, chunk_id FROM chunks WHERE {column} IN (SELECT value FROM json_each(?))",
        (json.dumps(list(values)),),
    ).fetchall()
    for rowid, chunk_id in found:
        by_row[rowid] = chunk_id
        by_id[chunk_id] = rowid
    return found
