"""How the CLI shows ingestion runs: one ingest trace with its stages and per-document rows (`zhiku traces --id`),
and the ingestion history with times, grouped per run (`zhiku history`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from zhiku.cli import tables
from zhiku.observability.trace import Trace, ordered_stages
from zhiku.types import IngestionRecord

RUN_GAP_S = 30.0  # without traces, records further apart than this start a new run


def when(unix_s: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(unix_s))


def stage_table(trace: Trace) -> Table:
    stages = Table(title=f"trace {trace.trace_id} · {trace.elapsed_ms:.1f} ms")
    for col in ("stage", "status", "start ms", "elapsed ms", "counts"):
        stages.add_column(col)
    for s in ordered_stages(trace):
        note = s.data.get("reason") or s.data.get("error") or ""
        counts = " ".join(f"{k}={v}" for k, v in s.counts.items())
        stages.add_row(s.name, s.status, f"{s.start_ms:.1f}", f"{s.elapsed_ms:.2f}", f"{counts} {note}".strip())
    return stages


def print_ingest_trace(console: Console, trace: Trace) -> None:
    """An ingestion run: its stages, its counts and one row per document (status, and the reason when any)."""
    console.print(stage_table(trace))
    data = trace.data
    counts = data.get("counts", {})
    console.print(
        f"{when(trace.started_at)} · "
        + ", ".join(f"{n} {k}" for k, n in counts.items())
        + f" · {data.get('chunks_written', 0)} chunks written, {data.get('chunks_embedded', 0)} embedded"
        + (" · dry run" if data.get("dry_run") else ""),
        markup=False,
    )
    docs = data.get("documents", [])
    table = Table(title=f"documents ({len(docs)})")
    for col in ("status", "source", "reason"):
        table.add_column(col)
    for d in docs:
        table.add_row(d.get("status", ""), d.get("source", ""), d.get("reason") or "")
    console.print(table if docs else "no documents in this run", markup=False)


@dataclass(frozen=True)
class Run:
    started_at: float
    trace_id: str | None
    records: tuple[IngestionRecord, ...]


def group_runs(records: Sequence[IngestionRecord], traces: Sequence[Trace]) -> list[Run]:
    """History records (newest first) grouped into ingestion runs, newest first: by the ingest trace whose time
    span holds them, else (no trace: tracing off or rotated away) by gaps longer than ``RUN_GAP_S``."""
    spans = [(t.started_at, t.started_at + t.elapsed_ms / 1000, t.trace_id) for t in traces if t.kind == "ingest"]

    def trace_of(r: IngestionRecord) -> str | None:  # the nearest run's span, when it is within a second
        best = min(spans, key=lambda sp: max(sp[0] - r.at, r.at - sp[1], 0.0), default=None)
        return best[2] if best is not None and max(best[0] - r.at, r.at - best[1]) <= 1.0 else None

    groups: list[tuple[str | None, list[IngestionRecord]]] = []
    for r in records:
        tid = trace_of(r)
        if groups:
            last_tid, rows = groups[-1]
            if (tid is not None and tid == last_tid) or (
                tid is None and last_tid is None and rows[-1].at - r.at <= RUN_GAP_S
            ):
                rows.append(r)
                continue
        groups.append((tid, [r]))
    starts = {tid: start for start, _, tid in spans}
    return [Run(starts[tid] if tid else rows[-1].at, tid, tuple(rows)) for tid, rows in groups]


def print_history(console: Console, runs: Sequence[Run]) -> None:
    if not runs:
        console.print("no ingestion history yet: run `zhiku ingest PATH`", markup=False)
        return
    errors = any(r.error for run in runs for r in run.records)  # no column of blanks squeezing the paths
    names = ("time", "status", "collection", "path", "chunks", "error")[: 6 if errors else 5]
    table = tables.table(names, texts=["path", "error"])
    here = Path.cwd()
    for i, run in enumerate(runs):
        counts: dict[str, int] = {}
        for r in run.records:
            counts[r.status] = counts.get(r.status, 0) + 1
        label = f"── run (trace {run.trace_id})" if run.trace_id else "── run"
        summary = ", ".join(f"{n} {k}" for k, n in counts.items())
        table.add_row(*(when(run.started_at), summary, "", label, "", "")[: len(names)], style="bold")
        for r in run.records:
            path = Path(r.path)
            shown = str(path.relative_to(here)) if path.is_absolute() and path.is_relative_to(here) else r.path
            cells = [time.strftime("  %H:%M:%S", time.localtime(r.at)), r.status, r.collection, shown]
            table.add_row(*[*cells, str(r.chunk_count), r.error or ""][: len(names)])  # a 6th cell: a column
        if i < len(runs) - 1:
            table.add_section()
    console.print(table)
