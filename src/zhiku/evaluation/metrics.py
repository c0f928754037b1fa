"""Ranking metrics as small pure functions (trec_eval conventions; binary or graded relevance), and quality gates:
``"hit@5>=0.9,mrr@10>=0.8"`` — every bar must hold, or `zhiku eval --gate` exits 1."""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from zhiku.errors import InvalidInput


def hit_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    return 1.0 if any(d in relevant for d in ranked[:k]) else 0.0


def mrr_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """Reciprocal rank of the first relevant document within the top ``k`` (0 if none)."""
    return next((1.0 / i for i, d in enumerate(ranked[:k], 1) if d in relevant), 0.0)


def recall_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    return sum(d in relevant for d in ranked[:k]) / len(relevant) if relevant else 0.0


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


OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}
_BAR = re.compile(r"^\s*([A-Za-z_]+@\d+)\s*(>=|<=|>|<)\s*([0-9]*\.?[0-9]+)\s*$")


@dataclass(frozen=True)
class Bar:
    metric: str  # e.g. "hit@5"
    op: str  # >= > <= <
    threshold: float

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.threshold:g}"


@dataclass(frozen=True)
class BarResult:
    bar: Bar
    value: float
    passed: bool

    def __str__(self) -> str:
        verdict = "ok" if self.passed else "MISSED"
        return f"{self.bar.metric} = {self.value:.4f} (bar {self.bar.op} {self.bar.threshold:g}): {verdict}"


def parse_gate(spec: str) -> tuple[Bar, ...]:
    """Parse ``METRIC OP NUMBER`` bars separated by commas; a malformed one is an ``InvalidInput`` naming it."""
    bars = []
    for part in (spec or "").split(","):
        if not part.strip():
            continue
        m = _BAR.match(part)
        if m is None:
            raise InvalidInput(
                f"invalid --gate bar {part.strip()!r}: write METRIC OP NUMBER, e.g. "
                '"hit@5>=0.9,mrr@10>=0.8" (OP is >=, >, <= or <)'
            )
        metric = m.group(1).lower()
        try:
            parse_metric(metric)
        except ValueError as e:
            raise InvalidInput(f"invalid --gate bar {part.strip()!r}: {e}") from None
        value = float(m.group(3))
        if value > 1:  # every metric is a mean of values between 0 and 1
            raise InvalidInput(f"invalid --gate bar {part.strip()!r}: {metric} lies between 0 and 1")
        bars.append(Bar(metric, m.group(2), value))
    if not bars:
        raise InvalidInput('--gate is empty: give bars like "hit@5>=0.9,mrr@10>=0.8"')
    return tuple(bars)


REPORTED_DIGITS = 4  # metrics are reported (--json, summary.json) and printed to 4 decimals


def check_gate(bars: Sequence[Bar], metrics: Mapping[str, float]) -> list[BarResult]:
    """Each bar compared with its metric as reported (4 decimals): a ``--baseline`` bar is a reported value."""
    return [
        BarResult(b, metrics[b.metric], OPS[b.op](round(metrics[b.metric], REPORTED_DIGITS), b.threshold)) for b in bars
    ]


def baseline_bars(
    path: Path, *, max_drop: float, dataset: str, mode: str, budget: int | None, queries: int
) -> tuple[Bar, ...]:
    """Bars from an earlier run's ``summary.json`` (or ``--json`` output)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise InvalidInput(f"cannot read the baseline {path}: {e}") from None
    if not isinstance(data, dict):
        raise InvalidInput(f"the baseline {path} is not an eval result: save one with `zhiku eval --out DIR`")
    if not 0 <= max_drop < 1:
        raise InvalidInput(f"--max-drop must lie in [0, 1), got {max_drop}")
    for key, now in (("dataset", dataset), ("mode", mode), ("budget", budget), ("queries", queries)):
        if data.get(key) != now:
            raise InvalidInput(
                f"the baseline {path} has {key} {data.get(key)!r}, this run {now!r}: compare runs of the same set, "
                "mode, budget and queries (or save a new baseline)"
            )
    metrics = data.get("metrics", data)
    bars = []
    for name, value in metrics.items():
        try:
            parse_metric(name)
        except ValueError:
            continue  # dataset, queries, latency_ms, ...
        if isinstance(value, int | float) and not isinstance(value, bool):
            if not math.isfinite(value):  # NaN would make a bar at 0 that every run passes
                raise InvalidInput(f"the baseline {path} has {name} = {value}: save a new baseline")
            bars.append(Bar(name, ">=", round(max(0.0, float(value) - max_drop), REPORTED_DIGITS)))
    if not bars:
        raise InvalidInput(f"the baseline {path} holds no metrics: save one with `zhiku eval --out DIR` (summary.json)")
    return tuple(bars)
