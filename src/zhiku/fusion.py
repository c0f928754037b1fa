"""Rank fusion: small pure functions."""

from __future__ import annotations

from collections.abc import Sequence

from zhiku.types import ScoredId


def rrf(
    rankings: Sequence[Sequence[ScoredId]],
    *,
    k: int = 60,
    weights: Sequence[float] | None = None,
) -> list[tuple[str, float]]:
    """Reciprocal Rank Fusion (Cormack, Clarke & Büttcher, SIGIR 2009).

    ``score(d) = Σ_i w_i / (k + rank_i(d))`` over the rankings that contain ``d`` (ranks 1-based).
    Returns ``(chunk_id, score)`` best first; ties are broken by the best single rank, then by id so the
    order is deterministic.
    """
    if k < 1:
        raise ValueError(f"RRF k must be >= 1, got {k}")
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings")
    scores: dict[str, float] = {}
    best_rank: dict[str, int] = {}
    for ranking, weight in zip(rankings, weights):
        for item in ranking:
            scores[item.chunk_id] = scores.get(item.chunk_id, 0.0) + weight / (k + item.rank)
            best_rank[item.chunk_id] = min(best_rank.get(item.chunk_id, item.rank), item.rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], best_rank[kv[0]], kv[0]))


def ranked(ids_scores: Sequence[tuple[str, float]]) -> list[ScoredId]:
    """Turn ``(id, score)`` pairs, best first, into ``ScoredId`` with 1-based ranks."""
    return [ScoredId(chunk_id=i, score=s, rank=n) for n, (i, s) in enumerate(ids_scores, 1)]
