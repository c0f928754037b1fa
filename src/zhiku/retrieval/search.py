"""The query pipeline: parse → BM25 (the query is embedded meanwhile in a worker) → dense → fusion → rerank."""

from __future__ import annotations

import contextvars
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from zhiku.embedding.base import Embedder
from zhiku.errors import InvalidInput
from zhiku.observability.rank_changes import changes_data, fusion_rank_changes, rank_changes
from zhiku.observability.tracing import mark, ranking_rows, span
from zhiku.retrieval.context import whole_articles
from zhiku.retrieval.fusion import ranked, rrf, zscore_fusion
from zhiku.retrieval.gate import FairGate
from zhiku.retrieval.rerank import Reranker, rerank_with_fallback, reranker_name
from zhiku.settings import RerankSettings, RetrievalSettings
from zhiku.stores.base import Catalogue, Retriever
from zhiku.text import TextProcessor, query_clauses
from zhiku.types import Filters, Hit, ScoredId, SearchMode

MODES: tuple[SearchMode, ...] = ("bm25", "dense", "hybrid")
MAX_TOP_K = 100
DENSE_WORKERS = 8  # dense channels running at once, across concurrent searches


@dataclass(frozen=True)
class ParsedQuery:
    text: str  # as the user wrote it (stripped)
    terms: tuple[str, ...]  # BM25 terms after normalisation, segmentation and stopword removal


def parse_query(query: str, text: TextProcessor, *, max_chars: int) -> ParsedQuery:
    if not isinstance(query, str) or not query.strip():
        raise InvalidInput("the query is empty: ask a question, e.g. 试用期最长多久")
    query = query.strip()
    if len(query) > max_chars:
        raise InvalidInput(
            f"the query has {len(query)} characters; the limit is {max_chars} (retrieval.max_query_chars)"
        )
    return ParsedQuery(text=query, terms=tuple(text.query_tokens(query)))


def check_top_k(top_k: int) -> int:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
        raise InvalidInput(f"top_k must be an integer from 1 to {MAX_TOP_K}, got {top_k!r}")
    return top_k


def check_mode(mode: str) -> SearchMode:
    if mode not in MODES:
        raise InvalidInput(f"unknown search mode {mode!r}: use one of {', '.join(MODES)}")
    return mode


@dataclass(frozen=True)
class Retrieval:
    """Everything one search produced, stage by stage (for answers, traces and evaluation)."""

    query: ParsedQuery
    mode: SearchMode
    bm25: tuple[ScoredId, ...]
    dense: tuple[ScoredId, ...]
    hits: tuple[Hit, ...]
    rerank: str = "off"  # "off" | "ok" | "fallback: <reason>" (the hits then keep the fused order)
    rewrite: str = "off"  # query rewriting (retrieval/rewrite.py): "off" | "ok" | "fallback: <reason>"
    queries: tuple[str, ...] = ()  # the rewritten queries searched besides the original
    clauses: tuple[ScoredId, ...] = ()  # the clause channel (retrieval.clause_weight): best cosine over the clauses


@dataclass(frozen=True)
class DenseResult:
    """What the dense worker found: the question's vector and ranking, and its clauses' vectors (none when the
    question is one clause or the clause channel is off)."""

    vector: np.ndarray | None = None
    ranking: tuple[ScoredId, ...] = ()
    clause_vectors: tuple[np.ndarray, ...] = ()


