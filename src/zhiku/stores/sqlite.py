"""``SQLiteStore``: the embedded default backend, one SQLite file per index plus its vector file.

``INDEX_DIR/zhiku.db`` (WAL, ``synchronous=NORMAL``) holds documents, chunks with their float32 vectors and
pre-segmented index tokens, the ingestion history and metadata. Dense search is served from the memory-mapped
vector files beside it (``_vectors``, ``_vector_files``; compacted when enough of their rows are dead,
``_sqlite_compact``), BM25 from postings segments in ``bm25/`` (``_bm25``), both kept in step with every commit.
Reads run on pooled connections, side by side; writes go one at a time through one connection.
Every ``sqlite3`` error becomes a ``StoreError``.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import astuple
from pathlib import Path

import numpy as np

from zhiku.errors import ConfigError, IndexMismatch, IndexNotFound, InvalidInput, StoreError
from zhiku.numeric import l2_normalise
from zhiku.stores._bm25 import MAX_DF, BM25Index
from zhiku.stores._chunk_ids import ChunkIds
from zhiku.stores._filter_masks import FilterMasks
from zhiku.stores._sqlite_compact import COMPACT_DEAD_FRACTION, CompactionReport, SQLiteCompaction
from zhiku.stores._sqlite_conn import Database, stored_dim, translate, version_of
from zhiku.stores._sqlite_read import Catalogue
from zhiku.stores._sqlite_schema import DB_NAME, HISTORY_COLS, SCHEMA_VERSION, prepare_rows
from zhiku.stores._sqlite_search import SQLiteSearch, query_terms
from zhiku.stores._vector_files import LAYOUT_KEY, layout_for_write, note_dead, top_rowid, write_rows
from zhiku.stores._vectors import VectorSnapshot, numkong
from zhiku.types import Chunk, CollectionStats, DocRecord, IngestionRecord

_MANAGED_META = frozenset({"schema_version", "index_version", "index_id", LAYOUT_KEY})
log = logging.getLogger(__name__)


class SQLiteStore(SQLiteCompaction, SQLiteSearch):
    """The ``Store`` protocol over one SQLite file (``index_dir/zhiku.db``). Thread-safe: reads run concurrently
    on pooled connections, writes one at a time.

    ``read_only=True`` opens an existing index for searching (a missing one raises ``IndexNotFound``); writes
    then raise ``ReadOnlyIndex``. A writer waits ``busy_timeout_s`` for another writer, then raises ``IndexLocked``.
    BM25 leaves out query terms found in more than ``bm25_max_df`` of the chunks (and in more than 1,000; the 2
    rarest always stay): they add little to the score and cost the most; ``bm25_max_df=1`` keeps every term.
    ``dense_search``: ``exact`` scores every row in float32; ``int8`` ranks every row by its int8 code (numkong) and
    scores the best ``4 × top_k`` (at least 100) in float32; ``auto`` (default) does ``int8`` from 100,000 rows when
    numkong is installed. A write that leaves more than ``compact_dead_fraction`` of the vector file's rows deleted (and at least
    1,000) compacts it (``compact``); ``compact_dead_fraction=1`` leaves that to ``compact()``.
    """

    def __init__(
        self,
        index_dir: Path | str,
        *,
        read_only: bool = False,
        busy_timeout_s: float = 5.0,
        bm25_max_df: float = MAX_DF,
        compact_dead_fraction: float = COMPACT_DEAD_FRACTION,
        dense_search: str = "auto",
    ) -> None:
        if dense_search not in ("auto", "exact", "int8"):
            raise InvalidInput(f"dense_search must be auto, exact or int8, got {dense_search!r}")
        if dense_search == "int8" and numkong() is None:
            raise ConfigError(
                "store.dense_search is int8 but numkong is not installed: "
                "pip install 'zhiku[scale]', or set store.dense_search to auto"
            )
        self.dense_mode = dense_search
        self.index_dir = Path(index_dir)
        self.compact_dead_fraction = compact_dead_fraction
        self.path = self.index_dir / DB_NAME
        self.read_only = read_only
        self._vec_lock = threading.Lock()  # replacing the vector snapshot
        self._snap: VectorSnapshot | None = None
        self.bm25 = BM25Index(self.index_dir, bm25_max_df)
        self._ids = ChunkIds()  # chunk ids by rowid, for the searches
        self._masks = FilterMasks()  # rows passing each filter searched with
        self.db = Database(self.index_dir, read_only=read_only, busy_timeout_s=busy_timeout_s)
        self.catalogue = Catalogue(self.db)
        try:
            if not read_only:
                self._check_vector_file()
                self.bm25.save(self.db, verify=True)
        except sqlite3.Error as e:
            self.close()
            raise translate(e, self.index_dir) from e
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.index_dir)!r}, read_only={self.read_only})"

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the catalogue ------------------------------------------------------------------------------
    def get_chunks(self, chunk_ids: Sequence[str]) -> list[Chunk]:
        return self.catalogue.get_chunks(chunk_ids)

    def chunk_places(self, chunk_ids: Sequence[str]) -> dict[str, tuple[str, str, int | None]]:
        return self.catalogue.chunk_places(chunk_ids)

    def get_document(self, doc_id: str) -> DocRecord | None:
        return self.catalogue.get_document(doc_id)

    def find_document(self, collection: str, source: str) -> DocRecord | None:
        return self.catalogue.find_document(collection, source)

    def list_documents(self, collection: str | None = None) -> list[DocRecord]:
        return self.catalogue.list_documents(collection)

    def document_chunks(self, doc_id: str) -> list[Chunk]:
        return self.catalogue.document_chunks(doc_id)

    def collections(self) -> list[CollectionStats]:
        return self.catalogue.collections()

    def ingestion_history(self, limit: int = 100) -> list[IngestionRecord]:
        return self.catalogue.ingestion_history(limit)

    def get_meta(self) -> dict[str, str]:
        return self.catalogue.get_meta()

    def index_version(self) -> int:
        return self.catalogue.index_version()

    def pinned(self) -> AbstractContextManager[None]:
        """``OneVersion``: this thread's reads inside it see one index version (``Database.pinned``)."""
        return self.db.pinned()

    # --- writing -----------------------------------------------------------------------------------
    def write_document(
        self, doc: DocRecord, chunks: Sequence[Chunk], tokens: Sequence[Sequence[str]], vectors: np.ndarray
    ) -> None:
        rows, ids, matrix = prepare_rows(doc, chunks, tokens, vectors)
        dim = matrix.shape[1]
        unit = l2_normalise(matrix)
        with self.db.lock:
            with self.db.write() as conn:
                stored = stored_dim(conn)
                if rows and stored is not None and stored != dim:
                    raise IndexMismatch(
                        f"index holds {stored}-dimensional vectors but got {dim}: the embedder changed; "
                        "rebuild with `zhiku ingest PATH --force` into a new --index"
                    )
                other = conn.execute(
                    "SELECT doc_id FROM documents WHERE collection = ? AND source = ? AND doc_id <> ?",
                    (doc.collection, doc.source, doc.doc_id),
                ).fetchone()
                if other:
                    raise StoreError(
                        f"{doc.collection}/{doc.source} is already stored as document {other[0]}, not {doc.doc_id}: delete that document first"
                    )
                clash = conn.execute(
                    "SELECT chunk_id, doc_id FROM chunks WHERE doc_id <> ? AND chunk_id IN (SELECT value FROM json_each(?)) LIMIT 1",
                    (doc.doc_id, json.dumps(ids)),
                ).fetchone()
                if clash:
                    raise StoreError(
                        f"chunk id {clash[0]} already belongs to document {clash[1]}: chunk ids must be unique across the index"
                    )
                old_version = version_of(conn)
                removed = self._delete_rows(conn, doc.doc_id, old_version + 1)
                base = top_rowid(conn) + 1  # rowids are never reused: see _vectors
                self.catalogue.insert(conn, doc, sum(len(c.text) for c in chunks), rows, base)
                if rows:  # dim == stored, or records the first one
                    conn.execute("INSERT OR REPLACE INTO meta VALUES ('dim', ?)", (str(dim),))
                    self._write_vectors(conn, dim, base, unit)  # before COMMIT, past every committed rowid
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('index_version', ?)", (str(old_version + 1),))
            added = np.arange(base, base + len(rows), dtype=np.int64)
            self._after_commit(old_version, dim if rows else None, added, removed)
            self.bm25.written(self.db, len(rows))
            self._maybe_compact()

    def _delete_rows(self, conn: sqlite3.Connection, doc_id: str, version: int) -> np.ndarray:
        """Delete a document's rows, recording its chunks' rowids as tombstones of ``version``; returns them."""
        rowids = self.catalogue.delete(conn, doc_id)
        note_dead(conn, stored_dim(conn), rowids.size)
        conn.executemany("INSERT OR REPLACE INTO tombstones VALUES (?, ?)", [(int(r), version) for r in rowids])
        return rowids

    def delete_document(self, doc_id: str) -> bool:
        with self.db.lock:
            with self.db.write() as conn:
                if conn.execute("SELECT 1 FROM documents WHERE doc_id = ?", (doc_id,)).fetchone() is None:
                    return False
                old_version = version_of(conn)
                removed = self._delete_rows(conn, doc_id, old_version + 1)
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('index_version', ?)", (str(old_version + 1),))
            self._after_commit(old_version, None, np.empty(0, np.int64), removed)
            self._maybe_compact()
        return True

    def record_ingestion(self, record: IngestionRecord) -> None:
        with self.db.write() as conn:
            conn.execute(
                f"INSERT INTO ingestion_history ({HISTORY_COLS}) VALUES ({', '.join('?' * 8)})", astuple(record)
            )

    def _write_vectors(self, conn: sqlite3.Connection, dim: int, first_rowid: int, unit: np.ndarray) -> None:
        layout = layout_for_write(conn, self.index_dir, dim, first_rowid)
        try:
            write_rows(layout, self.index_dir, layout.first_row(first_rowid), unit)
        except OSError as e:
            raise StoreError(
                f"cannot write vectors to {layout.path(self.index_dir)}: {e.strerror}; free disk space or fix permissions"
            ) from e

    def _after_commit(self, old_version: int, dim: int | None, added: np.ndarray, removed: np.ndarray) -> None:
        """Move the vector snapshot to the committed version if it was current (else the next search catches up)."""
        with self._vec_lock:
            snap = self._snap
            if snap is None or snap.version != old_version or snap.path is None:
                return
            if dim is not None and dim != snap.dim or added.size and int(added[0]) <= snap.layout.base:
                self._snap = None
                return
            top = max(snap.top, int(added.max()) if added.size else 0)
            self._snap = snap.changed(old_version + 1, top, None, added, removed)

    # --- metadata ----------------------------------------------------------------------------------
    def set_meta(self, values: dict[str, str]) -> None:
        for key, value in values.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise InvalidInput(f"index metadata keys and values must be strings, got {key!r}: {value!r}")
            if key in _MANAGED_META:
                raise InvalidInput(f"index metadata {key!r} is managed by the store and cannot be set")
        with self.db.lock:
            with self.db.write() as conn:
                conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", list(values.items()))
            with self._vec_lock:
                if self._snap is not None and values.get("dim", str(self._snap.dim)) != str(self._snap.dim):
                    self._snap = None  # reloaded, with the new dim, on the next dense search

    def close(self) -> None:
        db = getattr(self, "db", None)
        if db is not None:
            db.close()
        self._snap = None
        self.bm25.snap = None


__all__ = ["DB_NAME", "SCHEMA_VERSION", "CompactionReport", "IndexNotFound", "SQLiteStore", "query_terms"]
