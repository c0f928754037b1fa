"""``MilvusStore``: the ``Store`` protocol on Milvus (standalone, distributed, Zilliz Cloud or milvus-lite)."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from contextlib import suppress
from typing import Any

import numpy as np

from zhiku.cache import Cache
from zhiku.errors import IndexMismatch, IndexNotFound, InvalidInput, ReadOnlyIndex, StoreError
from zhiku.settings import StoreSettings
from zhiku.stores import _milvus_schema as ms
from zhiku.stores._milvus_conn import Connection, Unreachable
from zhiku.stores._sqlite_schema import prepare_rows
from zhiku.stores._vectors import match_sources
from zhiku.types import Chunk, CollectionStats, DocRecord, Filters, IngestionRecord, ScoredId

HNSW_M, HNSW_EF_CONSTRUCTION = 16, 200  # Milvus's usual build parameters, fixed when the index is created
_MANAGED_META = frozenset({"schema_version", "index_version"})
MAX_TOPK = 16384  # Milvus's limit on search results
SEEN_MAX = 50_000  # recent search results whose versions get_chunks remembers
HNSW_EF = 128  # HNSW candidates at search time, raised to the results asked for: near-exact recall at top-k 100
log = logging.getLogger(__name__)


class MilvusStore:
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
        self._refresh_dim()

    def _chunks_dim(self) -> int:
        desc = self._call("describe chunks", "describe_collection", self.chunks_name)
        return next(int(f["params"]["dim"]) for f in desc["fields"] if f["name"] == "vector")

    def _upsert_catalog(self, rows: list[dict[str, Any]]) -> None:
        self.conn.upsert(self.catalog_name, rows, "write catalog")

    def _mismatch(self, stored: int | None, got: int) -> IndexMismatch:
        return IndexMismatch(
            f"{self.where} holds {stored}-dimensional vectors but got {got}: the embedder changed; "
            "rebuild with `zhiku ingest PATH --force` into another store.collection_prefix"
        )

    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyIndex(f"{self.where} was opened read-only (read_only=True); open it for writing to change it")

    # --- catalog reads -------------------------------------------------------------------------------
    def _catalog(self, what: str, expr: str, fields: list[str]) -> list[dict[str, Any]]:
        """Catalog rows by key (one ``query`` call: keys are few, no paging)."""
        return list(self._call(what, "query", self.catalog_name, filter=expr, output_fields=fields))

    def _meta_value(self, key: str) -> str | None:
        rows = self._catalog("read metadata", f"key == {ms.lit('meta:' + key)}", ["payload"])
        return rows[0]["payload"] if rows else None

    def _doc_rows(self, expr: str, fields: list[str] = ms.DOC_FIELDS) -> list[dict[str, Any]]:
        return self.conn.query_all(
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

    # --- searching -----------------------------------------------------------------------------------
    def _filter_expr(self, filters: Filters) -> str | None:
        """The Milvus expression for ``filters``: ``""`` for none, ``None`` when nothing can match."""
        parts = []
        for column, value in (("collection", filters.collection), ("doc_type", filters.doc_type)):
            if isinstance(value, tuple):
                parts.append(f"{column} in {ms.lits(sorted(value))}")
            elif value is not None:
                parts.append(f"{column} == {ms.lit(value)}")
        if filters.source_glob is not None:
            where = parts[0] if filters.collection is not None else ""
            sources = match_sources({r["source"] for r in self._doc_rows(where, ["source"])}, filters.source_glob)
            if not sources:
                return None
            parts.append(f"source in {ms.lits(sorted(sources))}")
        return " and ".join(parts)

    def _raw_search(self, data: Any, field: str, expr: str, limit: int, params: dict[str, Any]) -> list[dict[str, Any]]:
        if field == "vector":
            params = {**params, "params": {"ef": max(HNSW_EF, limit)}}
        options = {"data": [data], "anns_field": field, "filter": expr, "limit": limit, "search_params": params}
        raw = self._call(
            "search", "search", self.chunks_name, output_fields=["chunk_id", "doc_id", "version"], **options
        )
        return [{**hit["entity"], "score": abs(float(hit["distance"]))} for hit in raw[0]]

    def _search(self, data: Any, field: str, params: dict[str, Any], top_k: int, filters: Filters) -> list[ScoredId]:
        if top_k < 1 or self._dim is None and not self._refresh_dim():
            return []
        expr = self._filter_expr(filters)
        if expr is None:
            return []
        top_k = min(int(top_k), MAX_TOPK)
        limit = top_k
        while True:
            rows = self._raw_search(data, field, expr, limit, params)
            visible = self._visible(rows)
            if len(visible) >= top_k or len(rows) < limit or limit >= MAX_TOPK:
                break
            limit = min(MAX_TOPK, 2 * limit + len(rows) - len(visible))
        visible.sort(key=lambda r: (-r["score"], r["chunk_id"]))
        for r in visible[:top_k]:  # their versions, so that ``get_chunks`` fetches them by primary key
            self._seen.put(r["chunk_id"], int(r["version"]))
        return [ScoredId(r["chunk_id"], r["score"], rank) for rank, r in enumerate(visible[:top_k], 1)]

    def warm(self) -> None:
        """Milvus loads the collections when the store opens; this only notices one created since."""
        try:
            if self._dim is None:
                self._refresh_dim()
        except StoreError as e:  # the first query reports it, with its error code
            log.warning("could not reach %s: %s", self.where, e)

    def bm25_search(self, terms: Sequence[str], top_k: int, filters: Filters = Filters()) -> list[ScoredId]:
        if isinstance(terms, str):
            raise InvalidInput(f"BM25 terms must be a list of tokens, not the string {terms!r}")
        unique = [t for t in dict.fromkeys(terms) if any(ch.isalnum() for ch in t)]
        if not unique:
            return []
        return self._search(" ".join(unique), "sparse", {"metric_type": "BM25"}, top_k, filters)

    def _query_vector(self, vector: np.ndarray) -> np.ndarray | None:
        """The query as float32, checked against the stored dim; None when the store holds no vectors yet."""
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if not np.isfinite(query).all():
            raise InvalidInput("the query vector contains NaN or infinite values; check the embedder")
        if self._dim is None and not self._refresh_dim():
            return None
        if query.size != self._dim:
            raise self._mismatch(self._dim, query.size)
        return query

    def dense_search(self, vector: np.ndarray, top_k: int, filters: Filters = Filters()) -> list[ScoredId]:
        query = self._query_vector(vector)
        if query is None:
            return []
        return self._search(query.tolist(), "vector", {"metric_type": "COSINE"}, top_k, filters)

    def dense_scores(self, vector: np.ndarray, chunk_ids: Sequence[str]) -> dict[str, float]:
        """A search restricted to ``chunk_ids`` (rows of replaced versions too: the limit leaves room for them)."""
        ids = list(dict.fromkeys(chunk_ids))
        query = self._query_vector(vector)
        if query is None or not ids:
            return {}
        limit = min(MAX_TOPK, 2 * len(ids))
        rows = self._visible(
            self._raw_search(query.tolist(), "vector", f"chunk_id in {ms.lits(ids)}", limit, {"metric_type": "COSINE"})
        )
        return {r["chunk_id"]: r["score"] for r in rows}

    def get_chunks(self, chunk_ids: Sequence[str]) -> list[Chunk]:
        """By primary key (``<chunk_id>@<version>``) for chunks this store just found in a search."""
        ids = list(dict.fromkeys(chunk_ids))
        if not ids or self._dim is None and not self._refresh_dim():
            return []
        keys = [f"{i}@{v}" for i in ids if (v := self._seen.get(i)) is not None]
        found = self._fetch_chunks(f"row_id in {ms.lits(keys)}") if keys else {}
        missing = [i for i in ids if i not in found]
        if missing:
            found.update(self._fetch_chunks(f"chunk_id in {ms.lits(missing)}"))
        return [found[i] for i in chunk_ids if i in found]

    def _fetch_chunks(self, expr: str) -> dict[str, Chunk]:
        rows = self._visible(self.conn.query_all(self.chunks_name, expr, ms.CHUNK_FIELDS, what="read chunks"))
        return {r["chunk_id"]: ms.chunk_from_row(r) for r in rows}

    def get_document(self, doc_id: str) -> DocRecord | None:
        rows = self._catalog("read documents", f"key == {ms.lit('doc:' + doc_id)}", ["payload"])
        return ms.from_json(DocRecord, rows[0]["payload"]) if rows else None

    def find_document(self, collection: str, source: str) -> DocRecord | None:
        rows = self._doc_rows(f"collection == {ms.lit(collection)} and source == {ms.lit(source)}", ["payload"])
        return ms.from_json(DocRecord, rows[0]["payload"]) if rows else None

    def list_documents(self, collection: str | None = None) -> list[DocRecord]:
        rows = self._doc_rows(f"collection == {ms.lit(collection)}" if collection is not None else "", ["payload"])
        docs = [ms.from_json(DocRecord, r["payload"]) for r in rows]
        return sorted(docs, key=lambda d: (d.collection, d.source))

    def document_chunks(self, doc_id: str) -> list[Chunk]:
        live = self._live_versions([doc_id])
        if not live or self._dim is None and not self._refresh_dim():
            return []
        expr = f"doc_id == {ms.lit(doc_id)} and version == {live[doc_id]}"
        rows = self.conn.query_all(self.chunks_name, expr, ms.CHUNK_FIELDS, what="read chunks")
        return sorted((ms.chunk_from_row(r) for r in rows), key=lambda c: c.ordinal)

    def collections(self) -> list[CollectionStats]:
        totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for r in self._doc_rows("", ["collection", "chunk_count", "chars"]):
            t = totals[r["collection"]]
            t[:] = t[0] + 1, t[1] + int(r["chunk_count"]), t[2] + int(r["chars"])
        return [CollectionStats(name, *t) for name, t in sorted(totals.items())]

    def ingestion_history(self, limit: int = 100) -> list[IngestionRecord]:
        keys = self.conn.query_all(self.catalog_name, 'kind == "hist"', ["key", "at"], what="read history")
        newest = [r["key"] for r in sorted(keys, key=lambda r: (r["at"], r["key"]), reverse=True)[: max(int(limit), 0)]]
        if not newest:
            return []
        rows = self.conn.query_all(
            self.catalog_name, f"key in {ms.lits(newest)}", ["key", "payload"], what="read history"
        )
        by_key = {r["key"]: ms.from_json(IngestionRecord, r["payload"]) for r in rows}
        return [by_key[k] for k in newest if k in by_key]

    def __enter__(self) -> MilvusStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writing -------------------------------------------------------------------------------------
    def write_document(
        self, doc: DocRecord, chunks: Sequence[Chunk], tokens: Sequence[Sequence[str]], vectors: np.ndarray
    ) -> None:
        rows, ids, matrix = prepare_rows(doc, chunks, tokens, vectors)
        dim = matrix.shape[1]
        where = f"cannot write document {doc.doc_id} ({doc.collection}/{doc.source})"
        for chunk in chunks:
            if len(chunk.text.encode()) > ms.MAX_VARCHAR:
                raise StoreError(
                    f"{where}: chunk {chunk.chunk_id} holds more than {ms.MAX_VARCHAR} bytes of text, Milvus's "
                    "limit for one field; lower chunking.size_chars"
                )
        with self._lock:
            self._check_writable()
            keys = ms.lits(["meta:dim", "meta:index_version"])
            meta = {
                r["key"][5:]: r["payload"] for r in self._catalog("read metadata", f"key in {keys}", ["key", "payload"])
            }
            stored_dim = self._stored_dim(meta.get("dim"))
            if rows and stored_dim is not None and stored_dim != dim:
                raise self._mismatch(stored_dim, dim)
            other = self._doc_rows(
                f"collection == {ms.lit(doc.collection)} and source == {ms.lit(doc.source)} "
                f"and doc_id != {ms.lit(doc.doc_id)}",
                ["doc_id"],
            )
            if other:
                raise StoreError(
                    f"{doc.collection}/{doc.source} is already stored as document {other[0]['doc_id']}, "
                    f"not {doc.doc_id}: delete that document first"
                )
            if rows:
                self._ensure_chunks(dim)
            stale: list[str] = []  # every row of this document before the write: the live version and any leftovers
            if self._dim is not None or self._refresh_dim():
                expr = f"doc_id == {ms.lit(doc.doc_id)}" + (f" or chunk_id in {ms.lits(ids)}" if ids else "")
                existing = self.conn.query_all(
                    self.chunks_name, expr, ["row_id", "chunk_id", "doc_id", "version"], what="check chunk ids"
                )
                clash = self._visible([r for r in existing if r["doc_id"] != doc.doc_id])
                if clash:
                    raise StoreError(
                        f"chunk id {clash[0]['chunk_id']} already belongs to document {clash[0]['doc_id']}: "
                        "chunk ids must be unique across the index"
                    )
                stale = [r["row_id"] for r in existing if r["doc_id"] == doc.doc_id]
            version = max(int(meta.get("index_version") or 0) + 1, time.time_ns() // 1000)
            new_rows = [
                ms.chunk_row(c, version, ms.fit_tokens(r[-1]), v.tolist())
                for c, r, v in zip(chunks, rows, matrix, strict=False)
            ]
            try:
                if new_rows:
                    self.conn.upsert(self.chunks_name, new_rows, f"write the chunks of {doc.doc_id}")
                self._upsert_catalog([ms.doc_row(doc, version, sum(len(c.text) for c in chunks))])  # the switch
            except StoreError as e:
                if not isinstance(e, Unreachable):  # unreachable: leftovers stay invisible; the next write removes them
                    self._discard(f"row_id in {ms.lits([r['row_id'] for r in new_rows])}")
                raise
            bump = [ms.meta_row("index_version", str(version))]
            if rows and stored_dim != dim:
                bump.append(ms.meta_row("dim", str(dim)))
            self._upsert_catalog(bump)
            if stale:
                self._discard(f"row_id in {ms.lits(stale)}")

    def _ensure_chunks(self, dim: int) -> None:
        """Create ``<prefix>chunks`` for ``dim``; an empty one of another dim (after a forced rebuild) is recreated."""
        if self._dim is None:
            self._refresh_dim()  # another process may have created it
        if self._dim == dim:
            return
        if self._dim is not None:
            self._call("drop chunks", "drop_collection", self.chunks_name)
            self._dim = None
        # milvus-lite has no `whitespace`; a real Milvus's `standard` splits Chinese into single characters
        analyzer = "standard" if self.conn.is_lite else "whitespace"
        client = self.conn.client
        if self.conn.create(
            self.chunks_name,
            ms.chunks_schema(client, dim, analyzer),
            ms.chunks_index(client, HNSW_M, HNSW_EF_CONSTRUCTION),
        ):
            self._upsert_catalog([ms.meta_row("milvus_analyzer", analyzer)])
        self._dim = self._chunks_dim()
        if self._dim != dim:  # another process created it first, for other vectors
            raise self._mismatch(self._dim, dim)

    def _discard(self, expr: str) -> None:
        """Delete chunk rows that no document points at; best effort (leftovers stay invisible)."""
        if self._dim is None and not self._refresh_dim():
            return
        with suppress(StoreError):
            self._call("clean up", "delete", self.chunks_name, filter=expr)

    def delete_document(self, doc_id: str) -> bool:
        with self._lock:
            self._check_writable()
            if not self._live_versions([doc_id]):
                return False
            self._call(f"delete {doc_id}", "delete", self.catalog_name, filter=f"key == {ms.lit('doc:' + doc_id)}")
            version = max(self.index_version() + 1, time.time_ns() // 1000)
            self._upsert_catalog([ms.meta_row("index_version", str(version))])
            self._discard(f"doc_id == {ms.lit(doc_id)}")
        return True

    def record_ingestion(self, record: IngestionRecord) -> None:
        with self._lock:
            self._check_writable()
            self._upsert_catalog([ms.history_row(f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}", record)])

    # --- metadata ------------------------------------------------------------------------------------
    def get_meta(self) -> dict[str, str]:
        rows = self.conn.query_all(self.catalog_name, 'kind == "meta"', ["key", "payload"], what="read metadata")
        return dict(sorted((r["key"][len("meta:") :], r["payload"]) for r in rows))

    def set_meta(self, values: dict[str, str]) -> None:
        for key, value in values.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise InvalidInput(f"index metadata keys and values must be strings, got {key!r}: {value!r}")
            if key in _MANAGED_META:
                raise InvalidInput(f"index metadata {key!r} is managed by the store and cannot be set")
        with self._lock:
            self._check_writable()
            self._upsert_catalog([ms.meta_row(k, v) for k, v in values.items()])

    def index_version(self) -> int:
        value = self._meta_value("index_version")
        return int(value) if value and value.isdigit() else 0
