"""The ``Catalogue`` role of ``SQLiteStore``: documents, chunks, collections and history, each read on a pooled
read connection (readers run side by side and never wait for the writer)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from contextlib import AbstractContextManager

from zhiku.stores._sqlite_schema import CHUNK_COLS, DOC_COLS, HISTORY_COLS, chunk_from_row, doc_from_row
from zhiku.types import Chunk, CollectionStats, DocRecord, IngestionRecord


class SQLiteReads:
    """Catalogue reads; the store provides ``_read`` (a pooled read connection)."""

    def _read(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def get_chunks(self, chunk_ids: Sequence[str]) -> list[Chunk]:
        ids = list(chunk_ids)
        if not ids:
            return []
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {CHUNK_COLS} FROM chunks WHERE chunk_id IN (SELECT value FROM json_each(?))",
                (json.dumps(ids),),
            )
            found = {row[0]: chunk_from_row(row) for row in rows}
        return [found[i] for i in ids if i in found]

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
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {CHUNK_COLS} FROM chunks WHERE doc_id = ? ORDER BY ordinal", (doc_id,)
            ).fetchall()
        return [chunk_from_row(row) for row in rows]

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
