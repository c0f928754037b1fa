"""The ``Retriever`` role of ``SQLiteStore``: BM25 over the in-memory postings segments (``_bm25``) and dense
search over the mapped vector file, each on a pooled read connection, with no lock held while scoring (searches
run side by side)."""

from __future__ import annotations

import functools
import logging
import sqlite3
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

from zhiku.errors import IndexMismatch, InvalidInput, StoreError
from zhiku.numeric import l2_normalise
from zhiku.stores import _core
from zhiku.stores._ann import AnnCache
from zhiku.stores._bm25 import BM25Snapshot
from zhiku.stores._chunk_ids import ChunkIds
from zhiku.stores._filter_masks import FilterMasks
from zhiku.stores._sqlite_read import SQLiteReads, stored_dim, version_of
from zhiku.stores._vectors import PREAD_FROM_BYTES, FileMoved, VectorSnapshot, dot_rows, numkong, screen_width
from zhiku.types import Filters, Ranking, ScoredId

log = logging.getLogger(__name__)

# BM25 query-term pruning (measured in bench/RESULTS.md, Issue 13): a term found in more than BM25_MAX_DF of the
# chunks and in more than BM25_MIN_DF chunks is left out of the query (the 2 rarest terms always stay).
BM25_MAX_DF = 0.5  # above N/2 a term's BM25 IDF is <= 0 (floored at 1e-6): lossless on every dev set
BM25_MIN_DF = 1000
# store.dense_search "auto" screens by int8 codes from this many rows in the vector file (bench/RESULTS.md, Issue 13)
SCREEN_FROM = 100_000
# ... and from this many with the compiled core's kernels (``_vectors.simd_kernels``: AVX2 int8 products; bench/
# RESULTS.md, Issue 13 — int8 screening from 1,024 rows: measured on an Intel Xeon) ...
SCREEN_KERNELS_FROM = 1024
# ... except on AMD CPUs, whose large L3 feeds the exact kernel fast enough that screening pays only once the
# float32 rows pass this many bytes (8,192 rows of 384 floats; bench/RESULTS.md, Issue 13 — every bar on an AMD
# EPYC box: exact faster up to 8–16k rows there)
SCREEN_KERNELS_FROM_BYTES_AMD = 12 << 20


