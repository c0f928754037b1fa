"""The clause channel: a long question's clauses, each embedded as a query, re-order the candidates found."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from zhiku.embedding.base import Embedder, embed_queries
from zhiku.observability.tracing import span
from zhiku.retrieval.fusion import columns_of
from zhiku.retrieval.query import QueryVectors
from zhiku.stores.base import BestCosines, Retriever
from zhiku.types import Ranking, ScoredId

log = logging.getLogger(__name__)

MAX_CLAUSES = 8  # clauses embedded beside the question (the first ones): one embedding call stays short


def clause_ranking(
    store: Retriever, rankings: Sequence[Sequence[ScoredId]], vectors: Sequence[np.ndarray]
) -> Sequence[ScoredId]:
    """Every candidate of ``rankings`` scored by its best cosine over the clause ``vectors``, best first."""
    if not vectors:
        return []
    candidates = list(dict.fromkeys([i for ranking in rankings for i in columns_of(ranking)[0]]))
    if isinstance(store, BestCosines):  # one lookup of the candidates' rows for every clause
        best = store.best_dense_scores(vectors, candidates)
    else:
        best = {}
        for vector in vectors:
            for chunk_id, score in store.dense_scores(vector, candidates).items():
                best[chunk_id] = max(score, best.get(chunk_id, score))
    order = sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))  # ties by id
    return Ranking([i for i, _ in order], [s for _, s in order])


def embed_clauses(embedder: Embedder, known: QueryVectors, clauses: list[str]) -> tuple[np.ndarray, ...]:
    """The clauses' vectors, kept in ``known`` with the question vectors (a repeated question embeds none of them)."""
    if not clauses:
        return ()
    with span("clauses") as sp:
        kept = {clause: known.get(clause) for clause in clauses}
        missing = [clause for clause, vector in kept.items() if vector is None]
        if missing:
            try:  # one call for all of them (one request to a remote model)
                new = embed_queries(embedder, missing)
            except Exception as exc:  # noqa: BLE001 - an optional channel degrades; the question's own vector is fine
                log.warning("clause channel skipped: embedding the clauses failed (%s: %s)", type(exc).__name__, exc)
                reason = f"{type(exc).__name__}: {exc}"
                sp.set(counts={"clauses": len(clauses), "embedded": 0}, status="fallback", reason=reason)
                return ()
            for clause, vector in zip(missing, new, strict=True):
                known.put(clause, vector)
                kept[clause] = vector
        sp.set(counts={"clauses": len(clauses), "embedded": len(missing)})
    return tuple(v for v in (kept[clause] for clause in clauses) if v is not None)
