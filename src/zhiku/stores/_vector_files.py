"""The vector files beside ``zhiku.db``: where each chunk's row lives, writing them, and checking them.

A layout (meta ``vector_layout``; absent: generation 0, row ``rowid - 1``) names generation ``g``'s file
(``vectors.<dim>.f32``, ``vectors.<dim>.g<g>.f32`` after a compaction): its first ``count`` rows hold rowids
``ids`` (``.ids``, all ``<= base``), rowid ``r > base`` is at row ``count + r - base - 1``; ``.i8`` holds the
same rows' int8 codes. ``vector_sums`` holds the CRC-32 of each ``BLOCK`` rows of both files (block -1: the
ids), meta ``vector_stamp`` the files' stat when a writer last left them whole; damaged files are never served.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import zlib
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from zhiku.numeric import l2_normalise
from zhiku.stores._sqlite_conn import stored_dim, top_rowid
from zhiku.stores._sqlite_schema import DB_NAME

LAYOUT_KEY = "vector_layout"
STAMP_KEY = "vector_stamp"
_BATCH = 65536
BLOCK = 1024  # rows per checksummed block
UNCHECKED = "has no checksums"  # an index written by an older zhiku: not damage, but not served from the file


@dataclass(frozen=True)
class Layout:
    """``dead``: rows of chunks deleted since the file was written (what compaction would reclaim)."""

    dim: int
    gen: int = 0
    base: int = 0
    count: int = 0
    dead: int = 0

    def path(self, index_dir: Path) -> Path:
        return index_dir / (f"vectors.{self.dim}.f32" if self.gen == 0 else f"vectors.{self.dim}.g{self.gen}.f32")

    def ids_path(self, index_dir: Path) -> Path:
        return index_dir / f"vectors.{self.dim}.g{self.gen}.ids"

    def codes_path(self, index_dir: Path) -> Path:
        return self.path(index_dir).with_suffix(".i8")

    def files(self, index_dir: Path) -> tuple[Path, ...]:
        return self.path(index_dir), self.ids_path(index_dir), self.codes_path(index_dir)

    def rows(self, top: int) -> int:
        return self.count + max(top - self.base, 0)

    def first_row(self, first_rowid: int) -> int:
        if first_rowid <= self.base:
            raise ValueError(f"rowid {first_rowid} is not past the vector file's base {self.base}")
        return self.count + first_rowid - self.base - 1


def read_layout(conn: sqlite3.Connection, dim: int) -> Layout:
    """The recorded layout; generation 0 if none; an empty next generation if recorded for another dim."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (LAYOUT_KEY,)).fetchone()
    if row is None:
        return Layout(dim, dead=conn.execute("SELECT COUNT(*) FROM tombstones").fetchone()[0])
    layout = Layout(**json.loads(row[0]))
    return layout if layout.dim == dim else Layout(dim, gen=layout.gen + 1, base=top_rowid(conn))


