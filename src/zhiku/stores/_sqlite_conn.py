"""The SQLite file of an index (``Database``): opening, schema creation and upgrades, error translation, one
write connection (one transaction at a time) and a pool of read connections that lets searches run side by side
(WAL: readers never wait for each other or for the writer, and each sees only committed transactions)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import numpy as np

from zhiku.errors import IndexLocked, IndexMismatch, IndexNotFound, ReadOnlyIndex, StoreError
from zhiku.stores._sqlite_schema import DB_NAME, MIGRATIONS, SCHEMA, SCHEMA_VERSION, SUMS_TABLE

MAX_IDLE = 16  # idle read connections kept


def translate(e: sqlite3.Error, index_dir: Path) -> StoreError:
    """A ``sqlite3`` error as the ``StoreError`` that says what to do."""
    path = index_dir / DB_NAME
    code = getattr(e, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    text = str(e).lower()
    if primary in (5, 6) or "locked" in text or "busy" in text:
        return IndexLocked(f"index {index_dir} is locked by another writer; wait for it to finish and try again")
    if primary == 8 or "readonly" in text:
        return ReadOnlyIndex(
            f"index {index_dir} is read-only: {path} or its directory is not writable; fix the permissions or choose another --index"
        )
    if primary == 11 or "malformed" in text:
        return StoreError(f"{path} is damaged ({e}): `zhiku repair --index {index_dir}` rebuilds what it can")
    if primary == 26 or "not a database" in text:
        return StoreError(f"{path} is not a usable zhiku index ({e}): move it away or choose another --index")
    return StoreError(f"index {path}: {e}")


def connect(index_dir: Path, *, read_only: bool, busy_timeout_s: float, query_only: bool = False) -> sqlite3.Connection:
    """A connection to ``index_dir/zhiku.db`` (created when writable); errors already translated."""
    path = index_dir / DB_NAME
    if read_only:
        if not path.is_file():
            raise IndexNotFound(f"no index at {index_dir}: run `zhiku ingest PATH --index {index_dir}` first")
        target, uri = path.resolve().as_uri() + "?mode=ro", True
    else:
        try:
            index_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create index directory {index_dir}: {e.strerror}; choose another --index") from e
        target, uri = str(path), False
    try:
        conn = sqlite3.connect(target, uri=uri, timeout=busy_timeout_s, check_same_thread=False, isolation_level=None)
    except sqlite3.Error as e:
        raise translate(e, index_dir) from e
    try:
        if not read_only:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        if query_only:
            conn.execute("PRAGMA query_only=1")
    except sqlite3.Error as e:
        conn.close()
        raise translate(e, index_dir) from e
    return conn


def init_schema(conn: sqlite3.Connection, index_dir: Path, *, read_only: bool) -> None:
    """Create the schema of a new index, or upgrade an older one in place; refuse a newer one."""
    path = index_dir / DB_NAME
    tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "meta" not in tables:
        if tables:
            raise StoreError(
                f"{path} is a SQLite database but not a zhiku index: move it away or choose another --index"
            )
        if read_only:
            raise IndexNotFound(
                f"no index at {index_dir} (empty {DB_NAME}): run `zhiku ingest PATH --index {index_dir}` first"
            )
        conn.executescript(
            f"BEGIN IMMEDIATE; {SCHEMA} INSERT OR IGNORE INTO meta VALUES ('schema_version', '{SCHEMA_VERSION}');"
            " INSERT OR IGNORE INTO meta VALUES ('index_version', '0');"
            " INSERT OR IGNORE INTO meta VALUES ('index_id', lower(hex(randomblob(16)))); COMMIT;"
        )
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is not None and int(row[0]) > SCHEMA_VERSION:
        raise IndexMismatch(
            f"index {index_dir} has schema version {row[0]}, newer than this zhiku supports ({SCHEMA_VERSION}): upgrade zhiku"
        )
    if row is not None and int(row[0]) < SCHEMA_VERSION:
        _migrate(conn, index_dir, int(row[0]), read_only=read_only)
    if not read_only and "vector_sums" not in tables:
        conn.execute(SUMS_TABLE)


def _migrate(conn: sqlite3.Connection, index_dir: Path, version: int, *, read_only: bool) -> None:
    """Upgrade an index written by an older zhiku in place (new columns and tables with defaults; data kept)."""
    if read_only or version not in MIGRATIONS:
        how = (
            f"open it for writing once (any `zhiku ingest PATH --index {index_dir}` upgrades it in place and keeps its contents)"
            if version in MIGRATIONS
            else "rebuild it: `zhiku ingest PATH --index NEW_DIR`"
        )
        raise IndexMismatch(
            f"index {index_dir} has schema version {version}, older than this zhiku's ({SCHEMA_VERSION}): {how}"
        )
    script = "".join(MIGRATIONS[v] for v in range(version, SCHEMA_VERSION))
    conn.executescript(
        f"BEGIN IMMEDIATE; {script} UPDATE meta SET value = '{SCHEMA_VERSION}' WHERE key = 'schema_version'; COMMIT;"
    )


class Database:
    """``write()`` transactions on one connection (``lock`` held), ``read()`` on pooled ones, ``pinned()`` reads."""

    def __init__(self, index_dir: Path, *, read_only: bool, busy_timeout_s: float) -> None:
        self.index_dir, self.read_only, self.busy_timeout_s = index_dir, read_only, busy_timeout_s
        self.lock = threading.RLock()  # the write connection
        self._pins = Pins()
        self._idle: list[sqlite3.Connection] = []  # read connections, one per concurrent reader at most
        self._idle_lock = threading.Lock()
        self.conn: sqlite3.Connection | None = connect(index_dir, read_only=read_only, busy_timeout_s=busy_timeout_s)
        self._file = index_dir / DB_NAME
        self.identity = file_identity(self._file)
        try:
            init_schema(self.conn, index_dir, read_only=read_only)
        except sqlite3.Error as e:
            self.close()
            raise translate(e, index_dir) from e
        except BaseException:
            self.close()
            raise

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A pooled read connection (``PRAGMA query_only``; no lock shared with other readers), errors translated."""
        if self.once("db"):
            self.check_identity()
        with self._idle_lock:
            self.open_conn()
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = connect(
                self.index_dir, read_only=self.read_only, busy_timeout_s=self.busy_timeout_s, query_only=True
            )
        try:
            yield conn
        except sqlite3.Error as e:
            raise translate(e, self.index_dir) from e
        finally:
            if conn.in_transaction:
                with suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            with self._idle_lock:
                keep = self.conn is not None and len(self._idle) < MAX_IDLE
                if keep:
                    self._idle.append(conn)
            if not keep:
                conn.close()

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: committed on success, rolled back on any exception."""
        with self.lock:
            conn = self.open_conn()
            if self.read_only:
                raise ReadOnlyIndex(
                    f"index {self.index_dir} is read-only (opened with read_only=True); open it for writing to change it"
                )
            self.check_identity()
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

    def open_conn(self) -> sqlite3.Connection:
        """The write connection; raises ``StoreError`` once the index is closed."""
        if self.conn is None:
            raise StoreError(f"index {self.index_dir} is closed")
        return self.conn

    def check_identity(self) -> None:
        """Refuse an index whose ``zhiku.db`` was replaced since opened: the connections would read the old file."""
        if file_identity(self._file) != self.identity:
            raise StoreError(
                f"index {self.index_dir} was deleted or replaced while open: restart to serve what is there now"
            )

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """The write connection inside one read transaction (``lock`` held): the writer's own consistent view."""
        with self.lock:
            conn = self.open_conn()
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                with suppress(sqlite3.Error):
                    conn.execute("COMMIT")

    @contextmanager
    def pinned(self) -> Iterator[None]:
        """The reads on this thread inside it see one index version: the first read's, or the one a snapshot
        moved to (nested: the outer one's)."""
        pins = self._pins
        if pins.on:
            yield
            return
        pins.on, pins.version, pins.checked = True, None, set()
        try:
            yield
        finally:
            pins.on, pins.version = False, None

    def once(self, what: str) -> bool:
        """Whether this read checks ``what``'s files (a stat each): every read outside a pinned search, the first of
        a pinned one (the files as the search begins are the files its reads see)."""
        pins = self._pins
        if not pins.on:
            return True
        if what in pins.checked:
            return False
        pins.checked.add(what)
        return True

    def version(self, conn: sqlite3.Connection) -> int:
        """The index version for this thread's read: the pinned one inside ``pinned``."""
        pins = self._pins
        if not pins.on:
            return version_of(conn)
        if pins.version is None:
            pins.version = version_of(conn)
        return pins.version

    def moved_to(self, version: int) -> None:
        if self._pins.on:
            self._pins.version = version

    def close(self) -> None:
        with self.lock:
            with self._idle_lock:
                conns, self._idle = [self.conn, *self._idle], []
                self.conn = None
            for conn in conns:
                if conn is not None:
                    with suppress(sqlite3.Error):
                        conn.close()


