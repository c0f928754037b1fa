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
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import astuple
from pathlib import Path

import numpy as np

from zhiku.errors import ConfigError, IndexMismatch, IndexNotFound, InvalidInput, ReadOnlyIndex, StoreError
from zhiku.numeric import l2_normalise
from zhiku.stores import _bm25
from zhiku.stores._ann import AnnCache, usearch
from zhiku.stores._bm25 import BM25Snapshot, save_segments
from zhiku.stores._chunk_ids import ChunkIds
from zhiku.stores._filter_masks import FilterMasks
from zhiku.stores._sqlite_compact import COMPACT_DEAD_FRACTION, CompactionReport, SQLiteCompaction
from zhiku.stores._sqlite_conn import ReadPool, connect, init_schema, translate
from zhiku.stores._sqlite_read import Pins, chunk_cache, stored_dim, version_of
from zhiku.stores._sqlite_schema import (
    CHUNK_COLS,
    DB_NAME,
    DOC_COLS,
    HISTORY_COLS,
    SCHEMA_VERSION,
    doc_row,
    prepare_rows,
)
from zhiku.stores._sqlite_search import BM25_MAX_DF, SQLiteSearch, query_terms
from zhiku.stores._vector_files import LAYOUT_KEY, layout_for_write, note_dead, top_rowid, write_rows
from zhiku.stores._vectors import VectorSnapshot, numkong, simd_kernels
from zhiku.types import Chunk, DocRecord, IngestionRecord

_MANAGED_META = frozenset({"schema_version", "index_version", "index_id", LAYOUT_KEY})
log = logging.getLogger(__name__)