class Searcher:
    """Runs searches over a ``Store`` with an ``Embedder``; safe to call from several threads."""

    def __init__(
        self,
        store: Retriever,
        embedder: Embedder,
        text: TextProcessor,
        settings: RetrievalSettings,
        reranker: Reranker | None = None,
        rerank: RerankSettings | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.text = text
        self.settings = settings
        self.reranker = reranker
        self.rerank_settings = rerank or RerankSettings()
        # concurrent searches each run their dense channel at once (the store holds no lock while scoring)
        self._pool = ThreadPoolExecutor(max_workers=DENSE_WORKERS, thread_name_prefix="zhiku-dense")
        # the CPU-bound steps (store searches, fusion, hits) of at most this many searches at once; embedding
        # the question and reranking stay outside, so a remote model's latency never holds a place
        self._gate = FairGate(settings.max_concurrent or 2 * (os.cpu_count() or 1))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def search(
        self,
        query: str,
        *,
        top_k: int | None = None,
        mode: str | None = None,
        filters: Filters = Filters(),
        per_source_k: int | None = None,
        rerank: bool | None = None,
    ) -> Retrieval:
        """``rerank``: None runs the configured reranker (if any), False skips it, True requires one."""
        s = self.settings
        top_k = check_top_k(s.top_k if top_k is None else top_k)
        mode_ = check_mode(s.mode if mode is None else mode)
        if rerank and self.reranker is None:
            raise InvalidInput(
                "no reranker is configured: set rerank.provider (cross-encoder or llm) and rerank.model, "
                "e.g. ZHIKU_RERANK__PROVIDER=cross-encoder ZHIKU_RERANK__MODEL=BAAI/bge-reranker-v2-m3"
            )
        reranker = self.reranker if rerank is not False else None
        final_k = top_k
        if reranker is not None:  # the reranker sees top_m fused candidates; it keeps at most rerank.top_k
            final_k = min(top_k, self.rerank_settings.top_k or top_k)
            top_k = max(top_k, self.rerank_settings.top_m)
        with span("parse") as sp:
            parsed = parse_query(query, self.text, max_chars=s.max_query_chars)
            sp.set(counts={"terms": len(parsed.terms)}, terms=list(parsed.terms))
        depth = max(per_source_k or s.per_source_k, top_k)

        dense_future = None
        if mode_ in ("dense", "hybrid"):
            clauses = self._clauses_of(parsed.text) if mode_ == "hybrid" else []  # the clause channel's
            run = contextvars.copy_context().run
            dense_future = self._pool.submit(run, self._dense, parsed.text, depth, filters, clauses)
        bm25: list[ScoredId] = []
        if mode_ in ("bm25", "hybrid"):
            with span("bm25") as sp:
                with self._gate:
                    bm25 = self.store.bm25_search(parsed.terms, depth, filters)
                sp.ranking(bm25, depth=depth)
        else:
            mark("bm25", reason=f"mode {mode_}")
        if dense_future is None:
            mark("dense", reason=f"mode {mode_}")
        found = dense_future.result() if dense_future is not None else DenseResult()

        with self._gate:
            by_clause = self._clause_ranking(bm25, found) if found.clause_vectors else []
            hits = self._hits(mode_, bm25, found, by_clause, top_k)
        status = "off"
        if reranker is None:
            mark("rerank", reason="no reranker configured" if self.reranker is None else "switched off for this query")
        else:
            hits, status = self._rerank(reranker, parsed.text, hits, final_k)
        return Retrieval(parsed, mode_, tuple(bm25), found.ranking, tuple(hits), status, clauses=tuple(by_clause))

    def _clauses_of(self, query: str) -> list[str]:
        """The clauses to embed beside the whole question: z-score fusion with a clause weight only."""
        s = self.settings
        if s.fusion != "zscore" or s.clause_weight <= 0:
            return []
        return query_clauses(query, max_clauses=s.max_clauses)

    def _rerank(self, reranker: Reranker, query: str, hits: list[Hit], top_k: int) -> tuple[list[Hit], str]:
        r = self.rerank_settings
        with span("rerank") as sp:
            outcome = rerank_with_fallback(reranker, query, hits, top_m=r.top_m, top_k=top_k, timeout=r.timeout)
            if sp.active:
                candidates = min(r.top_m, len(hits))
                data: dict[str, Any] = {"reranker": reranker_name(reranker), "top_m": r.top_m, "timeout_s": r.timeout}
                if outcome.ok:
                    changes = rank_changes(
                        {h.chunk.chunk_id: n for n, h in enumerate(hits[:candidates], 1)},
                        [h.chunk.chunk_id for h in outcome.hits if h.rerank_rank is not None],
                    )
                    scores = [
                        {
                            "chunk_id": h.chunk.chunk_id,
                            "rerank_rank": h.rerank_rank,
                            "fused_rank": h.fused_rank,
                            "raw": round(h.rerank_score, 6),
                            "sigmoid": round(h.rerank_sigmoid or 0.0, 6),
                        }
                        for h in outcome.hits
                        if h.rerank_score is not None
                    ]
                    sp.set(
                        counts={"candidates": candidates, "returned": len(outcome.hits)},
                        scores=scores,
                        **data,
                        **changes_data(changes, keep_dropped_within=top_k),
                    )
                else:
                    sp.set(
                        counts={"candidates": candidates, "returned": len(outcome.hits)},
                        status="fallback",
                        reason=outcome.status.removeprefix("fallback: "),
                        **data,
                    )
        return list(outcome.hits), outcome.status

    def _hits(
        self, mode_: SearchMode, bm25: list[ScoredId], found: DenseResult, clauses: list[ScoredId], top_k: int
    ) -> list[Hit]:
        """Fuse (or take the one channel), fetch the chunks, and let a piece bring its article (small-to-big)."""
        s = self.settings
        keep = 2 * top_k if s.whole_articles else top_k  # pieces of one article become one hit: keep spares
        dense = list(found.ranking)
        filled: dict[str, float] = {}
        if mode_ == "bm25":
            order = [(x.chunk_id, x.score) for x in bm25][:keep]
        elif mode_ == "dense":
            order = [(x.chunk_id, x.score) for x in dense][:keep]
        else:
            order, filled = self._fuse(bm25, found, clauses, top_k, keep)
        if mode_ != "hybrid":
            mark("fusion", reason=f"mode {mode_}: one channel, nothing to fuse")

        by_bm25 = {x.chunk_id: x for x in bm25}
        by_dense = {x.chunk_id: x for x in dense}
        chunks = {c.chunk_id: c for c in self.store.get_chunks([cid for cid, _ in order])}
        hits = []
        for fused_rank, (cid, score) in enumerate(order, 1):
            if cid not in chunks:  # deleted between retrieval and fetch
                continue
            b, d = by_bm25.get(cid), by_dense.get(cid)
            hits.append(
                Hit(
                    chunk=chunks[cid],
                    score=float(score),
                    bm25_rank=b.rank if b else None,
                    bm25_score=b.score if b else None,
                    dense_rank=d.rank if d else None,
                    dense_score=d.score if d else filled.get(cid),
                    fused_rank=fused_rank,
                )
            )
        if s.whole_articles and isinstance(self.store, Catalogue):  # small-to-big: a piece brings its article
            hits = whole_articles(hits, self.store.document_chunks)[:top_k]
        return hits

    def _dense(self, query: str, depth: int, filters: Filters, clauses: list[str]) -> DenseResult:
        with span("dense") as sp:
            vector = self.embedder.embed_query(query)
            with self._gate:
                found = self.store.dense_search(vector, depth, filters)
            sp.ranking(found, depth=depth)
            vectors = tuple(self.embedder.embed_query(c) for c in clauses)  # the clause channel's
            if clauses:
                sp.set(counts={"clauses": len(clauses)}, clauses=list(clauses))
        return DenseResult(vector, tuple(found), vectors)

    def _clause_ranking(self, bm25: list[ScoredId], found: DenseResult) -> list[ScoredId]:
        """The clause channel: every candidate of the BM25 and dense rankings scored by its best cosine over the
        question's clauses (no search of its own: it re-orders the candidates, it never adds one)."""
        candidates = list(dict.fromkeys(x.chunk_id for x in (*bm25, *found.ranking)))
        best: dict[str, float] = {}
        for v in found.clause_vectors:
            for c, x in self.store.dense_scores(v, candidates).items():
                best[c] = max(x, best.get(c, x))
        return ranked(sorted(best.items(), key=lambda kv: (-kv[1], kv[0])))

    def _fuse(
        self, bm25: list[ScoredId], found: DenseResult, clauses: list[ScoredId], top_k: int, keep: int
    ) -> tuple[list[tuple[str, float]], dict[str, float]]:
        """The fused order (``keep`` long) and the exact cosines filled in for BM25 candidates outside the dense
        ranking (``retrieval.fill_dense``, z-score fusion only); ``clauses``: the clause channel's ranking."""
        s = self.settings
        dense = list(found.ranking)
        with span("fusion") as sp:
            weights = [s.bm25_weight, s.dense_weight]
            filled: dict[str, float] = {}
            if s.fusion == "rrf":
                order = rrf([bm25, dense], k=s.rrf_k, weights=weights)[:keep]
            else:
                if s.fill_dense and dense and found.vector is not None:
                    seen = {x.chunk_id for x in dense}
                    missing = [x.chunk_id for x in bm25 if x.chunk_id not in seen]
                    filled = self.store.dense_scores(found.vector, missing) if missing else {}
                rankings, fill = [bm25, dense], [None, filled]
                if clauses:  # the clause channel (retrieval.clause_weight)
                    rankings, fill, weights = [*rankings, clauses], [*fill, None], [*weights, s.clause_weight]
                order = zscore_fusion(rankings, weights=weights, fill=fill)[:keep]
            if sp.active:  # rank changes cost a few dict operations: only when traced
                changes = fusion_rank_changes(bm25, dense, [c for c, _ in order[:top_k]])
                sp.set(
                    counts={"candidates": len(changes), "returned": len(order[:top_k])},
                    method=s.fusion,
                    dense_filled=len(filled),  # BM25 candidates given their exact cosine (retrieval.fill_dense)
                    clause_ranking=ranking_rows(clauses),  # the clause channel (retrieval.clause_weight)
                    rrf_k=s.rrf_k,
                    weights=weights,
                    **changes_data(changes, keep_dropped_within=top_k),
                )
        return order, filled