class Pins(threading.local):
    on: bool = False
    version: int | None = None
    checked: set[str]  # the files checked (``Database.once``)


def file_identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def version_of(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = 'index_version'").fetchone()
    return int(row[0]) if row else 0


def stored_dim(conn: sqlite3.Connection) -> int | None:
    """The index's vector dimension: meta ``dim`` (blank counts as unset), else that of a stored vector."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'dim'").fetchone()
    if row and row[0].strip().isdigit() and int(row[0]) > 0:
        return int(row[0])
    row = conn.execute("SELECT length(vector) / 4 FROM chunks WHERE length(vector) > 0 LIMIT 1").fetchone()
    return int(row[0]) if row else None


def read_rowids(conn: sqlite3.Connection, sql: str, *args: object) -> np.ndarray:
    """The first column of ``sql``'s rows (rowids) as int64."""
    return np.fromiter((r for (r,) in conn.execute(sql, args)), dtype=np.int64)


def top_rowid(conn: sqlite3.Connection) -> int:
    """The highest rowid ever given to a chunk (live or deleted)."""
    row = conn.execute(
        "SELECT MAX(COALESCE((SELECT MAX(rowid) FROM chunks), 0), COALESCE((SELECT MAX(rowid) FROM tombstones), 0))"
    ).fetchone()
    return int(row[0])
