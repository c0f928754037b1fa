"""The dense index behind ``SQLiteStore``: a memory-mapped vector file beside ``zhiku.db``.

SQLite keeps every chunk's float32 vector as a BLOB (the durable copy that ``migrate`` reads). Dense search is
served from ``vectors.<dim>.f32``: unit rows, row ``rowid - 1`` holds chunk ``rowid``. Rowids are never reused
(a deleted chunk's rowid stays in ``tombstones``), so the file only grows: a write appends its rows *before*
its transaction commits (past every committed rowid, where no reader looks), and a delete only records
tombstones. A writer killed before ``COMMIT`` leaves rows nobody points at, overwritten by the next writer; so
after ``kill -9`` the file holds every committed row, and a document is its old or its new version.

Opening maps the file (no row is decoded) and reads the live rowids from an index; another process's commits
are applied incrementally (rows past the last seen rowid, tombstones newer than the last seen version). A file
that is missing or does not match the BLOBs (e.g. after a power loss) is rebuilt from them.
"""

from __future__ import annotations

import contextlib
import fnmatch
import mmap
import os
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zhiku.numeric import l2_normalise

_BATCH = 8192


def match_sources(sources: Iterable[str], glob: str) -> list[str]:
    """The sources matching an fnmatch-style glob (``*``, ``?``, ``[seq]``, ``[!seq]``), case-sensitive.

    BM25 and dense search both filter through this function, so they always agree on what a glob means.
    """
    return [s for s in sources if fnmatch.fnmatchcase(s, glob)]


def vector_path(index_dir: Path, dim: int) -> Path:
    return index_dir / f"vectors.{dim}.f32"


def write_rows(path: Path, first_rowid: int, unit: np.ndarray) -> None:
    """Write unit rows for rowids ``first_rowid…`` (float32, ``(k, dim)``) into the vector file."""
    data = np.ascontiguousarray(unit, dtype="<f4").tobytes()
    offset = (first_rowid - 1) * unit.shape[1] * 4
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.pwrite(fd, view, offset)
            view, offset = view[written:], offset + written
    finally:
        os.close(fd)


def top_rowid(conn: sqlite3.Connection) -> int:
    """The highest rowid ever given to a chunk (live or deleted)."""
    row = conn.execute(
        "SELECT MAX(COALESCE((SELECT MAX(rowid) FROM chunks), 0), COALESCE((SELECT MAX(rowid) FROM tombstones), 0))"
    ).fetchone()
    return int(row[0])


def _rowids(conn: sqlite3.Connection, sql: str, *args: object) -> np.ndarray:
    return np.fromiter((r for (r,) in conn.execute(sql, args)), dtype=np.int64)


def _blob_rows(
    conn: sqlite3.Connection, dim: int, where: str, *args: object
) -> Iterable[tuple[np.ndarray, np.ndarray]]:
    """``(rowids, unit rows)`` batches of stored vectors, decoded from the BLOBs."""
    cursor = conn.execute(f"SELECT rowid, vector FROM chunks {where} ORDER BY rowid", args)
    while batch := cursor.fetchmany(_BATCH):
        ids = np.fromiter((r for r, _ in batch), dtype=np.int64, count=len(batch))
        rows = np.frombuffer(b"".join(v for _, v in batch), "<f4").reshape(len(batch), dim)
        yield ids, l2_normalise(rows)


def rebuild_file(conn: sqlite3.Connection, path: Path, dim: int) -> None:
    """Write the vector file afresh from the BLOBs (a new index, an upgraded one, or a damaged file)."""
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    tmp.touch()
    for ids, rows in _blob_rows(conn, dim, ""):
        for start, stop in _runs(ids):
            write_rows(tmp, int(ids[start]), rows[start:stop])
    os.replace(tmp, path)


def _runs(ids: np.ndarray) -> list[tuple[int, int]]:
    """Index ranges of consecutive rowids."""
    breaks = np.flatnonzero(np.diff(ids) != 1) + 1
    edges = [0, *breaks.tolist(), ids.size]
    return [(a, b) for a, b in zip(edges, edges[1:], strict=False) if b > a]


def file_matches(conn: sqlite3.Connection, path: Path, dim: int, top: int) -> bool:
    """The vector file is long enough and its newest live row equals the BLOB (a cheap check at open)."""
    if not path.is_file() or path.stat().st_size < top * dim * 4:
        return False
    row = conn.execute("SELECT rowid, vector FROM chunks ORDER BY rowid DESC LIMIT 1").fetchone()
    if row is None:
        return True
    stored = np.frombuffer(row[1], "<f4")
    mapped = np.memmap(path, dtype="<f4", mode="r", shape=(top, dim))
    return stored.size == dim and bool(np.allclose(mapped[row[0] - 1], l2_normalise(stored.reshape(1, dim))[0]))


