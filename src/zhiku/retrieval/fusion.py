"""Rank fusion: small pure functions."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import repeat

import numpy as np

from zhiku.numeric import best
from zhiku.types import Ranking, ScoredId

RRF_K = 60  # the RRF constant of Cormack et al. 2009
FILL_DENSE = True  # a BM25 candidate outside the dense top gets its exact cosine, not the channel's lowest score
WEIGHTS = (1.0, 1.0)  # BM25's and the dense channel's weight: no other pair measured better on every dev set
# BM25's, the dense channel's and the clause channel's for a question asked in English (BM25: its bridged terms;
# clauses: it with its Chinese gloss), chosen on half A of the English dev sets
CROSS_WEIGHTS = (1.0, 1.0, 1.5)
FEEDBACK_WEIGHTS = (1.0, 1.0, 1.0)  # theirs after the second dense search (``search.FEEDBACK_DOCS``), chosen alike
NAMED_WEIGHTS = (2.0, 1.0, 1.0)  # and when it names someone in pinyin (``bridge.names``): BM25 matches the name
# The clause channel's weight in z-score fusion, chosen on half of each dev set and measured on the other half;
# 0 turns the channel off
CLAUSE_WEIGHT = 0.35


def weights_of(fusion: str) -> tuple[float, float, float]:
    """The BM25, dense and clause weights of ``retrieval.fusion``: ``zscore:B,D,C`` (`zhiku tune`), else the defaults."""
    given = fusion.partition(":")[2]
    b, d, c = map(float, given.split(",")) if given else (*WEIGHTS, CLAUSE_WEIGHT)
    return b, d, c


def rrf(
    rankings: Sequence[Sequence[ScoredId]],
    *,
    k: int = 60,
    weights: Sequence[float] | None = None,
) -> list[tuple[str, float]]:
    """Reciprocal Rank Fusion (Cormack et al. 2009): ``Σ w_i / (k + rank_i)``; ``(chunk_id, score)`` best first,
    ties by the best single rank, then by id."""
    if k < 1:
        raise ValueError(f"RRF k must be >= 1, got {k}")
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings")
    scores: dict[str, float] = {}
    best_rank: dict[str, int] = {}
    for ranking, weight in zip(rankings, weights, strict=False):
        for item in ranking:
            scores[item.chunk_id] = scores.get(item.chunk_id, 0.0) + weight / (k + item.rank)
            best_rank[item.chunk_id] = min(best_rank.get(item.chunk_id, item.rank), item.rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], best_rank[kv[0]], kv[0]))


def ranked(ids_scores: Sequence[tuple[str, float]]) -> list[ScoredId]:
    """Turn ``(id, score)`` pairs, best first, into ``ScoredId`` with 1-based ranks."""
    return [ScoredId(chunk_id=i, score=s, rank=n) for n, (i, s) in enumerate(ids_scores, 1)]


def zscore_fusion(
    rankings: Sequence[Sequence[ScoredId]],
    *,
    weights: Sequence[float] | None = None,
    fill: Sequence[Mapping[str, float] | None] | None = None,
    limit: int | None = None,
) -> list[tuple[str, float]]:
    """Weighted CombSUM of z-scores (Fox & Shaw 1994; Montague & Aslam 2001): a sure channel (one candidate far
    above the rest) weighs more, which RRF cannot see. A candidate a ranking lacks gets its lowest z-score, or its
    exact raw score from ``fill`` (a mapping or None per ranking). The first ``limit`` ``(chunk_id, score)``, best
    first, ties by id."""
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings")
    if fill is not None and len(fill) != len(rankings):
        raise ValueError(f"{len(fill)} fill mappings for {len(rankings)} rankings")
    columns = [columns_of(r) for r in rankings]
    at: dict[str, int] = {}  # every candidate's position, in ranking order
    where = [[at.setdefault(c, len(at)) for c in ids] for ids, _ in columns]  # (one pass over each ranking)
    keys = list(at)
    fused = np.zeros(len(keys))
    for n, ((_, scores), w) in enumerate(zip(columns, weights, strict=False)):
        if not scores:
            continue
        own = np.array(scores, np.float64)
        mean = own.sum() / own.size  # numpy's mean and std, without their per-call overhead (the same floats)
        own -= mean
        std = math.sqrt((own * own).sum() / own.size) or 1.0
        own /= std
        z = np.full(len(keys), own.min())  # a candidate the channel did not find: its lowest standardised score
        extra = fill[n] if fill is not None else None
        if extra:  # exact raw scores of candidates outside the ranking
            put = np.fromiter(map(at.get, extra, repeat(-1)), np.intp, len(extra))
            found = put >= 0
            z[put[found]] = (np.fromiter(extra.values(), np.float64, len(extra))[found] - mean) / std
        z[where[n]] = own
        fused += w * z
    return _best_first(keys, fused, limit)


def columns_of(ranking: Sequence[ScoredId]) -> tuple[Sequence[str], Sequence[float]]:
    """A ranking's ids and scores (a ``Ranking`` holds them as columns)."""
    if isinstance(ranking, Ranking):
        return ranking.ids, ranking.scores
    return [x.chunk_id for x in ranking], [x.score for x in ranking]


def positions(ids: Sequence[str]) -> dict[str, int]:
    """Each id's 0-based position in ``ids``."""
    return dict(zip(ids, range(len(ids)), strict=True))


def _best_first(keys: list[str], scores: np.ndarray, limit: int | None) -> list[tuple[str, float]]:
    """The first ``limit`` ``(key, score)`` by score descending, ties by key (only the candidates scoring at least
    the ``limit``-th best score are sorted)."""
    at = range(len(keys)) if limit is None else best(scores, limit).tolist()
    pairs = sorted(zip((-scores[at]).tolist(), [keys[i] for i in at], strict=True))[:limit]
    return [(key, -score) for score, key in pairs]
