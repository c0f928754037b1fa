"""The search of a read question (``plan.QueryPlan``): BM25 (a slow embedder embeds the question meanwhile in a
worker) → dense → fusion → rerank, then what the question looks up (``lookups``)."""

from __future__ import annotations

import contextvars
import logging
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from zhiku.cache import Cache
from zhiku.embedding.base import Embedder, embed_queries, takes_several_queries
from zhiku.errors import InvalidInput
from zhiku.observability.tracing import fusion_changes, mark, ranking_rows, span
from zhiku.retrieval.bridge import CROSS_HITS, ENGLISH, bridged, chinese_senses, english_senses
from zhiku.retrieval.clauses import clause_ranking, embed_clauses
from zhiku.retrieval.context import WHOLE_ARTICLES, Runs, whole_articles
from zhiku.retrieval.fusion import (
    CROSS_WEIGHTS,
    FEEDBACK_WEIGHTS,
    FILL_DENSE,
    NAMED_WEIGHTS,
    RRF_K,
    columns_of,
    positions,
    rrf,
    weights_of,
    zscore_fusion,
)
from zhiku.retrieval.gate import FairGate
from zhiku.retrieval.lookups import lookup
from zhiku.retrieval.plan import QueryPlan, read_question
from zhiku.retrieval.query import QUERY_VECTORS, QueryVectors, check_top_k
from zhiku.retrieval.rerank import TOP_M, Reranker, rerank_traced
from zhiku.settings import RerankSettings, RetrievalSettings
from zhiku.stores.base import Catalogue, FilledDense, OneVersion, Retriever, StoredVectors, WeightedBM25
from zhiku.text import TextProcessor
from zhiku.types import Chunk, Filters, Hit, ScoredId, SearchMode, frozen

DENSE_WORKERS = 8  # dense channels running at once, across concurrent searches
# Searches whose CPU-bound steps run at once, one a core; the others wait their turn (a trace's `queue` stage).
# Those steps are mostly Python holding the interpreter lock: more places only add switching (50 clients on 10k
# chunks, 2 cores: 556 searches/s, p95 100 ms, with 2 places; 481/s, p95 116 ms, with 4)
MAX_CONCURRENT = os.cpu_count() or 1
PER_SOURCE_K = 100  # candidates of each channel before fusion: z-score fusion measured best at 100 on the dev sets
# an embedder that answers in less than this (the median of its last EMBED_TIMES questions) runs on the caller's
# thread: handing the question to the dense worker would cost more than overlapping its embedding with BM25 saves
INLINE_EMBED_S = 0.001
EMBED_TIMES = 9
# An English question's second dense search (pseudo-relevance feedback, Rocchio): its unit vector plus FEEDBACK_BETA
# × the mean stored vector of the first FEEDBACK_DOCS fused passages, in the passages' own language; chosen on half A
# of the English dev sets (hit@5 0.778 → 0.795 cmrc2018_dev, 0.523 → 0.548 stard_dev)
FEEDBACK_DOCS = 5
FEEDBACK_BETA = 2.0
# a store without term counts (Milvus): its language read from the chunks of this many documents, each of at most
# SAMPLE_CHUNKS chunks (a catalogue read and one read per document, when the index version has changed)
SAMPLE_DOCS = 8
SAMPLE_CHUNKS = 200
# ... and that version looked at once a second, not at each question: on Milvus a look is a query (~9 ms on
# milvus-lite), and a language or size a second old scales a confidence as well
RESAMPLE_S = 1.0
_THE = re.compile(r"\bthe\b", re.IGNORECASE)


