"""The ``Retriever`` role of ``SQLiteStore``: BM25 over FTS5 and dense search over the mapped vector file, each on
a pooled read connection, with no lock held while scoring (searches run side by side)."""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from zhiku.errors import IndexMismatch, InvalidInput, StoreError
from zhiku.stores._ann import AnnCache
from zhiku.stores._sqlite_read import SQLiteReads, stored_dim, version_of
from zhiku.stores._vectors import FileMoved, VectorSnapshot, match_sources
from zhiku.types import Filters, ScoredId

log = logging.getLogger(__name__)

# BM25 query-term pruning (measured in bench/RESULTS.md, Issue 13): a term found in more than BM25_MAX_DF of the
# chunks and in more than BM25_MIN_DF chunks is left out of the FTS5 query (the 2 rarest terms always stay).
BM25_MAX_DF = 0.5  # above N/2 a term's BM25 IDF is <= 0 (FTS5 floors it at 1e-6): lossless on every dev set
BM25_MIN_DF = 1000
# store.dense_search "auto" screens by int8 codes from this many rows in the vector file (bench/RESULTS.md, Issue 13)
SCREEN_FROM = 100_000


def fts_query(terms: Sequence[str]) -> str:
    """An FTS5 query matching any of ``terms``: each double-quoted (``"`` doubled), joined with ``OR``.

    Repeated and blank terms are dropped; no terms gives ``""``.
    """
    if isinstance(terms, str):
        raise InvalidInput(f"BM25 terms must be a list of tokens, not the string {terms!r}")
    unique = dict.fromkeys(t for t in terms if t.strip())
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in unique)


