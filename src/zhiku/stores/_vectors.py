"""The dense index behind ``SQLiteStore``: memory-mapped vector files beside ``zhiku.db``.

SQLite keeps every chunk's float32 vector as a BLOB (the durable copy that ``migrate`` reads). Dense search is
served from the vector file of the current layout (``_vector_files``: which file, which row holds which rowid)
and its int8 codes. Rowids are never reused (a deleted chunk's rowid stays in ``tombstones``), so between
compactions the file only grows: a write appends its rows *before* its transaction commits (past every
committed rowid, where no reader looks), and a delete only records tombstones. A writer killed before ``COMMIT``
leaves rows nobody points at, overwritten by the next writer; so after ``kill -9`` the file holds every
committed row, and a document is its old or its new version.

Opening maps the files (no row is decoded) and reads the live rowids from an index; another process's commits
are applied incrementally (rows past the last seen rowid, tombstones newer than the last seen version), or the
files mapped anew after a compaction. A file that is missing or does not match the BLOBs (e.g. after a power
loss) is rewritten from them at the next writable open; until then it is served from the BLOBs in memory.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import importlib
import mmap
import os
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from zhiku.numeric import l2_normalise
from zhiku.stores._vector_files import (
    Layout,
    blob_rows,
    load_ids,
    quantise,
    read_layout,
    rowids_of,
    rows_of,
    top_rowid,
)


def match_sources(sources: Iterable[str], glob: str) -> list[str]:
    """The sources matching an fnmatch-style glob (``*``, ``?``, ``[seq]``, ``[!seq]``), case-sensitive.

    BM25 and dense search both filter through this function, so they always agree on what a glob means.
    """
    return [s for s in sources if fnmatch.fnmatchcase(s, glob)]


def file_matches(conn: sqlite3.Connection, index_dir: Path, layout: Layout, ids: np.ndarray, top: int) -> bool:
    """The layout's file is long enough and its newest live row equals the BLOB (a cheap check at open)."""
    path = layout.path(index_dir)
    rows = layout.rows(top)
    if not path.is_file() or path.stat().st_size < rows * layout.dim * 4:
        return False
    row = conn.execute("SELECT rowid, vector FROM chunks ORDER BY rowid DESC LIMIT 1").fetchone()
    if row is None or rows == 0:
        return True
    stored = np.frombuffer(row[1], "<f4")
    at = int(rows_of(layout, ids, np.array([row[0]]))[0])
    if stored.size != layout.dim or at < 0:
        return False
    mapped = np.memmap(path, dtype="<f4", mode="r", shape=(rows, layout.dim))
    return bool(np.allclose(mapped[at], l2_normalise(stored.reshape(1, layout.dim))[0]))


class FileMoved(Exception):
    """The vector file a read transaction points at was replaced by a compaction that committed meanwhile."""


def _rowids(conn: sqlite3.Connection, sql: str, *args: object) -> np.ndarray:
    return np.fromiter((r for (r,) in conn.execute(sql, args)), dtype=np.int64)


_NO_IDS = np.empty(0, np.int64)
RESCORE = 4  # int8 screening re-scores the best RESCORE × k rows in float32 ...
RESCORE_MIN = 100  # ... and at least this many (bench/RESULTS.md, Issue 13: recall of exact top k)
# from this size of float32 file ``gather`` reads rows with preadv rather than through the mapping (a mapping's
# resident memory grows to the whole file: +153 MB at 100k × 384, measured; 1.5 GB at 1M would break its RSS bar)
PREAD_FROM_BYTES = 256 << 20