Keep = Callable[[Chunk], bool] | None  # the chunks a tags filter keeps (None: every chunk)
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Retrieval:
    """Everything one search produced, stage by stage (for answers, traces and evaluation)."""

    query: QueryPlan
    mode: SearchMode
    bm25: Sequence[ScoredId]  # a tuple or a ``Ranking`` (immutable either way)
    dense: Sequence[ScoredId]
    hits: tuple[Hit, ...]
    rerank: str = "off"  # "off" | "ok" | "fallback: <reason>" (the hits then keep the fused order)
    rewrite: str = "off"  # query rewriting (retrieval/rewrite.py): "off" | "ok" | "fallback: <reason>"
    queries: tuple[str, ...] = ()  # the rewritten queries searched besides the original
    clauses: Sequence[ScoredId] = ()  # the clause channel: best cosine over the clauses
    filled: Mapping[str, float] = field(default_factory=dict)  # exact cosines of BM25 candidates outside ``dense``
    missing: tuple[str, ...] = ()  # what the question asked for that no document has (a page past its last)
    pages: tuple[int, ...] = ()  # the pages the question asked for whose passages lead the hits (``lookups``)
    # what ``hits`` were cut from: a reranker's candidates, a cross-lingual question's first CROSS_HITS (none: ``hits``)
    candidates: tuple[Hit, ...] = ()


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
        self.gate = FairGate(MAX_CONCURRENT)  # (``gate.waiting``: searches waiting for a place)
        self._vectors = QueryVectors()
        self._catalogue = self.store if isinstance(self.store, Catalogue) else None  # (a protocol check is slow)
        self._fills = self.store if isinstance(self.store, FilledDense) else None
        self._weighted = self.store if isinstance(self.store, WeightedBM25) else None
        self._stored = self.store if isinstance(self.store, StoredVectors) else None
        # one index version for the reads of a search (read once), where the store can pin it
        self.one_version = self.store.pinned if isinstance(self.store, OneVersion) else nullcontext
        self._embed_times: tuple[float, ...] = ()  # the embedder's last times per call (replaced, not mutated)
        self.inline_embed_s = INLINE_EMBED_S
        self._runs = Runs()  # small-to-big's memo (``whole_articles``), one per store: its chunk objects
        self._plans: Cache[QueryPlan] = Cache(QUERY_VECTORS)  # questions read, as their vectors are kept
        self._sampled: tuple[int, tuple[str, int]] = (-1, ("zh", 0))  # (index version, ``_sampled_counts``)
        self._sampled_at = -RESAMPLE_S  # (when its index version was last looked at)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def read(
        self, question: str, mode: str | None = None, filters: Filters = Filters(), tags: tuple[str, ...] = ()
    ) -> QueryPlan:
        """The plan of ``question`` (``plan.read_question``), kept for the next time it is asked."""
        if (plan := self._plans.get(key := (question, mode, filters, tags))) is None:
            plan = read_question(question, self.text, self.settings, mode=mode, filters=filters, tags=tags)
            self._plans.put(key, plan)
        else:  # (the stage a reading records)
            with span("parse") as sp:
                sp.set(counts={"terms": len(plan.terms)}, terms=list(plan.terms))
        return plan

    def warm(self, questions: Sequence[str]) -> None:
        """Embed the hybrid forms and clauses of ``questions`` in one call (what is not kept yet): many questions
        asked in turn (`zhiku tune`) then embed none one by one."""
        plans = [self.read(q, "hybrid") for q in questions]
        texts = [t for p in plans for t in dict.fromkeys((*p.forms, *p.clauses)) if self._vectors.get(t) is None]
        if texts := list(dict.fromkeys(texts)):
            for text, vector in zip(texts, embed_queries(self.embedder, texts), strict=True):
                self._vectors.put(text, vector)

    def index_language(self) -> str:
        """The language the index is written in: "zh" when more of its chunks hold 的 than "the", "en" when fewer,
        "" when as many (an empty index; text with neither word); for a store without term counts, of a sample."""
        return self._text_counts()[0]

    def _text_counts(self) -> tuple[str, int]:
        """``index_language`` and about how many chunks the index has: those holding its language's commonest word
        (a store without term counts: ``_sampled_counts``)."""
        if self._weighted is None:
            return self._sampled_counts()
        n = self._weighted.term_counts(["的", "the"])
        zh, en = n.get("的", 0), n.get("the", 0)
        return _language(zh, en), max(zh, en)

    def _sampled_counts(self) -> tuple[str, int]:
        """For a store that cannot count the chunks holding a word (Milvus): the language of the chunks of up to
        ``SAMPLE_DOCS`` documents spread over its catalogue (those of at most ``SAMPLE_CHUNKS`` chunks; if none is,
        the smallest), and all its chunks; read again when the index version has changed, looked at once in
        ``RESAMPLE_S`` (a store without a catalogue is taken to be Chinese)."""
        if self._catalogue is None:
            return "zh", 0
        if (now := time.monotonic()) - self._sampled_at < RESAMPLE_S:
            return self._sampled[1]
        self._sampled_at, version = now, self.store.index_version()
        if self._sampled[0] != version:
            docs = self._catalogue.list_documents()
            spread = docs[:: max(1, len(docs) // SAMPLE_DOCS)][:SAMPLE_DOCS]
            small = [d for d in spread if d.chunk_count <= SAMPLE_CHUNKS]
            if not small and docs:  # (every one longer: the smallest)
                small = [min(docs, key=lambda d: d.chunk_count)]
            texts = [c.text for d in small for c in self._catalogue.document_chunks(d.doc_id)]
            zh, en = sum("的" in t for t in texts), sum(_THE.search(t) is not None for t in texts)
            self._sampled = (version, (_language(zh, en), sum(d.chunk_count for d in docs)))
        return self._sampled[1]

    def search(
        self, plan: QueryPlan, *, top_k: int | None = None, per_source_k: int | None = None, rerank: bool | None = None
    ) -> Retrieval:
        """``rerank``: None runs the configured reranker (if any), False skips it, True requires one."""
        top_k = check_top_k(self.settings.top_k if top_k is None else top_k)
        mode_ = plan.mode
        if rerank and self.reranker is None:
            raise InvalidInput(
                "no reranker is configured: set rerank.provider (cross-encoder or llm) and rerank.model, "
                "e.g. ZHIKU_RERANK__PROVIDER=cross-encoder ZHIKU_RERANK__MODEL=BAAI/bge-reranker-v2-m3"
            )
        reranker = self.reranker if rerank is not False else None
        final_k = top_k
        if reranker is not None:  # the reranker sees TOP_M fused candidates
            top_k = max(top_k, TOP_M)
        depth = max(per_source_k or PER_SOURCE_K, top_k)
        # one index version for the reads of a search, from reading the language of its text on
        with self.one_version():
            plan, weights, clauses = self._in_text_language(plan)
            if plan.cross_lingual:  # its confidence reads the first CROSS_HITS passages, however few are asked for
                top_k = max(top_k, CROSS_HITS)
            forms = plan.forms
            known: tuple[np.ndarray | Exception | None, ...] = tuple(self._vectors.get(form) for form in forms)
            if mode_ == "bm25":
                forms = known = ()
            # a slow embedder embeds the question in a worker while BM25 runs here; the dense channel, fusion and the
            # hits then take a second place in the gate; a fast one embeds here first, and the search takes one place
            future = None
            if any(v is None for v in known) and not self._embeds_fast():
                future = self._pool.submit(contextvars.copy_context().run, self._embed_all, forms, known, clauses)
                clause_vectors: tuple[np.ndarray, ...] = ()
            else:
                known, clause_vectors = self._embed_all(forms, known, clauses)
            with self.gate:
                bm25 = self._bm25(plan, weights, depth)
                if future is None:
                    dense, filled, hits, by_clause = self._rest(plan, known, bm25, clause_vectors, depth, top_k)
            if future is not None:
                known, clause_vectors = future.result()
                with self.gate:
                    dense, filled, hits, by_clause = self._rest(plan, known, bm25, clause_vectors, depth, top_k)
        status, shown = "off", hits[:final_k] if len(hits) > final_k else hits
        if reranker is None:
            mark("rerank", reason="no reranker configured" if self.reranker is None else "switched off for this query")
        else:
            shown, status = rerank_traced(reranker, plan.text, hits, self.rerank_settings, final_k)
        return Retrieval(
            plan, mode_, frozen(bm25), frozen(dense), tuple(shown), status, clauses=frozen(by_clause),
            filled=filled, candidates=() if shown is hits else tuple(hits),
        )  # fmt: skip

    def looked_up(self, r: Retrieval, allowed: Keep = None) -> Retrieval:
        """``r`` with what its question looks up (named articles, asked pages: ``lookups.lookup``) first, and what
        it asked for that no passage holds; ``allowed``: the chunks a tags filter keeps."""
        if not r.query.articles and not r.query.pages:  # (nothing to look up: most questions)
            return r
        found = lookup(r.query, r.hits, r.candidates or r.hits, self.text.normalize, self._catalogue, allowed)
        return replace(r, hits=found.hits, missing=found.missing, pages=found.pages)

    def _in_text_language(self, plan: QueryPlan) -> tuple[QueryPlan, dict[str, float], list[str]]:
        """``plan`` read for the language of the index's text (``index_language``), its BM25 terms weighted when
        they are bridged to that language, and the clauses to embed (with the question's gloss in it)."""
        forms, clauses, mode_ = plan.forms, list(plan.clauses), plan.mode
        weights: dict[str, float] = {}
        language, chunks = self._text_counts()
        plan = replace(plan, index_chunks=chunks)  # the scale of its BM25 scores, for its confidence
        counts = self._weighted.term_counts if self._weighted else None
        if language == "zh" and plan.english >= ENGLISH and mode_ != "dense":  # English words meet Chinese text
            stop = self.text.stopwords
            cut = lambda head: [t for t in self.text.query_tokens(head) if t not in stop]  # noqa: E731
            plan = replace(plan, bridge=chinese_senses(plan.normalized, cut, counts))
        elif language != "zh":  # an English question needs no bridge here; a Chinese one's words meet English text
            asked_in_chinese = language == "en" and plan.english < ENGLISH and mode_ != "dense"
            words = self.text.whole_words(plan.normalized) if asked_in_chinese else []
            found = english_senses(words, counts) if words else ()
            plan = replace(plan, index_language=language, names=(), bridge=found)
        if plan.bridge or plan.names:  # terms in the text's language for BM25, the question's gloss for clauses
            weights, gloss = bridged(plan.bridge, counts, " " if language == "en" else "")
            weights.update(dict.fromkeys(plan.terms, 1.0))
            if plan.names and counts is not None:  # the pairs a pinyin name may stand for that occur
                held = counts(plan.names)
                weights.update({t: 1.0 for t, n in held.items() if n})
            clauses += [f"{forms[0]} {gloss}"] if gloss and mode_ == "hybrid" else []  # (beside its English)
        return plan, weights, clauses

    def _embed_all(
        self, forms: tuple[str, ...], known: tuple[np.ndarray | Exception | None, ...], clauses: list[str]
    ) -> tuple[tuple[np.ndarray | Exception | None, ...], tuple[np.ndarray, ...]]:
        """Every form's vector (``known``: those known; several in one call when the embedder takes several), then
        the clauses'. Only the question as written must embed: a Simplified form's error stands for its vector."""
        vectors: list[np.ndarray | Exception | None] = list(known)
        todo = [n for n, vector in enumerate(vectors) if vector is None]
        if todo:
            with span("dense"):
                if len(todo) > 1 and takes_several_queries(self.embedder):
                    t = time.perf_counter()
                    try:
                        new = embed_queries(self.embedder, [forms[n] for n in todo])
                        # the caller's wait for the one call (a remote model answers two questions as fast as one)
                        self._embedded(time.perf_counter() - t, [forms[n] for n in todo], new)
                        for n, vector in zip(todo, new, strict=True):
                            vectors[n] = vector
                        todo = []
                    except Exception as exc:  # noqa: BLE001 - each form is embedded on its own next
                        log.warning(
                            "embedding the question's forms in one call failed (%s: %s)", type(exc).__name__, exc
                        )
                for n in todo:
                    try:
                        vectors[n] = self._embed(forms[n])
                    except Exception as exc:  # noqa: BLE001 - only the Simplified form may fail
                        if n == 0:
                            raise
                        vectors[n] = exc
        return tuple(vectors), embed_clauses(self.embedder, self._vectors, clauses)

    def _rest(
        self,
        plan: QueryPlan,
        known: tuple[np.ndarray | Exception | None, ...],
        bm25: Sequence[ScoredId],
        clause_vectors: tuple[np.ndarray, ...],
        depth: int,
        top_k: int,
    ) -> tuple[Sequence[ScoredId], dict[str, float], list[Hit], Sequence[ScoredId]]:
        """After BM25: the dense channel (with the cosines of BM25's candidates outside it), the clause channel,
        fusion (or the one channel), the chunks, and a piece bringing its article (small-to-big)."""
        mode_, filters = plan.mode, plan.filters
        dense: Sequence[ScoredId] = []
        filled: dict[str, float] = {}
        if mode_ == "bm25":
            mark("dense", reason=f"mode {mode_}")
        else:
            fill = mode_ == "hybrid" and FILL_DENSE and self.settings.fusion != "rrf"
            dense, filled = self._dense(depth, filters, known, bm25 if fill else ())
        by_clause = clause_ranking(self.store, [bm25, dense], clause_vectors)
        keep = self._keep(top_k)
        if mode_ == "hybrid":
            order = self._fuse(bm25, dense, filled, top_k, keep, by_clause, plan.cross_lingual)
            if (
                plan.cross_lingual
                and FEEDBACK_DOCS
                and order
                and self._stored is not None
                and isinstance(known[0], np.ndarray)
            ):
                # the question's own cosines stay the dense channel's (confidence, the hits' scores)
                top = self._stored.chunk_vectors([c for c, _ in order[:FEEDBACK_DOCS]])
                moved = known[0] / np.linalg.norm(known[0]) + FEEDBACK_BETA * top.mean(axis=0)
                again, more = self._dense(depth, filters, (moved,), bm25 if fill else ())
                by_clause = clause_ranking(self.store, [bm25, again], clause_vectors)
                chosen = NAMED_WEIGHTS if plan.names else FEEDBACK_WEIGHTS
                order = self._fuse(bm25, again, more, top_k, keep, by_clause, chosen=chosen)
        else:
            ids, scores = columns_of(bm25 if mode_ == "bm25" else dense)
            order = list(zip(ids[:keep], scores[:keep], strict=True))
            mark("fusion", reason=f"mode {mode_}: one channel, nothing to fuse")
        return dense, filled, self._hits(order, top_k, bm25, dense, filled), by_clause

    def _keep(self, top_k: int) -> int:
        return 2 * top_k if WHOLE_ARTICLES and self._catalogue else top_k  # a piece brings its article: spares

    def _hits(
        self, order: list[tuple[str, float]], top_k: int, bm25: Sequence[ScoredId], dense: Sequence[ScoredId],
        filled: Mapping[str, float],
    ) -> list[Hit]:  # fmt: skip
        hits = _hits_of(order, self.store.get_chunks, bm25, dense, filled)
        if WHOLE_ARTICLES and self._catalogue is not None:  # small-to-big: a piece brings its article
            return whole_articles(hits, self._catalogue.document_chunks, limit=top_k, runs=self._runs)
        return list(hits)

    def refused(self, r: Retrieval, weights: tuple[float, float, float], top_k: int) -> Retrieval:
        """``r`` with its hybrid channels fused again by z-scores with ``weights`` (BM25, dense, clauses), and what
        it looks up: `zhiku tune` searches a question once and weighs it many times. An English question's
        fusion is its own (``CROSS_WEIGHTS``, then its second dense search): ``weights`` leave it as it is."""
        if r.query.cross_lingual:
            return r
        order = self._fuse(r.bm25, r.dense, r.filled, top_k, self._keep(top_k), r.clauses, chosen=weights)
        return self.looked_up(replace(r, hits=tuple(self._hits(order, top_k, r.bm25, r.dense, r.filled))))

    def _bm25(self, plan: QueryPlan, weights: dict[str, float], depth: int) -> Sequence[ScoredId]:
        """``weights``: an English question's terms, Chinese ones bridged (``bridge.bridged``)."""
        if plan.mode not in ("bm25", "hybrid"):
            mark("bm25", reason=f"mode {plan.mode}")
            return []
        with span("bm25") as sp:
            if not weights:
                found = self.store.bm25_search(plan.terms, depth, plan.filters, rare=plan.pairs)
            elif self._weighted is not None:
                found = self._weighted.bm25_weighted(weights, depth, plan.filters)
            else:
                found = self.store.bm25_search(list(weights), depth, plan.filters)
            if weights:
                sp.set(bridged=sorted(weights))
            sp.ranking(found, depth=depth)
        return found

    def _dense(
        self,
        depth: int,
        filters: Filters,
        known: tuple[np.ndarray | Exception | None, ...],
        others: Sequence[ScoredId],
    ) -> tuple[Sequence[ScoredId], dict[str, float]]:
        """The ranking of the form (``QueryPlan.forms``) whose best cosine is higher (the first on a tie), with the
        cosines of ``others``' candidates outside it; the Simplified form is extra: if it fails, the first stands."""
        with span("dense") as sp:
            best: tuple[Sequence[ScoredId], dict[str, float]] | None = None
            chosen = 0
            failed: dict[str, Any] = {}  # the Simplified form's error, for the trace
            for n, vector in enumerate(known):
                try:
                    if isinstance(vector, Exception):  # (embedding the Simplified form failed)
                        raise vector
                    assert vector is not None  # (``_embed_all`` embedded it)
                    if self._fills is not None:
                        found, filled = self._fills.dense_filled(vector, depth, filters, others)
                    else:
                        found = self.store.dense_search(vector, depth, filters)
                        seen = set(columns_of(found)[0])
                        missing = [c for c in columns_of(others)[0] if c not in seen]
                        filled = self.store.dense_scores(vector, missing) if missing else {}
                except Exception as exc:  # noqa: BLE001 - the Simplified form is extra: the one as written stands
                    if best is None:
                        raise
                    log.warning("the Simplified form of the question failed (%s: %s)", type(exc).__name__, exc)
                    failed = {"reason": f"the Simplified form failed: {type(exc).__name__}: {exc}"}
                    continue
                if best is None or (found and (not best[0] or found[0].score > best[0][0].score)):
                    best, chosen = (found, filled), n
            assert best is not None  # (forms is never empty)
            sp.ranking(best[0], depth=depth)
            if len(known) > 1:
                sp.set(question="simplified" if chosen else "as written", **failed)
        return best

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
        """Whether the embedder's median time over its last questions is under ``inline_embed_s``."""
        times = sorted(self._embed_times)
        return bool(times) and times[len(times) // 2] < self.inline_embed_s

    def _fuse(
        self,
        bm25: Sequence[ScoredId],
        dense: Sequence[ScoredId],
        filled: Mapping[str, float],
        top_k: int,
        keep: int,
        by_clause: Sequence[ScoredId] = (),
        cross_lingual: bool = False,
        chosen: tuple[float, float, float] | None = None,
    ) -> list[tuple[str, float]]:
        """The fused order (``keep`` long); ``filled``: exact cosines of BM25 candidates outside the dense ranking;
        ``chosen``: z-score weights other than the settings'."""
        s = self.settings
        with span("fusion") as sp:
            *weights, clause = CROSS_WEIGHTS if cross_lingual else chosen or weights_of(s.fusion)
            if s.fusion == "rrf" and chosen is None:
                order = rrf([bm25, dense], k=RRF_K, weights=weights)[:keep]
            else:
                rankings: list[Sequence[ScoredId]] = [bm25, dense]
                fill: list[Mapping[str, float] | None] = [None, filled]
                if by_clause:  # the clause channel
                    rankings, fill, weights = [*rankings, by_clause], [*fill, None], [*weights, clause]
                order = zscore_fusion(rankings, weights=weights, fill=fill, limit=keep)
            if sp.active:  # (rank changes: only a trace needs them)
                fused = [c for c, _ in order[:top_k]]
                sp.set(
                    counts={"returned": len(fused), **({"clause_candidates": len(by_clause)} if by_clause else {})},
                    method=s.fusion, dense_filled=len(filled), rrf_k=RRF_K, weights=weights,
                )  # fmt: skip
                counts, changes = fusion_changes(bm25, dense, fused, top_k)
                sp.set(counts, **changes)
                if by_clause:
                    sp.set(clause_ranking=ranking_rows(by_clause))
        return order


def _language(zh: int, en: int) -> str:
    """The language of an index whose ``zh`` chunks hold 的 and ``en`` hold "the": "" when as many."""
    return "zh" if zh > en else "en" if en > zh else ""


def _hits_of(
    order: Sequence[tuple[str, float]],
    fetch: Callable[[list[str]], list[Chunk]],
    bm25: Sequence[ScoredId],
    dense: Sequence[ScoredId],
    filled: Mapping[str, float],
) -> Iterator[Hit]:
    """The hits of the fused ``order`` with their ranks and scores in every channel, made as read (small-to-big
    stops at ``top_k``); deleted chunks left out."""
    (b_ids, b_scores), (d_ids, d_scores) = columns_of(bm25), columns_of(dense)
    b_at, d_at = positions(b_ids), positions(d_ids)
    chunks = {c.chunk_id: c for c in fetch([i for i, _ in order])}  # (one read: the spares are mostly needed)
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
