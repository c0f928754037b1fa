"""The ``Catalogue`` role of ``SQLiteStore``: documents, chunks, collections and history, each read on a pooled
read connection (readers run side by side and never wait for the writer). Chunks decoded for one search are kept
for the next (``chunk_cache``) until the ``index_version`` moves: every commit that changes chunks moves it, in
this process or another."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager

from zhiku.cache import Cache
from zhiku.stores._sqlite_schema import CHUNK_COLS, DOC_COLS, HISTORY_COLS, chunk_from_row, doc_from_row
from zhiku.types import Chunk, CollectionStats, DocRecord, IngestionRecord

# what a store's decoded chunks kept between reads may weigh (of one index version; the oldest out first): their
# texts' characters and CHUNK_WEIGHT more each (~20–50 MB of Python objects; a corpus of 10k ~500-character chunks
# is held whole: a question's hits are then never decoded again, bench/RESULTS.md, Issue 13 — int8 screening)
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


class SQLiteReads:
    """Catalogue reads; the store provides ``_read`` (a pooled read connection), ``_chunk_cache`` and ``_pins``."""

    _chunk_cache: Cache[Chunk | tuple[Chunk, ...]]
    _pins: Pins  # this thread's pinned index version (``pinned``)

    def _read(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def pinned(self) -> AbstractContextManager[None]:
        """``OneVersion``: the reads on this thread inside it (a search's channels, fill and chunks) see the index
        at one version, read once: the first read's, or the one a snapshot moved to. Nested: the outer one's."""
        return _Pin(self._pins)

    def _version(self, conn: sqlite3.Connection) -> int:
        """The index version for this thread's read: the pinned one (read at the first read inside ``pinned``)."""
        pins = self._pins
        if not pins.on:
            return version_of(conn)
        version = pins.version
        if version is None:
            version = pins.version = version_of(conn)
        return version

    def _moved_to(self, version: int) -> None:
        """A snapshot was moved to ``version`` (read in its own transaction): the pin follows it."""
        pins = self._pins
        if pins.on:
            pins.version = version

    def get_chunks(self, chunk_ids: Sequence[str]) -> list[Chunk]:
        """The chunks of ``chunk_ids`` that exist, in that order: those of the current version from memory, the
        others read (one statement) and kept."""
        ids = list(chunk_ids)
        if not ids:
            return []
        cache = self._chunk_cache
        in_ids = " WHERE chunk_id IN (SELECT value FROM json_each(?))"
        with self._read() as conn:
            version = cache.version
            found = {i: c for i in ids if isinstance(c := cache.get(i, version), Chunk)}
            missing = [i for i in ids if i not in found]
            at, fetched = _fetch(conn, in_ids, json.dumps(missing)) if missing else (None, [])
            if found and (at if at is not None else self._version(conn)) != version:  # kept ones of another version
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
        with self._read() as conn:
            rows = conn.execute(_PLACES, (json.dumps(list(chunk_ids)),)).fetchall()
        return {r[0]: (r[1], r[2], r[3]) for r in rows}

    def get_document(self, doc_id: str) -> DocRecord | None:
        with self._read() as conn:
            row = conn.execute(f"SELECT {DOC_COLS} FROM documents WHERE doc_id = ?", (doc_id,)).fetchone()
        return doc_from_row(row) if row else None

    def find_document(self, collection: str, source: str) -> DocRecord | None:
        with self._read() as conn:
            row = conn.execute(
                f"SELECT {DOC_COLS} FROM documents WHERE collection = ? AND source = ?", (collection, source)
            ).fetchone()
        return doc_from_row(row) if row else None

    def list_documents(self, collection: str | None = None) -> list[DocRecord]:
        where, args = ("WHERE collection = ?", (collection,)) if collection is not None else ("", ())
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {DOC_COLS} FROM documents {where} ORDER BY collection, source", args
            ).fetchall()
        return [doc_from_row(row) for row in rows]

    def document_chunks(self, doc_id: str) -> list[Chunk]:
        cache = self._chunk_cache
        with self._read() as conn:
            version = cache.version
            kept = cache.get(("doc", doc_id), version)
            if isinstance(kept, tuple) and self._version(conn) == version:
                return list(kept)
            at, chunks = _fetch(conn, " WHERE doc_id = ? ORDER BY ordinal", doc_id)
        if at is not None:
            cache.put(("doc", doc_id), tuple(chunks), at)
        return chunks

    def collections(self) -> list[CollectionStats]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT collection, COUNT(*), SUM(chunk_count), SUM(chars) FROM documents GROUP BY collection ORDER BY collection"
            ).fetchall()
        return [CollectionStats(*row) for row in rows]

    def ingestion_history(self, limit: int = 100) -> list[IngestionRecord]:
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {HISTORY_COLS} FROM ingestion_history ORDER BY at DESC, id DESC LIMIT ?", (max(int(limit), 0),)
            ).fetchall()
        return [IngestionRecord(*row) for row in rows]

    def get_meta(self) -> dict[str, str]:
        with self._read() as conn:
            return dict(conn.execute("SELECT key, value FROM meta ORDER BY key").fetchall())

    def index_version(self) -> int:
        with self._read() as conn:
            return version_of(conn)


class Pins(threading.local):
    """Each thread's pin: ``on`` inside ``pinned``, ``version`` once a read inside it has read one."""

    on: bool = False
    version: int | None = None


class _Pin:
    """``SQLiteReads.pinned``: a class, not a generator (it is entered by every search)."""

    __slots__ = ("_pins", "_outer")

    def __init__(self, pins: Pins) -> None:
        self._pins = pins
        self._outer = False

    def __enter__(self) -> None:
        pins = self._pins
        self._outer = not pins.on
        if self._outer:
            pins.on, pins.version = True, None

    def __exit__(self, *exc: object) -> None:
        if self._outer:
            self._pins.on, self._pins.version = False, None


def version_of(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = 'index_version'").fetchone()
    return int(row[0]) if row else 0


def stored_dim(conn: sqlite3.Connection) -> int | None:
    """The index's vector dimension: meta ``dim`` (blank counts as unset), else that of a stored vector."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'dim'").fetchone()
    if row and row[0].strip().isdigit() and int(row[0]) > 0:
        return int(row[0])
    row = conn.execute("SELECT length(vector) / 4 FROM chunks WHERE length(vector) > 0 LIMIT 1").fetchone()
    return int(row[0]) if row else None
