"""Copy a SQLite index into another store (e.g. Milvus) as stored, without re-embedding: one ``write_document``
per document, skipping those already there, so an interrupted migration resumes when run again."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zhiku.errors import StoreError
from zhiku.stores.base import Store
from zhiku.stores.sqlite import SQLiteStore

_MANAGED_META = ("schema_version", "index_version", "index_id")
ProgressFn = Callable[[int, int, str], None]


@dataclass(frozen=True)
class MigrationReport:
    documents: int  # written into the target
    chunks: int
    skipped: int  # already in the target, unchanged
    history: int  # ingestion-history rows copied
    seconds: float


def _tokens_and_vectors(source: SQLiteStore, doc_id: str) -> dict[str, tuple[list[str], np.ndarray]]:
    sql = "SELECT c.chunk_id, f.tokens, c.vector FROM chunks AS c JOIN chunk_tokens AS f ON f.rowid = c.rowid WHERE c.doc_id = ?"
    with source.db.read() as conn:
        rows = conn.execute(sql, (doc_id,)).fetchall()
    return {cid: (tokens.split(), np.frombuffer(blob, "<f4")) for cid, tokens, blob in rows}


def migrate_sqlite(index: Path, target: Store, *, on_progress: ProgressFn | None = None) -> MigrationReport:
    """Copy the SQLite index at ``index`` into ``target`` (any ``Store``; opened for writing)."""
    started = time.perf_counter()
    with SQLiteStore(index, read_only=True) as source:
        meta = {k: v for k, v in source.get_meta().items() if k not in _MANAGED_META}
        if meta:
            target.set_meta(meta)
        docs = source.list_documents()
        written = chunks = skipped = 0
        for n, doc in enumerate(docs):
            if on_progress:
                on_progress(n, len(docs), doc.source)
            if target.get_document(doc.doc_id) == doc:
                skipped += 1
                continue
            doc_chunks = source.document_chunks(doc.doc_id)
            parts = _tokens_and_vectors(source, doc.doc_id)
            if set(parts) != {c.chunk_id for c in doc_chunks}:
                raise StoreError(
                    f"index {index} is inconsistent: document {doc.doc_id} lacks tokens or vectors for "
                    "some chunks; rebuild it with `zhiku ingest PATH --force` before migrating"
                )
            dim = int(meta.get("dim") or 0) or (len(next(iter(parts.values()))[1]) if parts else 0)
            vectors = (
                np.stack([parts[c.chunk_id][1] for c in doc_chunks]) if doc_chunks else np.zeros((0, dim), np.float32)
            )
            target.write_document(doc, doc_chunks, [parts[c.chunk_id][0] for c in doc_chunks], vectors)
            written += 1
            chunks += len(doc_chunks)
        history = source.ingestion_history(limit=10**9)
        present = set(target.ingestion_history(limit=10**9))
        missing = [r for r in reversed(history) if r not in present]
        for record in missing:
            target.record_ingestion(record)
        if on_progress:
            on_progress(len(docs), len(docs), "")
        expected = source.collections()
        names = {c.name for c in expected}
        got = [c for c in target.collections() if c.name in names]
        if got != expected:
            raise StoreError(
                f"after copying, the target holds {got} but {index} holds {expected}: run the migration again"
            )
    return MigrationReport(written, chunks, skipped, len(missing), time.perf_counter() - started)
