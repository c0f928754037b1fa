"""The clause channel (``retrieval.clause_weight``): a long question's clauses, each embedded as a query, re-order
the candidates BM25 and the dense channel found (bench/RESULTS.md, Issue 11 — held-out variants)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from zhiku.retrieval.fusion import ranked
from zhiku.settings import RetrievalSettings
from zhiku.stores.base import Retriever
from zhiku.text import query_clauses
from zhiku.types import ScoredId


def clauses_to_embed(query: str, settings: RetrievalSettings) -> list[str]:
    """The clauses to embed beside the whole question: z-score fusion with a clause weight only (``[]`` for a
    question of one clause)."""
    if settings.fusion != "zscore" or settings.clause_weight <= 0:
        return []
    return query_clauses(query, max_clauses=settings.max_clauses)


def clause_ranking(
    store: Retriever, rankings: Sequence[Sequence[ScoredId]], vectors: Sequence[np.ndarray]
) -> list[ScoredId]:
    """Every candidate of ``rankings`` scored by its best cosine over the clause ``vectors``, best first (ties by
    id): no search of its own, so it re-orders the candidates and never adds one. ``[]`` without vectors."""
    if not vectors:
        return []
    candidates = list(dict.fromkeys(x.chunk_id for ranking in rankings for x in ranking))
    best: dict[str, float] = {}
    for vector in vectors:
        for chunk_id, score in store.dense_scores(vector, candidates).items():
            best[chunk_id] = max(score, best.get(chunk_id, score))
    return ranked(sorted(best.items(), key=lambda kv: (-kv[1], kv[0])))