@dataclass(frozen=True)
class VectorSnapshot:
    """The dense index at one ``index_version``: the file rows of rowids ``1…top`` (where each is: ``layout``,
    ``ids``) and which are live. Immutable: searches run on a snapshot without any lock while a writer builds
    the next one."""

    dim: int
    version: int
    top: int
    matrix: np.ndarray  # (>= rows, dim) float32 unit rows: a read-only memmap, or in memory
    live: np.ndarray  # bool (rows,)
    live_count: int
    path: Path | None  # the mapped file; None when the rows are held in memory (generation 0 layout)
    layout: Layout = Layout(0)
    ids: np.ndarray = field(default_factory=lambda: _NO_IDS)  # rowids of the layout's first ``count`` rows
    codes: np.ndarray | None = None  # (>= rows, dim) int8 codes of the rows (mapped), when the file is whole

    @property
    def rows(self) -> int:
        return self.layout.rows(self.top)

    @classmethod
    def empty(cls, dim: int, version: int) -> VectorSnapshot:
        return cls(dim, version, 0, np.empty((0, dim), np.float32), np.zeros(0, bool), 0, None, Layout(dim))

    @classmethod
    def load(
        cls, conn: sqlite3.Connection, index_dir: Path, dim: int, version: int, *, retried: bool = False
    ) -> VectorSnapshot:
        """Map the vector file or, when it does not match (a read-only index never opened by this zhiku for
        writing, a damaged file), decode the BLOBs into memory. ``conn`` is inside a read transaction. Raises
        ``FileMoved`` when a compaction replaced the file since that transaction began (unless ``retried``)."""
        top = top_rowid(conn)
        live_ids = _rowids(conn, "SELECT rowid FROM chunks") if dim and top else _NO_IDS
        if live_ids.size == 0:
            return cls.empty(dim, version)
        layout = read_layout(conn, dim)
        path = layout.path(index_dir)
        if layout.gen and not path.is_file() and not retried:
            raise FileMoved(str(path))
        try:
            ids = load_ids(index_dir, layout)
        except (OSError, ValueError):
            ids = None
        if ids is not None and file_matches(conn, index_dir, layout, ids, top):
            live = np.zeros(layout.rows(top), bool)
            live[rows_of(layout, ids, live_ids)] = True
            matrix = _map(path, dim, live.size)
            newest = int(rows_of(layout, ids, live_ids[-1:])[0])
            codes = map_codes(index_dir, layout, live.size, matrix, newest)
            return cls(dim, version, top, matrix, live, live_ids.size, path, layout, ids, codes)
        matrix = np.zeros((top, dim), np.float32)
        for rowids, rows in blob_rows(conn, dim):
            matrix[rowids - 1] = rows
        live = np.zeros(top, bool)
        live[live_ids - 1] = True
        return cls(dim, version, top, matrix, live, live_ids.size, None, Layout(dim))

    def refreshed(self, conn: sqlite3.Connection, index_dir: Path, version: int) -> VectorSnapshot:
        """This snapshot moved to ``version`` by another connection's commits (``conn`` in a read transaction);
        loaded anew when they compacted the file."""
        if self.path is not None and read_layout(conn, self.dim).gen != self.layout.gen:
            return VectorSnapshot.load(conn, index_dir, self.dim, version)
        added = _rowids(conn, "SELECT rowid FROM chunks WHERE rowid > ?", self.top)
        removed = _rowids(conn, "SELECT rowid FROM tombstones WHERE version > ?", self.version)
        top = max(self.top, top_rowid(conn))
        matrix = None
        if self.path is None and added.size:
            matrix = np.zeros((top, self.dim), np.float32)
            matrix[: self.top] = self.matrix[: self.top]
            for rowids, rows in blob_rows(conn, self.dim, "WHERE rowid > ?", self.top):
                matrix[rowids - 1] = rows
        return self.changed(version, top, matrix, added, removed)

    def changed(
        self, version: int, top: int, matrix: np.ndarray | None, added: np.ndarray, removed: np.ndarray
    ) -> VectorSnapshot:
        """A new snapshot with rowids ``added`` live and ``removed`` dead (``matrix`` None: remap the file)."""
        rows = self.layout.rows(top)
        codes = self.codes
        if matrix is None and self.path is not None and rows > self.rows:
            matrix = _map(self.path, self.dim, rows)
            codes = map_codes(self.path.parent, self.layout, rows) if codes is not None else None
        matrix = self.matrix if matrix is None else matrix
        live = np.zeros(rows, bool)
        live[: self.live.size] = self.live
        gone = rows_of(self.layout, self.ids, removed[removed <= top])
        live[gone[gone >= 0]] = False
        live[rows_of(self.layout, self.ids, added)] = True
        return replace(
            self, version=version, top=top, matrix=matrix, live=live, live_count=int(live.sum()), codes=codes
        )

    def rows_of(self, rowids: np.ndarray) -> np.ndarray:
        """The file rows of ``rowids`` (-1 for one this snapshot does not hold)."""
        rows = rows_of(self.layout, self.ids, rowids)
        rows[rowids > self.top] = -1
        return rows

    def mask_of(self, rowids: np.ndarray) -> np.ndarray:
        """A row mask allowing these rowids (those this snapshot holds)."""
        rows = self.rows_of(rowids)
        mask = np.zeros(self.rows, bool)
        mask[rows[rows >= 0]] = True
        return mask

    def prefetch(self, *, codes_only: bool = False) -> None:
        """Ask the OS to read the mapped files ahead (a hint; returns at once): only the int8 codes when searches
        screen by them (they then read a few float32 rows each)."""
        for array in (self.codes,) if codes_only else (self.matrix, self.codes):
            mapped = getattr(array, "_mmap", None)
            if isinstance(mapped, mmap.mmap) and hasattr(mmap, "MADV_WILLNEED"):
                with contextlib.suppress(OSError, ValueError):
                    mapped.madvise(mmap.MADV_WILLNEED)

    def search(
        self, query: np.ndarray, top_k: int, mask: np.ndarray | None, *, screen: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(rowids, scores)`` of the ``top_k`` best live rows (``mask``: rows allowed by filters), unordered.
        ``screen``: rank every row by its int8 code first (numkong) and score only the best ``RESCORE`` ×
        ``top_k`` in float32 (without codes or numkong: every row in float32)."""
        allowed = self.live if mask is None else self.live & mask[: self.rows]
        n = self.live_count if mask is None else int(allowed.sum())
        if top_k < 1 or n == 0:
            return np.empty(0, np.int64), np.empty(0, np.float32)
        unit = l2_normalise(query.reshape(1, -1))[0]
        k = min(top_k, n)
        rows: np.ndarray | None = None
        if screen and self.codes is not None and numkong() is not None:
            rows = self.screened(unit, allowed, screen_width(k, n))
            scores = dot_rows(self.gather(rows), unit)
        else:
            scores = dot_rows(np.asarray(self.matrix[: self.rows]).view(np.ndarray), unit)
            if n < self.rows:
                scores[~allowed] = -np.inf
        best = _best(scores, k)
        best = best[np.isfinite(scores[best])]
        return rowids_of(self.layout, self.ids, best if rows is None else rows[best]), scores[best]

    def gather(self, rows: np.ndarray) -> np.ndarray:
        """The float32 ``rows`` (ascending), read with ``pread`` rather than through the mapping: the scattered
        pages a re-scoring reads then stay in the page cache, not in this process's resident memory (which
        fault-around would fill with the whole file over many queries). A file under ``PREAD_FROM_BYTES`` is read
        through the mapping (0.07 ms for 400 rows against 0.45 ms with preadv at 100k rows, measured; an exact
        search reads it whole anyway)."""
        if self.path is None or rows.size == 0 or self.rows * self.dim * 4 < PREAD_FROM_BYTES:
            return np.asarray(self.matrix[rows])
        size = self.dim * 4
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:  # deleted by a compaction: this snapshot's mapping still holds it
            return np.asarray(self.matrix[rows])
        try:
            out, got = _read_rows(fd, rows, size)
        finally:
            os.close(fd)
        if got != rows.size * size:
            return np.asarray(self.matrix[rows])
        return out.view("<f4").reshape(rows.size, self.dim)

    def screened(self, unit: np.ndarray, allowed: np.ndarray, want: int) -> np.ndarray:
        """The ``want`` allowed rows whose int8 codes score best against the query's (numkong), in file order."""
        assert self.codes is not None
        codes = np.asarray(self.codes[: self.rows]).view(np.ndarray)
        coarse = np.asarray(numkong().cdist(quantise(unit)[None, :], codes, metric="dot", out_dtype="float32"))[0]
        if not allowed.all():
            coarse[~allowed] = -np.inf
        rows = np.argpartition(-coarse, want - 1)[:want] if want < coarse.size else np.arange(coarse.size)
        return np.sort(rows[np.isfinite(coarse[rows])])  # the float32 rows are read in file order


