"""``MilvusStore``: the ``Store`` protocol on Milvus (standalone, distributed, Zilliz Cloud or milvus-lite).

One zhiku index is two Milvus collections named by ``store.collection_prefix`` (see ``_milvus_schema``):
``<prefix>chunks`` holds every chunk with its BM25 tokens (Milvus's BM25 function) and its vector (HNSW,
COSINE), partitioned by the zhiku collection (partition key); ``<prefix>catalog`` holds the documents,
metadata and ingestion history, so every zhiku process pointed at the same URI and prefix sees them.

Milvus has no multi-row transactions, so a document is replaced in three steps that readers never see
half-done: (1) the new chunks are upserted under a new ``version`` (invisible: no document points at it);
(2) the document's catalog row is upserted with that version — the switch, one row, atomic; (3) the old
version's chunks are deleted. Every read keeps only chunks whose ``version`` is their document's live
version, so a crash between the steps leaves the old or the new document whole, plus invisible rows that
the next write of that document removes. Versions come from ``max(index_version + 1, now in µs)``, so two
writer processes never produce the same one; the newest is also the ``index_version``. Every write is an
upsert or a delete by key, so pymilvus may retry any of them after a lost connection without duplicating
rows. Two processes writing the *same* document at the same moment are not serialised (last switch wins).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

import numpy as np

from zhiku.errors import IndexMismatch, InvalidInput, StoreError
from zhiku.stores import _milvus_schema as ms
from zhiku.stores._milvus_conn import Unreachable
from zhiku.stores._milvus_read import MilvusReads
from zhiku.stores._sqlite_schema import prepare_rows
from zhiku.types import Chunk, DocRecord, IngestionRecord

HNSW_M, HNSW_EF_CONSTRUCTION = 16, 200  # Milvus's usual build parameters, fixed when the index is created
_MANAGED_META = frozenset({"schema_version", "index_version"})


class MilvusStore(MilvusReads):
    """The ``Store`` protocol over Milvus. Thread-safe; writes of one process are serialised by a lock.

    ``read_only=True`` opens an existing index for searching (a missing one raises ``IndexNotFound``); writes
    then raise ``ReadOnlyIndex``.
    """

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
            meta = self._meta_values(["dim", "index_version"])
            stored_dim = self._stored_dim(meta.get("dim"))
            if rows and stored_dim is not None and stored_dim != dim:
                raise IndexMismatch(
                    f"{self.where} holds {stored_dim}-dimensional vectors but got {dim}: the embedder changed; "
                    "rebuild with `zhiku ingest PATH --force` into another store.collection_prefix"
                )
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
                existing = self._query(
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
                    self._upsert(self.chunks_name, new_rows, f"write the chunks of {doc.doc_id}")
                self._upsert_catalog([ms.doc_row(doc, version, sum(len(c.text) for c in chunks))])  # the switch
            except StoreError as e:
                if not isinstance(
                    e, Unreachable
                ):  # unreachable: the leftovers stay invisible; the next write removes them
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
            raise IndexMismatch(
                f"{self.where} holds {self._dim}-dimensional vectors but got {dim}: the embedder changed; "
                "rebuild with `zhiku ingest PATH --force` into another store.collection_prefix"
            )

    def _next_version(self) -> int:
        return max(self.index_version() + 1, time.time_ns() // 1000)

    def _discard(self, expr: str) -> None:
        """Delete chunk rows that no document points at; best effort (leftovers stay invisible)."""
        if self._dim is None and not self._refresh_dim():
            return
        try:
            self._call("clean up", "delete", self.chunks_name, filter=expr)
        except StoreError:
            pass

    def delete_document(self, doc_id: str) -> bool:
        with self._lock:
            self._check_writable()
            if not self._live_versions([doc_id]):
                return False
            self._call(f"delete {doc_id}", "delete", self.catalog_name, filter=f"key == {ms.lit('doc:' + doc_id)}")
            self._upsert_catalog([ms.meta_row("index_version", str(self._next_version()))])
            self._discard(f"doc_id == {ms.lit(doc_id)}")
        return True

    def record_ingestion(self, record: IngestionRecord) -> None:
        with self._lock:
            self._check_writable()
            self._upsert_catalog([ms.history_row(f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}", record)])

    def get_meta(self) -> dict[str, str]:
        rows = self._query(self.catalog_name, 'kind == "meta"', ["key", "payload"], what="read metadata")
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


__all__ = ["MilvusStore"]