def layout_for_write(conn: sqlite3.Connection, index_dir: Path, dim: int, first_rowid: int) -> Layout:
    """The layout new rows go into (inside the write transaction); a new dim starts a new generation."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (LAYOUT_KEY,)).fetchone()
    stored = Layout(**json.loads(row[0])) if row is not None else None
    if stored is not None and stored.dim == dim:
        return stored
    if stored is None and (first_rowid == 1 or Layout(dim).path(index_dir).is_file()):
        return read_layout(conn, dim)  # generation 0: a new index, or one never compacted
    layout = Layout(dim, gen=(stored.gen if stored is not None else 0) + 1, base=first_rowid - 1)
    save_layout(conn, layout)
    conn.execute("DELETE FROM vector_sums")
    remove_stale_files(index_dir, layout)  # the old dim's files: under the write lock, no other writer's
    return layout


def save_layout(conn: sqlite3.Connection, layout: Layout) -> None:
    conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (LAYOUT_KEY, json.dumps(asdict(layout))))


def note_dead(conn: sqlite3.Connection, dim: int | None, rows: int) -> None:
    if rows and dim:
        layout = read_layout(conn, dim)
        save_layout(conn, replace(layout, dead=layout.dead + rows))


def load_ids(index_dir: Path, layout: Layout) -> np.ndarray:
    if layout.count == 0:
        return np.empty(0, np.int64)
    ids = np.fromfile(layout.ids_path(index_dir), dtype="<i8")
    if ids.size != layout.count:
        raise ValueError(f"{layout.ids_path(index_dir)} lists {ids.size} rowids, not {layout.count}")
    return ids


def quantise(unit: np.ndarray) -> np.ndarray:
    """``round(127 x)`` of unit vectors: code dot products are exact in float32 up to 1,040 dims."""
    return np.clip(np.rint(np.asarray(unit, np.float32) * 127), -127, 127).astype(np.int8)


def write_rows(
    conn: sqlite3.Connection, layout: Layout, index_dir: Path, first_row: int, unit: np.ndarray
) -> list[object] | None:
    """Write unit rows and their codes from ``first_row`` on, their checksums into the transaction; returns the
    files' new stamp when they were whole before."""
    whole = first_row == 0 or recorded_stamp(conn) == stamp_of(index_dir, layout)
    whole = whole or verify(conn, index_dir, layout, first_row, full=True) is None
    unit, codes = np.ascontiguousarray(unit, "<f4"), quantise(unit)
    _pwrite(layout.path(index_dir), first_row * unit.shape[1] * 4, unit.tobytes())
    _pwrite(layout.codes_path(index_dir), first_row * unit.shape[1], codes.tobytes())
    covered, last = conn.execute(
        "SELECT COALESCE(SUM(rows), 0), MAX(block) FROM vector_sums WHERE gen = ? AND block >= 0", (layout.gen,)
    ).fetchone()
    if covered != first_row:  # rows before these have no checksums: the next writable open rewrites the files
        return None
    tail = conn.execute("SELECT rows, f32, i8 FROM vector_sums WHERE gen = ? AND block = ?", (layout.gen, last))
    sums = [list(row) for row in tail if row[0] < BLOCK]
    first = (-1 if last is None else last) + (0 if sums else 1)
    add_sums(sums, unit, codes)
    conn.executemany(
        "INSERT OR REPLACE INTO vector_sums VALUES (?, ?, ?, ?, ?)",
        [(layout.gen, first + i, *b) for i, b in enumerate(sums)],
    )
    return save_stamp(conn, index_dir, layout) if whole else None


def add_sums(blocks: list[list[int]], unit: np.ndarray, codes: np.ndarray) -> None:
    """Extend the running CRC-32s ``[rows, f32, i8]`` of each ``BLOCK`` rows of a rows file and its codes file."""
    at = 0
    while at < len(unit):
        if not blocks or blocks[-1][0] == BLOCK:
            blocks.append([0, 0, 0])
        block = blocks[-1]
        take = min(BLOCK - block[0], len(unit) - at)
        block[1] = zlib.crc32(unit[at : at + take].data, block[1])
        block[2] = zlib.crc32(codes[at : at + take].data, block[2])
        block[0] += take
        at += take


def stat_of(path: Path) -> list[int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def stamp_of(index_dir: Path, layout: Layout) -> list[object]:
    """The stat of the layout's files (ctime included: any rewrite changes it)."""
    return [layout.gen, layout.dim, *map(stat_of, layout.files(index_dir))]


def recorded_stamp(conn: sqlite3.Connection) -> object:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (STAMP_KEY,)).fetchone()
    return None if row is None else json.loads(row[0])


def save_stamp(conn: sqlite3.Connection, index_dir: Path, layout: Layout | None) -> list[object] | None:
    """Record the files as whole (None: forget the stamp: the next open reads every block)."""
    if layout is None:
        conn.execute("DELETE FROM meta WHERE key = ?", (STAMP_KEY,))
        return None
    stamp = stamp_of(index_dir, layout)
    conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (STAMP_KEY, json.dumps(stamp)))
    return stamp


