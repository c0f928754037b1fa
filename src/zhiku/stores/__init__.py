"""Storage backends behind the ``Store`` protocol; ``open_store`` picks one from the settings."""

from __future__ import annotations

import sqlite3
from contextlib import suppress
from pathlib import Path

from zhiku.errors import ConfigError, InvalidInput, StoreError
from zhiku.settings import Settings
from zhiku.stores._vector_files import UNCHECKED
from zhiku.stores._vector_files import damage as index_damage
from zhiku.stores.base import Catalogue, IndexAdmin, Retriever, Store, Writer
from zhiku.stores.sqlite import DB_NAME, CompactionReport, IndexNotFound, SQLiteStore

BUSY_TIMEOUT_S = 5.0  # how long a writer waits for another one before `IndexLocked`: an ingest, not a deadlock


def open_store(settings: Settings, *, read_only: bool = False) -> Store:
    """The index of ``settings.store.kind``; ``read_only``: a missing index raises ``IndexNotFound``, writes
    ``ReadOnlyIndex``."""
    kind = settings.store.kind
    if kind == "sqlite":
        return SQLiteStore(
            settings.index, read_only=read_only, busy_timeout_s=BUSY_TIMEOUT_S, dense_search=settings.store.dense_search
        )
    if kind == "milvus":
        from zhiku.stores.milvus import MilvusStore

        store = MilvusStore(settings.store, read_only=read_only)
        with suppress(OSError):  # the local directory still holds traces and extracted images
            settings.index.mkdir(parents=True, exist_ok=True)
        return store
    raise ConfigError(f"unknown store.kind {kind!r}: use 'sqlite' or 'milvus'")


def _embedded(settings: Settings, what: str) -> Path:
    if settings.store.kind != "sqlite":
        raise InvalidInput(f"only the embedded (sqlite) store has files to {what}, not {settings.store.kind!r}")
    if not (settings.index / DB_NAME).is_file():
        raise IndexNotFound(f"no index at {settings.index}: run `zhiku ingest PATH --index {settings.index}` first")
    return settings.index


def compact_index(settings: Settings) -> CompactionReport:
    """Reclaim the embedded index's vector-file rows of deleted chunks now (``zhiku compact``)."""
    with SQLiteStore(_embedded(settings, "compact"), busy_timeout_s=BUSY_TIMEOUT_S) as store:
        return store.compact()


class TablesDamaged(StoreError): ...  # what is intact is the documents' files: zhiku.api.repair_index ingests them


def readable_documents(index: Path) -> list[tuple[str, str, str]]:
    """``(collection, source, path)`` of each row of a damaged zhiku.db's documents that still reads."""
    conn, out, rowid, misses = sqlite3.connect(f"file:{index / DB_NAME}?mode=ro", uri=True), [], 0, 0
    sql = "SELECT rowid, collection, source, path FROM documents WHERE rowid > ? ORDER BY rowid LIMIT 1"
    while misses < 1_000:  # a damaged page raises for its rows: step past them one rowid at a time
        try:
            if (row := conn.execute(sql, (rowid,)).fetchone()) is None:
                break
            rowid, misses = row[0], 0
            out.append(row[1:])
        except sqlite3.DatabaseError:
            rowid, misses = rowid + 1, misses + 1
    conn.close()
    return out


def repair_files(settings: Settings) -> list[str]:
    """Rebuild zhiku.db's indexes and the vector files from what is intact; returns what it repaired."""
    index, done = _embedded(settings, "repair"), []
    db = str(index / DB_NAME)
    found = index_damage(index)
    if found is not None and found.startswith(db):
        conn = sqlite3.connect(db)
        with suppress(sqlite3.DatabaseError):
            conn.execute("REINDEX")
        conn.close()
        if (left := index_damage(index)) is not None and left.startswith(db):
            raise TablesDamaged(f"{left}; its indexes rebuilt, not its tables: move {index} away and ingest the "
                                f"documents again (`zhiku ingest PATH --index {index}`)")  # fmt: skip
        done.append(f"{found}: its indexes rebuilt")
        found = index_damage(index)
    with SQLiteStore(index, busy_timeout_s=BUSY_TIMEOUT_S) as store:  # a writable open rewrites damaged vectors
        store.vectors.check(store.db, full=True)
    if found is not None:
        done.append(f"{found}: rewritten from the vectors stored in {DB_NAME}")
    if (left := index_damage(index)) is not None:
        raise StoreError(f"{left} (after the repair): move {index} away and ingest the documents again")
    return done


__all__ = ["Catalogue", "CompactionReport", "compact_index", "UNCHECKED", "index_damage", "repair_files"]
__all__ += ["IndexAdmin", "IndexNotFound", "Retriever", "SQLiteStore", "Store", "Writer", "open_store"]
