"""The ``Retriever`` role of ``SQLiteStore``: BM25 over the in-memory postings segments (``_bm25``) and dense
search over the mapped vector file, each on a pooled read connection, with no lock held while scoring (searches
run side by side)."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import numpy as np

from zhiku.errors import IndexMismatch, InvalidInput, StoreError
from zhiku.numeric import l2_normalise
from zhiku.stores._bm25 import BM25Index, BM25Snapshot
from zhiku.stores._chunk_ids import ChunkIds
from zhiku.stores._filter_masks import FilterMasks
from zhiku.stores._sqlite_conn import Database, stored_dim, version_of
from zhiku.stores._sqlite_read import Catalogue
from zhiku.stores._vectors import FileMoved, VectorSnapshot, dot_rows
from zhiku.types import Filters, Ranking, ScoredId

log = logging.getLogger(__name__)

# store.dense_search "auto" screens by int8 codes from this many rows in the vector file (numpy + numkong's crossover)
SCREEN_FROM = 100_000


def query_terms(terms: Sequence[str]) -> list[str]:
    """The distinct non-blank ``terms``, in order (a BM25 query scores each once)."""
    if isinstance(terms, str):
        raise InvalidInput(f"BM25 terms must be a list of tokens, not the string {terms!r}")
    return list(dict.fromkeys(t for t in terms if t.strip()))


class SQLiteSearch:
    """BM25 and dense search; the store sets these attributes."""

    db: Database
    catalogue: Catalogue

    index_dir: Path
    path: Path
    bm25: BM25Index
    dense_mode: str  # "exact", "int8" or "auto" (int8 from SCREEN_FROM rows): store.dense_search
    _ids: ChunkIds
    _masks: FilterMasks
    _vec_lock: threading.Lock
    _snap: VectorSnapshot | None

    def bm25_search(self, terms: Sequence[str], top_k: int, filters: Filters = Filters()) -> Sequence[ScoredId]:
        unique = query_terms(terms)
        if not unique or top_k < 1:
            return []
        with self.db.read() as conn:
            snap = self._bm25_snapshot(conn)
            mask = self._filter_mask(conn, snap.top, filters)
            if mask is not None and not mask.any():
                return []
            rowids, scores = self.bm25.search(snap, unique, int(top_k), mask)
            return _ranked(rowids, scores, self._ids, conn, snap.top, int(top_k))

    def _bm25_snapshot(self, conn: sqlite3.Connection) -> BM25Snapshot:
        """The BM25 index at this read's version (``BM25Index.current``); a pin follows it."""
        snap = self.bm25.current(conn, self.db.version(conn), lambda: self._forget_rows(True))
        self.db.moved_to(snap.version)
        return snap

    def dense_search(self, vector: np.ndarray, top_k: int, filters: Filters = Filters()) -> Sequence[ScoredId]:
        query = self._query_vector(vector)
        with self.db.read() as conn:
            snap = self._snapshot(conn)
            self._check_dim(snap, query)
            mask = self._filter_mask(conn, snap.top, filters)
            allowed = None if mask is None else snap.mask_of(np.flatnonzero(mask) + 1)  # by file row
            # no lock held: searches run side by side
            rowids, scores = snap.search(query, int(top_k), allowed, screen=self._screens(snap))
            if rowids.size == 0:
                return []
            return _ranked(rowids, scores, self._ids, conn, snap.top, int(top_k))

    def dense_scores(self, vector: np.ndarray, chunk_ids: Sequence[str]) -> dict[str, float]:
        query = self._query_vector(vector)
        found = self._rows_to_score([query], chunk_ids)
        if found is None:
            return {}
        snap, at, kept = found
        scores = _cosines(snap.gather(at), query)
        return dict(zip(kept, scores.tolist(), strict=True))

    def best_dense_scores(self, vectors: Sequence[np.ndarray], chunk_ids: Sequence[str]) -> dict[str, float]:
        """``BestCosines``: the chunks' rows looked up and read once for every vector."""
        queries = [self._query_vector(v) for v in vectors]
        found = self._rows_to_score(queries, chunk_ids)
        if found is None:
            return {}
        snap, at, kept = found
        rows = snap.gather(at)
        best = np.maximum.reduce([_cosines(rows, query) for query in queries])  # as dense_scores
        return dict(zip(kept, best.tolist(), strict=True))

    def _rows_to_score(
        self, queries: list[np.ndarray], chunk_ids: Sequence[str]
    ) -> tuple[VectorSnapshot, np.ndarray, list[str]] | None:
        """The snapshot, the file rows of the live chunks among ``chunk_ids`` and their ids, after checking every
        query's dimension against the index; None when there is nothing to score."""
        ids = list(dict.fromkeys(chunk_ids))
        if not ids or not queries:
            return None
        with self.db.read() as conn:
            snap = self._snapshot(conn)
            for query in queries:
                self._check_dim(snap, query)
            at, kept = self._live_rows(conn, snap, ids)
        return (snap, at, kept) if kept else None

    def _live_rows(
        self, conn: sqlite3.Connection, snap: VectorSnapshot, ids: list[str]
    ) -> tuple[np.ndarray, list[str]]:
        """The file rows of the chunks ``ids`` live in ``snap`` (in file order) and their ids: rowids remembered
        from earlier searches when they are live (``_chunk_ids``), the rest read from SQLite."""
        hint = self._ids.rows_hint(ids)
        rowids = np.array([-1 if r is None else r for r in hint], dtype=np.int64)
        at = snap.rows_of(rowids)  # file rows (-1: not in this snapshot)
        at[rowids < 1] = -1
        ok = at >= 0
        ok[ok] = snap.live[at[ok]]
        if not ok.all():  # never seen, or moved since (a document written again): ask SQLite
            stale = [c for c, good in zip(ids, ok.tolist(), strict=True) if not good]
            now = self._ids.rows_now(conn, stale)
            redo = np.flatnonzero(~ok)
            rowids[redo] = [now.get(c, -1) for c in stale]
            at[redo] = snap.rows_of(rowids[redo])
            at[redo[rowids[redo] < 1]] = -1
            ok = at >= 0
            ok[ok] = snap.live[at[ok]]
        order = np.flatnonzero(ok)
        order = order[np.argsort(at[order], kind="stable")]
        return at[order], [ids[i] for i in order.tolist()]

    @staticmethod
    def _query_vector(vector: np.ndarray) -> np.ndarray:
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if not np.isfinite(query).all():
            raise InvalidInput("the query vector contains NaN or infinite values; check the embedder")
        return query

    @staticmethod
    def _check_dim(snap: VectorSnapshot, query: np.ndarray) -> None:
        if snap.dim and query.size != snap.dim:
            raise IndexMismatch(
                f"index holds {snap.dim}-dimensional vectors but got {query.size}: the embedder changed; "
                "rebuild with `zhiku ingest PATH --force` into a new --index"
            )

    def _screens(self, snap: VectorSnapshot) -> bool:
        """Whether dense search ranks by the int8 codes first (``store.dense_search``)."""
        return self.dense_mode == "int8" or self.dense_mode == "auto" and snap.rows >= SCREEN_FROM

    def warm(self) -> None:
        """Map the vectors, load the BM25 segments and the chunk ids now (and ask the OS to read the files ahead),
        so the first search is not the slow one.
        A broken index is only logged: the first query reports it, with its error code."""
        try:
            with self.db.read() as conn:
                snap = self._snapshot(conn)
                snap.prefetch(codes_only=self._screens(snap) and snap.codes is not None)
                bm25 = self._bm25_snapshot(conn)
                bm25.prefetch()
                self._ids.names(conn, [], bm25.top, whole=True)  # reads them all, up to chunk_ids.TABLE_MAX rows
        except StoreError as e:
            log.warning("could not load the index %s: %s", self.index_dir, e)

    def _snapshot(self, conn: sqlite3.Connection) -> VectorSnapshot:
        """The vectors at the index's current version: loaded once, then moved forward incrementally."""
        snap = self._snap
        if snap is not None and snap.version == self.db.version(conn):
            return snap
        with self._vec_lock:
            try:
                snap = self._snapshot_in(conn, retried=False)
            except FileMoved:  # a compaction replaced the file as this transaction began: the next one sees it
                snap = self._snapshot_in(conn, retried=True)
            self._snap = snap
        self.db.moved_to(snap.version)
        return snap

    def _snapshot_in(self, conn: sqlite3.Connection, *, retried: bool) -> VectorSnapshot:
        conn.execute("BEGIN")  # one snapshot for the version, the rowids and the tombstones
        try:
            snap, version, dim = self._snap, version_of(conn), stored_dim(conn) or 0
            if snap is None or snap.dim != dim or snap.version > version or snap.top == 0:
                self._forget_rows(snap is not None and snap.version > version)
                snap = VectorSnapshot.load(conn, self.index_dir, dim, version, retried=retried)
            elif snap.version != version:
                snap = snap.refreshed(conn, self.index_dir, version)
            conn.execute("COMMIT")
        except ValueError as e:
            raise StoreError(
                f"{self.path} holds vectors that are not {dim}-dimensional float32 ({e}): rebuild the index"
            ) from None
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        return snap

    def _forget_rows(self, replaced: bool) -> None:
        """Drop what the searches keep about rowids (``_chunk_ids``, ``_filter_masks``: true for the life of an
        index) when the index went back to an older version: another index now, whose rowids are other chunks. The
        decoded chunks too (``chunk_cache``): kept by version, they would never be replaced (an older version's rows
        are not added) and would be served again once this index's version reaches theirs."""
        if replaced:
            self._ids.clear()
            self._masks.clear()
            self.catalogue.cache.clear()

    def _filter_mask(self, conn: sqlite3.Connection, top: int, filters: Filters) -> np.ndarray | None:
        """Rows ``1…top`` passing ``filters`` (by rowid − 1; None: no filter), kept per filter (``_filter_masks``)."""
        return self._masks.mask(conn, top, filters)