class SQLiteSearch(SQLiteReads):
    """BM25 and dense search; the store sets these attributes."""

    index_dir: Path
    path: Path
    bm25_max_df: float
    dense_mode: str  # "exact", "int8", "hnsw" or "auto" (int8 from SCREEN_FROM rows): store.dense_search
    _ann: AnnCache
    _chunk_count: tuple[int, int]
    _vec_lock: threading.Lock
    _snap: VectorSnapshot | None

    def bm25_search(self, terms: Sequence[str], top_k: int, filters: Filters = Filters()) -> list[ScoredId]:
        query = fts_query(terms)
        if not query or top_k < 1:
            return []
        sql = "SELECT c.chunk_id, -bm25(fts) FROM fts CROSS JOIN chunks AS c ON c.rowid = fts.rowid WHERE fts MATCH ?"
        params: list[Any] = [query]
        with self._read() as conn:
            query = fts_query(self._frequent_terms_pruned(conn, terms))
            if filters == Filters():
                return self._bm25_unfiltered(conn, query, int(top_k))
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

    def _frequent_terms_pruned(self, conn: sqlite3.Connection, terms: Sequence[str]) -> list[str]:
        """``terms`` without those in more than ``bm25_max_df`` of the chunks (and more than ``BM25_MIN_DF``:
        rarer terms cost little), keeping at least the 2 rarest."""
        unique = list(dict.fromkeys(t for t in terms if t.strip()))
        if len(unique) <= 2 or self.bm25_max_df >= 1:
            return unique
        version = version_of(conn)
        if self._chunk_count[0] != version:
            self._chunk_count = (version, conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0])
        limit = max(self.bm25_max_df * self._chunk_count[1], BM25_MIN_DF)
        df = dict(
            conn.execute(
                "SELECT term, df FROM term_df WHERE term IN (SELECT value FROM json_each(?))", (json.dumps(unique),)
            ).fetchall()
        )
        rarest = set(sorted(unique, key=lambda t: (df.get(t, 0), t))[:2])
        return [t for t in unique if t in rarest or df.get(t, 0) <= limit]

    @staticmethod
    def _bm25_unfiltered(conn: sqlite3.Connection, query: str, top_k: int) -> list[ScoredId]:
        """The best ``top_k`` by FTS5 rank alone (no join per match), chunk ids looked up for those only. Ties
        are broken by chunk id as in the filtered query: the limit grows while the cut falls inside a tie."""
        limit = top_k + 16
        while True:
            ranked = conn.execute(
                "SELECT rowid, -rank FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT ?", (query, limit)
            ).fetchall()
            if len(ranked) < limit or ranked[top_k - 1][1] != ranked[-1][1]:
                break
            limit *= 4
        ids = dict(
            conn.execute(
                "SELECT rowid, chunk_id FROM chunks WHERE rowid IN (SELECT value FROM json_each(?))",
                (json.dumps([r for r, _ in ranked]),),
            ).fetchall()
        )
        hits = sorted(((ids[r], float(score)) for r, score in ranked if r in ids), key=lambda h: (-h[1], h[0]))
        return [ScoredId(cid, score, rank) for rank, (cid, score) in enumerate(hits[:top_k], 1)]

    def dense_search(self, vector: np.ndarray, top_k: int, filters: Filters = Filters()) -> list[ScoredId]:
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if not np.isfinite(query).all():
            raise InvalidInput("the query vector contains NaN or infinite values; check the embedder")
        with self._read() as conn:
            snap = self._snapshot(conn)
            if snap.dim and query.size != snap.dim:
                raise IndexMismatch(
                    f"index holds {snap.dim}-dimensional vectors but got {query.size}: the embedder changed; "
                    "rebuild with `zhiku ingest PATH --force` into a new --index"
                )
            mask = self._filter_mask(conn, snap, filters)
            ann = self._ann.get(snap.layout, snap.matrix, snap.rows) if self._uses_ann(snap) else None
            # no lock held: searches run side by side
            rowids, scores = snap.search(query, int(top_k), mask, screen=self._screens(snap), ann=ann)
            if rowids.size == 0:
                return []
            found = dict(
                conn.execute(
                    "SELECT rowid, chunk_id FROM chunks WHERE rowid IN (SELECT value FROM json_each(?))",
                    (json.dumps(rowids.tolist()),),
                ).fetchall()
            )
        hits = sorted(
            ((found[int(r)], float(s)) for r, s in zip(rowids, scores, strict=True) if int(r) in found),
            key=lambda h: (-h[1], h[0]),
        )
        return [ScoredId(cid, score, rank) for rank, (cid, score) in enumerate(hits, 1)]

    def _screens(self, snap: VectorSnapshot) -> bool:
        """Whether dense search ranks by the int8 codes first (``store.dense_search``; hnsw: when it cannot use
        the HNSW index)."""
        return self.dense_mode in ("int8", "hnsw") or self.dense_mode == "auto" and snap.rows >= SCREEN_FROM

    def _uses_ann(self, snap: VectorSnapshot) -> bool:
        return self.dense_mode == "hnsw" and snap.path is not None and snap.live_count > 0

    def warm(self) -> None:
        """Map the vectors now (and ask the OS to read them ahead), so the first dense search is not the slow one.
        A broken index is only logged: the first query reports it, with its error code."""
        try:
            with self._read() as conn:
                snap = self._snapshot(conn)
                snap.prefetch(codes_only=self._screens(snap) and snap.codes is not None)
                if self._uses_ann(snap):  # opens the saved HNSW index, or starts building it
                    self._ann.get(snap.layout, snap.matrix, snap.rows)
        except StoreError as e:
            log.warning("could not load the vectors of %s: %s", self.index_dir, e)

    def _snapshot(self, conn: sqlite3.Connection) -> VectorSnapshot:
        """The vectors at the index's current version: loaded once, then moved forward incrementally."""
        snap = self._snap
        if snap is not None and snap.version == version_of(conn):
            return snap
        with self._vec_lock:
            try:
                snap = self._snapshot_in(conn, retried=False)
            except FileMoved:  # a compaction replaced the file as this transaction began: the next one sees it
                snap = self._snapshot_in(conn, retried=True)
            self._snap = snap
        return snap

    def _snapshot_in(self, conn: sqlite3.Connection, *, retried: bool) -> VectorSnapshot:
        conn.execute("BEGIN")  # one snapshot for the version, the rowids and the tombstones
        try:
            snap, version, dim = self._snap, version_of(conn), stored_dim(conn) or 0
            if snap is None or snap.dim != dim or snap.version > version or snap.top == 0:
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

    def _filter_mask(self, conn: sqlite3.Connection, snap: VectorSnapshot, filters: Filters) -> np.ndarray | None:
        """Rows passing ``filters`` (None: no filter), from the chunks' columns at this connection's snapshot."""
        sql, params = "SELECT rowid FROM chunks WHERE 1", []
        for column, value in (("collection", filters.collection), ("doc_type", filters.doc_type)):
            if value is not None:
                sql += f" AND {column} = ?"
                params.append(value)
        if filters.source_glob is not None:
            sources = match_sources(
                (s for (s,) in conn.execute("SELECT DISTINCT source FROM documents")), filters.source_glob
            )
            sql += " AND source IN (SELECT value FROM json_each(?))"
            params.append(json.dumps(sources))
        if not params:
            return None
        return snap.mask_of(np.fromiter((r for (r,) in conn.execute(sql, params)), dtype=np.int64))
