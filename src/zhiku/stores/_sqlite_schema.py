"""The SQLite schema of an index, and the validated rows one document write inserts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, astuple, fields
from typing import Any

import numpy as np

from zhiku.errors import StoreError
from zhiku.types import Chunk, DocRecord, DocStatus, ImageRef

DB_NAME = "zhiku.db"
SCHEMA_VERSION = 4

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    doc_id TEXT PRIMARY KEY, collection TEXT NOT NULL, source TEXT NOT NULL, path TEXT NOT NULL,
    doc_type TEXT NOT NULL, title TEXT NOT NULL, sha256 TEXT NOT NULL, size INTEGER NOT NULL,
    chunk_count INTEGER NOT NULL, pages INTEGER, ingested_at REAL NOT NULL, chars INTEGER NOT NULL,
    status TEXT NOT NULL DEFAULT 'ready', needs_ocr_pages TEXT NOT NULL DEFAULT '[]',
    ocr_pages TEXT NOT NULL DEFAULT '[]',
    UNIQUE (collection, source));
CREATE TABLE IF NOT EXISTS chunks (
    rowid INTEGER PRIMARY KEY, chunk_id TEXT NOT NULL UNIQUE,
    doc_id TEXT NOT NULL REFERENCES documents (doc_id) ON DELETE CASCADE,
    collection TEXT NOT NULL, source TEXT NOT NULL, doc_type TEXT NOT NULL, section TEXT NOT NULL,
    page INTEGER, start INTEGER NOT NULL, "end" INTEGER NOT NULL, ordinal INTEGER NOT NULL,
    text TEXT NOT NULL, vector BLOB NOT NULL, images TEXT NOT NULL DEFAULT '[]');
CREATE INDEX IF NOT EXISTS chunks_by_doc ON chunks (doc_id, ordinal);
CREATE TABLE IF NOT EXISTS chunk_tokens (rowid INTEGER PRIMARY KEY, tokens TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS ingestion_history (
    id INTEGER PRIMARY KEY, path TEXT NOT NULL, collection TEXT NOT NULL, sha256 TEXT, size INTEGER,
    status TEXT NOT NULL, error TEXT, chunk_count INTEGER NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS ingestion_history_by_at ON ingestion_history (at);
CREATE TABLE IF NOT EXISTS tombstones (rowid INTEGER PRIMARY KEY, version INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS tombstones_by_version ON tombstones (version);
"""
# CRC-32s of the vector files' row blocks (_vector_files), created on an older index by its next writable open
SUMS_TABLE = """CREATE TABLE IF NOT EXISTS vector_sums (gen INTEGER NOT NULL, block INTEGER NOT NULL,
    rows INTEGER NOT NULL, f32 INTEGER NOT NULL, i8 INTEGER NOT NULL, PRIMARY KEY (gen, block));"""
CHUNK_COLS = 'chunk_id, doc_id, collection, source, doc_type, section, page, start, "end", ordinal, text, images'
DOC_COLS = (
    "doc_id, collection, source, path, doc_type, title, sha256, size, chunk_count, pages, ingested_at, "
    "status, needs_ocr_pages, ocr_pages"
)
HISTORY_COLS = "path, collection, sha256, size, status, error, chunk_count, at"

# Upgrades of an older index, by the version they start from; each leaves the data as it was.
MIGRATIONS: dict[int, str] = {
    1: """ALTER TABLE documents ADD COLUMN status TEXT NOT NULL DEFAULT 'ready';
ALTER TABLE documents ADD COLUMN needs_ocr_pages TEXT NOT NULL DEFAULT '[]';
ALTER TABLE documents ADD COLUMN ocr_pages TEXT NOT NULL DEFAULT '[]';
ALTER TABLE chunks ADD COLUMN images TEXT NOT NULL DEFAULT '[]';""",
    # 3: deleted chunks' rowids (never reused), so the vector file and other processes update incrementally
    2: """CREATE TABLE IF NOT EXISTS tombstones (rowid INTEGER PRIMARY KEY, version INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS tombstones_by_version ON tombstones (version);
CREATE INDEX IF NOT EXISTS chunks_by_doc ON chunks (doc_id, ordinal);""",
    # 4: BM25 is scored from segment files beside the database (_bm25), built from the chunks' tokens in a plain
    # table; the FTS5 table (and schema 3's term_df) are no longer written
    3: """CREATE TABLE IF NOT EXISTS chunk_tokens (rowid INTEGER PRIMARY KEY, tokens TEXT NOT NULL);
INSERT INTO chunk_tokens (rowid, tokens) SELECT f.rowid, f.tokens FROM fts AS f JOIN chunks AS c ON c.rowid = f.rowid;
DROP TABLE fts;
DROP TABLE IF EXISTS term_df;
INSERT OR IGNORE INTO meta VALUES ('index_id', lower(hex(randomblob(16))));""",
}