def _ranked(
    rowids: np.ndarray, scores: np.ndarray, ids: ChunkIds, conn: sqlite3.Connection, top: int, top_k: int
) -> Ranking:
    """The best ``top_k`` hits, by score then chunk id (ties broken the same way by every search); rows that are no
    chunk (deleted before their id was ever read) left out. ``top``: the snapshot's highest rowid."""
    order = np.argsort(-scores, kind="stable")
    ranked = scores[order]
    rows = rowids[order].tolist()
    names = ids.names(conn, rows, top)
    tied = ranked.size > 1 and bool((ranked[1:] == ranked[:-1]).any())
    if not tied and None not in names:  # (the common case: no ties to order by id, every row a chunk)
        names_, rows_, scores_ = cast(list[str], names[:top_k]), rows[:top_k], ranked[:top_k].tolist()
    else:
        hits = [(s, c, r) for s, c, r in zip((-ranked).tolist(), names, rows, strict=True) if c is not None]
        if tied:  # ties: by chunk id
            hits.sort()
        hits = hits[:top_k]
        names_, rows_, scores_ = [c for _, c, _ in hits], [r for _, _, r in hits], [-s for s, _, _ in hits]
    ids.seen(names_, rows_)
    return Ranking(names_, scores_, rows_)


def _cosines(rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Each row's cosine with ``query`` (the rows are unit vectors)."""
    return dot_rows(rows, l2_normalise(query.reshape(1, -1))[0])
