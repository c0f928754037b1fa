"""Quality gates: ``"hit@5>=0.9,mrr@10>=0.8"`` — every bar must hold, or `zhiku eval --gate` exits 1."""

from __future__ import annotations

import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from zhiku.errors import InvalidInput
from zhiku.evaluation.metrics import parse_metric

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


def check_gate(bars: Sequence[Bar], metrics: Mapping[str, float]) -> list[BarResult]:
    return [BarResult(b, metrics[b.metric], OPS[b.op](metrics[b.metric], b.threshold)) for b in bars]
