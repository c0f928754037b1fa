"""Chunk ids by rowid, cached for the searches of ``SQLiteStore``: turning a ranking's rowids into chunk ids (and a
fill's chunk ids into rowids) without a SQL query per search.

A rowid is given to one chunk and never reused (``_vectors``: a deleted chunk's rowid stays in ``tombstones``;
compaction keeps rowids), so a rowid's chunk id, once read from committed rows, never changes: that direction
needs no invalidation. A chunk id moves to a new rowid when its document is written again, so the other
direction is only a hint: the caller keeps a cached rowid only if it is live in its snapshot (a live rowid holds
that chunk id, and chunk ids are unique among live chunks), and asks SQLite for the rest.

The maps are bounded (``LIMIT`` rowids): past it they are replaced by empty ones. A search holds on to the maps it
started with, so a concurrent replacement never loses its entries. Dict reads and writes are atomic in CPython:
no lock.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

LIMIT = 200_000  # rowids kept (about 25 MB of keys and ids); past it the maps start again empty


class ChunkIds:
    """rowid → chunk id (exact) and chunk id → rowid (a hint), filled from committed rows."""

    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self._maps: tuple[dict[int, str], dict[str, int]] = ({}, {})

    def clear(self) -> None:
        self._maps = ({}, {})

    def _current(self) -> tuple[dict[int, str], dict[str, int]]:
        maps = self._maps
        if len(maps[0]) > self.limit:
            maps = self._maps = ({}, {})
        return maps

    def of_rows(self, conn: sqlite3.Connection, rowids: Sequence[int]) -> dict[int, str]:
        """The chunk id of each of ``rowids`` that is (or was) a committed chunk; rows deleted before they were ever
        read are left out."""
        by_row, by_id = self._current()
        missing = [r for r in rowids if r not in by_row]
        if missing:
            found = conn.execute(
                "SELECT rowid, chunk_id FROM chunks WHERE rowid IN (SELECT value FROM json_each(?))",
                (json.dumps(missing),),
            ).fetchall()
            for rowid, chunk_id in found:
                by_row[rowid] = chunk_id
                by_id[chunk_id] = rowid
        return by_row

    def of_rows_known(self, rowid: int) -> str | None:
        """The chunk id of ``rowid`` if it was read (no SQL)."""
        return self._maps[0].get(rowid)

    def rows_hint(self, chunk_ids: Sequence[str]) -> list[int | None]:
        """The rowid each chunk id was last seen at (None: never seen); check it is live before trusting it."""
        by_id = self._current()[1]
        return [by_id.get(c) for c in chunk_ids]

    def rows_now(self, conn: sqlite3.Connection, chunk_ids: Sequence[str]) -> dict[str, int]:
        """The current rowids of ``chunk_ids`` (those stored), read from SQLite, and remembered."""
        by_row, by_id = self._current()
        found = conn.execute(
            "SELECT rowid, chunk_id FROM chunks WHERE chunk_id IN (SELECT value FROM json_each(?))",
            (json.dumps(list(chunk_ids)),),
        ).fetchall()
        for rowid, chunk_id in found:
            by_row[rowid] = chunk_id
            by_id[chunk_id] = rowid
        return {c: r for r, c in found}
