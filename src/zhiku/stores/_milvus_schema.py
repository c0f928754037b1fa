"""The Milvus layout of an index: two collections, their schemas, and the codecs between records and rows."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from functools import cache
from typing import Any, TypeVar, cast

from pydantic import TypeAdapter

from zhiku.types import Chunk, DocRecord, IngestionRecord

SCHEMA_VERSION = 1
CHUNKS = "chunks"
CATALOG = "catalog"
MAX_VARCHAR = 65535  # bytes (UTF-8): Milvus's default limit for one VARCHAR value
PLACEHOLDER = [0.0, 0.0]  # the catalog's vector
# Chunk fields kept as scalar columns (filters, display); the rest travels in ``payload``.
CHUNK_COLUMNS = ("chunk_id", "doc_id", "collection", "source", "doc_type", "section", "page", "text")
CHUNK_FIELDS = ["row_id", *CHUNK_COLUMNS, "version", "payload"]
DOC_FIELDS = ["key", "doc_id", "version", "payload"]

T = TypeVar("T")
SCHEMA = f"(schema {SCHEMA_VERSION})"  # in each collection's description


# --- literals in filter expressions ------------------------------------------------------------------
_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"})


def lit(value: str) -> str:
    """``value`` as a double-quoted Milvus expression string (``\\``, ``"``, and line breaks escaped)."""
    return f'"{value.translate(_ESCAPES)}"'


def lits(values: Sequence[str]) -> str:
    """``values`` as a Milvus list literal, e.g. ``["a", "b"]``."""
    return "[" + ", ".join(lit(v) for v in values) + "]"


# --- records <-> JSON -------------------------------------------------------------------------------
def to_json(obj: Any) -> str:
    """A dataclass (nested ones, tuples and str-enums included) as compact JSON."""
    return json.dumps(dataclasses.asdict(obj), ensure_ascii=False, separators=(",", ":"))


@cache
def _adapter(cls: type) -> TypeAdapter[Any]:
    return TypeAdapter(cls)


def from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """The dataclass ``cls`` from ``data`` (as ``to_json`` wrote it); missing fields take their defaults."""
    klass: Any = cls  # a dataclass type (hashable; T is unbound for mypy)
    return cast(T, _adapter(klass).validate_python(data))


def from_json(cls: type[T], text: str) -> T:
    return from_dict(cls, json.loads(text))


# --- rows --------------------------------------------------------------------------------------------
def chunk_row(chunk: Chunk, version: int, tokens: str, vector: list[float]) -> dict[str, Any]:
    data = dataclasses.asdict(chunk)
    row = {name: data.pop(name) for name in CHUNK_COLUMNS}
    row.update(
        row_id=f"{chunk.chunk_id}@{version}",
        version=version,
        tokens=tokens,
        vector=vector,
        payload=json.dumps(data, ensure_ascii=False, separators=(",", ":")),
    )
    return row


def chunk_from_row(row: dict[str, Any]) -> Chunk:
    data = json.loads(row["payload"])
    data.update({name: row[name] for name in CHUNK_COLUMNS})
    return from_dict(Chunk, data)


def _catalog_row(key: str, kind: str, payload: str, **fields: Any) -> dict[str, Any]:
    row = {"key": key, "kind": kind, "doc_id": "", "collection": "", "source": "", "version": 0, "chunk_count": 0}
    return {**row, "chars": 0, "at": 0.0, **fields, "payload": payload, "placeholder": PLACEHOLDER}


def doc_row(doc: DocRecord, version: int, chars: int) -> dict[str, Any]:
    return _catalog_row(
        f"doc:{doc.doc_id}",
        "doc",
        to_json(doc),
        doc_id=doc.doc_id,
        collection=doc.collection,
        source=doc.source,
        version=version,
        chunk_count=doc.chunk_count,
        chars=chars,
        at=float(doc.ingested_at),
    )


def meta_row(key: str, value: str) -> dict[str, Any]:
    return _catalog_row(f"meta:{key}", "meta", value)


def history_row(key: str, record: IngestionRecord) -> dict[str, Any]:
    fields = {"collection": record.collection, "source": record.path, "chunk_count": record.chunk_count}
    return _catalog_row(f"hist:{key}", "hist", to_json(record), **fields, at=float(record.at))


def fit_tokens(text: str, limit: int = MAX_VARCHAR) -> str:
    """``text`` cut at a token boundary to at most ``limit`` UTF-8 bytes (Milvus's VARCHAR limit)."""
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[:limit].decode(errors="ignore").rsplit(" ", 1)[0]


# --- schemas -----------------------------------------------------------------------------------------
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


def chunks_index(client: Any, m: int, ef_construction: int) -> Any:
    params = client.prepare_index_params()
    params.add_index(
        "vector", index_type="HNSW", metric_type="COSINE", params={"M": m, "efConstruction": ef_construction}
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
