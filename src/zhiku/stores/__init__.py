"""Storage backends behind the ``Store`` protocol; ``open_store`` picks one from the settings."""

from __future__ import annotations

from zhiku.errors import ConfigError
from zhiku.settings import Settings
from zhiku.stores.base import Store
from zhiku.stores.sqlite import IndexNotFound, SQLiteStore


def open_store(settings: Settings, *, read_only: bool = False) -> Store:
    """Open the index at ``settings.index`` with the backend named by ``settings.store.kind``.

    ``read_only=True`` is for searching and listing (CLI reads, the server): a missing index raises
    ``IndexNotFound`` instead of being created, and writes raise ``ReadOnlyIndex``.
    """
    kind = settings.store.kind
    if kind == "sqlite":
        return SQLiteStore(settings.index, read_only=read_only, busy_timeout_s=settings.store.busy_timeout_s)
    raise ConfigError(f"unknown store.kind {kind!r}: use 'sqlite'")


__all__ = ["IndexNotFound", "SQLiteStore", "Store", "open_store"]
