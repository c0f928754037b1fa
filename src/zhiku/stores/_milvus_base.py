"""``MilvusBase``: the connection, catalog reads and shared state under ``MilvusStore`` (see ``milvus``)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any

from zhiku.cache import Cache
from zhiku.errors import IndexMismatch, IndexNotFound, ReadOnlyIndex, StoreError
from zhiku.settings import StoreSettings
from zhiku.stores import _milvus_schema as ms
from zhiku.stores._milvus_conn import Connection

MAX_TOPK = 16384  # Milvus's limit on search results
SEEN_MAX = 50_000  # recent search results whose versions get_chunks remembers


class MilvusBase:
    """Connection, catalog plumbing and the state ``MilvusStore``'s reads and writes share."""

    def __init__(self, settings: StoreSettings, *, read_only: bool = False) -> None:
        self.settings = settings
        self.read_only = read_only
        self.chunks_name = settings.collection_prefix + ms.CHUNKS
        self.catalog_name = settings.collection_prefix + ms.CATALOG
        self._lock = threading.RLock()
        self._dim: int | None = None  # of <prefix>chunks, once known to exist
        self._seen: Cache[int] = Cache(SEEN_MAX)  # chunk_id -> version, of recent search results
        self._conn: Connection | None = Connection(settings)
        try:
            self._open_catalog()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
            self._conn = None

    def __repr__(self) -> str:
        return f"MilvusStore({self.settings.uri!r}, prefix={self.settings.collection_prefix!r}, read_only={self.read_only})"

    # --- plumbing ------------------------------------------------------------------------------------
    @property
    def conn(self) -> Connection:
        if self._conn is None:
            raise StoreError(f"the Milvus store {self.settings.collection_prefix}* at {self.settings.uri} is closed")
        return self._conn

    @property
    def where(self) -> str:
        return self.conn.where

    def _call(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        return self.conn.invoke(what, method, *args, **kwargs)

    def _has(self, name: str) -> bool:
        return bool(self._call(f"has_collection {name}", "has_collection", name))

    def _open_catalog(self) -> None:
        if not self._has(self.catalog_name):
            if self.read_only:
                raise IndexNotFound(
                    f"no zhiku index in {self.where}: run `zhiku ingest PATH` (or `zhiku migrate --to milvus`) "
                    "with these store settings first"
                )
            client = self.conn.client
            if self.conn.create(self.catalog_name, ms.catalog_schema(client), ms.catalog_index(client)):
                self._upsert_catalog(
                    [ms.meta_row("schema_version", str(ms.SCHEMA_VERSION)), ms.meta_row("index_version", "0")]
                )
        else:
            self._call("load catalog", "load_collection", self.catalog_name)
        stored = self._meta_value("schema_version")
        if stored is not None and stored.isdigit() and int(stored) > ms.SCHEMA_VERSION:
            raise IndexMismatch(
                f"{self.where} has zhiku schema version {stored}, newer than this zhiku supports "
                f"({ms.SCHEMA_VERSION}): upgrade zhiku"
            )
        if self._has(self.chunks_name):
            self._call("load chunks", "load_collection", self.chunks_name)
            self._dim = self._chunks_dim()

    def _chunks_dim(self) -> int:
        desc = self._call("describe chunks", "describe_collection", self.chunks_name)
        return next(int(f["params"]["dim"]) for f in desc["fields"] if f["name"] == "vector")

    def _query(self, name: str, expr: str, fields: list[str], *, what: str = "query") -> list[dict[str, Any]]:
        return self.conn.query_all(name, expr, fields, what=what)

    def _upsert(self, name: str, rows: list[dict[str, Any]], what: str) -> None:
        self.conn.upsert(name, rows, what)

    def _upsert_catalog(self, rows: list[dict[str, Any]]) -> None:
        self._upsert(self.catalog_name, rows, "write catalog")

    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyIndex(f"{self.where} was opened read-only (read_only=True); open it for writing to change it")

    # --- catalog reads -------------------------------------------------------------------------------
    def _catalog(self, what: str, expr: str, fields: list[str]) -> list[dict[str, Any]]:
        """Catalog rows by key (one ``query`` call: keys are few, no paging)."""
        rows: list[dict[str, Any]] = self._call(what, "query", self.catalog_name, filter=expr, output_fields=fields)
        return rows

    def _meta_value(self, key: str) -> str | None:
        rows = self._catalog("read metadata", f"key == {ms.lit('meta:' + key)}", ["payload"])
        return rows[0]["payload"] if rows else None

    def _doc_rows(self, expr: str, fields: list[str] = ms.DOC_FIELDS) -> list[dict[str, Any]]:
        return self._query(
            self.catalog_name, f'kind == "doc" and ({expr})' if expr else 'kind == "doc"', fields, what="read documents"
        )

    def _live_versions(self, doc_ids: Iterable[str]) -> dict[str, int]:
        keys = sorted({f"doc:{d}" for d in doc_ids})
        if not keys:
            return {}
        rows = self._catalog("read documents", f"key in {ms.lits(keys)}", ["doc_id", "version"])
        return {r["doc_id"]: int(r["version"]) for r in rows}

    def _visible(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The rows that belong to their document's live version (others are mid-replace or orphaned)."""
        live = self._live_versions(r["doc_id"] for r in rows)
        return [r for r in rows if live.get(r["doc_id"]) == int(r["version"])]

    def _meta_values(self, keys: Sequence[str]) -> dict[str, str]:
        rows = self._catalog("read metadata", f"key in {ms.lits(['meta:' + k for k in keys])}", ["key", "payload"])
        return {r["key"][len("meta:") :]: r["payload"] for r in rows}

    def _stored_dim(self, meta_dim: str | None) -> int | None:
        """The index's vector dimension: meta ``dim`` (blank counts as unset), else that of stored chunks."""
        value = (meta_dim or "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
        if self._dim is not None and self._doc_rows("chunk_count > 0", ["key"]):
            return self._dim
        return None

    def _refresh_dim(self) -> bool:
        """Another process may have created ``<prefix>chunks`` since this store opened."""
        if self._has(self.chunks_name):
            self._call("load chunks", "load_collection", self.chunks_name)
            self._dim = self._chunks_dim()
        return self._dim is not None


__all__ = ["MAX_TOPK", "SEEN_MAX", "MilvusBase"]
