"""Searching and reading a zhiku index in Milvus: the ``Retriever`` and ``Catalogue`` roles of ``MilvusStore``.

Every read keeps only chunks whose ``version`` is their document's live version (see ``milvus``).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from zhiku.errors import IndexMismatch, InvalidInput, StoreError
from zhiku.stores import _milvus_schema as ms
from zhiku.stores._milvus_base import MAX_TOPK, MilvusBase
from zhiku.stores._vectors import match_sources
from zhiku.types import Chunk, CollectionStats, DocRecord, Filters, IngestionRecord, ScoredId

log = logging.getLogger(__name__)
HNSW_EF = 128  # HNSW candidates at search time, raised to the results asked for: near-exact recall at top-k 100


class MilvusReads(MilvusBase):
    """BM25, dense and hybrid search, chunk and document reads."""

    # --- searching -----------------------------------------------------------------------------------
    def _filter_expr(self, filters: Filters) -> str | None:
        """The Milvus expression for ``filters``: ``""`` for none, ``None`` when nothing can match."""
        parts = []
        for column, value in (("collection", filters.collection), ("doc_type", filters.doc_type)):
            if value is not None:
                parts.append(f"{column} == {ms.lit(value)}")
        if filters.source_glob is not None:
            where = f"collection == {ms.lit(filters.collection)}" if filters.collection is not None else ""
            sources = match_sources({r["source"] for r in self._doc_rows(where, ["source"])}, filters.source_glob)
            if not sources:
                return None
            parts.append(f"source in {ms.lits(sorted(sources))}")
        return " and ".join(parts)

    def _search(self, data: Any, field: str, params: dict[str, Any], top_k: int, filters: Filters) -> list[ScoredId]:
        if top_k < 1 or self._dim is None and not self._refresh_dim():
            return []
        expr = self._filter_expr(filters)
        if expr is None:
            return []
        top_k = min(int(top_k), MAX_TOPK)
        limit = top_k
        while True:
            if field == "vector":
                params = {**params, "params": {"ef": max(HNSW_EF, limit)}}
            raw = self._call(
                "search",
                "search",
                self.chunks_name,
                data=[data],
                anns_field=field,
                filter=expr,
                limit=limit,
                output_fields=["chunk_id", "doc_id", "version"],
                search_params=params,
            )[0]
            rows = [{**hit["entity"], "score": abs(float(hit["distance"]))} for hit in raw]
            visible = self._visible(rows)
            if len(visible) >= top_k or len(rows) < limit or limit >= MAX_TOPK:
                break
            limit = min(MAX_TOPK, 2 * limit + len(rows) - len(visible))
        visible.sort(key=lambda r: (-r["score"], r["chunk_id"]))
        self._remember(visible[:top_k])
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
            raise IndexMismatch(
                f"{self.where} holds {self._dim}-dimensional vectors but got {query.size}: the embedder "
                "changed; rebuild with `zhiku ingest PATH --force` into another store.collection_prefix"
            )
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
        raw = self._call(
            "search",
            "search",
            self.chunks_name,
            data=[query.tolist()],
            anns_field="vector",
            filter=f"chunk_id in {ms.lits(ids)}",
            limit=limit,
            output_fields=["chunk_id", "doc_id", "version"],
            search_params={"metric_type": "COSINE", "params": {"ef": max(HNSW_EF, limit)}},
        )[0]
        rows = self._visible([{**hit["entity"], "score": abs(float(hit["distance"]))} for hit in raw])
        return {r["chunk_id"]: r["score"] for r in rows}

    def hybrid_search(
        self,
        terms: Sequence[str],
        vector: np.ndarray,
        top_k: int,
        filters: Filters = Filters(),
        *,
        rrf_k: int = 60,
        depth: int | None = None,
    ) -> list[ScoredId]:
        """BM25 and dense fused by Milvus itself (``hybrid_search`` + ``RRFRanker(rrf_k)``), best first.

        Not used by ``Searcher``, which fuses in Python (channel weights, per-channel evidence for traces); it
        gives the same order as ``zhiku.retrieval.fusion.rrf`` over ``bm25_search`` and ``dense_search`` with equal
        weights and the same ``depth`` per channel, up to ties.
        """
        from pymilvus import AnnSearchRequest, RRFRanker

        unique = [t for t in dict.fromkeys(terms) if any(ch.isalnum() for ch in t)]
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if top_k < 1 or self._dim is None and not self._refresh_dim():
            return []
        expr = self._filter_expr(filters)
        if expr is None:
            return []
        depth = min(max(depth or top_k, top_k), MAX_TOPK)
        requests = [
            AnnSearchRequest(
                data=[query.tolist()],
                anns_field="vector",
                limit=depth,
                expr=expr,
                param={"metric_type": "COSINE", "params": {"ef": max(HNSW_EF, depth)}},
            )
        ]
        if unique:
            requests.insert(
                0,
                AnnSearchRequest(
                    data=[" ".join(unique)], anns_field="sparse", limit=depth, expr=expr, param={"metric_type": "BM25"}
                ),
            )
        raw = self._call(
            "hybrid search",
            "hybrid_search",
            self.chunks_name,
            requests,
            RRFRanker(rrf_k),
            limit=depth,
            output_fields=["chunk_id", "doc_id", "version"],
        )[0]
        visible = self._visible([{**hit["entity"], "score": float(hit["distance"])} for hit in raw])
        visible.sort(key=lambda r: (-r["score"], r["chunk_id"]))
        return [ScoredId(r["chunk_id"], r["score"], rank) for rank, r in enumerate(visible[:top_k], 1)]

    # --- reading -------------------------------------------------------------------------------------
    def get_chunks(self, chunk_ids: Sequence[str]) -> list[Chunk]:
        """By primary key (``<chunk_id>@<version>``) for chunks this store just found in a search, by ``chunk_id``
        for the rest (and for any whose version changed since)."""
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
        rows = self._visible(self._query(self.chunks_name, expr, ms.CHUNK_FIELDS, what="read chunks"))
        return {r["chunk_id"]: ms.chunk_from_row(r) for r in rows}

    def _remember(self, rows: Sequence[dict[str, Any]]) -> None:
        """Keep the versions of chunks just found, so that ``get_chunks`` can fetch them by primary key."""
        for r in rows:
            self._seen.put(r["chunk_id"], int(r["version"]))

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
        rows = self._query(
            self.chunks_name,
            f"doc_id == {ms.lit(doc_id)} and version == {live[doc_id]}",
            ms.CHUNK_FIELDS,
            what="read chunks",
        )
        return sorted((ms.chunk_from_row(r) for r in rows), key=lambda c: c.ordinal)

    def collections(self) -> list[CollectionStats]:
        totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for r in self._doc_rows("", ["collection", "chunk_count", "chars"]):
            t = totals[r["collection"]]
            t[0] += 1
            t[1] += int(r["chunk_count"])
            t[2] += int(r["chars"])
        return [CollectionStats(name, *t) for name, t in sorted(totals.items())]

    def ingestion_history(self, limit: int = 100) -> list[IngestionRecord]:
        keys = self._query(self.catalog_name, 'kind == "hist"', ["key", "at"], what="read history")
        newest = [r["key"] for r in sorted(keys, key=lambda r: (r["at"], r["key"]), reverse=True)[: max(int(limit), 0)]]
        if not newest:
            return []
        rows = self._query(self.catalog_name, f"key in {ms.lits(newest)}", ["key", "payload"], what="read history")
        by_key = {r["key"]: ms.from_json(IngestionRecord, r["payload"]) for r in rows}
        return [by_key[k] for k in newest if k in by_key]

    # --- metadata ------------------------------------------------------------------------------------


__all__ = ["MilvusReads"]
