"""Compaction of the SQLite store's vector file: the rows of deleted chunks are reclaimed by writing the live rows
into the next generation's file and pointing ``meta.vector_layout`` at it in one transaction (``_vector_files``).

The live rows are copied into temporary files without the index's write lock (other processes keep writing);
under the lock the rows written meanwhile are appended, the files named, and the layout recorded.
Crash safety: the new files are written and synced before the transaction that records them commits, and the
old ones are deleted only after it; a ``kill -9`` at any moment leaves the old generation (the commit did not
happen) or the new one (it did), and the files of the other are deleted at the next compaction or writable open.
Readers keep the snapshot they have (its file stays mapped after it is deleted); another process sees the new
``index_version`` and maps the new file.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from zhiku.errors import IndexLocked, StoreError
from zhiku.stores._sqlite_conn import Database, stored_dim, version_of
from zhiku.stores._vector_files import (
    Layout,
    NewGeneration,
    load_ids,
    read_layout,
    remove_files,
    remove_stale_files,
    rows_of,
    save_layout,
    stored_rows,
    top_rowid,
    vector_files,
    write_codes,
)
from zhiku.stores._vectors import VectorSnapshot, file_matches, map_codes

log = logging.getLogger(__name__)

COMPACT_DEAD_FRACTION = 0.25  # a write leaving more of the file's rows dead compacts it (bench/RESULTS.md, Issue 13)
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


class SQLiteCompaction:
    """``compact`` and the vector-file checks at open; the store provides the connections and attributes."""

    index_dir: Path
    compact_dead_fraction: float
    db: Database
    _vec_lock: threading.Lock
    _snap: VectorSnapshot | None

    def compact(self, *, min_dead_fraction: float = 0.0) -> CompactionReport:
        """Reclaim the vector-file rows of deleted chunks when more than ``min_dead_fraction`` of the rows are
        dead (0: whenever any is), and delete vector files of older generations and other dims. A file that is
        missing or does not match the stored vectors is rewritten from them. Safe against ``kill -9``.

        The live rows are copied without holding the index's write lock (other processes keep writing); the
        lock is taken only to copy the rows written meanwhile and record the new generation."""
        t0 = time.perf_counter()
        with self.db.lock:
            plan = self._plan(min_dead_fraction)
            new = self._copy_live(plan) if plan is not None and plan.source is not None else None
            done = None
            locked = time.perf_counter()
            try:
                with self.db.write() as conn:
                    done = self._finish(conn, plan, new) if plan is not None else None
                    keep = done[1] if done is not None else _layout(conn)
                    # under the write lock, so no other writer's uncommitted generation is among them
                    removed = remove_stale_files(self.index_dir, keep, done[0] if done is not None else None)
            finally:
                if new is not None and done is None:
                    new.discard()
            locked = time.perf_counter() - locked
            if done is not None:  # committed: the old generation is no one's now
                removed += remove_files(self.index_dir, done[0])
        if done is None:
            return CompactionReport(False, 0, 0, 0, len(removed), time.perf_counter() - t0, locked)
        old, layout, snap = done
        with self._vec_lock:
            self._snap = snap
        rows_before, rows_after = old.rows(snap.top), layout.rows(snap.top)
        freed = (rows_before - rows_after) * layout.dim * 4
        return CompactionReport(True, rows_before, rows_after, freed, len(removed), time.perf_counter() - t0, locked)

    def _plan(self, min_dead_fraction: float) -> _Plan | None:
        """What a compaction would copy (read in one transaction), or None when nothing needs it."""
        conn = self.db.conn
        assert conn is not None
        conn.execute("BEGIN")
        try:
            dim, top = stored_dim(conn), top_rowid(conn)
            if not dim or not top:
                return None
            old = read_layout(conn, dim)
            try:
                ids = load_ids(self.index_dir, old)
                intact = file_matches(conn, self.index_dir, old, ids, top)
            except (OSError, ValueError):
                ids, intact = np.empty(0, np.int64), False
            rows = old.rows(top)
            if intact and (old.dead == 0 or old.dead <= min_dead_fraction * rows):
                return None
            live = np.fromiter((r for (r,) in conn.execute("SELECT rowid FROM chunks ORDER BY rowid")), np.int64)
        finally:
            conn.execute("COMMIT")
        source = np.memmap(old.path(self.index_dir), "<f4", "r", shape=(rows, dim)) if intact and rows else None
        return _Plan(old, ids, top, live, source)

    def _copy_live(self, plan: _Plan) -> NewGeneration:
        try:
            new = NewGeneration(self.index_dir, plan.old, plan.top, plan.live)
            new.append(stored_rows(None, plan.old, plan.source, plan.ids, plan.live))
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
        dim = stored_dim(conn)
        old = read_layout(conn, dim) if dim else None
        if old is None or (old.dim, old.gen) != (plan.old.dim, plan.old.gen) or new is not None and not new.intact():
            return None
        top = top_rowid(conn)
        try:
            if new is None:  # no usable file: every live row from the BLOBs, under the lock
                live = np.fromiter((r for (r,) in conn.execute("SELECT rowid FROM chunks ORDER BY rowid")), np.int64)
                new = NewGeneration(self.index_dir, old, top, live)
                new.append(stored_rows(conn, old, None, plan.ids, live))
            elif top > plan.top:  # rows written since the copy, dead or alive: each keeps its place
                source = np.memmap(old.path(self.index_dir), "<f4", "r", shape=(old.rows(top), old.dim))
                new.append(stored_rows(None, old, source, plan.ids, np.arange(plan.top + 1, top + 1)))
            new.commit()
        except ValueError as e:  # BLOBs of another dim: dense search says so too
            raise WrongDim(
                f"{self.index_dir} holds vectors that are not {dim}-dimensional ({e}): rebuild the index"
            ) from None
        except OSError as e:
            raise StoreError(
                f"cannot compact the vectors of {self.index_dir}: {e}; free disk space or fix permissions"
            ) from e
        live = np.fromiter((r for (r,) in conn.execute("SELECT rowid FROM chunks ORDER BY rowid")), np.int64)
        layout = replace(new.layout, dead=new.layout.rows(top) - int(live.size))
        save_layout(conn, layout)
        version = version_of(conn) + 1
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('index_version', ?)", (str(version),))
        return old, layout, _snapshot(self.index_dir, layout, new.ids, live, version, top)

    def _maybe_compact(self) -> None:
        """After a write: compact when the file's dead rows passed ``compact_dead_fraction`` (and 1,000)."""
        if self.db.conn is None or self.compact_dead_fraction >= 1:
            return
        dim = stored_dim(self.db.conn)
        if not dim:
            return
        layout = read_layout(self.db.conn, dim)
        if layout.dead < COMPACT_MIN_DEAD or layout.dead <= self.compact_dead_fraction * layout.rows(
            top_rowid(self.db.conn)
        ):
            return
        try:  # the write has committed: a failed compaction is only logged (the next write tries again)
            report = self.compact(min_dead_fraction=self.compact_dead_fraction)
        except StoreError as e:
            log.warning("could not compact the vectors of %s: %s", self.index_dir, e)
            return
        log.info("compacted the vectors of %s: %s", self.index_dir, report)

    def _check_vector_file(self) -> None:
        """At a writable open: rewrite a missing or damaged vector file from the BLOBs (e.g. an index from an
        older zhiku), and delete files a forced rebuild or a killed compaction left behind."""
        assert self.db.conn is not None
        layout = _layout(self.db.conn)
        if not self._file_intact(self.db.conn, layout):
            with suppress(WrongDim):  # the first dense search reports it
                self.compact(min_dead_fraction=1.0)
            return
        if layout is not None and not self._codes_intact(self.db.conn, layout):
            with self.db.lock, self.db.write() as conn:  # an index written before the int8 codes existed
                layout = _layout(conn)
                if layout is not None and not self._codes_intact(conn, layout):
                    rows = layout.rows(top_rowid(conn))
                    write_codes(
                        layout,
                        self.index_dir,
                        np.memmap(layout.path(self.index_dir), "<f4", "r", shape=(rows, layout.dim)),
                    )
        kept = () if layout is None else layout.files(self.index_dir)
        if any(p not in kept for p in vector_files(self.index_dir)):
            with suppress(IndexLocked):  # another writer is busy (maybe compacting): the next open cleans up
                self.compact(min_dead_fraction=1.0)

    def _codes_intact(self, conn: sqlite3.Connection, layout: Layout) -> bool:
        rows = layout.rows(top_rowid(conn))
        if rows == 0:
            return True
        matrix = np.memmap(layout.path(self.index_dir), "<f4", "r", shape=(rows, layout.dim))
        return map_codes(self.index_dir, layout, rows, matrix, rows - 1) is not None

    def _file_intact(self, conn: sqlite3.Connection, layout: Layout | None) -> bool:
        top = top_rowid(conn)
        if layout is None or not top:
            return True
        with suppress(OSError, ValueError):
            return file_matches(conn, self.index_dir, layout, load_ids(self.index_dir, layout), top)
        return False