@functools.cache
def cpu_vendor() -> str:
    """The CPU's vendor (``/proc/cpuinfo``'s ``vendor_id``: ``GenuineIntel``, ``AuthenticAMD``…), '' where unknown."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return ""


def screen_kernels_from(dim: int) -> int:
    """From how many rows of ``dim`` floats ``store.dense_search`` auto screens where the kernels run (this CPU's)."""
    if cpu_vendor() == "AuthenticAMD":
        return max(SCREEN_KERNELS_FROM, SCREEN_KERNELS_FROM_BYTES_AMD // (4 * max(dim, 1)))
    return SCREEN_KERNELS_FROM


def query_terms(terms: Sequence[str]) -> list[str]:
    """The distinct non-blank ``terms``, in order (a BM25 query scores each once)."""
    if isinstance(terms, str):
        raise InvalidInput(f"BM25 terms must be a list of tokens, not the string {terms!r}")
    return list(dict.fromkeys(t for t in terms if t.strip()))


class SQLiteSearch(SQLiteReads):
    """BM25 and dense search; the store sets these attributes."""

    index_dir: Path
    path: Path
    bm25_max_df: float
    dense_mode: str  # "exact", "int8", "hnsw" or "auto" (int8 from SCREEN_FROM rows): store.dense_search
    _ann: AnnCache
    _ids: ChunkIds
    _masks: FilterMasks
    _vec_lock: threading.Lock
    _snap: VectorSnapshot | None
    _bm25: BM25Snapshot | None
    _last_scores: threading.local
    _core_kept: list[_core.CoreIndex]  # the last CoreIndex of this store's snapshots (``hybrid_core``)
    _kernels: Any  # ``simd_kernels()`` for every dense product, or None (numpy's einsum, numkong's screening)

    def bm25_search(self, terms: Sequence[str], top_k: int, filters: Filters = Filters()) -> Sequence[ScoredId]:
        unique = query_terms(terms)
        if not unique or top_k < 1:
            return []
        with self._read() as conn:
            snap = self._bm25_snapshot(conn)
            mask = self._filter_mask(conn, snap.top, filters)
            if mask is not None and not mask.any():
                return []
            rowids, scores = snap.search(unique, int(top_k), mask, (self.bm25_max_df, BM25_MIN_DF))
            return _ranked(rowids, scores, self._ids, conn, snap.top, int(top_k))

    def _bm25_snapshot(self, conn: sqlite3.Connection) -> BM25Snapshot:
        """The BM25 index at the current version: loaded once, then moved forward incrementally."""
        snap = self._bm25
        if snap is not None and snap.version == self._version(conn):
            return snap
        with self._vec_lock:
            conn.execute("BEGIN")  # one snapshot for the version, the rows and the tombstones
            snap, version = self._bm25, version_of(conn)
            if snap is None or snap.version > version:
                self._forget_rows(snap is not None)
                snap = BM25Snapshot.load(conn, self.index_dir, version)
            elif snap.version != version:
                snap = snap.refreshed(conn, version)
            conn.execute("COMMIT")
            self._bm25 = snap
        self._moved_to(snap.version)
        return snap

    def dense_search(self, vector: np.ndarray, top_k: int, filters: Filters = Filters()) -> Sequence[ScoredId]:
        query = self._query_vector(vector)
        with self._read() as conn:
            snap = self._snapshot(conn)
            self._check_dim(snap, query)
            mask = self._filter_mask(conn, snap.top, filters)
            allowed = None if mask is None else snap.mask_of(np.flatnonzero(mask) + 1)  # by file row
            ann = self._ann.get(snap.layout, snap.matrix, snap.rows) if self._uses_ann(snap) else None
            # no lock held: searches run side by side
            every: list[np.ndarray] = []
            screen = self._screens(snap)
            rowids, scores = snap.search(
                query, int(top_k), allowed, screen=screen, ann=ann, every=every, kernels=self._kernels
            )
            # a fill for this question (``dense_scores``, next on this thread) reads its cosines from here; the
            # snapshot by weak reference: a thread that searches no more must not keep an old one alive (its whole
            # in-memory matrix, or the mapping of a file a compaction replaced) once the store has moved on
            # (the question copied: the caller's array may be a buffer it reuses)
            self._last_scores.product = (weakref.ref(snap), query.copy(), every[0]) if every else None
            if rowids.size == 0:
                return []
            return _ranked(rowids, scores, self._ids, conn, snap.top, int(top_k))

    def hybrid_core(
        self,
        terms: Sequence[str],
        vector: np.ndarray,
        depth: int,
        keep: int,
        fusion: _core.Fusion | None,
        filters: Filters = Filters(),
    ) -> _core.CoreResult | None:
        """BM25 and the exact dense search through the compiled core (``_core``): the channels, and with ``fusion``
        (the weights, and whether to fill) the z-score fusion of their ``keep`` best. The same rankings and floats
        as ``bm25_search``, ``dense_search`` and ``zscore_fusion``; the phase times are BM25 (with its terms'
        lookup), dense (with the product) and fusion. None where the core does not serve (not built, no candidates
        to rank, filters that allow no row, a screened or HNSW search, no id table): the caller then takes the
        numpy path."""
        if not _core.available() or depth < 1 or keep < 1:
            return None
        unique, query = query_terms(terms), self._query_vector(vector)
        with self._read() as conn:
            vec = self._snapshot(conn)
            self._check_dim(vec, query)
            # (without codes, or without kernels and numkong, the numpy path scores every row: so does the core)
            screen = (
                self._screens(vec) and vec.codes is not None and (self._kernels is not None or numkong() is not None)
            )
            if vec.live_count == 0 or self._uses_ann(vec) or screen and not self._core_screens(vec):
                return None
            bm25 = self._bm25_snapshot(conn)
            table = self._ids.table(conn, max(bm25.top, vec.top))
            ix = None if table is None else _core.core_index(bm25, vec, table, self._core_kept)
            if ix is None:
                return None
            allowed = None if filters.is_empty() else self._allowed(conn, ix, filters)
            if not filters.is_empty() and allowed is None:
                return None
        t0 = time.perf_counter()
        scored = bm25.scored_terms(unique, (self.bm25_max_df, BM25_MIN_DF))
        t1 = time.perf_counter()
        unit = l2_normalise(query.reshape(1, -1))[0]
        if screen:  # the best rows by their int8 codes scored in float32 (the core's fill scores any other it needs)
            rows = ix.live if allowed is None else allowed[0]
            n = vec.live_count if allowed is None else int(np.count_nonzero(rows))
            scores = vec.screened_product(unit, rows.view(bool), screen_width(depth, n), self._kernels)
        else:
            scores = vec.product(unit, vec.live, vec.live_count, self._kernels)
        t2 = time.perf_counter()
        dots = (vec.float_rows, unit) if screen else None
        got = _core.hybrid(ix, scores, scored, depth, keep, fusion, (t1 - t0, t2 - t1), allowed, dots)
        if fusion is None:  # fused in Python (``dense_search``'s way): its fill reads these cosines, and the rows
            self._last_scores.product = (weakref.ref(vec), query.copy(), scores)
            for ranking in (got.bm25, got.dense):
                self._ids.seen(ranking.ids, ranking.rows or ())
        return got

    def _allowed(self, conn: sqlite3.Connection, ix: _core.CoreIndex, filters: Filters) -> _core.Allowed | None:
        """What ``filters`` allow in the core's snapshots, with the masks ``bm25_search`` and ``dense_search`` use."""

        def masks() -> tuple[np.ndarray, np.ndarray]:
            bm25_mask = self._filter_mask(conn, ix.bm25.top, filters)
            dense_mask = self._filter_mask(conn, ix.vectors.top, filters)
            assert bm25_mask is not None and dense_mask is not None  # (filters is not empty)
            return bm25_mask, ix.vectors.mask_of(np.flatnonzero(dense_mask) + 1)

        return ix.allowed(filters, masks)

    def dense_scores(self, vector: np.ndarray, chunk_ids: Sequence[str]) -> dict[str, float]:
        query = self._query_vector(vector)
        found = self._rows_to_score([query], chunk_ids)
        if found is None:
            return {}
        snap, at, kept = found
        scores = self._scored_before(snap, query, at)
        if scores is None:
            scores = _cosines(snap.gather(at), query, self._kernels)
        return dict(zip(kept, scores.tolist(), strict=True))

    def best_dense_scores(self, vectors: Sequence[np.ndarray], chunk_ids: Sequence[str]) -> dict[str, float]:
        """``BestCosines``: the chunks' rows looked up and read once for every vector."""
        queries = [self._query_vector(v) for v in vectors]
        found = self._rows_to_score(queries, chunk_ids)
        if found is None:
            return {}
        snap, at, kept = found
        rows = snap.gather(at)
        best = np.maximum.reduce([_cosines(rows, query, self._kernels) for query in queries])  # as dense_scores
        return dict(zip(kept, best.tolist(), strict=True))

    def _rows_to_score(
        self, queries: list[np.ndarray], chunk_ids: Sequence[str]
    ) -> tuple[VectorSnapshot, np.ndarray, list[str]] | None:
        """The snapshot, the file rows of the live chunks among ``chunk_ids`` and their ids, after checking every
        query's dimension against the index; None when there is nothing to score."""
        ids = list(dict.fromkeys(chunk_ids))
        if not ids or not queries:
            return None
        with self._read() as conn:
            snap = self._snapshot(conn)
            for query in queries:
                self._check_dim(snap, query)
            at, kept = self._live_rows(conn, snap, ids)
        return (snap, at, kept) if kept else None

    def _scored_before(self, snap: VectorSnapshot, query: np.ndarray, at: np.ndarray) -> np.ndarray | None:
        """The cosines of file rows ``at`` from this thread's last exact dense search, when it scored this question
        in this snapshot (a hybrid search's fill: no second product)."""
        last = getattr(self._last_scores, "product", None)
        if last is None or last[0]() is not snap or not np.array_equal(last[1], query):
            return None
        scores: np.ndarray = last[2][at]
        return scores if bool(np.isfinite(scores).all()) else None

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
        """Whether dense search ranks by the int8 codes first (``store.dense_search``; hnsw: when it cannot use
        the HNSW index)."""
        start = SCREEN_FROM if self._kernels is None else screen_kernels_from(snap.dim)
        return self.dense_mode in ("int8", "hnsw") or self.dense_mode == "auto" and snap.rows >= start

    def _core_screens(self, snap: VectorSnapshot) -> bool:
        """Whether the compiled core serves this snapshot's screened searches: with the kernels, int8 codes and a
        vector file read through its mapping (``PREAD_FROM_BYTES``: larger files are read row by row)."""
        mapped = snap.path is not None and snap.rows * snap.dim * 4 < PREAD_FROM_BYTES
        return self._kernels is not None and snap.codes is not None and mapped

    def _uses_ann(self, snap: VectorSnapshot) -> bool:
        return self.dense_mode == "hnsw" and snap.path is not None and snap.live_count > 0

    def warm(self) -> None:
        """Map the vectors, load the BM25 segments and the chunk ids now (and ask the OS to read the files ahead),
        so the first search is not the slow one.
        A broken index is only logged: the first query reports it, with its error code."""
        try:
            with self._read() as conn:
                snap = self._snapshot(conn)
                snap.prefetch(codes_only=self._screens(snap) and snap.codes is not None)
                if self._uses_ann(snap):  # opens the saved HNSW index, or starts building it
                    self._ann.get(snap.layout, snap.matrix, snap.rows)
                bm25 = self._bm25_snapshot(conn)
                bm25.prefetch()
                self._ids.names(conn, [], bm25.top, whole=True)  # reads them all, up to chunk_ids.TABLE_MAX rows
        except StoreError as e:
            log.warning("could not load the index %s: %s", self.index_dir, e)

    def _snapshot(self, conn: sqlite3.Connection) -> VectorSnapshot:
        """The vectors at the index's current version: loaded once, then moved forward incrementally."""
        snap = self._snap
        if snap is not None and snap.version == self._version(conn):
            return snap
        with self._vec_lock:
            try:
                snap = self._snapshot_in(conn, retried=False)
            except FileMoved:  # a compaction replaced the file as this transaction began: the next one sees it
                snap = self._snapshot_in(conn, retried=True)
            self._snap = snap
        self._moved_to(snap.version)
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
            self._chunk_cache.clear()

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


def _cosines(rows: np.ndarray, query: np.ndarray, kernels: Any) -> np.ndarray:
    """Each row's cosine with ``query`` (the rows are unit vectors): row by row the same floats as the whole product
    of an exact dense search."""
    return dot_rows(rows, l2_normalise(query.reshape(1, -1))[0], kernels)
