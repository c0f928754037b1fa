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
files mapped anew after a compaction. A file that fails its checksums (``_vector_files.verify``) is rewritten
from the BLOBs at the next writable open; until then it is served from the BLOBs in memory.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import importlib
import logging
import mmap
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from zhiku.errors import IndexLocked, StoreError
from zhiku.numeric import best
from zhiku.stores._sqlite_conn import Database, read_rowids, stored_dim, top_rowid, version_of
from zhiku.stores._vector_files import (
    UNCHECKED,
    Layout,
    NewGeneration,
    blob_rows,
    layout_for_write,
    load_ids,
    quantise,
    read_layout,
    recorded_stamp,
    remove_stale_files,
    rowids_of,
    rows_of,
    save_layout,
    save_stamp,
    stamp_of,
    stat_of,
    stored_rows,
    unlink_all,
    vector_files,
    verify,
    write_rows,
)

log = logging.getLogger(__name__)


def match_sources(sources: Iterable[str], glob: str) -> list[str]:
    """The sources matching an fnmatch-style glob (``*``, ``?``, ``[seq]``, ``[!seq]``), case-sensitive.

    BM25 and dense search both filter through this function, so they always agree on what a glob means.
    """
    return [s for s in sources if fnmatch.fnmatchcase(s, glob)]


class FileMoved(Exception):
    """The vector file a read transaction points at was replaced by a compaction that committed meanwhile."""