@dataclass(frozen=True)
class _Plan:
    """A compaction's copy: the old layout (and its rowids file), the rowids of the live chunks up to ``top``,
    and the old file mapped (None: it is missing or damaged, so the rows come from the BLOBs)."""

    old: Layout
    ids: np.ndarray
    top: int
    live: np.ndarray
    source: np.ndarray | None


def _snapshot(
    index_dir: Path, layout: Layout, ids: np.ndarray, live_ids: np.ndarray, version: int, top: int
) -> VectorSnapshot:
    """The snapshot of a generation just written (every file row mapped, ``live_ids`` live)."""
    rows = layout.rows(top)
    path = layout.path(index_dir)
    if rows == 0:
        return VectorSnapshot.empty(layout.dim, version)
    matrix = np.memmap(path, "<f4", "r", shape=(rows, layout.dim))
    live = np.zeros(rows, bool)
    live[rows_of(layout, ids, live_ids)] = True
    codes = map_codes(index_dir, layout, rows)
    return VectorSnapshot(layout.dim, version, top, matrix, live, int(live.sum()), path, layout, ids, codes)


def _layout(conn: sqlite3.Connection) -> Layout | None:
    """The current layout, None when the index holds no vectors (no dim)."""
    dim = stored_dim(conn)
    return read_layout(conn, dim) if dim else None
