"""Chunk ids by rowid, kept for the searches of ``SQLiteStore``: turning a ranking's rowids into chunk ids (and a
fill's chunk ids into rowids) without a SQL query per search.

A rowid is given to one chunk and never reused (``_vectors``: a deleted chunk's rowid stays in ``tombstones``;
compaction keeps rowids), so a rowid's chunk id, once read from committed rows, never changes: that direction
needs no invalidation, only extending to new rows. Each ranking reads the rowids it has not seen (into maps
bounded by ``LIMIT`` rowids, replaced by empty ones past it). Once that has read a quarter as many rows as the
index has (or at ``warm()``), up to ``TABLE_MAX`` rowids, every id is read at once into one list by rowid, with
the map back (from the covering index of the ``chunk_id`` column: ~0.1 s at 100,000 chunks, once; then only the
rows past it): the first searches of a one-off command do not pay for it, a server's searches stop asking SQLite
and decoding ids.

A chunk id moves to a new rowid when its document is written again, so the other direction is only a hint: the
caller keeps a remembered rowid only if it is live in its snapshot (a live rowid holds that chunk id, and chunk
ids are unique among live chunks), and asks SQLite for the rest.

A search holds on to the maps and the list it started with, so a concurrent replacement never loses its
entries. Dict reads and writes are atomic in CPython: no lock.
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

    def __init__(self, limit: int = LIMIT, table_max: int = TABLE_MAX) -> None:
        self.limit, self.table_max = limit, table_max
        self._maps: tuple[dict[int, str], dict[str, int]] = ({}, {})
        # every rowid up to ``covered``: ids by rowid (None: no chunk) and each id's newest rowid
        self._table: tuple[int, list[str | None], dict[str, int]] | None = None
        self._read = 0  # rows read one ranking at a time (the list is read once this reaches top / 4)

    def clear(self) -> None:
        self._maps, self._table, self._read = ({}, {}), None, 0

    def _current(self) -> tuple[dict[int, str], dict[str, int]]:
        maps = self._maps
        if len(maps[0]) > self.limit or len(maps[1]) > self.limit:
            maps = self._maps = ({}, {})
        return maps

    def names(
        self, conn: sqlite3.Connection, rowids: Sequence[int], top: int, *, whole: bool = False
    ) -> list[str | None]:
        """The chunk id of each of ``rowids`` (all ``<= top``; None: deleted before it was ever read); ``whole``:
        read every id into the list now (``warm()``)."""
        table = self.table(conn, top) if whole or self._table is not None or self._read * 4 >= top else None
        if table is not None:
            return list(map(table[1].__getitem__, rowids))
        by_row = self.of_rows(conn, rowids)
        return [by_row.get(r) for r in rowids]

    def seen(self, chunk_ids: Sequence[str], rowids: Sequence[int]) -> None:
        """Remember where these chunk ids are (a hint for ``rows_hint``; the list's map already holds them)."""
        if self._table is None:
            self._current()[1].update(zip(chunk_ids, rowids, strict=True))

    def table(self, conn: sqlite3.Connection, top: int) -> tuple[int, list[str | None], dict[str, int]] | None:
        """Every chunk id of rowids ``1…top`` by rowid and the map back, read once then extended (None past
        ``table_max``)."""
        table = self._table
        if table is not None and table[0] >= top:
            return table
        if top > self.table_max:
            return None
        # the whole column from its covering index (not the table's rows), then the rows past it (a range of the
        # table's key), added in place: searches read only rowids they hold
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

    def of_rows(self, conn: sqlite3.Connection, rowids: Sequence[int]) -> dict[int, str]:
        """The map rowid → chunk id holding every one of ``rowids`` that is (or was) a committed chunk (read from
        SQLite when not seen before; rows deleted before they were ever read are not in it), and the rows seen
        before: callers look their rows up in it."""
        by_row, by_id = self._current()
        missing = [r for r in rowids if r not in by_row]
        self._read += len(missing)
        if missing:
            found = conn.execute(
                "SELECT rowid, chunk_id FROM chunks WHERE rowid IN (SELECT value FROM json_each(?))",
                (json.dumps(missing),),
            ).fetchall()
            self._remember(found, by_row, by_id)
        return by_row

    def rows_hint(self, chunk_ids: Sequence[str]) -> np.ndarray:
        """The rowid each chunk id was last seen at (-1: never seen); check it is live before trusting it."""
        by_id = self._current()[1] if self._table is None else self._table[2]
        return np.fromiter(map(by_id.get, chunk_ids, repeat(-1)), np.int64, len(chunk_ids))

    def rows_now(self, conn: sqlite3.Connection, chunk_ids: Sequence[str]) -> dict[str, int]:
        """The current rowids of ``chunk_ids`` (those stored), read from SQLite, and remembered."""
        by_row, by_id = self._current()
        found = conn.execute(
            "SELECT rowid, chunk_id FROM chunks WHERE chunk_id IN (SELECT value FROM json_each(?))",
            (json.dumps(list(chunk_ids)),),
        ).fetchall()
        self._remember(found, by_row, by_id)
        return {c: r for r, c in found}

    @staticmethod
    def _remember(found: list[tuple[int, str]], by_row: dict[int, str], by_id: dict[str, int]) -> None:
        for rowid, chunk_id in found:
            by_row[rowid] = chunk_id
            by_id[chunk_id] = rowid
