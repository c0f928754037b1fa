"""The query pipeline: parse → BM25 and dense retrieval in parallel → RRF → hits."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from zhiku.embedding.base import Embedder
from zhiku.errors import InvalidInput
from zhiku.fusion import rrf
from zhiku.settings import RetrievalSettings
from zhiku.stores.base import Store
from zhiku.text import TextProcessor
from zhiku.types import Filters, Hit, ScoredId, SearchMode

MODES: tuple[SearchMode, ...] = ("bm25", "dense", "hybrid")
MAX_TOP_K = 100


@dataclass(frozen=True)
class ParsedQuery:
    text: str  # as the user wrote it (stripped)
    terms: tuple[str, ...]  # BM25 terms after normalisation, segmentation and stopword removal


def parse_query(query: str, text: TextProcessor, *, max_chars: int) -> ParsedQuery:
    if not isinstance(query, str) or not query.strip():
        raise InvalidInput("the query is empty: ask a question, e.g. 试用期最长多久")
    query = query.strip()
    if len(query) > max_chars:
        raise InvalidInput(f"the query has {len(query)} characters; the limit is {max_chars} (retrieval.max_query_chars)")
    return ParsedQuery(text=query, terms=tuple(text.query_tokens(query)))


def check_top_k(top_k: int) -> int:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
        raise InvalidInput(f"top_k must be an integer from 1 to {MAX_TOP_K}, got {top_k!r}")
    return top_k


def check_mode(mode: str) -> SearchMode:
    if mode not in MODES:
        raise InvalidInput(f"unknown search mode {mode!r}: use one of {', '.join(MODES)}")
    return mode  # type: ignore[return-value]


@dataclass(frozen=True)
class Retrieval:
    """Everything one search produced, stage by stage (for answers, traces and evaluation)."""

    query: ParsedQuery
    mode: SearchMode
    bm25: tuple[ScoredId, ...]
    dense: tuple[ScoredId, ...]
    hits: tuple[Hit, ...]


class Searcher:
    """Runs searches over a ``Store`` with an ``Embedder``; safe to call from several threads."""

    def __init__(self, store: Store, embedder: Embedder, text: TextProcessor, settings: RetrievalSettings) -> None:
        self.store = store
        self.embedder = embedder
        self.text = text
        self.settings = settings
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="zhiku-dense")

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
    ) -> Retrieval:
        s = self.settings
        top_k = check_top_k(s.top_k if top_k is None else top_k)
        mode_ = check_mode(s.mode if mode is None else mode)
        parsed = parse_query(query, self.text, max_chars=s.max_query_chars)
        depth = max(per_source_k or s.per_source_k, top_k)

        dense_future = None
        if mode_ in ("dense", "hybrid"):
            dense_future = self._pool.submit(self._dense, parsed.text, depth, filters)
        bm25: list[ScoredId] = []
        if mode_ in ("bm25", "hybrid"):
            bm25 = self.store.bm25_search(parsed.terms, depth, filters)
        dense = dense_future.result() if dense_future is not None else []

        if mode_ == "bm25":
            order = [(x.chunk_id, x.score) for x in bm25]
        elif mode_ == "dense":
            order = [(x.chunk_id, x.score) for x in dense]
        else:
            order = rrf([bm25, dense], k=s.rrf_k, weights=[s.bm25_weight, s.dense_weight])
        order = order[:top_k]

        by_bm25 = {x.chunk_id: x for x in bm25}
        by_dense = {x.chunk_id: x for x in dense}
        chunks = {c.chunk_id: c for c in self.store.get_chunks([cid for cid, _ in order])}
        hits = []
        for cid, score in order:
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
                    dense_score=d.score if d else None,
                )
            )
        return Retrieval(query=parsed, mode=mode_, bm25=tuple(bm25), dense=tuple(dense), hits=tuple(hits))

    def _dense(self, query: str, depth: int, filters: Filters) -> list[ScoredId]:
        return self.store.dense_search(self.embedder.embed_query(query), depth, filters)