def doc_row(doc: DocRecord) -> tuple[Any, ...]:
    """``doc`` as the values of ``DOC_COLS``."""
    pages = (json.dumps(list(doc.needs_ocr_pages)), json.dumps(list(doc.ocr_pages)))
    return (*astuple(doc)[:11], DocStatus(doc.status).value, *pages)


def doc_from_row(row: Sequence[Any]) -> DocRecord:
    """A ``DocRecord`` from the values of ``DOC_COLS``."""
    pages = tuple(json.loads(row[12])), tuple(json.loads(row[13]))
    return DocRecord(*row[:11], DocStatus(row[11]), *pages)  # type: ignore[call-arg]  # mypy cannot count a slice


def chunk_row(chunk: Chunk) -> tuple[Any, ...]:
    """``chunk`` as the values of ``CHUNK_COLS`` (its fields in order, the images as JSON)."""
    images = json.dumps([asdict(i) for i in chunk.images], ensure_ascii=False) if chunk.images else "[]"
    return (*(getattr(chunk, f.name) for f in fields(Chunk)[:11]), images)


def chunk_from_row(row: Sequence[Any]) -> Chunk:
    """A ``Chunk`` from the values of ``CHUNK_COLS``."""
    found = json.loads(row[11]) if row[11] != "[]" else []
    images = tuple(ImageRef(**{**d, "bbox": tuple(d["bbox"]) if d.get("bbox") is not None else None}) for d in found)
    return Chunk(*row[:11], images=images)  # type: ignore[misc]  # as in doc_from_row


def prepare_rows(
    doc: DocRecord, chunks: Sequence[Chunk], tokens: Sequence[Sequence[str]], vectors: Any
) -> tuple[list[tuple[Any, ...]], list[str], np.ndarray]:
    """Validate a document write and build its rows; raises ``StoreError`` before anything is touched."""
    where = f"cannot write document {doc.doc_id} ({doc.collection}/{doc.source})"
    try:
        DocStatus(doc.status)
    except ValueError:
        raise StoreError(
            f"{where}: unknown status {doc.status!r} (one of: {', '.join(s.value for s in DocStatus)})"
        ) from None
    try:
        matrix = np.ascontiguousarray(vectors, dtype="<f4")
    except (TypeError, ValueError) as e:
        raise StoreError(f"{where}: vectors are not a float array: {e}") from None
    if len(chunks) == 0 and matrix.size == 0:
        matrix = matrix.reshape(0, matrix.shape[-1] if matrix.ndim == 2 else 0)
    if matrix.ndim != 2:
        raise StoreError(f"{where}: vectors must be a 2-D array (chunks x dim), got shape {matrix.shape}")
    if not len(chunks) == len(tokens) == matrix.shape[0]:
        raise StoreError(
            f"{where}: got {len(chunks)} chunks, {len(tokens)} token lists and {matrix.shape[0]} vectors; they must match one to one"
        )
    if len(chunks) and matrix.shape[1] == 0:
        raise StoreError(f"{where}: vectors have no dimensions (shape {matrix.shape})")
    if not np.isfinite(matrix).all():
        raise StoreError(f"{where}: vectors contain NaN or infinite values; check the embedder")
    if doc.chunk_count != len(chunks):
        raise StoreError(f"{where}: doc.chunk_count is {doc.chunk_count} but {len(chunks)} chunks were given")
    for chunk in chunks:
        for field in ("doc_id", "collection", "source", "doc_type"):
            if getattr(chunk, field) != getattr(doc, field):
                raise StoreError(
                    f"{where}: chunk {chunk.chunk_id} has {field}={getattr(chunk, field)!r} but the document has {getattr(doc, field)!r}"
                )
    ids = [c.chunk_id for c in chunks]
    if len(set(ids)) != len(ids):
        raise StoreError(f"{where}: duplicate chunk ids in one document")
    if any(isinstance(terms, str) for terms in tokens):
        raise StoreError(f"{where}: tokens[i] must be a list of index terms, not a string")
    try:
        texts = [" ".join(terms) for terms in tokens]
    except TypeError as e:
        raise StoreError(f"{where}: tokens must be lists of strings: {e}") from None
    rows = [(*chunk_row(c), vector.tobytes(), text) for c, vector, text in zip(chunks, matrix, texts, strict=False)]
    return rows, ids, matrix
