"""Ranking metrics as small pure functions (trec_eval conventions; binary or graded relevance)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def hit_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """1.0 if any relevant document is in the top ``k``."""
    return 1.0 if any(d in relevant for d in ranked[:k]) else 0.0


def mrr_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """Reciprocal rank of the first relevant document within the top ``k`` (0 if none)."""
    return next((1.0 / i for i, d in enumerate(ranked[:k], 1) if d in relevant), 0.0)


def recall_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """Share of the relevant documents found in the top ``k``."""
    if not relevant:
        return 0.0
    return sum(1 for d in ranked[:k] if d in relevant) / len(relevant)


def ndcg_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """nDCG@k with linear gains, as trec_eval's ``ndcg_cut`` (Järvelin & Kekäläinen 2002)."""
    dcg = sum(relevant.get(d, 0) / math.log2(i + 1) for i, d in enumerate(ranked[:k], 1))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 1) for i, g in enumerate(ideal, 1))
    return dcg / idcg if idcg > 0 else 0.0


METRICS = {"hit": hit_at_k, "mrr": mrr_at_k, "ndcg": ndcg_at_k, "recall": recall_at_k}
# ``hit_chars@N``: a relevant target within the first N characters of returned text (the ranked chunks' text, cut
# at N). It needs the chunks' lengths, so the runner computes it; ``score`` takes the ranking cut at N.
BUDGET_METRIC = "hit_chars"
MAX_BUDGET = 1_000_000


def parse_metric(name: str) -> tuple[str, int]:
    """``"ndcg@10"`` → ``("ndcg", 10)``; raises ``ValueError`` naming the metrics there are."""
    base, at, k = name.strip().lower().partition("@")
    if base == BUDGET_METRIC and at and k.isdigit() and 1 <= int(k) <= MAX_BUDGET:
        return base, int(k)
    if base not in METRICS or not at or not k.isdigit() or not 1 <= int(k) <= 1000:
        raise ValueError(
            f"unknown metric {name!r}: use {', '.join(f'{m}@K' for m in METRICS)} (K from 1 to 1000) "
            f"or {BUDGET_METRIC}@CHARS (a hit within the first CHARS characters of returned text)"
        )
    return base, int(k)


def score(
    names: Sequence[str],
    ranked: Sequence[str],
    relevant: Mapping[str, int],
    by_budget: Mapping[int, Sequence[str]] | None = None,
) -> dict[str, float]:
    """Every named metric (``hit@5``, ``mrr@10``, …) of one ranking; ``hit_chars@N`` reads ``by_budget[N]``."""
    out = {}
    for name in names:
        base, k = parse_metric(name)
        if base == BUDGET_METRIC:
            if by_budget is None or k not in by_budget:
                raise ValueError(f"{name} needs the ranking cut at {k} characters")
            out[name] = hit_at_k(by_budget[k], relevant, len(by_budget[k]))
        else:
            out[name] = METRICS[base](ranked, relevant, k)
    return out