def verify(conn: sqlite3.Connection, index_dir: Path, layout: Layout, rows: int, *, full: bool = False) -> str | None:
    """What is wrong with the first ``rows`` of the layout's files, naming the file; None when whole (trusted by
    their stamp unless ``full``)."""
    if rows == 0 or not full and recorded_stamp(conn) == stamp_of(index_dir, layout):
        return None
    try:
        sums = conn.execute(
            "SELECT block, rows, f32, i8 FROM vector_sums WHERE gen = ? ORDER BY block", (layout.gen,)
        ).fetchall()
    except sqlite3.OperationalError:  # no such table: an index no zhiku with checksums has written
        sums = []
    path, ids_path, codes_path = layout.files(index_dir)
    blocks = [s for s in sums if s[0] >= 0]
    if sum(s[1] for s in blocks) != rows or [s[0] for s in blocks] != list(range(len(blocks))):
        return f"{path} {UNCHECKED} for some rows (written by an older zhiku)"
    if layout.count and [(s[1], s[2]) for s in sums if s[0] == -1] != [(layout.count, _crc(ids_path))]:
        return f"{ids_path} is damaged: it does not match its checksum"
    for file, width, col in ((path, layout.dim * 4, 2), (codes_path, layout.dim, 3)):
        got = _block_crcs(file, width, rows)
        if got is None:
            return f"{file} is damaged: missing, or shorter than its {rows} rows"
        bad = sum(b != s[col] for b, s in zip(got, blocks, strict=True))
        if bad:
            return f"{file} is damaged: {bad} of {len(blocks)} blocks of {BLOCK} rows do not match their checksums"
    return None


def _crc(path: Path) -> int | None:
    try:
        return zlib.crc32(path.read_bytes())
    except OSError:
        return None


def _block_crcs(path: Path, width: int, rows: int) -> list[int] | None:
    """The CRC-32 of each ``BLOCK`` rows (None: short or unreadable), read (not mapped: no resident pages) by up
    to 4 threads (zlib lets go of the GIL)."""
    size, end = BLOCK * width, rows * width

    def crc(at: int) -> int | None:
        data = os.pread(fd, min(size, end - at), at)
        return zlib.crc32(data) if len(data) == min(size, end - at) else None

    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        with ThreadPoolExecutor(min(4, os.cpu_count() or 1)) as pool:
            out = list(pool.map(crc, range(0, end, size)))
    except OSError:
        return None
    finally:
        os.close(fd)
    crcs = [c for c in out if c is not None]
    return crcs if len(crcs) == len(out) else None


def _pwrite(path: Path, offset: int, data: bytes) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.pwrite(fd, view, offset)
            view, offset = view[written:], offset + written
    finally:
        os.close(fd)


def blob_rows(
    conn: sqlite3.Connection, dim: int, where: str = "", *args: object, batch: int = 8192
) -> Iterable[tuple[np.ndarray, np.ndarray]]:
    cursor = conn.execute(f"SELECT rowid, vector FROM chunks {where} ORDER BY rowid", args)
    while rows := cursor.fetchmany(batch):
        ids = np.fromiter((r for r, _ in rows), dtype=np.int64, count=len(rows))
        matrix = np.frombuffer(b"".join(v for _, v in rows), "<f4").reshape(len(rows), dim)
        yield ids, l2_normalise(matrix)


class NewGeneration:
    """The next generation's files, named ``*.tmp`` until ``commit`` (inside the transaction recording it)."""

    def __init__(self, index_dir: Path, old: Layout, base: int, ids: np.ndarray) -> None:
        self.layout = Layout(old.dim, gen=old.gen + 1, base=base, count=int(ids.size))
        self.ids = ids
        tag = f"{os.getpid()}-{threading.get_ident()}"
        self.index_dir = index_dir
        self.sums: list[list[int]] = []
        # (temporary, final) of rows, rowids, codes
        self.files = [(final.with_name(f"{final.name}.{tag}.tmp"), final) for final in self.layout.files(index_dir)]
        for (tmp, _), data in zip(self.files, (b"", ids.astype("<i8").tobytes(), b""), strict=True):
            tmp.write_bytes(data)

    def append(self, batches: Iterable[np.ndarray]) -> None:
        with open(self.files[0][0], "ab") as rows, open(self.files[2][0], "ab") as codes:
            for batch in batches:
                unit, code = np.ascontiguousarray(batch, "<f4"), quantise(batch)
                rows.write(unit.tobytes())
                codes.write(code.tobytes())
                add_sums(self.sums, unit, code)

    def sync(self) -> None:
        """Sync before taking the write lock, so that ``commit`` has little left to sync."""
        for tmp, _ in self.files:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())

    def commit(self, conn: sqlite3.Connection) -> None:
        self.sync()
        for tmp, final in self.files:
            os.replace(tmp, final)
        _sync_dir(self.index_dir)
        gen = self.layout.gen
        conn.execute("DELETE FROM vector_sums")
        conn.executemany(
            "INSERT INTO vector_sums VALUES (?, ?, ?, ?, ?)",
            [(gen, -1, self.layout.count, zlib.crc32(self.ids.astype("<i8").tobytes()), 0)]
            + [(gen, i, *b) for i, b in enumerate(self.sums)],
        )
        save_stamp(conn, self.index_dir, self.layout)

    def intact(self) -> bool:
        """Whether every temporary file is still there (a writable open tidies a dead process's)."""
        return all(tmp.is_file() for tmp, _ in self.files)

    def discard(self) -> None:
        for tmp, _ in self.files:
            with contextlib.suppress(OSError):
                tmp.unlink()


