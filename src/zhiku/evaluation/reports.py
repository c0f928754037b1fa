"""Evaluation outputs (``summary.json``, ``report.md``, ``per_query.json``) and an index's evaluation history."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from zhiku.errors import InvalidInput
from zhiku.evaluation.generation import GenerationResult
from zhiku.evaluation.metrics import BarResult
from zhiku.evaluation.runner import EvalResult, records_json

HISTORY_FILE = "eval_history.jsonl"
WORST_SHOWN = 10


def gate_json(gate: Sequence[BarResult]) -> dict[str, Any] | None:
    """The verdict and every bar (``summary.json``, and `zhiku eval --json` when ``--gate`` is given)."""
    if not gate:
        return None
    return {
        "passed": all(b.passed for b in gate),
        "bars": [{"bar": str(b.bar), "value": round(b.value, 4), "passed": b.passed} for b in gate],
    }


def check_out_dir(out_dir: Path | None) -> None:
    """Refuse an ``--out`` that cannot become a folder before the run, not with a traceback after it."""
    if out_dir is None:
        return
    taken = next((p for p in (Path(out_dir), *Path(out_dir).parents) if p.exists()), None)
    if taken is not None and not taken.is_dir():
        raise InvalidInput(f"--out {out_dir}: {taken} is a file, not a folder (name a folder; it is created)")


def write_outputs(
    out_dir: Path,
    result: EvalResult,
    *,
    gate: Sequence[BarResult] = (),
    generation: GenerationResult | None = None,
    index: str | None = None,
) -> dict[str, Path]:
    """Write the three files into ``out_dir`` (created); returns their paths by name."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = result.summary_json()
    data.update(index=index, gate=gate_json(gate), generation=None if generation is None else generation.to_json())
    paths = {
        name: out_dir / f"{name}.{ext}" for name, ext in (("summary", "json"), ("report", "md"), ("per_query", "json"))
    }
    paths["summary"].write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    per_query = json.dumps(records_json(result), ensure_ascii=False, indent=1)
    paths["per_query"].write_text(per_query + "\n", encoding="utf-8")
    paths["report"].write_text(markdown_report(result, gate=gate, generation=generation), encoding="utf-8")
    return paths


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return lines


def markdown_report(
    result: EvalResult, *, gate: Sequence[BarResult] = (), generation: GenerationResult | None = None
) -> str:
    r = result
    lines = [
        f"# Evaluation: {r.dataset}",
        "",
        f"{r.queries} queries · mode `{r.mode}`"
        + (f" · variant `{r.variant}`" if r.variant else "")
        + f" · latency p50 {r.latency_ms['p50']:.1f} ms, p95 {r.latency_ms['p95']:.1f} ms",
        "",
        "## Retrieval",
        "",
    ]
    lines += _table(["metric", "value"], [(n, f"{v:.4f}") for n, v in r.metrics.items()])
    if len(r.categories) > 1:
        names = list(r.metrics)
        lines += ["", "## Per category", ""]
        lines += _table(
            ["category", "queries", *names],
            [(c, int(m["queries"]), *(f"{m[n]:.4f}" for n in names)) for c, m in r.categories.items()],
        )
    if gate:
        verdict = "passed" if all(b.passed for b in gate) else "FAILED"
        lines += ["", f"## Gate: {verdict}", ""] + [f"- {b}" for b in gate]
    lines += ["", "## Generation (LLM judge)", ""]
    if generation is None or generation.status == "skipped":
        lines.append(f"Skipped: {generation.reason if generation else 'not requested'}.")
    else:
        lines += _table(
            ["metric", "mean"], [(n, "–" if v is None else f"{v:.4f}") for n, v in generation.metrics.items()]
        )
        lines.append(
            f"\n{generation.queries} queries judged, {generation.judge_calls} judge calls, "
            f"{generation.errors} unscored (judge errors)."
        )
        lines += [f"- judge error ×{n}: {reason}" for reason, n in generation.error_reasons()]
    if r.unmatched:
        lines += ["", f"## Expected entries that match nothing in the index ({len(r.unmatched)})", ""]
        lines += [f"- {u}" for u in r.unmatched]
    missed = [q for q in r.records if q.first_relevant is None or q.first_relevant > 5]
    lines += ["", f"## Missed at 5 ({len(missed)} of {r.queries})", ""]
    for q in missed[:WORST_SHOWN]:
        found = "not found" if q.first_relevant is None else f"first relevant at {q.first_relevant}"
        lines.append(
            f"- **{q.query}** ({q.category}; {found}); expected {', '.join(q.relevant)[:200]}; got: "
            + "; ".join(f"{h.rank}. {h.source} {h.section}".strip() for h in q.hits[:3])
        )
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ history
@dataclass(frozen=True)
class HistoryEntry:
    at: float  # unix seconds
    dataset: str
    kind: str
    mode: str
    variant: str
    queries: int
    metrics: dict[str, float]
    latency_ms: dict[str, float]
    gate_passed: bool | None = None
    generation: dict[str, float | None] = field(default_factory=dict)
    out: str | None = None


def history_entry(
    result: EvalResult,
    *,
    gate: Sequence[BarResult] = (),
    generation: GenerationResult | None = None,
    out: Path | None = None,
) -> HistoryEntry:
    r = result
    what = (r.dataset, r.kind, r.mode, r.variant or r.mode, r.queries)
    scores = ({n: round(v, 4) for n, v in r.metrics.items()}, {n: round(v, 2) for n, v in r.latency_ms.items()})
    judged = dict(generation.metrics) if generation is not None and generation.status == "ok" else {}
    passed = None if not gate else all(b.passed for b in gate)
    return HistoryEntry(time.time(), *what, *scores, passed, judged, None if out is None else str(out))


def append_history(index: Path, entry: HistoryEntry) -> Path:
    path = Path(index) / HISTORY_FILE
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(asdict(entry), ensure_ascii=False) + "\n")
    return path


def read_history(index: Path) -> list[HistoryEntry]:
    """Every recorded run, oldest first; unreadable lines are skipped."""
    path = Path(index) / HISTORY_FILE
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(HistoryEntry(**json.loads(line)))
        except (ValueError, TypeError):
            continue
    return out