def screen_width(k: int, n: int) -> int:
    """How many rows an int8 screening keeps for the float32 re-scoring of a top ``k`` among ``n`` allowed rows."""
    return min(n, max(RESCORE * k, RESCORE_MIN))


def dot_rows(rows: np.ndarray, unit: np.ndarray) -> np.ndarray:
    """Each row's dot product with ``unit`` (the rows are unit vectors: their cosines), by numpy's einsum (not BLAS:
    as fast on one core, the product is memory-bound, and it starts no BLAS threads, which slow concurrent
    searches down)."""
    scores: np.ndarray = np.einsum("ij,j->i", rows, unit)
    return scores


def _best(scores: np.ndarray, k: int) -> np.ndarray:
    """The positions of the ``k`` best ``scores`` and of every score tied with the ``k``-th: the ranking then orders
    ties by chunk id (``_sqlite_search._ranked``), so which tied rows it keeps never depends on where they lie."""
    if k >= scores.size:
        return np.arange(scores.size)
    cut = scores.size - k
    return np.flatnonzero(scores >= np.partition(scores, cut)[cut])


def _read_rows(fd: int, rows: np.ndarray, size: int) -> tuple[np.ndarray, int]:
    """Rows of ``size`` bytes at ``rows`` of the file ``fd``, read into one buffer (``preadv`` straight into it:
    half the time of ``pread``'s one bytes object per row), and how many bytes were read."""
    out = np.empty(rows.size * size, np.uint8)
    view = out.data
    offsets = (np.asarray(rows, np.int64) * size).tolist()
    if hasattr(os, "preadv"):
        preadv, starts = os.preadv, range(0, out.size, size)
        got = sum([preadv(fd, (view[i : i + size],), at) for i, at in zip(starts, offsets, strict=True)])
    else:  # no preadv (Windows)
        data = b"".join(os.pread(fd, size, at) for at in offsets)
        got = len(data)
        out[:got] = np.frombuffer(data, np.uint8)
    return out, got


def map_codes(
    index_dir: Path, layout: Layout, rows: int, matrix: np.ndarray | None = None, check_row: int = -1
) -> np.ndarray | None:
    """The layout's int8 codes mapped, or None when the file is short (an index from before codes existed) or,
    given ``matrix``, row ``check_row``'s codes do not match its float32 row."""
    path = layout.codes_path(index_dir)
    try:
        if rows == 0 or path.stat().st_size < rows * layout.dim:
            return None
    except OSError:
        return None
    codes = np.memmap(path, dtype=np.int8, mode="r", shape=(rows, layout.dim))
    if matrix is not None and check_row >= 0 and not np.array_equal(codes[check_row], quantise(matrix[check_row])):
        return None
    return codes


@functools.cache
def numkong() -> Any:
    """The numkong module (SIMD int8 dot products), or None when it is not installed."""
    try:
        return importlib.import_module("numkong")
    except ImportError:
        return None


def _map(path: Path, dim: int, rows: int) -> np.ndarray:
    return np.memmap(path, dtype="<f4", mode="r", shape=(rows, dim))
