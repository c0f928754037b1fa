"""``SQLiteStore``: the embedded default backend, one SQLite file per index plus its vector and BM25 files.

The store is composed of parts, each with its own small interface:

- ``Database`` (``_sqlite_conn``): ``zhiku.db`` (WAL, ``synchronous=NORMAL``), one write transaction at a time,
  pooled read connections side by side, searches pinned to one index version;
- ``Catalogue`` (``_sqlite_read``, the store's base class): documents, chunks, history and metadata;
- ``BM25Index`` (``_bm25``): postings segments in ``bm25/``, scored in memory;
- ``VectorIndex`` (``_vectors``): the memory-mapped vector files (float32 rows and their int8 codes), compacted
  when enough of their rows are dead;
- ``ChunkIds`` and ``FilterMasks``: what a rowid means (its chunk id, which filters it passes), kept between
  searches since it never changes.

The store writes a document through all of them in one transaction and turns the parts' rankings into hits.
Every ``sqlite3`` error becomes a ``StoreError``.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import astuple
from itertools import compress
from pathlib import Path
from typing import cast

import numpy as np

from zhiku.errors import ConfigError, IndexMismatch, IndexNotFound, InvalidInput, StoreError
from zhiku.numeric import l2_normalise
from zhiku.stores._bm25 import MAX_DF, BM25Index, BM25Snapshot
from zhiku.stores._chunk_ids import ChunkIds
from zhiku.stores._filter_masks import FilterMasks
from zhiku.stores._sqlite_conn import Database, read_rowids, stored_dim, top_rowid, translate, version_of
from zhiku.stores._sqlite_read import Catalogue, chunk_cache
from zhiku.stores._sqlite_schema import DB_NAME, HISTORY_COLS, SCHEMA_VERSION, prepare_rows
from zhiku.stores._vector_files import LAYOUT_KEY, STAMP_KEY, note_dead
from zhiku.stores._vectors import (
    COMPACT_DEAD_FRACTION,
    CompactionReport,
    VectorIndex,
    VectorSnapshot,
    dot_rows,
    numkong,
)
from zhiku.stores.base import check_meta
from zhiku.types import Chunk, DocRecord, Filters, IngestionRecord, Ranking, ScoredId

_MANAGED_META = frozenset({"schema_version", "index_version", "index_id", LAYOUT_KEY, STAMP_KEY})
log = logging.getLogger(__name__)


def query_terms(terms: Sequence[str]) -> list[str]:
    """The distinct non-blank ``terms``, in order (a BM25 query scores each once)."""
    if isinstance(terms, str):
        raise InvalidInput(f"BM25 terms must be a list of tokens, not the string {terms!r}")
    return list(dict.fromkeys(t for t in terms if t.strip()))


class SQLiteStore(Catalogue):
    """The ``Store`` protocol over one SQLite file (``index_dir/zhiku.db``). Thread-safe: reads run concurrently
    on pooled connections, writes one at a time.

    ``read_only=True`` opens an existing index for searching (a missing one raises ``IndexNotFound``); writes
    then raise ``ReadOnlyIndex``. A writer waits ``busy_timeout_s`` for another writer, then raises ``IndexLocked``.
    BM25 leaves out query terms found in more than ``bm25_max_df`` of the chunks (and in more than 1,000; the 2
    rarest always stay): they add little to the score and cost the most; ``bm25_max_df=1`` keeps every term.
    ``dense_search``: ``exact`` scores every row in float32; ``int8`` ranks every row by its int8 code (numkong)
    and scores the best ``4 × top_k`` (at least 100) in float32; ``auto`` (default) does ``int8`` from 10,000
    rows when numkong is installed. A write that leaves more than ``compact_dead_fraction`` of the vector file's
    rows deleted (and at least 1,000) compacts it; ``compact_dead_fraction=1`` leaves that to ``compact()``.
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
        self.index_dir = Path(index_dir)
        self.read_only = read_only
        self.bm25 = BM25Index(self.index_dir, bm25_max_df)
        self.vectors = VectorIndex(self.index_dir, dense_search, compact_dead_fraction)
        self._ids = ChunkIds()  # chunk ids by rowid, for the searches
        self._masks = FilterMasks()  # rows passing each filter searched with
        self.db = Database(self.index_dir, read_only=read_only, busy_timeout_s=busy_timeout_s)
        self.cache = chunk_cache()  # decoded chunks, for the catalogue's reads
        try:
            if not read_only:
                self.vectors.check(self.db)
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
                    raise _mismatch(stored, dim)
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
                base = top_rowid(conn) + 1  # rowids are never reused: see _vector_files
                self._insert(conn, doc, sum(len(c.text) for c in chunks), rows, base)
                if rows:  # dim == stored, or records the first one
                    conn.execute("INSERT OR REPLACE INTO meta VALUES ('dim', ?)", (str(dim),))
                    self.vectors.write(conn, dim, base, unit)  # before COMMIT, past every committed rowid
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('index_version', ?)", (str(old_version + 1),))
            added = np.arange(base, base + len(rows), dtype=np.int64)
            self.vectors.committed(old_version, dim if rows else None, added, removed)
            self.bm25.written(self.db, len(rows))
            self.vectors.maybe_compact(self.db)

    def delete_document(self, doc_id: str) -> bool:
        with self.db.lock:
            with self.db.write() as conn:
                if conn.execute("SELECT 1 FROM documents WHERE doc_id = ?", (doc_id,)).fetchone() is None:
                    return False
                old_version = version_of(conn)
                removed = self._delete_rows(conn, doc_id, old_version + 1)
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('index_version', ?)", (str(old_version + 1),))
            self.vectors.committed(old_version, None, np.empty(0, np.int64), removed)
            self.vectors.maybe_compact(self.db)
        return True

    @staticmethod
    def _delete_rows(conn: sqlite3.Connection, doc_id: str, version: int) -> np.ndarray:
        """Delete a document's rows, recording its chunks' rowids as tombstones of ``version``; returns them."""
        removed = read_rowids(conn, "SELECT rowid FROM chunks WHERE doc_id = ?", doc_id)
        conn.execute("DELETE FROM chunk_tokens WHERE rowid IN (SELECT rowid FROM chunks WHERE doc_id = ?)", (doc_id,))
        conn.execute("DELETE FROM chunks WHERE doc_id = ?", (doc_id,))
        conn.execute("DELETE FROM documents WHERE doc_id = ?", (doc_id,))
        note_dead(conn, stored_dim(conn), removed.size)  # (before the tombstones: an old layout counts them)
        conn.executemany("INSERT OR REPLACE INTO tombstones VALUES (?, ?)", [(int(r), version) for r in removed])
        return removed

    def record_ingestion(self, record: IngestionRecord) -> None:
        with self.db.write() as conn:
            conn.execute(
                f"INSERT INTO ingestion_history ({HISTORY_COLS}) VALUES ({', '.join('?' * 8)})", astuple(record)
            )

    def compact(self, *, min_dead_fraction: float = 0.0) -> CompactionReport:
        """Reclaim the vector-file rows of deleted chunks now (``VectorIndex.compact``)."""
        return self.vectors.compact(self.db, min_dead_fraction=min_dead_fraction)

    def set_meta(self, values: dict[str, str]) -> None:
        check_meta(values, _MANAGED_META)
        with self.db.lock:
            with self.db.write() as conn:
                conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", list(values.items()))
            snap = self.vectors.snap
            if snap is not None and values.get("dim", str(snap.dim)) != str(snap.dim):
                self.vectors.snap = None  # reloaded, with the new dim, on the next dense search

    def close(self) -> None:
        self.db.close()
        self.vectors.snap = None
        self.bm25.snap = None

    # --- searching ---------------------------------------------------------------------------------
    def bm25_search(
        self,
        terms: Sequence[str],
        top_k: int,
        filters: Filters = Filters(),
        rare: Sequence[str] = (),
        weights: Mapping[str, float] | None = None,
    ) -> Sequence[ScoredId]:
        unique = query_terms(terms)
        if not unique or top_k < 1:
            return []
        with self.db.read() as conn:
            snap = self._bm25_at(conn)
            mask = self._masks.mask(conn, snap.top, filters)
            if mask is not None and not mask.any():
                return []
            rowids, scores = snap.search(unique, int(top_k), mask, self.bm25.max_df, weights, query_terms(rare))
            return self._ranked(rowids, scores, conn, snap.top, int(top_k))

    def bm25_weighted(
        self, weights: Mapping[str, float], top_k: int, filters: Filters = Filters()
    ) -> Sequence[ScoredId]:
        """``WeightedBM25``: each term's BM25 score times its weight."""
        return self.bm25_search(list(weights), top_k, filters, weights=weights)

    def term_counts(self, terms: Sequence[str]) -> dict[str, int]:
        """``WeightedBM25``: how many live chunks hold each term."""
        with self.db.read() as conn:
            snap = self._bm25_at(conn)
            return {t: snap.df(t) for t in query_terms(terms)}

    def dense_search(self, vector: np.ndarray, top_k: int, filters: Filters = Filters()) -> Sequence[ScoredId]:
        return self.dense_filled(vector, top_k, filters, ())[0]

    def dense_filled(
        self, vector: np.ndarray, top_k: int, filters: Filters, others: Sequence[ScoredId]
    ) -> tuple[Sequence[ScoredId], dict[str, float]]:
        """``FilledDense``: the dense ranking and the cosines of ``others`` outside it, in one read."""
        unit = _unit(vector)
        with self.db.read() as conn:
            snap = self._vectors_at(conn)
            _check_dim(snap, unit)
            mask = self._masks.mask(conn, snap.top, filters)
            allowed = None if mask is None else snap.mask_of(np.flatnonzero(mask) + 1)  # by file row
            # no lock held: searches run side by side
            rowids, scores = snap.search(unit, int(top_k), allowed, screen=self.vectors.screens(snap))
            found = self._ranked(rowids, scores, conn, snap.top, int(top_k)) if rowids.size else None
            if not others or found is None:  # (no dense ranking: nothing to fuse the cosines with)
                return found or [], {}
            seen = set(found.ids)
            if isinstance(others, Ranking) and others.rows is not None:  # (BM25's: where each candidate is)
                outside = [c not in seen for c in others.ids]
                ids = list(compress(others.ids, outside))
                hint = np.fromiter(compress(others.rows, outside), np.int64, len(ids))
            else:
                ids = [x.chunk_id for x in others if x.chunk_id not in seen]
                hint = self._ids.rows_hint(ids)
            at, kept = self._file_rows(conn, snap, ids, hint)
        filled = dict(zip(kept, dot_rows(snap.gather(at), unit).tolist(), strict=True)) if kept else {}
        return found or [], filled

    def dense_scores(self, vector: np.ndarray, chunk_ids: Sequence[str]) -> dict[str, float]:
        return self.best_dense_scores([vector], chunk_ids)

    def best_dense_scores(self, vectors: Sequence[np.ndarray], chunk_ids: Sequence[str]) -> dict[str, float]:
        """``BestCosines``: the chunks' rows looked up and read once for every vector (rowids remembered from
        earlier searches used when they are live, the rest read from SQLite)."""
        queries = [_unit(v) for v in vectors]
        ids = list(dict.fromkeys(chunk_ids))
        if not ids or not queries:
            return {}
        with self.db.read() as conn:
            snap = self._vectors_at(conn)
            for query in queries:
                _check_dim(snap, query)
            at, kept = self._file_rows(conn, snap, ids, self._ids.rows_hint(ids))
        if not kept:
            return {}
        rows = snap.gather(at)
        best = np.maximum.reduce([dot_rows(rows, query) for query in queries])  # as dense_scores
        return dict(zip(kept, best.tolist(), strict=True))

    def chunk_vectors(self, chunk_ids: Sequence[str]) -> np.ndarray:
        """``StoredVectors``: the unit vectors of the live chunks among ``chunk_ids`` (one row each, in file order)."""
        ids = list(dict.fromkeys(chunk_ids))
        with self.db.read() as conn:
            snap = self._vectors_at(conn)
            at, _ = self._file_rows(conn, snap, ids, self._ids.rows_hint(ids))
        return snap.gather(at)

    def warm(self) -> None:
        """Map the vectors, load the BM25 segments and the chunk ids now (and ask the OS to read the files ahead),
        so the first search is not the slow one. A broken index is only logged: the first query reports it."""
        try:
            with self.db.read() as conn:
                snap = self._vectors_at(conn)
                snap.prefetch(codes_only=self.vectors.screens(snap) and snap.codes is not None)
                bm25 = self._bm25_at(conn)
                bm25.prefetch()
                self._ids.table(conn, bm25.top)  # reads them all, up to chunk_ids.TABLE_MAX rows
        except StoreError as e:
            log.warning("could not load the index %s: %s", self.index_dir, e)

    def damage(self) -> str | None:
        """What keeps the index from serving what it holds (deleted or replaced while open; vector files that fail
        their checks, so searched from zhiku.db meanwhile), None when whole: a stat of each file."""
        try:
            with self.db.read() as conn:
                snap = self._vectors_at(conn)
        except StoreError as e:
            return str(e)
        return (
            snap.damage and f"{snap.damage}: searching the vectors in zhiku.db; zhiku repair --index {self.index_dir}"
        )

    def _bm25_at(self, conn: sqlite3.Connection) -> BM25Snapshot:
        snap = self.bm25.current(conn, self.db.version(conn), self._forget_rows, check=self.db.once("bm25"))
        self.db.moved_to(snap.version)  # a pin follows the snapshot
        return snap

    def _vectors_at(self, conn: sqlite3.Connection) -> VectorSnapshot:
        snap = self.vectors.current(conn, self.db.version(conn), self._forget_rows, check=self.db.once("vectors"))
        self.db.moved_to(snap.version)
        return snap

    def _forget_rows(self) -> None:
        """Drop what the searches keep about rowids, and the decoded chunks (kept by version), when the index went
        back to an older version: another index now, whose rowids are other chunks."""
        self._ids.clear()
        self._masks.clear()
        self.cache.clear()

    def _file_rows(
        self, conn: sqlite3.Connection, snap: VectorSnapshot, ids: list[str], rowids: np.ndarray
    ) -> tuple[np.ndarray, list[str]]:
        """The file rows of the live chunks among ``ids`` (in file order) and their ids; ``rowids``: where each was
        last seen (-1: never), trusted when live, the rest read from SQLite."""
        at = snap.rows_of(rowids)  # file rows (< 0: not in this snapshot, or no rowid)
        ok = at >= 0
        ok[ok] = snap.live[at[ok]]
        if not ok.all():  # never seen, or moved since (a document written again): ask SQLite
            stale = [c for c, good in zip(ids, ok.tolist(), strict=True) if not good]
            now = self._ids.rows_now(conn, stale)
            redo = np.flatnonzero(~ok)
            rowids[redo] = [now.get(c, -1) for c in stale]
            at[redo] = snap.rows_of(rowids[redo])
            ok = at >= 0
            ok[ok] = snap.live[at[ok]]
        order = np.flatnonzero(ok)
        order = order[np.argsort(at[order], kind="stable")]
        return at[order], [ids[i] for i in order.tolist()]

    def _ranked(
        self, rowids: np.ndarray, scores: np.ndarray, conn: sqlite3.Connection, top: int, top_k: int
    ) -> Ranking:
        """The best ``top_k`` hits, by score then chunk id (ties broken the same way by every search); rows that are
        no chunk (deleted before their id was ever read) left out. ``top``: the snapshot's highest rowid."""
        order = np.argsort(-scores, kind="stable")
        ranked, rows = scores[order], rowids[order].tolist()
        found = self._ids.names(conn, rows, top)
        values = ranked.tolist()
        if None in found or (ranked[1:] == ranked[:-1]).any():  # ties by chunk id: (-score, id) pairs sorted
            pairs = zip((-ranked).tolist(), found, rows, strict=True)
            best = sorted(pairs if None not in found else [p for p in pairs if p[1] is not None])[:top_k]
            negated, found, rows = zip(*best, strict=True) if best else ((), [], [])  # type: ignore[assignment,var-annotated]
            values = [-x for x in negated]
        names = cast(list[str], found[:top_k])
        self._ids.seen(names, rows[:top_k])
        return Ranking(names, values[:top_k], rows[:top_k])


def _unit(vector: np.ndarray) -> np.ndarray:
    """The query as a float32 unit vector (the rows are unit vectors: their dot products with it are cosines;
    ``l2_normalise``'s floats, without its overhead)."""
    query = np.asarray(vector, dtype=np.float32).reshape(-1)
    if not np.isfinite(query).all():
        raise InvalidInput("the query vector contains NaN or infinite values; check the embedder")
    unit: np.ndarray = query / (np.sqrt((query * query).sum()) or np.float32(1.0))
    return unit


def _check_dim(snap: VectorSnapshot, query: np.ndarray) -> None:
    if snap.dim and query.size != snap.dim:
        raise _mismatch(snap.dim, query.size)


def _mismatch(stored: int, got: int) -> IndexMismatch:
    return IndexMismatch(
        f"index holds {stored}-dimensional vectors but got {got}: the embedder changed; "
        "rebuild with `zhiku ingest PATH --force` into a new --index"
    )


__all__ = ["DB_NAME", "SCHEMA_VERSION", "CompactionReport", "IndexNotFound", "SQLiteStore", "query_terms"]