_NO_IDS = np.empty(0, np.int64)
# store.dense_search "auto" screens by int8 codes from this many rows: numkong's int8 product and the float32
# re-scoring of the best rows overtake numpy's exact product at ~4,000 rows of 384 floats (0.29 against 0.58 ms at
# 10,000 rows, measured on an AMD EPYC), and the dev sets (up to 7,690 chunks) stay exact
SCREEN_FROM = 10_000
RESCORE = 4  # int8 screening re-scores the best RESCORE × k rows in float32 ...
RESCORE_MIN = 100  # ... and at least this many (the exact top k is then found on every dev set)
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
    stamp: list[object] | None = None  # the mapped files' stat when they were verified (``_vector_files.verify``)
    damage: str | None = None  # why the rows are decoded from the BLOBs: what ``verify`` found wrong

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
        live_ids = read_rowids(conn, "SELECT rowid FROM chunks") if dim and top else _NO_IDS
        if live_ids.size == 0:
            return cls.empty(dim, version)
        layout = read_layout(conn, dim)
        path = layout.path(index_dir)
        if layout.gen and not path.is_file() and not retried:
            raise FileMoved(str(path))
        stamp = stamp_of(index_dir, layout)  # (before reading: a change meanwhile shows at the next search)
        try:
            ids = load_ids(index_dir, layout)
            damage = verify(conn, index_dir, layout, layout.rows(top))
        except (OSError, ValueError) as e:
            damage = f"{layout.ids_path(index_dir)}: {e}"
        if damage is None:
            return cls.mapped(index_dir, layout, ids, live_ids, version, top, stamp)
        log.warning("%s: serving the vectors stored in zhiku.db; `zhiku repair --index %s` fixes it", damage, index_dir)
        matrix = np.zeros((top, dim), np.float32)
        for rowids, rows in blob_rows(conn, dim):
            matrix[rowids - 1] = rows
        live = np.zeros(top, bool)
        live[live_ids - 1] = True
        damage = None if UNCHECKED in damage else damage
        return cls(dim, version, top, matrix, live, live_ids.size, None, Layout(dim), damage=damage)

    @classmethod
    def mapped(
        cls,
        index_dir: Path,
        layout: Layout,
        ids: np.ndarray,
        live_ids: np.ndarray,
        version: int,
        top: int,
        stamp: list[object],
    ) -> VectorSnapshot:
        """The layout's files mapped, rowids ``live_ids`` live (``stamp``: the files' stat when verified)."""
        rows = layout.rows(top)
        if rows == 0:
            return cls.empty(layout.dim, version)
        live = np.zeros(rows, bool)
        live[rows_of(layout, ids, live_ids)] = True
        path = layout.path(index_dir)
        matrix, codes = _map(path, layout.dim, rows), map_codes(index_dir, layout, rows)
        return cls(layout.dim, version, top, matrix, live, int(live.sum()), path, layout, ids, codes, stamp)

    def refreshed(self, conn: sqlite3.Connection, index_dir: Path, version: int) -> VectorSnapshot:
        """This snapshot moved to ``version`` by another connection's commits (``conn`` in a read transaction);
        loaded anew when they compacted the file."""
        if self.damage or self.path is not None and read_layout(conn, self.dim).gen != self.layout.gen:
            return VectorSnapshot.load(conn, index_dir, self.dim, version)  # (damaged: repaired meanwhile?)
        added = read_rowids(conn, "SELECT rowid FROM chunks WHERE rowid > ?", self.top)
        removed = read_rowids(conn, "SELECT rowid FROM tombstones WHERE version > ?", self.version)
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

    @functools.cached_property
    def float_rows(self) -> np.ndarray:
        """The float32 rows as a plain array over the same memory (indexing a memmap costs more than a product of
        a few thousand rows)."""
        return np.asarray(self.matrix[: self.rows]).view(np.ndarray)

    @functools.cached_property
    def code_rows(self) -> np.ndarray:
        """The rows' int8 codes as a plain array over the same memory (only with ``codes``)."""
        assert self.codes is not None
        return np.asarray(self.codes[: self.rows]).view(np.ndarray)

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
        self, unit: np.ndarray, top_k: int, mask: np.ndarray | None, *, screen: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(rowids, scores)`` of the ``top_k`` best live rows (``mask``: rows allowed by filters) for the unit
        vector ``unit``, unordered. ``screen``: rank every row by its int8 code first (numkong; its best rows, and
        those tied with the last, in file order) and score only the best ``RESCORE`` × ``top_k`` in float32
        (without codes or numkong: every row in float32)."""
        allowed = self.live if mask is None else self.live & mask[: self.rows]
        n = self.live_count if mask is None else int(allowed.sum())
        if top_k < 1 or n == 0:
            return np.empty(0, np.int64), np.empty(0, np.float32)
        k = min(top_k, n)
        rows: np.ndarray | None = None
        if screen and self.codes is not None and numkong() is not None:
            query = quantise(unit)[None, :]
            coarse = np.asarray(numkong().cdist(query, self.code_rows, metric="dot", out_dtype="float32"))[0]
            if n < self.rows:
                coarse[~allowed] = -np.inf
            rows = best(coarse, min(n, max(RESCORE * k, RESCORE_MIN)))
            scores = dot_rows(self.gather(rows), unit)
        else:
            scores = dot_rows(self.float_rows, unit)
            if n < self.rows:
                scores[~allowed] = -np.inf
        top = best(scores, k)
        top = top[np.isfinite(scores[top])]
        return rowids_of(self.layout, self.ids, top if rows is None else rows[top]), scores[top]

    def gather(self, rows: np.ndarray) -> np.ndarray:
        """The float32 ``rows`` (ascending), read with ``pread`` from ``PREAD_FROM_BYTES`` on: the scattered pages
        then stay in the page cache, not in this process's resident memory (fault-around would map the whole file)."""
        if self.path is None or rows.size == 0 or self.rows * self.dim * 4 < PREAD_FROM_BYTES:
            return self.float_rows.take(rows, axis=0)
        size = self.dim * 4
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:  # deleted by a compaction: this snapshot's mapping still holds it
            return self.float_rows.take(rows, axis=0)
        try:
            out, got = _read_rows(fd, rows, size)
        finally:
            os.close(fd)
        if got != rows.size * size:
            return self.float_rows.take(rows, axis=0)
        return out.view("<f4").reshape(rows.size, self.dim)


def dot_rows(rows: np.ndarray, unit: np.ndarray) -> np.ndarray:
    """Each row's cosine with ``unit``, row by row (a score never depends on the rows beside it; no BLAS threads)."""
    scores: np.ndarray = np.vecdot(rows, unit)
    return scores


def _read_rows(fd: int, rows: np.ndarray, size: int) -> tuple[np.ndarray, int]:
    """Rows of ``size`` bytes at ``rows`` of the file ``fd``, read into one buffer, and how many bytes were read."""
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


def map_codes(index_dir: Path, layout: Layout, rows: int) -> np.ndarray | None:
    """The layout's int8 codes mapped (verified with the rows), or None when there are no rows."""
    path = layout.codes_path(index_dir)
    return np.memmap(path, dtype=np.int8, mode="r", shape=(rows, layout.dim)) if rows else None


COMPACT_DEAD_FRACTION = 0.25  # a write leaving more of the file's rows dead compacts it
COMPACT_MIN_DEAD = 1000  # ... and at least this many: below it the waste is a few MB


class WrongDim(StoreError):
    """The stored vectors are not of the index's dim (its metadata was changed by hand)."""


@dataclass(frozen=True)
class CompactionReport:
    """What ``compact`` did: rows in the vector file before and after, bytes freed, how long it took, and how long
    of that it held the index's write lock (other writers wait)."""

    compacted: bool
    rows_before: int
    rows_after: int
    bytes_freed: int
    files_removed: int
    seconds: float
    locked_seconds: float = 0.0


