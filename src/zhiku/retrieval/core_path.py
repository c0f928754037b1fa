"""Hybrid searches served by the store's compiled search core (``SQLiteStore.hybrid_core``, ``stores/_core``): BM25,
both channels' tops, the fill and z-score fusion in one call after numpy's dense product; then the chunks, the hits
and small-to-big as the numpy path makes them. The same hits, rankings and trace (bm25, dense and fusion stages
timed inside the call) as the numpy path (``Searcher``'s), which serves every other search:

- a question with a second form (Traditional characters, an article number in digits: two dense searches);
- filters that allow no row (the core serves the others: collection, source glob, doc_type; tags filter the hits
  of an unfiltered search);
- RRF fusion, a single channel, a store without the core (Milvus), the core not built or switched off
  (``retrieval.compiled_core``), a screened (int8) or HNSW dense search (large indexes);
- a slow embedder with the question not yet embedded: the numpy path embeds it in the dense worker while BM25 runs.

With the clause channel (a question of several clauses) the core gives the two channels and the clause ranking and
three-channel fusion are the numpy path's own (``Searcher._hits``, passed in)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import numpy as np

from zhiku.errors import IndexMismatch, InvalidInput, ZhikuError
from zhiku.observability.rank_changes import fusion_record
from zhiku.observability.tracing import ranking_columns, span, timed_span
from zhiku.retrieval.clauses import clause_ranking
from zhiku.retrieval.context import WHOLE_ARTICLES, Runs, whole_articles
from zhiku.retrieval.fusion import FILL_DENSE, RRF_K, WEIGHTS
from zhiku.retrieval.query import ParsedQuery
from zhiku.settings import RetrievalSettings
from zhiku.stores._core import CoreResult, Fusion
from zhiku.stores.base import Catalogue, Retriever
from zhiku.types import Filters, Hit, ScoredId, fused_hit

# ``Searcher._hits``: fuse (with the clause ranking), fetch the chunks, small-to-big
MakeHits = Callable[[Any, Sequence[ScoredId], Sequence[ScoredId], np.ndarray, int, Sequence[ScoredId]], list[Hit]]
Served = tuple[Sequence[ScoredId], Sequence[ScoredId], Sequence[ScoredId], list[Hit]]  # bm25, dense, clauses, hits


class CorePath:
    """A ``Searcher``'s way to the compiled core (``served``: how many searches it served, for tests and benches)."""

    def __init__(
        self,
        store: Retriever,
        settings: RetrievalSettings,
        embed: Callable[[str], np.ndarray],
        bm25: Callable[..., Sequence[ScoredId]],
        make_hits: MakeHits,
        catalogue: Catalogue | None,
        runs: Runs,
    ) -> None:
        """``embed``, ``bm25``, ``make_hits``: the ``Searcher``'s own steps (``_embed``, ``_bm25``, ``_hits``);
        ``runs``: its small-to-big memo (``whole_articles``)."""
        self.store, self.settings, self.catalogue, self.runs = store, settings, catalogue, runs
        self._core = getattr(store, "hybrid_core", None)
        self._embed, self._bm25, self._make_hits = embed, bm25, make_hits
        self.served = 0

    def applies(self, mode: str, forms: tuple[str, ...]) -> bool:
        """Whether the core may serve this search (the store may still decline: ``search`` then returns None)."""
        s = self.settings
        return self._core is not None and mode == "hybrid" and s.fusion == "zscore" and len(forms) == 1

    def search(
        self,
        mode: str,
        forms: tuple[str, ...],
        known: tuple[np.ndarray | None, ...],
        filters: Filters,
        parsed: ParsedQuery,
        depth: int,
        top_k: int,
        clause_vectors: tuple[np.ndarray, ...],
    ) -> Served | None:
        """``(bm25, dense, clause ranking, hits)`` as the numpy path gives them (``forms``: the question's, ``known``:
        their vectors, those known), or None where the core does not serve (``applies``, or the store declines:
        nothing recorded; the numpy path then runs, and raises any error again with its trace)."""
        if not self.applies(mode, forms):
            return None
        start = time.perf_counter()
        try:
            vector = known[0] if known and known[0] is not None else self._embed(forms[0])
        except Exception as e:
            self._dense_failed(e, mode, parsed, depth, filters)
        embedded = time.perf_counter() - start
        catalogue = self.catalogue if WHOLE_ARTICLES else None
        keep = 2 * top_k if catalogue is not None else top_k  # pieces of one article become one hit: keep spares
        fusion = None if clause_vectors else Fusion(*WEIGHTS, FILL_DENSE)
        assert self._core is not None
        try:
            got: CoreResult | None = self._core(parsed.terms, vector, depth, keep, fusion, filters)
        except (InvalidInput, IndexMismatch) as e:  # the vector refused (NaN, another dimension): not embedded again
            self._dense_failed(e, mode, parsed, depth, filters)
        except ZhikuError:  # (a store error): the numpy path tries again, and raises it with its trace
            return None
        if got is None:
            return None
        self.served += 1
        bm25_s, dense_s, fusion_s = got.seconds
        with timed_span("bm25", start + embedded, bm25_s) as sp:
            sp.ranking(got.bm25, depth=depth)
        with timed_span("dense", start, embedded + dense_s) as sp:  # (the numpy path's span embeds, as here)
            sp.ranking(got.dense, depth=depth)
        if got.fused is None:  # the clause channel: its ranking and the fusion of three, as the numpy path does
            by_clause = clause_ranking(self.store, [got.bm25, got.dense], clause_vectors)
            return (
                got.bm25,
                got.dense,
                by_clause,
                self._make_hits("hybrid", got.bm25, got.dense, vector, top_k, by_clause),
            )
        self._traced_fusion(got, start + embedded + bm25_s + dense_s, fusion_s, top_k)
        fused = got.fused
        chunks = {c.chunk_id: c for c in self.store.get_chunks([f[0] for f in fused])}
        hits = (fused_hit(c, f, n) for n, f in enumerate(fused, 1) if (c := chunks.get(f[0])) is not None)
        if catalogue is not None:
            found = whole_articles(hits, catalogue.document_chunks, limit=top_k, runs=self.runs)
            return got.bm25, got.dense, (), found
        return got.bm25, got.dense, (), list(hits)

    def _dense_failed(self, e: Exception, mode: str, parsed: ParsedQuery, depth: int, filters: Filters) -> NoReturn:
        """Raise ``e`` with the numpy path's trace of it: BM25 searched, then the dense stage failed."""
        self._bm25(mode, parsed, depth, filters, inside_gate=True)
        with span("dense"):
            raise e

    def _traced_fusion(self, got: CoreResult, start: float, seconds: float, top_k: int) -> None:
        """The fusion stage as ``Searcher._fuse`` records it (two channels)."""
        s = self.settings
        with timed_span("fusion", start, seconds) as sp:
            if sp.active:
                fused = [f[0] for f in (got.fused or ())[:top_k]]
                weights = list(WEIGHTS)
                fusion_recorded(sp, s, (got.bm25, got.dense, ()), fused, top_k, got.filled, weights)


def fusion_recorded(
    sp: Any,
    s: RetrievalSettings,
    channels: tuple[Sequence[ScoredId], Sequence[ScoredId], Sequence[ScoredId]],
    fused: list[str],
    top_k: int,
    filled: int,
    weights: list[float],
) -> None:
    """What the fusion stage ``sp`` (an active span) records on either path: the counts, the method and weights,
    how many BM25 candidates got their exact cosine (``FILL_DENSE``), and when the trace is sealed (only
    a written trace needs them) the rank changes and the clause ranking. ``channels``: BM25's, the dense and the
    clause channel's rankings (``()`` without clauses); ``fused``: the ids of the fused top ``top_k``."""
    bm25, dense, by_clause = channels
    sp.set(
        counts={"returned": len(fused), **({"clause_candidates": len(by_clause)} if by_clause else {})},
        method=s.fusion,
        dense_filled=filled,
        rrf_k=RRF_K,
        weights=weights,
    )
    sp.later(lambda: fusion_record(bm25, dense, fused, top_k))
    if by_clause:
        sp.later(lambda: ({}, {"clause_ranking": ranking_columns(by_clause)}))
