"""``MilvusStore``: the ``Store`` protocol on Milvus (standalone, distributed, Zilliz Cloud or milvus-lite)."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from functools import cache
from typing import Any, TypeVar, cast

import numpy as np
from pydantic import TypeAdapter

from zhiku.cache import Cache
from zhiku.errors import IndexMismatch, IndexNotFound, InvalidInput, MissingDependency, ReadOnlyIndex, StoreError
from zhiku.settings import StoreSettings
from zhiku.stores._sqlite_schema import prepare_rows
from zhiku.stores._vectors import match_sources
from zhiku.stores.base import check_meta
from zhiku.stores.sqlite import query_terms
from zhiku.types import Chunk, CollectionStats, DocRecord, Filters, IngestionRecord, ScoredId

T = TypeVar("T")
log = logging.getLogger(__name__)
QUERY_LIMIT = 16384  # Milvus's limit on the rows of one query or search
WRITE_BATCH = 256  # rows per upsert request
LITE_FLUSH_ROWS = 512  # see Connection.flush_pending
TIMEOUT_S = 30.0  # a request, retries of a lost connection included, before it fails with a StoreError
CONSISTENCY = "Strong"  # every finished write is seen, across processes too
_SERVER_SCHEMES = ("http://", "https://", "tcp://", "grpc://", "unix:")
_UNREACHABLE = "fail connecting|unavailable|connection refused|failed to connect|deadline|timeout".split("|")
_UNREACHABLE += ["timed out", "retry run out", "illegal connection"]


def import_pymilvus() -> Any:
    try:
        import pymilvus
    except ImportError:
        raise MissingDependency("store.kind=milvus needs pymilvus: pip install 'zhiku[milvus]'") from None
    log = logging.getLogger("pymilvus")
    if log.level == logging.WARNING:  # pymilvus's own default: its per-call tracebacks duplicate our StoreErrors
        log.setLevel(logging.CRITICAL)
    return pymilvus


class Unreachable(StoreError, retryable=True): ...  # the server did not answer (down, restarting, network)


class NotLoaded(StoreError): ...  # a collection not loaded (milvus-lite forgets loads across restarts): load, retry


class Connection:
    """A ``MilvusClient`` for one ``StoreSettings``, with error translation."""

    def __init__(self, settings: StoreSettings) -> None:
        self.settings = settings
        self.uri = settings.uri
        self.timeout = TIMEOUT_S
        db = settings.db_name or "default"
        self.where = f"Milvus at {self.uri} (database {db}, collections {settings.collection_prefix}*)"
        self._lock = threading.RLock()
        self._unflushed: dict[str, int] = {}
        self.server_version = ""
        pymilvus = import_pymilvus()
        token = settings.token.get_secret_value() if settings.token is not None else ""
        try:
            # dedicated: this store owns its gRPC channel and closes it (pymilvus keeps shared ones open forever)
            self.client = pymilvus.MilvusClient(uri=self.uri, token=token, timeout=self.timeout, dedicated=True)
        except Exception as e:  # noqa: BLE001 - every failure to connect becomes one StoreError
            raise self.error(e, "connect") from None
        try:
            self.server_version = str(self.call("get_server_version", "get_server_version"))
            if (name := settings.db_name) and name not in self.call("list_databases", "list_databases"):
                self.call("create_database", "create_database", name)
            if name:
                with self.guard("use_database"):
                    self.client.use_database(name)
        except BaseException:
            self.close()
            raise

    @property
    def is_lite(self) -> bool:
        """True for milvus-lite (its gRPC server or an embedded local path), which differs from Milvus proper."""
        return self.server_version.startswith("milvus_lite") or not self.uri.startswith(_SERVER_SCHEMES)

    @contextmanager
    def guard(self, what: str) -> Iterator[None]:
        """Turn every failure inside the block into a ``StoreError`` about ``what``."""
        try:
            yield
        except StoreError:
            raise
        except Exception as e:  # noqa: BLE001 - pymilvus raises MilvusException, grpc.RpcError, ValueError, …
            raise self.error(e, what) from None

    def call(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """``client.<method>(…, timeout=TIMEOUT_S)``, every failure a ``StoreError`` about ``what``: retried while the
        server is unreachable; a read of a collection not loaded loads it and is repeated once."""
        if method in ("search", "query"):
            kwargs.setdefault("consistency_level", CONSISTENCY)
            if method != "query" and self._unflushed:
                self.flush_pending()
        deadline, delay, loaded = time.monotonic() + self.timeout, 0.1, method == "load_collection"
        while True:
            try:
                with self.guard(what):
                    return getattr(self.client, method)(*args, timeout=self.timeout, **kwargs)
            except Unreachable:
                if time.monotonic() + delay >= deadline:
                    raise
                time.sleep(delay)
                delay = min(2 * delay, 2.0)
            except NotLoaded:
                if loaded:
                    raise
                self.call(f"load {args[0]}", "load_collection", args[0])
                deadline, delay, loaded = time.monotonic() + self.timeout, 0.1, True

    def error(self, e: BaseException, what: str) -> StoreError:
        message = str(getattr(e, "message", "") or e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        low = message.lower()
        if any(s in low for s in _UNREACHABLE):
            return Unreachable(
                f"cannot reach {self.where} during {what} ({message}): start Milvus (e.g. `milvus-lite server "
                f"--data-dir DIR --port 19530`) or fix store.uri (ZHIKU_STORE__URI); requests give up after "
                f"{self.timeout:g}s"
            )
        if any(s in low for s in ("auth", "permission", "denied", "unauthenticated", "credential")):
            return StoreError(
                f"{self.where} refused the credentials during {what} ({message}): set store.token "
                "(ZHIKU_STORE__TOKEN, `user:password` or an API key)"
            )
        if "not loaded" in low or "state 'released'" in low:
            return NotLoaded(f"{self.where}: {what} failed: {message}")
        if "database" in low and ("not found" in low or "not exist" in low):
            return StoreError(
                f"{self.where}: database {self.settings.db_name!r} does not exist ({message}): create it "
                "or fix store.db_name (ZHIKU_STORE__DB_NAME)"
            )
        return StoreError(f"{self.where}: {what} failed: {message}")

    def create(self, name: str, schema: Any, index_params: Any) -> bool:
        """Create, index and load a collection; False when another process created it first."""
        try:
            self.call(f"create {name}", "create_collection", name, schema=schema, consistency_level=CONSISTENCY)
        except StoreError:
            if not self.call(f"has_collection {name}", "has_collection", name):
                raise
            self.call(f"load {name}", "load_collection", name)
            return False
        self.call(f"index {name}", "create_index", name, index_params, sync=False)
        self.call(f"load {name}", "load_collection", name)
        return True

    def query_all(self, name: str, expr: str, fields: list[str], *, what: str = "query") -> list[dict[str, Any]]:
        """Every row of ``name`` matching ``expr`` (paged with an iterator past Milvus's per-query limit)."""
        rows = self.call(what, "query", name, filter=expr, output_fields=fields, limit=QUERY_LIMIT)
        if len(rows) < QUERY_LIMIT:
            return list(rows)
        with self.guard(what):
            options = {"filter": expr, "output_fields": fields, "consistency_level": CONSISTENCY}
            iterator = self.client.query_iterator(name, batch_size=4096, timeout=self.timeout, **options)
            out: list[dict[str, Any]] = []
            while batch := iterator.next():
                out.extend(batch)
            iterator.close()
        return out

    def upsert(self, name: str, rows: list[dict[str, Any]], what: str) -> None:
        """Upsert in requests of ``WRITE_BATCH`` rows (idempotent: safe to retry)."""
        for i in range(0, len(rows), WRITE_BATCH):
            self.call(what, "upsert", name, rows[i : i + WRITE_BATCH])
        with self._lock:
            self._unflushed[name] = self._unflushed.get(name, 0) + len(rows)
            due = self._unflushed[name] >= LITE_FLUSH_ROWS
        if due:
            self.flush_pending()

    def flush_pending(self) -> None:
        """milvus-lite only: seal what this connection wrote into indexed segments."""
        with self._lock:
            pending = [name for name, count in self._unflushed.items() if count]
            self._unflushed.clear()
            if self.is_lite:
                for name in pending:
                    self.call(f"flush {name}", "flush", name)

    def close(self) -> None:
        with suppress(StoreError):  # the rows are in milvus-lite's write-ahead log either way
            self.flush_pending()
        with suppress(Exception):  # closing never fails loudly
            self.client.close()


SCHEMA_VERSION = 1
CHUNKS = "chunks"
CATALOG = "catalog"
MAX_VARCHAR = 65535  # bytes (UTF-8): Milvus's default limit for one VARCHAR value
PLACEHOLDER = [0.0, 0.0]  # the catalog's vector
# Chunk fields kept as scalar columns (filters, display); the rest travels in ``payload``.
CHUNK_COLUMNS = ("chunk_id", "doc_id", "collection", "source", "doc_type", "section", "page", "text")
CHUNK_FIELDS = ["row_id", *CHUNK_COLUMNS, "version", "payload"]

SCHEMA = f"(schema {SCHEMA_VERSION})"  # in each collection's description


_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"})


def lit(value: str) -> str:
    """``value`` as a double-quoted Milvus expression string (``\\``, ``"``, and line breaks escaped)."""
    return f'"{value.translate(_ESCAPES)}"'


def lits(values: Sequence[str]) -> str:
    """``values`` as a Milvus list literal, e.g. ``["a", "b"]``."""
    return "[" + ", ".join(lit(v) for v in values) + "]"


def to_json(obj: Any) -> str:
    """A dataclass (nested ones, tuples and str-enums included) as compact JSON."""
    return json.dumps(dataclasses.asdict(obj), ensure_ascii=False, separators=(",", ":"))


@cache
def _adapter(cls: type) -> TypeAdapter[Any]:
    return TypeAdapter(cls)


def from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """The dataclass ``cls`` from ``data`` (as ``to_json`` wrote it); missing fields take their defaults."""
    return cast(T, _adapter(cast(Any, cls)).validate_python(data))  # (T is unbound for mypy)


def from_json(cls: type[T], text: str) -> T:
    return from_dict(cls, json.loads(text))


def chunk_row(chunk: Chunk, version: int, tokens: str, vector: list[float]) -> dict[str, Any]:
    data = dataclasses.asdict(chunk)
    row = {name: data.pop(name) for name in CHUNK_COLUMNS}
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    key = f"{chunk.chunk_id}@{version}"
    return {**row, "row_id": key, "version": version, "tokens": tokens, "vector": vector, "payload": payload}


def chunk_from_row(row: dict[str, Any]) -> Chunk:
    data = json.loads(row["payload"])
    data.update({name: row[name] for name in CHUNK_COLUMNS})
    return from_dict(Chunk, data)


def _catalog_row(key: str, kind: str, payload: str, **fields: Any) -> dict[str, Any]:
    row = {"key": key, "kind": kind, "doc_id": "", "collection": "", "source": "", "version": 0, "chunk_count": 0}
    return {**row, "chars": 0, "at": 0.0, **fields, "payload": payload, "placeholder": PLACEHOLDER}


def doc_row(doc: DocRecord, version: int, chars: int) -> dict[str, Any]:
    fields = {"doc_id": doc.doc_id, "collection": doc.collection, "source": doc.source, "chunk_count": doc.chunk_count}
    return _catalog_row(
        f"doc:{doc.doc_id}", "doc", to_json(doc), **fields, version=version, chars=chars, at=float(doc.ingested_at)
    )


def meta_row(key: str, value: str) -> dict[str, Any]:
    return _catalog_row(f"meta:{key}", "meta", value)


def history_row(key: str, record: IngestionRecord) -> dict[str, Any]:
    fields = {"collection": record.collection, "source": record.path, "chunk_count": record.chunk_count}
    return _catalog_row(f"hist:{key}", "hist", to_json(record), **fields, at=float(record.at))


def fit_tokens(text: str, limit: int = MAX_VARCHAR) -> str:
    """``text`` cut at a token boundary to at most ``limit`` UTF-8 bytes (Milvus's VARCHAR limit)."""
    data = text.encode()
    return text if len(data) <= limit else data[:limit].decode(errors="ignore").rsplit(" ", 1)[0]


def chunks_schema(client: Any, dim: int, analyzer: str) -> Any:
    from pymilvus import DataType, Function, FunctionType

    s = client.create_schema(auto_id=False, enable_dynamic_field=False, description=f"zhiku chunks {SCHEMA}")
    s.add_field("row_id", DataType.VARCHAR, is_primary=True, max_length=256)
    s.add_field("chunk_id", DataType.VARCHAR, max_length=256)
    s.add_field("doc_id", DataType.VARCHAR, max_length=256)
    s.add_field("collection", DataType.VARCHAR, max_length=1024, is_partition_key=True)
    s.add_field("source", DataType.VARCHAR, max_length=4096)
    s.add_field("doc_type", DataType.VARCHAR, max_length=64)
    s.add_field("section", DataType.VARCHAR, max_length=8192)
    s.add_field("page", DataType.INT64, nullable=True)
    s.add_field("version", DataType.INT64)
    s.add_field("text", DataType.VARCHAR, max_length=MAX_VARCHAR)
    s.add_field("payload", DataType.VARCHAR, max_length=MAX_VARCHAR)
    analyzed = {"enable_analyzer": True, "analyzer_params": {"tokenizer": analyzer}}
    s.add_field("tokens", DataType.VARCHAR, max_length=MAX_VARCHAR, **analyzed)
    s.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    s.add_field("vector", DataType.FLOAT_VECTOR, dim=dim)
    bm25 = {"input_field_names": ["tokens"], "output_field_names": ["sparse"]}
    s.add_function(Function(name="bm25", function_type=FunctionType.BM25, **bm25))
    return s


def chunks_index(client: Any) -> Any:
    params = client.prepare_index_params()
    params.add_index(
        "vector", index_type="HNSW", metric_type="COSINE", params={"M": HNSW_M, "efConstruction": HNSW_EF_CONSTRUCTION}
    )
    params.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
    for field in ("chunk_id", "doc_id"):  # get_chunks, document_chunks, replace and delete filter on these
        params.add_index(field, index_type="INVERTED")
    return params


def catalog_schema(client: Any) -> Any:
    from pymilvus import DataType

    s = client.create_schema(auto_id=False, enable_dynamic_field=False, description=f"zhiku catalog {SCHEMA}")
    s.add_field("key", DataType.VARCHAR, is_primary=True, max_length=512)
    s.add_field("kind", DataType.VARCHAR, max_length=16)
    s.add_field("doc_id", DataType.VARCHAR, max_length=256)
    s.add_field("collection", DataType.VARCHAR, max_length=1024)
    s.add_field("source", DataType.VARCHAR, max_length=4096)
    s.add_field("version", DataType.INT64)
    s.add_field("chunk_count", DataType.INT64)
    s.add_field("chars", DataType.INT64)
    s.add_field("at", DataType.DOUBLE)
    s.add_field("payload", DataType.VARCHAR, max_length=MAX_VARCHAR)
    s.add_field("placeholder", DataType.FLOAT_VECTOR, dim=len(PLACEHOLDER))
    return s


def catalog_index(client: Any) -> Any:
    params = client.prepare_index_params()
    params.add_index("placeholder", index_type="FLAT", metric_type="L2")
    for field in ("kind", "collection", "source"):
        params.add_index(field, index_type="INVERTED")
    return params


HNSW_M, HNSW_EF_CONSTRUCTION = 16, 200  # Milvus's usual build parameters, fixed when the index is created
_MANAGED_META = frozenset({"schema_version", "index_version"})
SEEN_MAX = 50_000  # recent search results whose versions get_chunks remembers
HNSW_EF = 128  # HNSW candidates at search time, raised to the results asked for: near-exact recall at top-k 100


class MilvusStore:
    def __init__(self, settings: StoreSettings, *, read_only: bool = False) -> None:
        self.settings = settings
        self.read_only = read_only
        self.chunks_name = settings.collection_prefix + CHUNKS
        self.catalog_name = settings.collection_prefix + CATALOG
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

    @property
    def conn(self) -> Connection:
        if self._conn is None:
            raise StoreError(f"the Milvus store {self.settings.collection_prefix}* at {self.settings.uri} is closed")
        return self._conn

    @property
    def where(self) -> str:
        return self.conn.where

    def _has(self, name: str) -> bool:
        return bool(self.conn.call(f"has_collection {name}", "has_collection", name))

    def _open_catalog(self) -> None:
        if not self._has(self.catalog_name):
            if self.read_only:
                raise IndexNotFound(
                    f"no zhiku index in {self.where}: run `zhiku ingest PATH` (or `zhiku migrate --to milvus`) "
                    "with these store settings first"
                )
            client = self.conn.client
            if self.conn.create(self.catalog_name, catalog_schema(client), catalog_index(client)):
                self._upsert_catalog([meta_row("schema_version", str(SCHEMA_VERSION)), meta_row("index_version", "0")])
        else:
            self.conn.call("load catalog", "load_collection", self.catalog_name)
        stored = self._meta_value("schema_version")
        if stored is not None and stored.isdigit() and int(stored) > SCHEMA_VERSION:
            raise IndexMismatch(
                f"{self.where} has zhiku schema version {stored}, newer than this zhiku supports "
                f"({SCHEMA_VERSION}): upgrade zhiku"
            )
        self._refresh_dim()

    def _chunks_dim(self) -> int:
        desc = self.conn.call("describe chunks", "describe_collection", self.chunks_name)
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

    def _catalog(self, what: str, expr: str, fields: list[str]) -> list[dict[str, Any]]:
        """Catalog rows by key (one ``query`` call: keys are few, no paging)."""
        return list(self.conn.call(what, "query", self.catalog_name, filter=expr, output_fields=fields))

    def _meta_value(self, key: str) -> str | None:
        rows = self._catalog("read metadata", f"key == {lit('meta:' + key)}", ["payload"])
        return rows[0]["payload"] if rows else None

    def _doc_rows(self, expr: str, fields: list[str]) -> list[dict[str, Any]]:
        return self.conn.query_all(
            self.catalog_name, f'kind == "doc" and ({expr})' if expr else 'kind == "doc"', fields, what="read documents"
        )

    def _live_versions(self, doc_ids: Iterable[str]) -> dict[str, int]:
        keys = sorted({f"doc:{d}" for d in doc_ids})
        if not keys:
            return {}
        rows = self._catalog("read documents", f"key in {lits(keys)}", ["doc_id", "version"])
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
            self.conn.call("load chunks", "load_collection", self.chunks_name)
            self._dim = self._chunks_dim()
        return self._dim is not None

    def _filter_expr(self, filters: Filters) -> str | None:
        """The Milvus expression for ``filters``: ``""`` for none, ``None`` when nothing can match."""
        parts = []
        for column, value in (("collection", filters.collection), ("doc_type", filters.doc_type)):
            if isinstance(value, tuple):
                parts.append(f"{column} in {lits(sorted(value))}")
            elif value is not None:
                parts.append(f"{column} == {lit(value)}")
        if filters.source_glob is not None:
            where = parts[0] if filters.collection is not None else ""
            sources = match_sources({r["source"] for r in self._doc_rows(where, ["source"])}, filters.source_glob)
            if not sources:
                return None
            parts.append(f"source in {lits(sorted(sources))}")
        return " and ".join(parts)

    def _raw_search(self, data: Any, field: str, expr: str, limit: int, params: dict[str, Any]) -> list[dict[str, Any]]:
        if field == "vector":
            params = {**params, "params": {"ef": max(HNSW_EF, limit)}}
        options = {"data": [data], "anns_field": field, "filter": expr, "limit": limit, "search_params": params}
        raw = self.conn.call(
            "search", "search", self.chunks_name, output_fields=["chunk_id", "doc_id", "version"], **options
        )
        return [{**hit["entity"], "score": abs(float(hit["distance"]))} for hit in raw[0]]

    def _search(self, data: Any, field: str, params: dict[str, Any], top_k: int, filters: Filters) -> list[ScoredId]:
        if top_k < 1 or self._dim is None and not self._refresh_dim():
            return []
        expr = self._filter_expr(filters)
        if expr is None:
            return []
        top_k = min(int(top_k), QUERY_LIMIT)
        limit = top_k
        while True:
            rows = self._raw_search(data, field, expr, limit, params)
            visible = self._visible(rows)
            if len(visible) >= top_k or len(rows) < limit or limit >= QUERY_LIMIT:
                break
            limit = min(QUERY_LIMIT, 2 * limit + len(rows) - len(visible))
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

    def bm25_search(  # ``rare`` terms are left out: Milvus scores every term it is given, however common
        self, terms: Sequence[str], top_k: int, filters: Filters = Filters(), rare: Sequence[str] = ()
    ) -> list[ScoredId]:
        unique = [t for t in query_terms(terms) if any(ch.isalnum() for ch in t)]
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
        limit = min(QUERY_LIMIT, 2 * len(ids))
        rows = self._visible(
            self._raw_search(query.tolist(), "vector", f"chunk_id in {lits(ids)}", limit, {"metric_type": "COSINE"})
        )
        return {r["chunk_id"]: r["score"] for r in rows}

    def get_chunks(self, chunk_ids: Sequence[str]) -> list[Chunk]:
        """By primary key (``<chunk_id>@<version>``) for chunks this store just found in a search."""
        ids = list(dict.fromkeys(chunk_ids))
        if not ids or self._dim is None and not self._refresh_dim():
            return []
        keys = [f"{i}@{v}" for i in ids if (v := self._seen.get(i)) is not None]
        found = self._fetch_chunks(f"row_id in {lits(keys)}") if keys else {}
        missing = [i for i in ids if i not in found]
        if missing:
            found.update(self._fetch_chunks(f"chunk_id in {lits(missing)}"))
        return [found[i] for i in chunk_ids if i in found]

    def _fetch_chunks(self, expr: str) -> dict[str, Chunk]:
        rows = self._visible(self.conn.query_all(self.chunks_name, expr, CHUNK_FIELDS, what="read chunks"))
        return {r["chunk_id"]: chunk_from_row(r) for r in rows}

    def get_document(self, doc_id: str) -> DocRecord | None:
        rows = self._catalog("read documents", f"key == {lit('doc:' + doc_id)}", ["payload"])
        return from_json(DocRecord, rows[0]["payload"]) if rows else None

    def find_document(self, collection: str, source: str) -> DocRecord | None:
        rows = self._doc_rows(f"collection == {lit(collection)} and source == {lit(source)}", ["payload"])
        return from_json(DocRecord, rows[0]["payload"]) if rows else None

    def list_documents(self, collection: str | None = None) -> list[DocRecord]:
        rows = self._doc_rows(f"collection == {lit(collection)}" if collection is not None else "", ["payload"])
        docs = [from_json(DocRecord, r["payload"]) for r in rows]
        return sorted(docs, key=lambda d: (d.collection, d.source))

    def document_chunks(self, doc_id: str) -> list[Chunk]:
        live = self._live_versions([doc_id])
        if not live or self._dim is None and not self._refresh_dim():
            return []
        expr = f"doc_id == {lit(doc_id)} and version == {live[doc_id]}"
        rows = self.conn.query_all(self.chunks_name, expr, CHUNK_FIELDS, what="read chunks")
        return sorted((chunk_from_row(r) for r in rows), key=lambda c: c.ordinal)

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
        rows = self.conn.query_all(self.catalog_name, f"key in {lits(newest)}", ["key", "payload"], what="read history")
        by_key = {r["key"]: from_json(IngestionRecord, r["payload"]) for r in rows}
        return [by_key[k] for k in newest if k in by_key]

    def __enter__(self) -> MilvusStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write_document(
        self, doc: DocRecord, chunks: Sequence[Chunk], tokens: Sequence[Sequence[str]], vectors: np.ndarray
    ) -> None:
        rows, ids, matrix = prepare_rows(doc, chunks, tokens, vectors)
        dim = matrix.shape[1]
        where = f"cannot write document {doc.doc_id} ({doc.collection}/{doc.source})"
        for chunk in chunks:
            if len(chunk.text.encode()) > MAX_VARCHAR:
                raise StoreError(
                    f"{where}: chunk {chunk.chunk_id} holds more than {MAX_VARCHAR} bytes of text, Milvus's "
                    "limit for one field; lower chunking.size_chars"
                )
        with self._lock:
            self._check_writable()
            keys = lits(["meta:dim", "meta:index_version"])
            meta = {
                r["key"][5:]: r["payload"] for r in self._catalog("read metadata", f"key in {keys}", ["key", "payload"])
            }
            stored_dim = self._stored_dim(meta.get("dim"))
            if rows and stored_dim is not None and stored_dim != dim:
                raise self._mismatch(stored_dim, dim)
            other = self._doc_rows(
                f"collection == {lit(doc.collection)} and source == {lit(doc.source)} and doc_id != {lit(doc.doc_id)}",
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
                expr = f"doc_id == {lit(doc.doc_id)}" + (f" or chunk_id in {lits(ids)}" if ids else "")
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
                chunk_row(c, version, fit_tokens(r[-1]), v.tolist())
                for c, r, v in zip(chunks, rows, matrix, strict=False)
            ]
            try:
                if new_rows:
                    self.conn.upsert(self.chunks_name, new_rows, f"write the chunks of {doc.doc_id}")
                self._upsert_catalog([doc_row(doc, version, sum(len(c.text) for c in chunks))])  # the switch
            except StoreError as e:
                if not isinstance(e, Unreachable):  # unreachable: leftovers stay invisible; the next write removes them
                    self._discard(f"row_id in {lits([r['row_id'] for r in new_rows])}")
                raise
            bump = [meta_row("index_version", str(version))]
            if rows and stored_dim != dim:
                bump.append(meta_row("dim", str(dim)))
            self._upsert_catalog(bump)
            if stale:
                self._discard(f"row_id in {lits(stale)}")

    def _ensure_chunks(self, dim: int) -> None:
        """Create ``<prefix>chunks`` for ``dim``; an empty one of another dim (after a forced rebuild) is recreated."""
        if self._dim is None:
            self._refresh_dim()  # another process may have created it
        if self._dim == dim:
            return
        if self._dim is not None:
            self.conn.call("drop chunks", "drop_collection", self.chunks_name)
            self._dim = None
        # milvus-lite has no `whitespace`; a real Milvus's `standard` splits Chinese into single characters
        analyzer = "standard" if self.conn.is_lite else "whitespace"
        client = self.conn.client
        if self.conn.create(
            self.chunks_name,
            chunks_schema(client, dim, analyzer),
            chunks_index(client),
        ):
            self._upsert_catalog([meta_row("milvus_analyzer", analyzer)])
        self._dim = self._chunks_dim()
        if self._dim != dim:  # another process created it first, for other vectors
            raise self._mismatch(self._dim, dim)

    def _discard(self, expr: str) -> None:
        """Delete chunk rows that no document points at; best effort (leftovers stay invisible)."""
        if self._dim is None and not self._refresh_dim():
            return
        with suppress(StoreError):
            self.conn.call("clean up", "delete", self.chunks_name, filter=expr)

    def delete_document(self, doc_id: str) -> bool:
        with self._lock:
            self._check_writable()
            if not self._live_versions([doc_id]):
                return False
            self.conn.call(f"delete {doc_id}", "delete", self.catalog_name, filter=f"key == {lit('doc:' + doc_id)}")
            version = max(self.index_version() + 1, time.time_ns() // 1000)
            self._upsert_catalog([meta_row("index_version", str(version))])
            self._discard(f"doc_id == {lit(doc_id)}")
        return True

    def record_ingestion(self, record: IngestionRecord) -> None:
        with self._lock:
            self._check_writable()
            self._upsert_catalog([history_row(f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}", record)])

    def get_meta(self) -> dict[str, str]:
        rows = self.conn.query_all(self.catalog_name, 'kind == "meta"', ["key", "payload"], what="read metadata")
        return dict(sorted((r["key"][len("meta:") :], r["payload"]) for r in rows))

    def set_meta(self, values: dict[str, str]) -> None:
        check_meta(values, _MANAGED_META)
        with self._lock:
            self._check_writable()
            self._upsert_catalog([meta_row(k, v) for k, v in values.items()])

    def index_version(self) -> int:
        value = self._meta_value("index_version")
        return int(value) if value and value.isdigit() else 0