class VectorIndex:
    """The dense part of ``SQLiteStore``: the snapshot of the vector file at the index's current version (loaded
    once, then moved forward), the rows a write appends, and compaction."""

    def __init__(self, index_dir: Path, mode: str, compact_dead_fraction: float) -> None:
        self.index_dir, self.mode, self.compact_dead_fraction = index_dir, mode, compact_dead_fraction
        self.snap: VectorSnapshot | None = None
        self._lock = threading.Lock()  # replacing the snapshot
        self._written: list[object] | None = None  # the files' stamp after this process's last write
        self._files: tuple[object, tuple[Path, ...]] = (None, ())

    def current(
        self, conn: sqlite3.Connection, version: int, forget: Callable[[], None], *, check: bool = True
    ) -> VectorSnapshot:
        """The snapshot at ``version`` (read on ``conn`` in one transaction when it moved); ``forget()`` is called
        when the index went back to an older version (another index's past: what rowids meant is void).
        ``check``: stat the files (``_same_files``; a search does it once, ``Database.once``)."""
        snap = self.snap
        if snap is not None and snap.version == version and (not check or self._same_files(snap)):
            return snap
        if snap is not None and snap.version == version and snap.top:  # only the files changed: a writer appended?
            with self._lock:
                conn.execute("BEGIN")
                try:
                    checked = self._checked(conn, snap)
                finally:
                    conn.execute("COMMIT")
                if checked is not None:
                    self.snap = checked
                    return checked
        with self._lock:
            try:
                snap = self._load(conn, forget, retried=False)
            except FileMoved:  # a compaction replaced the file as this transaction began: the next one sees it
                snap = self._load(conn, forget, retried=True)
            self.snap = snap
        return snap

    def _load(self, conn: sqlite3.Connection, forget: Callable[[], None], *, retried: bool) -> VectorSnapshot:
        conn.execute("BEGIN")  # one snapshot for the version, the rowids and the tombstones
        try:
            snap, version, dim = self.snap, version_of(conn), stored_dim(conn) or 0
            if snap is not None and snap.dim == dim and snap.top and not self._same_files(snap):
                snap = self._checked(conn, snap)
            if snap is None or snap.dim != dim or snap.version > version or snap.top == 0:
                if snap is not None and snap.version > version:
                    forget()
                snap = VectorSnapshot.load(conn, self.index_dir, dim, version, retried=retried)
            elif snap.version != version:
                snap = snap.refreshed(conn, self.index_dir, version)
            conn.execute("COMMIT")
        except ValueError as e:
            raise StoreError(
                f"{self.index_dir} holds vectors that are not {dim}-dimensional float32 ({e}): rebuild the index"
            ) from None
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        return snap

    def _checked(self, conn: sqlite3.Connection, snap: VectorSnapshot) -> VectorSnapshot | None:
        """``snap`` with its files' new stamp when they still hold its rows whole (``conn`` in a read transaction),
        None when they do not (loaded anew then: verified, or decoded from the BLOBs)."""
        stamp = stamp_of(self.index_dir, snap.layout)
        layout = read_layout(conn, snap.dim)
        if layout.gen != snap.layout.gen or verify(conn, self.index_dir, layout, layout.rows(top_rowid(conn))):
            return None
        return replace(snap, stamp=stamp)

    def _same_files(self, snap: VectorSnapshot) -> bool:
        """Whether the mapped files are as verified (a stat each): one truncated, rewritten or replaced since is
        verified again before a search reads it, and never read past its end."""
        if snap.stamp is None:
            return True
        files = self._files  # (the paths of its files, built once)
        if files[0] != snap.layout:
            files = self._files = (snap.layout, snap.layout.files(self.index_dir))
        return snap.stamp == [snap.layout.gen, snap.layout.dim, *map(stat_of, files[1])]

    def screens(self, snap: VectorSnapshot) -> bool:
        """Whether dense search ranks by the int8 codes first (``store.dense_search``)."""
        return self.mode == "int8" or self.mode == "auto" and snap.rows >= SCREEN_FROM

    def write(self, conn: sqlite3.Connection, dim: int, first_rowid: int, unit: np.ndarray) -> None:
        """Append a document's unit rows from ``first_rowid`` on (inside its transaction, before it commits)."""
        layout = layout_for_write(conn, self.index_dir, dim, first_rowid)
        try:
            self._written = write_rows(conn, layout, self.index_dir, layout.first_row(first_rowid), unit)
        except OSError as e:
            raise StoreError(
                f"cannot write vectors to {layout.path(self.index_dir)}: {e.strerror}; free disk space or fix permissions"
            ) from e

    def committed(self, old_version: int, dim: int | None, added: np.ndarray, removed: np.ndarray) -> None:
        """Move the snapshot to the committed version if it was current (else the next search catches up)."""
        with self._lock:
            snap = self.snap
            if snap is None or snap.version != old_version or snap.path is None:
                return
            if dim is not None and dim != snap.dim or added.size and int(added[0]) <= snap.layout.base:
                self.snap = None
                return
            top = max(snap.top, int(added.max()) if added.size else 0)
            stamp = self._written if added.size else snap.stamp  # files not whole before the write: verified again
            self.snap = replace(snap.changed(old_version + 1, top, None, added, removed), stamp=stamp or [])

    def compact(self, db: Database, *, min_dead_fraction: float = 0.0) -> CompactionReport:
        """Reclaim the vector-file rows of deleted chunks when more than ``min_dead_fraction`` of the rows are
        dead (0: whenever any is), and delete vector files of older generations and other dims. A file that is
        missing or does not match the stored vectors is rewritten from them. Safe against ``kill -9``.

        The live rows are copied without holding the index's write lock (other processes keep writing); the
        lock is taken only to copy the rows written meanwhile and record the new generation."""
        t0 = time.perf_counter()
        with db.lock:
            plan = self._plan(db, min_dead_fraction)
            new = self._copy_live(plan, plan.source) if plan is not None and plan.source is not None else None
            done = None
            locked = time.perf_counter()
            try:
                with db.write() as conn:
                    done = self._finish(conn, plan, new) if plan is not None else None
                    keep = done[1] if done is not None else _layout(conn)
                    # under the write lock, so no other writer's uncommitted generation is among them
                    removed = remove_stale_files(self.index_dir, keep, done[0] if done is not None else None)
            finally:
                if new is not None and done is None:
                    new.discard()
            locked = time.perf_counter() - locked
            if done is not None:  # committed: the old generation is no one's now
                removed += unlink_all(done[0].files(self.index_dir))
        if done is None:
            return CompactionReport(False, 0, 0, 0, len(removed), time.perf_counter() - t0, locked)
        old, layout, snap = done
        with self._lock:
            self.snap = snap
        rows_before, rows_after = old.rows(snap.top), layout.rows(snap.top)
        freed = (rows_before - rows_after) * layout.dim * 4
        return CompactionReport(True, rows_before, rows_after, freed, len(removed), time.perf_counter() - t0, locked)

    def _plan(self, db: Database, min_dead_fraction: float) -> _Plan | None:
        """What a compaction would copy (read in one transaction), or None when nothing needs it."""
        with db.snapshot() as conn:
            dim, top = stored_dim(conn), top_rowid(conn)
            if not dim or not top:
                return None
            old = read_layout(conn, dim)
            try:
                ids = load_ids(self.index_dir, old)
                intact = verify(conn, self.index_dir, old, old.rows(top)) is None
            except (OSError, ValueError):
                ids, intact = np.empty(0, np.int64), False
            rows = old.rows(top)
            if intact and (old.dead == 0 or old.dead <= min_dead_fraction * rows):
                return None
            live = read_rowids(conn, "SELECT rowid FROM chunks ORDER BY rowid")
        source = _map(old.path(self.index_dir), dim, rows) if intact and rows else None
        return _Plan(old, ids, top, live, source)

    def _copy_live(self, plan: _Plan, source: np.ndarray) -> NewGeneration:
        try:
            new = NewGeneration(self.index_dir, plan.old, plan.top, plan.live)
            new.append(stored_rows(plan.old, source, plan.ids, plan.live))
            new.sync()
        except OSError as e:
            raise StoreError(
                f"cannot compact the vectors of {self.index_dir}: {e}; free disk space or fix permissions"
            ) from e
        return new

    def _finish(
        self, conn: sqlite3.Connection, plan: _Plan, new: NewGeneration | None
    ) -> tuple[Layout, Layout, VectorSnapshot] | None:
        """Inside the write transaction: complete and record the new generation (None: another process changed
        the layout meanwhile, so this copy is void)."""
        old = _layout(conn)
        if old is None or (old.dim, old.gen) != (plan.old.dim, plan.old.gen) or new is not None and not new.intact():
            return None
        top = top_rowid(conn)
        live = read_rowids(conn, "SELECT rowid FROM chunks ORDER BY rowid")
        try:
            if new is None:  # no usable file: every live row from the BLOBs, under the lock
                new = NewGeneration(self.index_dir, old, top, live)
                new.append(rows for _, rows in blob_rows(conn, old.dim))
            elif top > plan.top:  # rows written since the copy, dead or alive: each keeps its place
                source = _map(old.path(self.index_dir), old.dim, old.rows(top))
                new.append(stored_rows(old, source, plan.ids, np.arange(plan.top + 1, top + 1)))
            new.commit(conn)
        except ValueError as e:  # BLOBs of another dim: dense search says so too
            raise WrongDim(
                f"{self.index_dir} holds vectors that are not {old.dim}-dimensional ({e}): rebuild the index"
            ) from None
        except OSError as e:
            raise StoreError(
                f"cannot compact the vectors of {self.index_dir}: {e}; free disk space or fix permissions"
            ) from e
        layout = replace(new.layout, dead=new.layout.rows(top) - int(live.size))
        save_layout(conn, layout)
        version = version_of(conn) + 1
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('index_version', ?)", (str(version),))
        snap = VectorSnapshot.mapped(
            self.index_dir, layout, new.ids, live, version, top, stamp_of(self.index_dir, layout)
        )
        return old, layout, snap

    def maybe_compact(self, db: Database) -> None:
        """After a write: compact when the file's dead rows passed ``compact_dead_fraction`` (and 1,000)."""
        conn = db.conn
        if conn is None or self.compact_dead_fraction >= 1:
            return
        layout = _layout(conn)
        if layout is None or layout.dead < COMPACT_MIN_DEAD:
            return
        if layout.dead <= self.compact_dead_fraction * layout.rows(top_rowid(conn)):
            return
        try:  # the write has committed: a failed compaction is only logged (the next write tries again)
            report = self.compact(db, min_dead_fraction=self.compact_dead_fraction)
        except StoreError as e:
            log.warning("could not compact the vectors of %s: %s", self.index_dir, e)
            return
        log.info("compacted the vectors of %s: %s", self.index_dir, report)

    def check(self, db: Database, *, full: bool = False) -> None:
        """At a writable open: rewrite vector files that do not match their checksums (or have none: written by an
        older zhiku) from the BLOBs, record the stamp of files read whole, and delete files a forced rebuild or a
        killed compaction left behind. ``full``: read every block even when the stamp vouches for them."""
        damage = stamp = recorded = None
        with db.snapshot() as conn:  # one read transaction: the layout, its rows and their checksums agree
            layout = _layout(conn)
            if layout is not None:
                stamp, recorded = stamp_of(self.index_dir, layout), recorded_stamp(conn)
                try:
                    load_ids(self.index_dir, layout)
                    damage = verify(conn, self.index_dir, layout, layout.rows(top_rowid(conn)), full=full)
                except (OSError, ValueError) as e:
                    damage = str(e)
        if layout is not None and damage is None and recorded != stamp:
            with contextlib.suppress(IndexLocked), db.lock, db.write() as conn:
                if stamp_of(self.index_dir, layout) == stamp:
                    save_stamp(conn, self.index_dir, layout)
        if damage is not None:
            log.warning("%s: rewriting it from the vectors stored in zhiku.db", damage)
            with db.lock, db.write() as conn:
                save_stamp(conn, self.index_dir, None)  # so that the compaction reads every block too
            with contextlib.suppress(WrongDim):  # the first dense search reports it
                self.compact(db, min_dead_fraction=1.0)
            return
        kept = () if layout is None else layout.files(self.index_dir)
        if any(p not in kept for p in vector_files(self.index_dir)):
            with contextlib.suppress(IndexLocked):  # another writer is busy (maybe compacting): the next open cleans up
                self.compact(db, min_dead_fraction=1.0)


@dataclass(frozen=True)
class _Plan:
    """A compaction's copy: the old layout (and its rowids file), the rowids of the live chunks up to ``top``,
    and the old file mapped (None: it is missing or damaged, so the rows come from the BLOBs)."""

    old: Layout
    ids: np.ndarray
    top: int
    live: np.ndarray
    source: np.ndarray | None


def _layout(conn: sqlite3.Connection) -> Layout | None:
    """The current layout, None when the index holds no vectors (no dim)."""
    dim = stored_dim(conn)
    return read_layout(conn, dim) if dim else None


@functools.cache
def numkong() -> Any:
    """The numkong module (SIMD int8 dot products), or None when it is not installed."""
    try:
        return importlib.import_module("numkong")
    except ImportError:
        return None


def _map(path: Path, dim: int, rows: int) -> np.ndarray:
    return np.memmap(path, dtype="<f4", mode="r", shape=(rows, dim))
