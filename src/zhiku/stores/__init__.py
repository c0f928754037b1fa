"""Storage backends behind the ``Store`` protocol; ``open_store`` picks one from the settings."""

from __future__ import annotations

from contextlib import suppress

from zhiku.errors import ConfigError, InvalidInput
from zhiku.settings import Settings
from zhiku.stores.base import Catalogue, IndexAdmin, Retriever, Store, Writer
from zhiku.stores.sqlite import DB_NAME, CompactionReport, IndexNotFound, SQLiteStore

BUSY_TIMEOUT_S = 5.0  # how long a writer waits for another one before `IndexLocked`: an ingest, not a deadlock


def open_store(settings: Settings, *, read_only: bool = False) -> Store:
    """Open the index at ``settings.index`` with the backend named by ``settings.store.kind``.

    ``milvus`` keeps the index in Milvus at ``settings.store.uri`` under ``store.collection_prefix`` instead
    (``settings.index`` then holds only local files such as traces and extracted images).

    ``read_only=True`` is for searching and listing (CLI reads, the server): a missing index raises
    ``IndexNotFound`` instead of being created, and writes raise ``ReadOnlyIndex``.
    """
    kind = settings.store.kind
    if kind == "sqlite":
        return SQLiteStore(
            settings.index,
            read_only=read_only,
            busy_timeout_s=BUSY_TIMEOUT_S,
            dense_search=settings.store.dense_search,
        )
    if kind == "milvus":
        from zhiku.stores.milvus import MilvusStore

        store = MilvusStore(settings.store, read_only=read_only)
        with suppress(OSError):  # the local directory still holds traces and extracted images
            settings.index.mkdir(parents=True, exist_ok=True)
        return store
    raise ConfigError(f"unknown store.kind {kind!r}: use 'sqlite' or 'milvus'")


def compact_index(settings: Settings) -> CompactionReport:
    """Reclaim the embedded index's vector-file rows of deleted chunks now (``zhiku compact``)."""
    if settings.store.kind != "sqlite":
        raise InvalidInput(
            f"only the embedded (sqlite) store has a vector file to compact, not {settings.store.kind!r}"
        )
    if not (settings.index / DB_NAME).is_file():
        raise IndexNotFound(f"no index at {settings.index}: run `zhiku ingest PATH --index {settings.index}` first")
    with SQLiteStore(settings.index, busy_timeout_s=BUSY_TIMEOUT_S) as store:
        return store.compact()


__all__ = [
    "Catalogue",
    "CompactionReport",
    "compact_index",
    "IndexAdmin",
    "IndexNotFound",
    "Retriever",
    "SQLiteStore",
    "Store",
    "Writer",
    "open_store",
]
