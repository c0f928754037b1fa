"""The query pipeline: parse → BM25 (a slow embedder embeds the query meanwhile in a worker) → dense → fusion → rerank."""

from __future__ import annotations

import contextvars
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from zhiku.embedding.base import Embedder, embed_queries, takes_several_queries
from zhiku.errors import InvalidInput
from zhiku.observability.tracing import mark, span
from zhiku.retrieval.clauses import CLAUSE_WEIGHT, clause_ranking, clauses_to_embed, embed_clauses
from zhiku.retrieval.context import WHOLE_ARTICLES, Runs, whole_articles
from zhiku.retrieval.core_path import CorePath, fusion_recorded
from zhiku.retrieval.fusion import FILL_DENSE, RRF_K, WEIGHTS, columns_of, positions, rrf, zscore_fusion
from zhiku.retrieval.gate import FairGate
from zhiku.retrieval.named import named_articles_first, named_articles_kept
from zhiku.retrieval.pages import lookup_pages
from zhiku.retrieval.query import MAX_QUERY_CHARS, ParsedQuery, QueryVectors, check_mode, check_top_k, parse_query
from zhiku.retrieval.rerank import TOP_M, Reranker, rerank_traced
from zhiku.settings import RerankSettings, RetrievalSettings
from zhiku.stores.base import Catalogue, OneVersion, Retriever
from zhiku.text import TextProcessor, article_numbers
from zhiku.types import Chunk, Filters, Hit, ScoredId, SearchMode, frozen

DENSE_WORKERS = 8  # dense channels running at once, across concurrent searches
# Searches whose CPU-bound steps run at once; the others wait their turn (a trace's `queue` stage): 50 clients on
# 2 cores served 267 searches/s with a p95 of 206 ms, 143/s and 481 ms ungated
MAX_CONCURRENT = 2 * (os.cpu_count() or 1)
PER_SOURCE_K = 100  # candidates of each channel before fusion: z-score fusion measured best at 100 on the dev sets
# an embedder that answers in less than this (the median of its last EMBED_TIMES questions) runs on the caller's
# thread: handing the question to the dense worker would cost more than overlapping its embedding with BM25 saves
# (bench/RESULTS.md, "Issue 13 — the search path's per-query cost")
INLINE_EMBED_S = 0.001
EMBED_TIMES = 9