@dataclass(frozen=True)
class VectorSnapshot:
    """The dense index at one ``index_version``: rows ``1…top`` (``matrix[r-1]``) and which are live. Immutable:
    searches run on a snapshot without any lock while a writer builds the next one."""

    dim: int
    version: int
    top: int
    matrix: np.ndarray  # (>= top, dim) float32 unit rows: a read-only memmap, or in memory
    live: np.ndarray  # bool (top,)
    live_count: int
    path: Path | None  # the mapped file; None when the rows are held in memory

    @classmethod
    def empty(cls, dim: int, version: int) -> VectorSnapshot:
        return cls(dim, version, 0, np.empty((0, dim), np.float32), np.zeros(0, bool), 0, None)

    @classmethod
    def load(cls, conn: sqlite3.Connection, index_dir: Path, dim: int, version: int) -> VectorSnapshot:
        """Map the vector file or, when it does not match (a read-only index never opened by this zhiku for
        writing), decode the BLOBs into memory. ``conn`` is inside a read transaction."""
        top = top_rowid(conn)
        if dim == 0 or top == 0:
            return cls.empty(dim, version)
        live = np.zeros(top, bool)
        live[_rowids(conn, "SELECT rowid FROM chunks") - 1] = True
        path = vector_path(index_dir, dim)
        if file_matches(conn, path, dim, top):
            return cls(dim, version, top, _map(path, dim, top), live, int(live.sum()), path)
        matrix = np.zeros((top, dim), np.float32)
        for ids, rows in _blob_rows(conn, dim, ""):
            matrix[ids - 1] = rows
        return cls(dim, version, top, matrix, live, int(live.sum()), None)

    def refreshed(self, conn: sqlite3.Connection, version: int) -> VectorSnapshot:
        """This snapshot moved to ``version`` by another connection's commits (``conn`` in a read transaction)."""
        added = _rowids(conn, "SELECT rowid FROM chunks WHERE rowid > ?", self.top)
        removed = _rowids(conn, "SELECT rowid FROM tombstones WHERE version > ?", self.version)
        top = max(self.top, top_rowid(conn))
        matrix = self.matrix
        if self.path is not None:
            matrix = _map(self.path, self.dim, top) if top > self.top else matrix
        elif added.size:
            matrix = np.zeros((top, self.dim), np.float32)
            matrix[: self.top] = self.matrix[: self.top]
            for ids, rows in _blob_rows(conn, self.dim, "WHERE rowid > ?", self.top):
                matrix[ids - 1] = rows
        return self.changed(version, top, matrix, added, removed)

    def changed(
        self, version: int, top: int, matrix: np.ndarray | None, added: np.ndarray, removed: np.ndarray
    ) -> VectorSnapshot:
        """A new snapshot with rows ``added`` live and ``removed`` dead (``matrix`` None: remap the file)."""
        if matrix is None:
            matrix = _map(self.path, self.dim, top) if self.path is not None and top > self.top else self.matrix
        live = np.zeros(top, bool)
        live[: self.top] = self.live
        live[removed[removed <= top] - 1] = False
        live[added - 1] = True
        return VectorSnapshot(self.dim, version, top, matrix, live, int(live.sum()), self.path)

    def prefetch(self) -> None:
        """Ask the OS to read the mapped file ahead (a hint; returns at once)."""
        mapped = getattr(self.matrix, "_mmap", None)
        if isinstance(mapped, mmap.mmap) and hasattr(mmap, "MADV_WILLNEED"):
            with contextlib.suppress(OSError, ValueError):
                mapped.madvise(mmap.MADV_WILLNEED)

    def search(self, query: np.ndarray, top_k: int, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """``(rowids, scores)`` of the ``top_k`` best live rows (``mask``: rows allowed by filters), unordered."""
        allowed = self.live if mask is None else self.live & mask[: self.top]
        n = self.live_count if mask is None else int(allowed.sum())
        if top_k < 1 or n == 0:
            return np.empty(0, np.int64), np.empty(0, np.float32)
        # einsum, not BLAS: as fast on one core (the product is memory-bound), and it never starts BLAS threads,
        # which made concurrent searches slower than one at a time (bench/concurrent_search.py, Issue 13)
        scores = np.einsum("ij,j->i", self.matrix[: self.top], l2_normalise(query.reshape(1, -1))[0])
        scores[~allowed] = -np.inf
        k = min(top_k, n)
        best = np.argpartition(-scores, k - 1)[:k] if k < scores.size else np.arange(scores.size)
        best = best[np.isfinite(scores[best])]
        return best + 1, scores[best]


def _map(path: Path, dim: int, top: int) -> np.ndarray:
    return np.memmap(path, dtype="<f4", mode="r", shape=(top, dim))