class SQLiteStore(SQLiteCompaction, SQLiteSearch):
    """The ``Store`` protocol over one SQLite file (``index_dir/zhiku.db``). Thread-safe: reads run concurrently
    on pooled connections, writes one at a time.

    ``read_only=True`` opens an existing index for searching (a missing one raises ``IndexNotFound``); writes
    then raise ``ReadOnlyIndex``. A writer waits ``busy_timeout_s`` for another writer, then raises ``IndexLocked``.
    BM25 leaves out query terms found in more than ``bm25_max_df`` of the chunks (and in more than 1,000; the 2
    rarest always stay): they add little to the score and cost the most; ``bm25_max_df=1`` keeps every term.
    ``dense_search``: ``exact`` scores every row in float32; ``int8`` ranks every row by its int8 code and scores
    the best ``4 × top_k`` (at least 100) in float32; ``auto`` (default) does ``int8`` from 1,024 rows where the
    compiled core's kernels run (AVX2 and FMA: ``_vectors.simd_kernels``), else from 100,000 rows when numkong is
    installed; ``hnsw`` takes the candidates from an HNSW index (``_ann``), ``int8`` until it is built. A write that leaves more than ``compact_dead_fraction`` of the vector file's rows deleted (and at least
    1,000) compacts it (``compact``); ``compact_dead_fraction=1`` leaves that to ``compact()``.
    """

    def __init__(
        self,
        index_dir: Path | str,
        *,
        read_only: bool = False,
        busy_timeout_s: float = 5.0,
        bm25_max_df: float = BM25_MAX_DF,
        compact_dead_fraction: float = COMPACT_DEAD_FRACTION,
        dense_search: str = "auto",
    ) -> None:
        if dense_search not in ("auto", "exact", "int8", "hnsw"):
            raise InvalidInput(f"dense_search must be auto, exact, int8 or hnsw, got {dense_search!r}")
        self._kernels = simd_kernels()  # the compiled core's dense kernels (AVX2 and FMA), for every dense product
        int8 = numkong() is not None or self._kernels is not None
        if dense_search in ("int8", "hnsw") and (not int8 or dense_search == "hnsw" and usearch() is None):
            what = "usearch is not installed" if int8 else "numkong is not installed (no AVX2/FMA kernels here)"
            raise ConfigError(
                f"store.dense_search is {dense_search} but {what}: "
                "pip install 'zhiku[scale]', or set store.dense_search to auto"
            )
        self.dense_mode = dense_search
        self.index_dir = Path(index_dir)
        self._ann = AnnCache(self.index_dir, threads=max(1, (os.cpu_count() or 2) // 2))
        self.bm25_max_df = bm25_max_df
        self.compact_dead_fraction = compact_dead_fraction
        self.path = self.index_dir / DB_NAME
        self.read_only = read_only
        self._lock = threading.RLock()  # the write connection
        self._vec_lock = threading.Lock()  # replacing the vector snapshot
        self._snap: VectorSnapshot | None = None
        self._bm25: BM25Snapshot | None = None
        self._ids = ChunkIds()  # chunk ids by rowid, for the searches
        self._masks = FilterMasks()  # rows passing each filter searched with
        self._bm25_unsaved = 0  # rows past the saved BM25 segments (as far as this store knows)
        self._chunk_cache = chunk_cache()
        self._last_scores = threading.local()  # each thread's last exact dense product (``_sqlite_search``)
        self._core_kept = []  # the compiled core's index of the last snapshots (``hybrid_core``)
        self._pins = Pins()  # each thread's pinned index version (``pinned``)
        self._conn: sqlite3.Connection | None = connect(
            self.index_dir, read_only=read_only, busy_timeout_s=busy_timeout_s
        )
        try:
            init_schema(self._conn, self.index_dir, read_only=read_only)
            if not read_only:
                self._check_vector_file()
                self._save_bm25(verify=True)
        except sqlite3.Error as e:
            self.close()
            raise translate(e, self.index_dir) from e
        except BaseException:
            self.close()
            raise
        self._pool = ReadPool(self.index_dir, read_only=read_only, busy_timeout_s=busy_timeout_s)

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.index_dir)!r}, read_only={self.read_only})"

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- connections and transactions ----------------------------------------------------------------
    def _read(self) -> AbstractContextManager[sqlite3.Connection]:
        """A pooled read connection (no lock shared with other readers)."""
        if self._conn is None:
            raise StoreError(f"index {self.index_dir} is closed")
        return self._pool.connection()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: committed on success, rolled back on any exception."""
        with self._lock:
            conn = self._conn
            if conn is None:
                raise StoreError(f"index {self.index_dir} is closed")
            if self.read_only:
                raise ReadOnlyIndex(
                    f"index {self.index_dir} is read-only (opened with read_only=True); open it for writing to change it"
                )
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        with suppress(sqlite3.Error):
                            conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as e:
                raise translate(e, self.index_dir) from e

    @staticmethod
    def _delete_rows(conn: sqlite3.Connection, doc_id: str, version: int) -> np.ndarray:
        """Delete a document's rows, recording its chunks' rowids as tombstones of ``version``; returns them."""
        rowids = np.fromiter(
            (r for (r,) in conn.execute("SELECT rowid FROM chunks WHERE doc_id = ?", (doc_id,))), dtype=np.int64
        )
        conn.execute("DELETE FROM chunk_tokens WHERE rowid IN (SELECT rowid FROM chunks WHERE doc_id = ?)", (doc_id,))
        conn.execute("DELETE FROM chunks WHERE doc_id = ?", (doc_id,))
        conn.execute("DELETE FROM documents WHERE doc_id = ?", (doc_id,))
        note_dead(conn, stored_dim(conn), rowids.size)
        conn.executemany("INSERT OR REPLACE INTO tombstones VALUES (?, ?)", [(int(r), version) for r in rowids])
        return rowids

    # --- writing -----------------------------------------------------------------------------------
    def write_document(
        self, doc: DocRecord, chunks: Sequence[Chunk], tokens: Sequence[Sequence[str]], vectors: np.ndarray
    ) -> None:
        rows, ids, matrix = prepare_rows(doc, chunks, tokens, vectors)
        dim = matrix.shape[1]
        unit = l2_normalise(matrix)
        with self._lock:
            with self._write() as conn:
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
                conn.execute(
                    f"INSERT INTO documents ({DOC_COLS}, chars) VALUES ({', '.join('?' * 15)})",
                    (*doc_row(doc), sum(len(c.text) for c in chunks)),
                )
                base = top_rowid(conn) + 1  # rowids are never reused: see _vectors
                conn.executemany(
                    f"INSERT INTO chunks (rowid, {CHUNK_COLS}, vector) VALUES ({', '.join('?' * 14)})",
                    [(base + i, *r[:-1]) for i, r in enumerate(rows)],
                )
                conn.executemany(
                    "INSERT INTO chunk_tokens (rowid, tokens) VALUES (?, ?)",
                    [(base + i, r[-1]) for i, r in enumerate(rows)],
                )
                if rows:  # dim == stored, or records the first one
                    conn.execute("INSERT OR REPLACE INTO meta VALUES ('dim', ?)", (str(dim),))
                    self._write_vectors(conn, dim, base, unit)  # before COMMIT, past every committed rowid
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('index_version', ?)", (str(old_version + 1),))
            added = np.arange(base, base + len(rows), dtype=np.int64)
            self._after_commit(old_version, dim if rows else None, added, removed)
            self._bm25_unsaved += len(rows)
            if self._bm25_unsaved >= _bm25.FLUSH_ROWS:  # else no need to look at the files
                self._save_bm25()
            self._maybe_compact()

    def delete_document(self, doc_id: str) -> bool:
        with self._lock:
            with self._write() as conn:
                if conn.execute("SELECT 1 FROM documents WHERE doc_id = ?", (doc_id,)).fetchone() is None:
                    return False
                old_version = version_of(conn)
                removed = self._delete_rows(conn, doc_id, old_version + 1)
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('index_version', ?)", (str(old_version + 1),))
            self._after_commit(old_version, None, np.empty(0, np.int64), removed)
            self._maybe_compact()
        return True

    def record_ingestion(self, record: IngestionRecord) -> None:
        with self._write() as conn:
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

    def _save_bm25(self, *, verify: bool = False) -> None:
        """Save committed rows past the BM25 segment files as new segments (``_bm25``), once there are enough.
        The files only speed up opening: a failure is logged, the committed write stands."""
        conn = self._conn
        assert conn is not None
        with self._lock:
            try:
                conn.execute("BEGIN")
                try:
                    self._bm25_unsaved = save_segments(conn, self.index_dir, verify=verify)
                finally:
                    conn.execute("COMMIT")
            except (OSError, sqlite3.Error) as e:
                log.warning("could not save the BM25 segments of %s: %s", self.index_dir, e)

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
        with self._lock:
            with self._write() as conn:
                conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", list(values.items()))
            with self._vec_lock:
                if self._snap is not None and values.get("dim", str(self._snap.dim)) != str(self._snap.dim):
                    self._snap = None  # reloaded, with the new dim, on the next dense search

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                with suppress(sqlite3.Error):
                    self._conn.close()
            self._conn = None
            pool = getattr(self, "_pool", None)
            if pool is not None:
                pool.close()
            self._snap = None
            self._bm25 = None
            self._core_kept.clear()


__all__ = ["DB_NAME", "SCHEMA_VERSION", "CompactionReport", "IndexNotFound", "SQLiteStore", "query_terms"]