NO_GATE = nullcontext()  # for a step already inside the gate
NONE = Filters()
Keep = Callable[[Chunk], bool] | None  # the chunks a tags filter keeps (None: every chunk)
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Retrieval:
    """Everything one search produced, stage by stage (for answers, traces and evaluation)."""

    query: ParsedQuery
    mode: SearchMode
    bm25: Sequence[ScoredId]  # a tuple or a ``Ranking`` (immutable either way)
    dense: Sequence[ScoredId]
    hits: tuple[Hit, ...]
    rerank: str = "off"  # "off" | "ok" | "fallback: <reason>" (the hits then keep the fused order)
    rewrite: str = "off"  # query rewriting (retrieval/rewrite.py): "off" | "ok" | "fallback: <reason>"
    queries: tuple[str, ...] = ()  # the rewritten queries searched besides the original
    clauses: Sequence[ScoredId] = ()  # the clause channel (retrieval.clause_weight): best cosine over the clauses
    missing: tuple[str, ...] = ()  # what the question asked for that no document has (a page past its last)
    pages: tuple[int, ...] = ()  # the pages the question asked for whose passages lead the hits (``pages_first``)


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
        # the CPU-bound steps (store searches, fusion, hits) of at most this many searches at once; reranking and
        # a slow embedder's embedding stay outside, so a remote model's latency never holds a place
        self._gate = FairGate(MAX_CONCURRENT)
        self._vectors = QueryVectors()
        self._catalogue = self.store if isinstance(self.store, Catalogue) else None  # (a protocol check is slow)
        # one index version for the reads of a search (read once), where the store can pin it
        self._one_version = self.store.pinned if isinstance(self.store, OneVersion) else nullcontext
        self._embed_times: tuple[float, ...] = ()  # the embedder's last times per call (replaced, not mutated)
        self.inline_embed_s = INLINE_EMBED_S
        self._runs = Runs()  # small-to-big's memo (``whole_articles``), one per store: its chunk objects
        self.core = CorePath(store, settings, self._embed, self._bm25, self._hits, self._catalogue, self._runs)

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
        if reranker is not None:  # the reranker sees TOP_M fused candidates
            final_k = top_k
            top_k = max(top_k, TOP_M)
        with span("parse") as sp:
            parsed = parse_query(query, self.text, max_chars=MAX_QUERY_CHARS)
            sp.set(counts={"terms": len(parsed.terms)}, terms=list(parsed.terms))
        depth = max(per_source_k or PER_SOURCE_K, top_k)

        forms = self._forms(parsed.text) if mode_ != "bm25" else ()
        known = tuple(self._vectors.get(form) for form in forms)
        # a slow embedder embeds the question in a worker (which then searches) while BM25 runs here; when the
        # vectors are known or the embedder is fast, the dense channel runs here too and the whole CPU part of the
        # search takes one place in the gate
        inline = mode_ == "bm25" or all(v is not None for v in known) or self._embeds_fast()
        clauses = clauses_to_embed(parsed.text, s) if mode_ == "hybrid" else []  # the clause channel's
        if inline:
            clause_vectors = self._embed_clauses(clauses)  # outside the gate, like a slow embedder's question
            with self._gate, self._one_version():
                if served := self.core.search(mode_, forms, known, filters, parsed, depth, top_k, clause_vectors):
                    bm25, dense, by_clause, hits = served
                else:
                    bm25 = self._bm25(mode_, parsed, depth, filters, inside_gate=True)
                    vector, dense = self._dense_here(mode_, forms, depth, filters, known)
                    by_clause = clause_ranking(self.store, [bm25, dense], clause_vectors)
                    hits = self._hits(mode_, bm25, dense, vector, top_k, by_clause)
        else:
            run = contextvars.copy_context().run
            future = self._pool.submit(run, self._dense_and_clauses, forms, depth, filters, clauses, known)
            with self._one_version():  # (the dense worker reads the version on its own)
                bm25 = self._bm25(mode_, parsed, depth, filters, inside_gate=False)
                vector, dense, clause_vectors = future.result()
                with self._gate:
                    by_clause = clause_ranking(self.store, [bm25, dense], clause_vectors)
                    hits = self._hits(mode_, bm25, dense, vector, top_k, by_clause)
        hits = named_articles_first(hits, parsed.text, self.text.normalize)
        status = "off"
        if reranker is None:
            mark("rerank", reason="no reranker configured" if self.reranker is None else "switched off for this query")
        else:
            hits, status = self._rerank(reranker, parsed.text, hits, final_k)
        return Retrieval(parsed, mode_, frozen(bm25), frozen(dense), tuple(hits), status, clauses=frozen(by_clause))

    def asked_pages_first(self, r: Retrieval, question: str, keep: Keep = None, filters: Filters = NONE) -> Retrieval:
        """``r`` with the passages on the pages the question asks for first (``pages.lookup_pages``: ``keep``, the
        chunks a tags filter keeps; ``filters``, the search's); a store without a catalogue: ``r`` as it is."""
        if (c := self._catalogue) is None:
            return r
        found = lookup_pages(c, r.hits, question, self.text.normalize, keep, filters)
        if found.hits == r.hits and not found.missing and found.pages == r.pages:
            return r
        return replace(r, hits=found.hits, missing=found.missing, pages=found.pages)

    def _rerank(self, reranker: Reranker, question: str, hits: list[Hit], final_k: int) -> tuple[list[Hit], str]:
        """``rerank_traced`` with the named articles kept first (``named_articles_kept``)."""
        reranked, status = rerank_traced(reranker, question, hits, self.rerank_settings, final_k)
        return named_articles_kept(reranked, hits, question, self.text.normalize), status

    def _embed_clauses(self, clauses: list[str]) -> tuple[np.ndarray, ...]:
        """The clauses' vectors, kept with the question vectors (``clauses.embed_clauses``)."""
        return embed_clauses(self.embedder, self._vectors, clauses)

    def _dense_and_clauses(
        self,
        forms: tuple[str, ...],
        depth: int,
        filters: Filters,
        clauses: list[str],
        known: tuple[np.ndarray | None, ...],
    ) -> tuple[np.ndarray, Sequence[ScoredId], tuple[np.ndarray, ...]]:
        """The dense worker: the question's channel (``known``: the forms' vectors, those known), then its clauses'
        vectors."""
        return (*self._dense(forms, depth, filters, known=known), self._embed_clauses(clauses))

    def _forms(self, question: str) -> tuple[str, ...]:
        """The question as written and, when it holds Traditional characters (``text.t2s``) or names an article in
        digits (第47条), in Simplified characters with the article spelled as statutes write it (第四十七条): the
        dense channel searches with each and keeps the better (``_dense``). BM25 needs no second form: its terms
        and the index's are normalised alike (and ``query_tokens`` adds the spelled article's); a passage's vector
        is of its text as written."""
        second = article_numbers(self.text.simplified(question))  # (第47條: 条 once Simplified)
        return (question,) if second == question else (question, second)

    def _hits(
        self,
        mode_: SearchMode,
        bm25: Sequence[ScoredId],
        dense: Sequence[ScoredId],
        vector: np.ndarray | None,
        top_k: int,
        by_clause: Sequence[ScoredId] = (),
    ) -> list[Hit]:
        """Fuse (or take the one channel), fetch the chunks, and let a piece bring its article (small-to-big)."""
        catalogue = self._catalogue if WHOLE_ARTICLES else None  # small-to-big: a piece brings its article
        keep = 2 * top_k if catalogue is not None else top_k  # pieces of one article become one hit: keep spares
        filled: dict[str, float] = {}
        if mode_ == "hybrid":
            order, filled = self._fuse(bm25, dense, vector, top_k, keep, by_clause)
        else:
            ids, scores = columns_of(bm25 if mode_ == "bm25" else dense)
            order = list(zip(ids[:keep], scores[:keep], strict=True))
            mark("fusion", reason=f"mode {mode_}: one channel, nothing to fuse")
        chunks = {c.chunk_id: c for c in self.store.get_chunks([cid for cid, _ in order])}
        hits = _hits_of(order, chunks, bm25, dense, filled)
        if catalogue is not None:
            return whole_articles(hits, catalogue.document_chunks, limit=top_k, runs=self._runs)
        return list(hits)

    def _bm25(
        self, mode_: SearchMode, parsed: ParsedQuery, depth: int, filters: Filters, *, inside_gate: bool
    ) -> Sequence[ScoredId]:
        if mode_ not in ("bm25", "hybrid"):
            mark("bm25", reason=f"mode {mode_}")
            return []
        with NO_GATE if inside_gate else self._gate, span("bm25") as sp:  # a wait for the gate is its own stage
            found = self.store.bm25_search(parsed.terms, depth, filters)
            sp.ranking(found, depth=depth)
        return found

    def _dense_here(
        self,
        mode_: SearchMode,
        forms: tuple[str, ...],
        depth: int,
        filters: Filters,
        known: tuple[np.ndarray | None, ...],
    ) -> tuple[np.ndarray | None, Sequence[ScoredId]]:
        """The dense channel on this thread, inside the gate (``known``: the forms' vectors, those known)."""
        if mode_ == "bm25":
            mark("dense", reason=f"mode {mode_}")
            return None, []
        return self._dense(forms, depth, filters, known=known, inside_gate=True)

    def _dense(
        self,
        forms: tuple[str, ...],
        depth: int,
        filters: Filters,
        *,
        known: tuple[np.ndarray | None, ...] = (),
        inside_gate: bool = False,
    ) -> tuple[np.ndarray, Sequence[ScoredId]]:
        """Embed each form of the question (``_forms``; unless its vector is ``known``) and search with it (taking a
        place in the gate for it); the ranking whose best cosine is higher is the channel's (the first on a tie):
        a question in Traditional characters meets Simplified passages in its Simplified form, Traditional ones
        as written. The Simplified form is extra: if embedding or searching with it fails (a remote embedder's
        second request), the ranking as written stands (logged; the stage's ``reason`` says why)."""
        with span("dense") as sp:
            best: tuple[np.ndarray, Sequence[ScoredId]] | None = None
            chosen = 0
            failed: dict[str, Any] = {}  # the Simplified form's error, for the trace
            known = self._embed_forms(forms, known)
            for n, form in enumerate(forms):
                given = known[n]
                try:
                    vector = given if given is not None else self._embed(form)
                    with NO_GATE if inside_gate else sp.outside(self._gate):  # a wait for the gate is the queue stage
                        found = self.store.dense_search(vector, depth, filters)
                except Exception as exc:  # noqa: BLE001 - the Simplified form is extra: the one as written stands
                    if best is None:
                        raise
                    log.warning("the Simplified form of the question failed (%s: %s)", type(exc).__name__, exc)
                    failed = {"reason": f"the Simplified form failed: {type(exc).__name__}: {exc}"}
                    continue
                if best is None or (found and (not best[1] or found[0].score > best[1][0].score)):
                    best, chosen = (vector, found), n
            assert best is not None  # (forms is never empty)
            sp.ranking(best[1], depth=depth)
            if len(forms) > 1:
                sp.set(question="simplified" if chosen else "as written", **failed)
        return best

    def _embed_forms(
        self, forms: tuple[str, ...], known: tuple[np.ndarray | None, ...]
    ) -> tuple[np.ndarray | None, ...]:
        """``known`` for every form, with the forms not known embedded in one call when there are several and the
        embedder embeds several questions at once (``embed_queries``: the built-in ones, one request to a remote
        model); if that call fails they stay unknown (``_dense`` embeds each on its own: the question as written
        must answer, its Simplified form may fail)."""
        vectors = list(known) + [None] * (len(forms) - len(known))
        todo = [n for n, vector in enumerate(vectors) if vector is None]
        if len(todo) < 2 or not takes_several_queries(self.embedder):
            return tuple(vectors)
        t = time.perf_counter()
        try:
            new = embed_queries(self.embedder, [forms[n] for n in todo])
        except Exception as exc:  # noqa: BLE001 - each form is embedded on its own next
            log.warning("embedding the question's forms in one call failed (%s: %s)", type(exc).__name__, exc)
            return tuple(vectors)
        # the caller's wait for the one call (a remote model answers two questions as fast as one)
        self._embedded(time.perf_counter() - t, [forms[n] for n in todo], new)
        for n, vector in zip(todo, new, strict=True):
            vectors[n] = vector
        return tuple(vectors)

    def _embed(self, query: str) -> np.ndarray:
        t = time.perf_counter()
        vector = self.embedder.embed_query(query)
        self._embedded(time.perf_counter() - t, [query], [vector])
        return vector

    def _embedded(self, seconds: float, texts: Sequence[str], vectors: Sequence[np.ndarray] | np.ndarray) -> None:
        """One call of the embedder: its time (``_embeds_fast``) and the vectors kept by text."""
        self._embed_times = (*self._embed_times[1 - EMBED_TIMES :], seconds)
        for text, vector in zip(texts, vectors, strict=True):
            self._vectors.put(text, vector)

    def _embeds_fast(self) -> bool:
        """Whether the embedder's median time over its last questions is under ``inline_embed_s`` (a median: a
        thread preempted while embedding does not send the next questions to the worker)."""
        times = sorted(self._embed_times)
        return bool(times) and times[len(times) // 2] < self.inline_embed_s

    def _fuse(
        self,
        bm25: Sequence[ScoredId],
        dense: Sequence[ScoredId],
        vector: np.ndarray | None,
        top_k: int,
        keep: int,
        by_clause: Sequence[ScoredId] = (),
    ) -> tuple[list[tuple[str, float]], dict[str, float]]:
        """The fused order (``keep`` long) and the exact cosines filled in for BM25 candidates outside the dense
        ranking (``retrieval.fill_dense``, z-score fusion only); ``by_clause``: the clause channel's ranking."""
        s = self.settings
        with span("fusion") as sp:
            weights = list(WEIGHTS)
            filled: dict[str, float] = {}
            if s.fusion == "rrf":
                order = rrf([bm25, dense], k=RRF_K, weights=weights)[:keep]
            else:
                if FILL_DENSE and dense and vector is not None:
                    seen = set(columns_of(dense)[0])
                    missing = [c for c in columns_of(bm25)[0] if c not in seen]
                    filled = self.store.dense_scores(vector, missing) if missing else {}
                rankings: list[Sequence[ScoredId]] = [bm25, dense]
                fill: list[dict[str, float] | None] = [None, filled]
                if by_clause:  # the clause channel (retrieval.clause_weight)
                    rankings, fill, weights = [*rankings, by_clause], [*fill, None], [*weights, CLAUSE_WEIGHT]
                order = zscore_fusion(rankings, weights=weights, fill=fill, limit=keep)
            if sp.active:  # rank changes: built when the trace is sealed (only a written trace needs them)
                fused = [c for c, _ in order[:top_k]]
                fusion_recorded(sp, s, (bm25, dense, by_clause), fused, top_k, len(filled), weights)
        return order, filled


def _hits_of(
    order: Sequence[tuple[str, float]],
    chunks: dict[str, Chunk],
    bm25: Sequence[ScoredId],
    dense: Sequence[ScoredId],
    filled: dict[str, float],
) -> Iterator[Hit]:
    """The hits of the fused ``order``, each with its rank and score in every channel (made as they are read: the
    small-to-big step stops at ``top_k``); chunks deleted between retrieval and fetch are left out."""
    (b_ids, b_scores), (d_ids, d_scores) = columns_of(bm25), columns_of(dense)
    b_at, d_at = positions(b_ids), positions(d_ids)
    for fused_rank, (cid, score) in enumerate(order, 1):
        chunk = chunks.get(cid)
        if chunk is None:
            continue
        b, d = b_at.get(cid), d_at.get(cid)
        yield Hit(
            chunk=chunk,
            score=float(score),
            bm25_rank=None if b is None else b + 1,
            bm25_score=None if b is None else b_scores[b],
            dense_rank=None if d is None else d + 1,
            dense_score=filled.get(cid) if d is None else d_scores[d],
            fused_rank=fused_rank,
        )
