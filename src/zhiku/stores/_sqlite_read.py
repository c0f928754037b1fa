"""The catalogue part of ``SQLiteStore``: documents, chunks, collections and history, each read on a pooled read
connection (readers run side by side and never wait for the writer). Chunks decoded for one search are kept for
the next (``chunk_cache``) until the ``index_version`` moves: every commit that changes chunks moves it, in this
process or another."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from zhiku.cache import Cache
from zhiku.stores._sqlite_conn import Database
from zhiku.stores._sqlite_schema import CHUNK_COLS, DOC_COLS, HISTORY_COLS, chunk_from_row, doc_from_row, doc_row
from zhiku.types import Chunk, CollectionStats, DocRecord, IngestionRecord

# what a store's decoded chunks kept between reads may weigh (of one index version; the oldest out first): their
# texts' characters and CHUNK_WEIGHT more each (~20–50 MB of Python objects; a corpus of 10k ~500-character chunks
# is held whole: a question's hits are then never decoded again)
CHUNK_CACHE = 8_000_000
CHUNK_WEIGHT = 256


def text_weight(c: Chunk) -> int:
    """A kept chunk's weight: its text's characters and ``CHUNK_WEIGHT`` (the object, its other strings)."""
    return CHUNK_WEIGHT + len(c.text)


def chunk_cache(size: int = CHUNK_CACHE) -> Cache[Chunk | tuple[Chunk, ...]]:
    """Decoded chunks of one ``index_version`` by chunk id, and documents' chunk lists by ``("doc", doc_id)``: what
    the last reads decoded, kept for the next, at most ``size`` in ``text_weight``."""
    return Cache(size, lambda v: text_weight(v) if isinstance(v, Chunk) else sum(map(text_weight, v)))


# the chunk columns and, read in the same statement (one snapshot), the index version they are of
_PLACES = "SELECT chunk_id, source, section, page FROM chunks WHERE chunk_id IN (SELECT value FROM json_each(?))"
_VERSIONED = f"SELECT {CHUNK_COLS}, (SELECT value FROM meta WHERE key = 'index_version') FROM chunks"


def _fetch(conn: sqlite3.Connection, sql: str, arg: str) -> tuple[int | None, list[Chunk]]:
    """The chunks of ``_VERSIONED + sql`` and the version they are of (None when no row came back)."""
    rows = conn.execute(_VERSIONED + sql, (arg,)).fetchall()
    return (int(rows[0][-1] or 0) if rows else None), [chunk_from_row(row) for row in rows]


class Catalogue:
    """The catalogue reads of ``SQLiteStore`` (its base class): documents, chunks, collections, history and
    metadata, read on pooled connections (decoded chunks kept in a ``chunk_cache``), and the rows one document
    write inserts."""

    db: Database
    cache: Cache[Chunk | tuple[Chunk, ...]]

    @staticmethod
    def _insert(conn: sqlite3.Connection, doc: DocRecord, chars: int, rows: list[tuple[Any, ...]], base: int) -> None:
        """Insert ``doc`` and its chunk rows (``prepare_rows``'s) at rowids ``base, base + 1, …``."""
        conn.execute(
            f"INSERT INTO documents ({DOC_COLS}, chars) VALUES ({', '.join('?' * 15)})", (*doc_row(doc), chars)
        )
        conn.executemany(
            f"INSERT INTO chunks (rowid, {CHUNK_COLS}, vector) VALUES ({', '.join('?' * 14)})",
            [(base + i, *r[:-1]) for i, r in enumerate(rows)],
        )
        conn.executemany(
            "INSERT INTO chunk_tokens (rowid, tokens) VALUES (?, ?)", [(base + i, r[-1]) for i, r in enumerate(rows)]
        )

    def get_chunks(self, chunk_ids: Sequence[str]) -> list[Chunk]:
        """The chunks of ``chunk_ids`` that exist, in that order: those of the current version from memory, the
        others read (one statement) and kept."""
        ids = list(chunk_ids)
        if not ids:
            return []
        cache = self.cache
        in_ids = " WHERE chunk_id IN (SELECT value FROM json_each(?))"
        with self.db.read() as conn:
            version = cache.version
            found = {i: c for i, c in cache.get_many(ids, version).items() if isinstance(c, Chunk)}
            missing = [i for i in ids if i not in found]
            at, fetched = _fetch(conn, in_ids, json.dumps(missing)) if missing else (None, [])
            if found and (at if at is not None else self.db.version(conn)) != version:  # kept ones of another version
                found = {}
                at, fetched = _fetch(conn, in_ids, json.dumps(ids))
        if at is not None:
            for c in fetched:
                cache.put(c.chunk_id, c, at)
        found.update((c.chunk_id, c) for c in fetched)
        return [found[i] for i in ids if i in found]

    def chunk_places(self, chunk_ids: Sequence[str]) -> dict[str, tuple[str, str, int | None]]:
        """``(source, section, page)`` by chunk id, read without the chunks' texts and not kept (a traced query
        labels its ~200 ranked candidates: decoding them cost ~3× as much and pushed its hits out of the chunk
        cache)."""
        if not chunk_ids:
            return {}
        with self.db.read() as conn:
            rows = conn.execute(_PLACES, (json.dumps(list(chunk_ids)),)).fetchall()
        return {r[0]: (r[1], r[2], r[3]) for r in rows}

    def _documents(self, where: str, *args: object) -> list[DocRecord]:
        with self.db.read() as conn:
            rows = conn.execute(f"SELECT {DOC_COLS} FROM documents {where}", args).fetchall()
        return [doc_from_row(row) for row in rows]

    def get_document(self, doc_id: str) -> DocRecord | None:
        return next(iter(self._documents("WHERE doc_id = ?", doc_id)), None)

    def find_document(self, collection: str, source: str) -> DocRecord | None:
        return next(iter(self._documents("WHERE collection = ? AND source = ?", collection, source)), None)

    def list_documents(self, collection: str | None = None) -> list[DocRecord]:
        if collection is None:
            return self._documents("ORDER BY collection, source")
        return self._documents("WHERE collection = ? ORDER BY collection, source", collection)

    def document_chunks(self, doc_id: str) -> list[Chunk]:
        cache = self.cache
        with self.db.read() as conn:
            version = cache.version
            kept = cache.get(("doc", doc_id), version)
            if isinstance(kept, tuple) and self.db.version(conn) == version:
                return list(kept)
            at, chunks = _fetch(conn, " WHERE doc_id = ? ORDER BY ordinal", doc_id)
        if at is not None:
            cache.put(("doc", doc_id), tuple(chunks), at)
        return chunks

    def collections(self) -> list[CollectionStats]:
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT collection, COUNT(*), SUM(chunk_count), SUM(chars) FROM documents GROUP BY collection ORDER BY collection"
            ).fetchall()
        return [CollectionStats(*row) for row in rows]

    def ingestion_history(self, limit: int = 100) -> list[IngestionRecord]:
        with self.db.read() as conn:
            rows = conn.execute(
                f"SELECT {HISTORY_COLS} FROM ingestion_history ORDER BY at DESC, id DESC LIMIT ?", (max(int(limit), 0),)
            ).fetchall()
        return [IngestionRecord(*row) for row in rows]

    def get_meta(self) -> dict[str, str]:
        with self.db.read() as conn:
            return dict(conn.execute("SELECT key, value FROM meta ORDER BY key").fetchall())

    def index_version(self) -> int:
        with self.db.read() as conn:
            return self.db.version(conn)
