"""``SQLiteStore``: the embedded default backend, one SQLite file per index.

``INDEX_DIR/zhiku.db`` (WAL, ``synchronous=NORMAL``) holds documents, chunks with their float32 vectors,
an FTS5 table of the chunks' pre-segmented index tokens (BM25), the ingestion history and metadata.
Dense search is served from an in-memory matrix (``_vectors.VectorIndex``) loaded lazily from the BLOBs
and reloaded when another connection changed the index. Every ``sqlite3`` error becomes a ``StoreError``.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import astuple
from pathlib import Path
from typing import Any

import numpy as np

from zhiku.errors import IndexLocked, IndexMismatch, IndexNotFound, InvalidInput, ReadOnlyIndex, StoreError
from zhiku.stores._sqlite_schema import (
    CHUNK_COLS,
    DB_NAME,
    DOC_COLS,
    HISTORY_COLS,
    MIGRATIONS,
    SCHEMA,
    SCHEMA_VERSION,
    chunk_from_row,
    doc_from_row,
    doc_row,
    prepare_rows,
)
from zhiku.stores._vectors import VectorIndex, match_sources
from zhiku.types import Chunk, CollectionStats, DocRecord, Filters, IngestionRecord, ScoredId

_MANAGED_META = frozenset({"schema_version", "index_version"})
_LOAD_BATCH = 4096


def fts_query(terms: Sequence[str]) -> str:
    """An FTS5 query matching any of ``terms``: each double-quoted (``"`` doubled), joined with ``OR``.

    Repeated and blank terms are dropped; no terms gives ``""``.
    """
    if isinstance(terms, str):
        raise InvalidInput(f"BM25 terms must be a list of tokens, not the string {terms!r}")
    unique = dict.fromkeys(t for t in terms if t.strip())
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in unique)


class SQLiteStore:
    """The ``Store`` protocol over one SQLite file (``index_dir/zhiku.db``). Thread-safe (one locked connection).

    ``read_only=True`` opens an existing index for searching (a missing one raises ``IndexNotFound``); writes
    then raise ``ReadOnlyIndex``. A writer waits ``busy_timeout_s`` for another writer, then raises ``IndexLocked``.
    """

    def __init__(self, index_dir: Path | str, *, read_only: bool = False, busy_timeout_s: float = 5.0) -> None:
        self.index_dir = Path(index_dir)
        self.path = self.index_dir / DB_NAME
        self.read_only = read_only
        self._lock = threading.RLock()
        self._vectors: VectorIndex | None = None
        self._vectors_version = -1
        self._data_version: int | None = None
        self._conn: sqlite3.Connection | None = self._open(busy_timeout_s)

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.index_dir)!r}, read_only={self.read_only})"

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- connection, errors, transactions ------------------------------------------------------------
    def _open(self, busy_timeout_s: float) -> sqlite3.Connection:
        if self.read_only:
            if not self.path.is_file():
                raise IndexNotFound(
                    f"no index at {self.index_dir}: run `zhiku ingest PATH --index {self.index_dir}` first"
                )
            target, uri = self.path.resolve().as_uri() + "?mode=ro", True
        else:
            try:
                self.index_dir.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreError(
                    f"cannot create index directory {self.index_dir}: {e.strerror}; choose another --index"
                ) from e
            target, uri = str(self.path), False
        try:
            conn = sqlite3.connect(
                target, uri=uri, timeout=busy_timeout_s, check_same_thread=False, isolation_level=None
            )
        except sqlite3.Error as e:
            raise self._translate(e) from e
        try:
            if not self.read_only:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            self._init_schema(conn)
        except sqlite3.Error as e:
            conn.close()
            raise self._translate(e) from e
        except BaseException:
            conn.close()
            raise
        return conn

    def _init_schema(self, conn: sqlite3.Connection) -> None:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "meta" not in tables:
            if tables:
                raise StoreError(
                    f"{self.path} is a SQLite database but not a zhiku index: move it away or choose another --index"
                )
            if self.read_only:
                raise IndexNotFound(
                    f"no index at {self.index_dir} (empty {DB_NAME}): run `zhiku ingest PATH --index {self.index_dir}` first"
                )
            conn.executescript(
                f"BEGIN IMMEDIATE; {SCHEMA} INSERT OR IGNORE INTO meta VALUES ('schema_version', '{SCHEMA_VERSION}');"
                " INSERT OR IGNORE INTO meta VALUES ('index_version', '0'); COMMIT;"
            )
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is not None and int(row[0]) > SCHEMA_VERSION:
            raise IndexMismatch(
                f"index {self.index_dir} has schema version {row[0]}, newer than this zhiku supports ({SCHEMA_VERSION}): upgrade zhiku"
            )
        if row is not None and int(row[0]) < SCHEMA_VERSION:
            self._migrate(conn, int(row[0]))

    def _migrate(self, conn: sqlite3.Connection, version: int) -> None:
        """Upgrade an index written by an older zhiku in place (new columns with defaults; data kept)."""
        if self.read_only or version not in MIGRATIONS:
            how = (
                (
                    "open it for writing once (any `zhiku ingest PATH --index "
                    f"{self.index_dir}` upgrades it in place and keeps its contents)"
                )
                if version in MIGRATIONS
                else ("rebuild it: `zhiku ingest PATH --index NEW_DIR`")
            )
            raise IndexMismatch(
                f"index {self.index_dir} has schema version {version}, older than this zhiku's "
                f"({SCHEMA_VERSION}): {how}"
            )
        script = "".join(MIGRATIONS[v] for v in range(version, SCHEMA_VERSION))
        conn.executescript(
            f"BEGIN IMMEDIATE; {script} UPDATE meta SET value = '{SCHEMA_VERSION}' "
            "WHERE key = 'schema_version'; COMMIT;"
        )

    def _translate(self, e: sqlite3.Error) -> StoreError:
        code = getattr(e, "sqlite_errorcode", None)
        primary = code & 0xFF if isinstance(code, int) else None
        text = str(e).lower()
        if primary in (5, 6) or "locked" in text or "busy" in text:
            return IndexLocked(
                f"index {self.index_dir} is locked by another writer; wait for it to finish, or raise store.busy_timeout_s"
            )
        if primary == 8 or "readonly" in text:
            return ReadOnlyIndex(
                f"index {self.index_dir} is read-only: {self.path} or its directory is not writable; fix the permissions or choose another --index"
            )
        if primary in (11, 26) or "not a database" in text or "malformed" in text:
            return StoreError(f"{self.path} is not a usable zhiku index ({e}): move it away or choose another --index")
        return StoreError(f"index {self.path}: {e}")

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        """The connection, under the lock, with sqlite3 errors translated."""
        with self._lock:
            if self._conn is None:
                raise StoreError(f"index {self.index_dir} is closed")
            try:
                yield self._conn
            except sqlite3.Error as e:
                raise self._translate(e) from e

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: committed on success, rolled back on any exception."""
        with self._db() as conn:
            if self.read_only:
                raise ReadOnlyIndex(
                    f"index {self.index_dir} is read-only (opened with read_only=True); open it for writing to change it"
                )
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    with suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                raise

    @staticmethod
    def _version(conn: sqlite3.Connection) -> int:
        row = conn.execute("SELECT value FROM meta WHERE key = 'index_version'").fetchone()
        return int(row[0]) if row else 0

    @staticmethod
    def _stored_dim(conn: sqlite3.Connection) -> int | None:
        """The index's vector dimension: meta ``dim`` (blank counts as unset), else that of a stored vector."""
        row = conn.execute("SELECT value FROM meta WHERE key = 'dim'").fetchone()
        if row and row[0].strip().isdigit() and int(row[0]) > 0:
            return int(row[0])
        row = conn.execute("SELECT length(vector) / 4 FROM chunks WHERE length(vector) > 0 LIMIT 1").fetchone()
        return int(row[0]) if row else None

    @staticmethod
    def _delete_rows(conn: sqlite3.Connection, doc_id: str) -> None:
        conn.execute("DELETE FROM fts WHERE rowid IN (SELECT rowid FROM chunks WHERE doc_id = ?)", (doc_id,))
        conn.execute("DELETE FROM chunks WHERE doc_id = ?", (doc_id,))
        conn.execute("DELETE FROM documents WHERE doc_id = ?", (doc_id,))

    # --- writing -----------------------------------------------------------------------------------
    def write_document(
        self, doc: DocRecord, chunks: Sequence[Chunk], tokens: Sequence[Sequence[str]], vectors: np.ndarray
    ) -> None:
        rows, ids, matrix = prepare_rows(doc, chunks, tokens, vectors)
        dim = matrix.shape[1]
        with self._lock:
            with self._write() as conn:
                stored_dim = self._stored_dim(conn)
                if rows and stored_dim is not None and stored_dim != dim:
                    raise IndexMismatch(
                        f"index holds {stored_dim}-dimensional vectors but got {dim}: the embedder changed; "
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
                old_version = self._version(conn)
                self._delete_rows(conn, doc.doc_id)
                conn.execute(
                    f"INSERT INTO documents ({DOC_COLS}, chars) VALUES ({', '.join('?' * 15)})",
                    (*doc_row(doc), sum(len(c.text) for c in chunks)),
                )
                base = conn.execute("SELECT COALESCE(MAX(rowid), 0) + 1 FROM chunks").fetchone()[0]
                conn.executemany(
                    f"INSERT INTO chunks (rowid, {CHUNK_COLS}, vector) VALUES ({', '.join('?' * 14)})",
                    [(base + i, *r[:-1]) for i, r in enumerate(rows)],
                )
                conn.executemany(
                    "INSERT INTO fts (rowid, tokens) VALUES (?, ?)", [(base + i, r[-1]) for i, r in enumerate(rows)]
                )
                if rows:  # dim == stored_dim, or records the first one
                    conn.execute("INSERT OR REPLACE INTO meta VALUES ('dim', ?)", (str(dim),))
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('index_version', ?)", (str(old_version + 1),))

            def apply(index: VectorIndex) -> None:
                index.remove(doc.doc_id)
                index.add(doc.doc_id, doc.collection, doc.doc_type, doc.source, ids, matrix)

            self._sync_vectors(old_version, apply, dim if rows else None)

    def delete_document(self, doc_id: str) -> bool:
        with self._lock:
            with self._write() as conn:
                if conn.execute("SELECT 1 FROM documents WHERE doc_id = ?", (doc_id,)).fetchone() is None:
                    return False
                old_version = self._version(conn)
                self._delete_rows(conn, doc_id)
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('index_version', ?)", (str(old_version + 1),))
            self._sync_vectors(old_version, lambda index: index.remove(doc_id), None)
        return True

    def record_ingestion(self, record: IngestionRecord) -> None:
        with self._write() as conn:
            conn.execute(
                f"INSERT INTO ingestion_history ({HISTORY_COLS}) VALUES ({', '.join('?' * 8)})", astuple(record)
            )

    def _sync_vectors(self, old_version: int, apply: Callable[[VectorIndex], None], dim: int | None) -> None:
        """After a commit: patch the in-memory vectors if they were current, else drop them (reloaded lazily)."""
        index = self._vectors
        if index is None or self._vectors_version != old_version or (dim is not None and dim != index.dim):
            self._vectors = None
            return
        try:
            apply(index)
            self._vectors_version = old_version + 1
        except Exception:
            self._vectors = None

    # --- searching ---------------------------------------------------------------------------------
    def bm25_search(self, terms: Sequence[str], top_k: int, filters: Filters = Filters()) -> list[ScoredId]:
        query = fts_query(terms)
        if not query or top_k < 1:
            return []
        sql = "SELECT c.chunk_id, -bm25(fts) FROM fts CROSS JOIN chunks AS c ON c.rowid = fts.rowid WHERE fts MATCH ?"
        params: list[Any] = [query]
        with self._db() as conn:
            for column, value in (("collection", filters.collection), ("doc_type", filters.doc_type)):
                if value is not None:
                    sql += f" AND c.{column} = ?"
                    params.append(value)
            if filters.source_glob is not None:
                where, args = (
                    ("WHERE collection = ?", (filters.collection,)) if filters.collection is not None else ("", ())
                )
                sources = match_sources(
                    (s for (s,) in conn.execute(f"SELECT DISTINCT source FROM documents {where}", args)),
                    filters.source_glob,
                )
                if not sources:
                    return []
                sql += " AND c.source IN (SELECT value FROM json_each(?))"
                params.append(json.dumps(sources))
            rows = conn.execute(sql + " ORDER BY bm25(fts), c.chunk_id LIMIT ?", (*params, int(top_k))).fetchall()
        return [ScoredId(chunk_id, float(score), rank) for rank, (chunk_id, score) in enumerate(rows, 1)]

    def dense_search(self, vector: np.ndarray, top_k: int, filters: Filters = Filters()) -> list[ScoredId]:
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if not np.isfinite(query).all():
            raise InvalidInput("the query vector contains NaN or infinite values; check the embedder")
        with self._db() as conn:
            index = self._current_vectors(conn)
            if index.dim and query.size != index.dim:
                raise IndexMismatch(
                    f"index holds {index.dim}-dimensional vectors but got {query.size}: the embedder changed; "
                    "rebuild with `zhiku ingest PATH --force` into a new --index"
                )
            return index.search(query, int(top_k), filters)

    def _current_vectors(self, conn: sqlite3.Connection) -> VectorIndex:
        """The in-memory vectors, reloaded first if another connection changed the index."""
        data_version = conn.execute("PRAGMA data_version").fetchone()[0]
        if self._vectors is not None and data_version == self._data_version:
            return self._vectors
        self._data_version = data_version
        if self._vectors is None or self._version(conn) != self._vectors_version:
            self._load_vectors(conn)
        assert self._vectors is not None
        return self._vectors

    def _load_vectors(self, conn: sqlite3.Connection) -> None:
        dim = 0
        conn.execute("BEGIN")  # one snapshot for the version, the count and the rows
        try:
            dim, version = self._stored_dim(conn) or 0, self._version(conn)
            n = conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
            matrix = np.empty((n, dim), np.float32)
            columns: tuple[list[str], ...] = ([], [], [], [], [])
            cursor = conn.execute("SELECT chunk_id, doc_id, collection, doc_type, source, vector FROM chunks")
            done = 0
            while batch := cursor.fetchmany(_LOAD_BATCH):
                blob = b"".join(row[5] for row in batch)
                matrix[done : done + len(batch)] = np.frombuffer(blob, "<f4").reshape(len(batch), dim)
                for column, values in zip(columns, zip(*batch, strict=False), strict=False):
                    column.extend(values)
                done += len(batch)
            conn.execute("COMMIT")
        except ValueError as e:
            raise StoreError(
                f"{self.path} holds vectors that are not {dim}-dimensional float32 ({e}): rebuild the index"
            ) from None
        finally:
            if conn.in_transaction:
                with suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
        self._vectors = VectorIndex.build(dim, matrix, *columns)
        self._vectors_version = version

    # --- reading -----------------------------------------------------------------------------------
    def get_chunks(self, chunk_ids: Sequence[str]) -> list[Chunk]:
        ids = list(chunk_ids)
        if not ids:
            return []
        with self._db() as conn:
            rows = conn.execute(
                f"SELECT {CHUNK_COLS} FROM chunks WHERE chunk_id IN (SELECT value FROM json_each(?))",
                (json.dumps(ids),),
            )
            found = {row[0]: chunk_from_row(row) for row in rows}
        return [found[i] for i in ids if i in found]

    def get_document(self, doc_id: str) -> DocRecord | None:
        with self._db() as conn:
            row = conn.execute(f"SELECT {DOC_COLS} FROM documents WHERE doc_id = ?", (doc_id,)).fetchone()
        return doc_from_row(row) if row else None

    def find_document(self, collection: str, source: str) -> DocRecord | None:
        with self._db() as conn:
            row = conn.execute(
                f"SELECT {DOC_COLS} FROM documents WHERE collection = ? AND source = ?", (collection, source)
            ).fetchone()
        return doc_from_row(row) if row else None

    def list_documents(self, collection: str | None = None) -> list[DocRecord]:
        where, args = ("WHERE collection = ?", (collection,)) if collection is not None else ("", ())
        with self._db() as conn:
            rows = conn.execute(
                f"SELECT {DOC_COLS} FROM documents {where} ORDER BY collection, source", args
            ).fetchall()
        return [doc_from_row(row) for row in rows]

    def document_chunks(self, doc_id: str) -> list[Chunk]:
        with self._db() as conn:
            rows = conn.execute(
                f"SELECT {CHUNK_COLS} FROM chunks WHERE doc_id = ? ORDER BY ordinal", (doc_id,)
            ).fetchall()
        return [chunk_from_row(row) for row in rows]

    def collections(self) -> list[CollectionStats]:
        with self._db() as conn:
            rows = conn.execute(
                "SELECT collection, COUNT(*), SUM(chunk_count), SUM(chars) FROM documents GROUP BY collection ORDER BY collection"
            ).fetchall()
        return [CollectionStats(*row) for row in rows]

    def ingestion_history(self, limit: int = 100) -> list[IngestionRecord]:
        with self._db() as conn:
            rows = conn.execute(
                f"SELECT {HISTORY_COLS} FROM ingestion_history ORDER BY at DESC, id DESC LIMIT ?", (max(int(limit), 0),)
            ).fetchall()
        return [IngestionRecord(*row) for row in rows]

    # --- metadata ----------------------------------------------------------------------------------
    def get_meta(self) -> dict[str, str]:
        with self._db() as conn:
            return dict(conn.execute("SELECT key, value FROM meta ORDER BY key").fetchall())

    def set_meta(self, values: dict[str, str]) -> None:
        for key, value in values.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise InvalidInput(f"index metadata keys and values must be strings, got {key!r}: {value!r}")
            if key in _MANAGED_META:
                raise InvalidInput(f"index metadata {key!r} is managed by the store and cannot be set")
        with self._lock:
            with self._write() as conn:
                conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", list(values.items()))
            if self._vectors is not None and values.get("dim", str(self._vectors.dim)) != str(self._vectors.dim):
                self._vectors = None  # reloaded, with the new dim, on the next dense search

    def index_version(self) -> int:
        with self._db() as conn:
            return self._version(conn)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                with suppress(sqlite3.Error):
                    self._conn.close()
            self._conn = None
            self._vectors = None


__all__ = ["DB_NAME", "SCHEMA_VERSION", "IndexNotFound", "SQLiteStore", "fts_query"]