def stored_rows(layout: Layout, source: np.ndarray, ids: np.ndarray, rowids: np.ndarray) -> Iterable[np.ndarray]:
    """The unit rows of ``rowids`` in batches, from the mapped file ``source``."""
    for start in range(0, rowids.size, _BATCH):
        yield source[rows_of(layout, ids, rowids[start : start + _BATCH])]


def rows_of(layout: Layout, ids: np.ndarray, rowids: np.ndarray) -> np.ndarray:
    """File rows of ``rowids`` (-1 for a rowid the file does not hold: deleted before it was written)."""
    rowids = np.asarray(rowids, dtype=np.int64)
    rows = layout.count + rowids - layout.base - 1
    old = rowids <= layout.base
    if old.any():
        at = np.searchsorted(ids, rowids[old])
        found = at < ids.size
        found[found] = ids[at[found]] == rowids[old][found]
        rows[old] = np.where(found, at, -1)
    return rows


def rowids_of(layout: Layout, ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.int64)
    head = rows < layout.count
    out = rows - layout.count + layout.base + 1
    out[head] = ids[rows[head]]
    return out


def vector_files(index_dir: Path) -> list[Path]:
    """Every vector file in ``index_dir`` (leftovers and older zhiku's HNSW indexes included)."""
    patterns = ("vectors.*.f32", "vectors.*.i8", "vectors.*.ids", "vectors.*.hnsw", "vectors.*.tmp")
    return [p for pattern in patterns for p in index_dir.glob(pattern)]


def remove_stale_files(index_dir: Path, *keep: Layout | None) -> list[Path]:
    """Delete every vector file but ``keep``'s and a live compaction's ``<name>.<pid>-<thread>.tmp`` (write lock
    held: an uncommitted generation is never another writer's then)."""
    kept = {p for layout in keep if layout is not None for p in layout.files(index_dir)}
    return unlink_all(
        p
        for p in vector_files(index_dir)
        if p not in kept and not (p.suffix == ".tmp" and pid_alive(p.stem.rpartition(".")[2].partition("-")[0]))
    )


def pid_alive(pid: str) -> bool:
    """Whether the process ``pid`` (digits, as a temporary file names its writer) still runs."""
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists but is not ours to signal
        pass
    return True


def unlink_all(paths: Iterable[Path]) -> list[Path]:
    removed = []
    for path in paths:
        try:
            path.unlink()
        except OSError:  # e.g. still mapped on a platform that forbids it: the next cleanup retries
            continue
        removed.append(path)
    return removed


def _sync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def damage(index_dir: Path, *, quick: bool = False) -> str | None:
    """What is damaged in an index, starting with the file's path; None when all is whole: SQLite's integrity_check
    (``quick``: quick_check), then every vector block against its checksum (``quick``: unless the stamp vouches)."""
    path = index_dir / DB_NAME
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        lines = [r for (r,) in conn.execute(f"PRAGMA {'quick_check' if quick else 'integrity_check'}(3)")]
        if lines != ["ok"]:
            return f"{path} is damaged: {'; '.join(lines)}"
        conn.execute("BEGIN")
        dim = stored_dim(conn)
        layout = read_layout(conn, dim) if dim else None
        if layout is None:
            return None
        try:
            load_ids(index_dir, layout)
            return verify(conn, index_dir, layout, layout.rows(top_rowid(conn)), full=not quick)
        except (OSError, ValueError) as e:
            return str(e)
    except sqlite3.DatabaseError as e:
        return f"{path} is damaged: {e}"
    finally:
        conn.close()
