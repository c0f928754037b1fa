"""Looking inside: `zhiku traces`, `zhiku dashboard`, `zhiku query --verbose`'s tables, `zhiku history`'s runs."""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from zhiku.cli.common import ConfigOpt, IndexOpt, JsonOpt, _errors, _print_json, err, out, table
from zhiku.errors import InvalidInput, MissingDependency, NotFound
from zhiku.observability.trace import TRACE_FILE, Trace, ordered_stages, read_traces
from zhiku.settings import load_settings
from zhiku.types import IngestionRecord

RUN_GAP_S = 30.0  # without traces, records further apart than this start a new run


def _fmt(v: Any, spec: str = "") -> str:
    return "–" if v is None else format(v, spec)


def _delta(c: dict[str, Any]) -> str:
    return {"new": "new", "dropped": "dropped", "": ""}.get(c["status"], f"{c['delta']:+d}" if c["delta"] else "=")


def when(unix_s: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(unix_s))


def stage_table(trace: Trace) -> Table:
    stages = table(
        ("stage", "status", "start ms", "elapsed ms", "counts"),
        title=f"trace {trace.trace_id} · {trace.elapsed_ms:.1f} ms",
    )
    for s in ordered_stages(trace):
        note = s.data.get("reason") or s.data.get("error") or ""
        counts = " ".join(f"{k}={v}" for k, v in s.counts.items())
        stages.add_row(s.name, s.status, f"{s.start_ms:.1f}", f"{s.elapsed_ms:.2f}", f"{counts} {note}".strip())
    return stages


def print_trace(console: Console, trace: Trace) -> None:
    """The stages (status, timings, counts) and the rank tables of one query trace."""
    console.print(stage_table(trace))
    hits = {h["chunk_id"]: h for h in trace.data.get("hits", [])}
    fusion = trace.stage("fusion")
    fused = fusion if fusion is not None and fusion.status == "ok" else None
    ranks = table(
        ("n", "Δ", "before", "bm25", "bm25 score", "dense", "cosine", "score", "source", "section"),
        whole=["n", "Δ", "before", "bm25", "bm25 score", "dense", "cosine", "score"],
        texts=["source", "section"],
        title="ranks: before = best channel rank; Δ = before − after (+ moved up)" if fused is not None else "hits",
    )
    if fused is not None:
        rows = fused.data.get("changes", [])
    else:
        rows = [{**h, "rank_after": h["rank"], "rank_before": None, "status": "", "delta": None} for h in hits.values()]
    channel: dict[str, dict[str, Any]] = {}
    for name in ("bm25", "dense"):
        stage = trace.stage(name)
        channel[name] = {x["chunk_id"]: x["score"] for x in (stage.data.get("ranking", []) if stage else [])}
    for c in rows:
        cid = c["chunk_id"]
        h = hits.get(cid) or {"bm25_score": channel["bm25"].get(cid), "dense_score": channel["dense"].get(cid)}
        cells = [_fmt(c["rank_after"]), _delta(c), _fmt(c["rank_before"]), _fmt(c["bm25_rank"])]
        cells += [_fmt(h.get("bm25_score"), ".3f"), _fmt(c["dense_rank"]), _fmt(h.get("dense_score"), ".3f")]
        ranks.add_row(*cells, _fmt(h.get("score"), ".4f"), c.get("source", ""), c.get("section", ""))
    console.print(ranks)
    if fused is not None:
        summary = fused.data.get("summary", {})
        console.print("fusion: " + ", ".join(f"{k} {v}" for k, v in summary.items()))
    rerank = trace.stage("rerank")
    if rerank is not None and rerank.status != "ok":
        console.print(f"rerank: {rerank.status} ({rerank.data.get('reason', '')})")
    elif rerank is not None:
        reranked = table(
            ("after", "Δ", "before", "raw", "sigmoid", "source", "section"),
            title=f"rerank ({rerank.data.get('reranker', '')}, top_m {rerank.data.get('top_m', '')}): "
            "before = fused rank; raw score and sigmoid",
        )
        scores = {row["chunk_id"]: row for row in rerank.data.get("scores", [])}
        for c in rerank.data.get("changes", []):
            sc, h = scores.get(c["chunk_id"], {}), hits.get(c["chunk_id"], {})  # a sampled-out trace has no labels
            cells = [_fmt(c["rank_after"]), _delta(c), _fmt(c["rank_before"]), _fmt(sc.get("raw"), ".3f")]
            cells += [_fmt(sc.get("sigmoid"), ".3f"), c.get("source") or h.get("source", "")]
            reranked.add_row(*cells, c.get("section") or h.get("section", ""))
        console.print(reranked)


def print_ingest_trace(console: Console, trace: Trace) -> None:
    """An ingestion run: its stages, its counts and one row per document (status, and the reason when any)."""
    console.print(stage_table(trace))
    data = trace.data
    counts = data.get("counts", {})
    console.print(
        f"{when(trace.started_at)} · "
        + ", ".join(f"{n} {k}" for k, n in counts.items())
        + f" · {data.get('chunks_written', 0)} chunks written, {data.get('chunks_embedded', 0)} embedded"
        + (" · dry run" if data.get("dry_run") else "")
    )
    docs = data.get("documents", [])
    rows = table(("status", "source", "reason"), title=f"documents ({len(docs)})")
    for d in docs:
        rows.add_row(d.get("status", ""), d.get("source", ""), d.get("reason") or "")
    console.print(rows if docs else "no documents in this run")


@dataclass(frozen=True)
class Run:
    started_at: float
    trace_id: str | None
    records: tuple[IngestionRecord, ...]


def group_runs(records: Sequence[IngestionRecord], traces: Sequence[Trace]) -> list[Run]:
    """History records grouped into runs by their ingest trace's time span, else by gaps over ``RUN_GAP_S``."""
    spans = [(t.started_at, t.started_at + t.elapsed_ms / 1000, t.trace_id) for t in traces if t.kind == "ingest"]

    def trace_of(r: IngestionRecord) -> str | None:  # the nearest run's span, when it is within a second
        best = min(spans, key=lambda sp: max(sp[0] - r.at, r.at - sp[1], 0.0), default=None)
        return best[2] if best is not None and max(best[0] - r.at, r.at - best[1]) <= 1.0 else None

    groups: list[tuple[str | None, list[IngestionRecord]]] = []
    for r in records:
        tid = trace_of(r)
        if groups and tid == groups[-1][0] and (tid is not None or groups[-1][1][-1].at - r.at <= RUN_GAP_S):
            groups[-1][1].append(r)
        else:
            groups.append((tid, [r]))
    starts = {tid: start for start, _, tid in spans}
    return [Run(starts[tid] if tid else rows[-1].at, tid, tuple(rows)) for tid, rows in groups]


def print_history(console: Console, runs: Sequence[Run]) -> None:
    if not runs:
        console.print("no ingestion history yet: run `zhiku ingest PATH`")
        return
    errors = any(r.error for run in runs for r in run.records)  # no column of blanks squeezing the paths
    names = ("time", "status", "collection", "path", "chunks", "error")[: 6 if errors else 5]
    rows = table(names, texts=["path", "error"])
    here = Path.cwd()
    for i, run in enumerate(runs):
        counts = Counter(r.status for r in run.records)
        label = f"── run (trace {run.trace_id})" if run.trace_id else "── run"
        summary = ", ".join(f"{n} {k}" for k, n in counts.items())
        rows.add_row(*(when(run.started_at), summary, "", label, "", "")[: len(names)], style="bold")
        for r in run.records:
            path = Path(r.path)
            shown = str(path.relative_to(here)) if path.is_absolute() and path.is_relative_to(here) else r.path
            cells = [time.strftime("  %H:%M:%S", time.localtime(r.at)), r.status, r.collection, shown]
            rows.add_row(*[*cells, str(r.chunk_count), r.error or ""][: len(names)])
        if i < len(runs) - 1:
            rows.add_section()
    console.print(rows)


def traces(
    kind: Annotated[Optional[str], typer.Option("--kind", help="query | ingest (default: both).")] = None,
    limit: Annotated[int, typer.Option("-n", "--limit", help="How many, newest first.", min=1)] = 20,
    trace_id: Annotated[Optional[str], typer.Option("--id", help="Show this trace's stages and rank table.")] = None,
    as_json: JsonOpt = False,
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """List recent traces (queries and ingestion runs) from <index>/traces.jsonl, or show one."""
    with _errors():
        settings = load_settings(config, index=index)
        found = read_traces(settings.index / TRACE_FILE, kind=kind, limit=10_000 if trace_id else limit)
        if trace_id:
            found = _by_id(found, trace_id, settings.index / TRACE_FILE)
    if as_json:
        _print_json({"traces": [t.to_json() for t in found]})
        return
    if trace_id:
        t = found[0]
        out.print(f"{t.kind} {t.trace_id}: " + " ".join(f"{k}={v}" for k, v in t.attrs.items() if v is not None))
        (print_ingest_trace if t.kind == "ingest" else print_trace)(out, t)
        return
    rows = table(("trace", "kind", "status", "ms", "what", "stages"), whole=["trace", "ms"], texts=["what"])
    for t in found:
        what = t.attrs.get("query") or ", ".join(t.attrs.get("paths") or []) or str(t.attrs.get("documents", ""))
        what = f"{t.attrs['caller']}: {what}" if t.attrs.get("caller") else what  # who asked, over HTTP
        stages = " ".join(
            f"{s.name}:{s.elapsed_ms:.0f}" if s.status == "ok" else f"{s.name}:{s.status}" for s in ordered_stages(t)
        )
        rows.add_row(t.trace_id, t.kind, t.status, f"{t.elapsed_ms:.1f}", str(what)[:60], stages)
    out.print(rows if found else f"no traces in {settings.index} yet (tracing.enabled: {settings.tracing.enabled})")


def _by_id(found: list[Trace], trace_id: str, path: Path) -> list[Trace]:
    """The trace whose id is ``trace_id`` or starts with it (an id cut short in a narrow table still works)."""
    exact = [t for t in found if t.trace_id == trace_id]
    if exact:
        return exact[:1]
    ids = sorted({t.trace_id for t in found if t.trace_id.startswith(trace_id.rstrip("…"))})
    if len(ids) == 1 and trace_id.rstrip("…"):
        return [t for t in found if t.trace_id == ids[0]][:1]
    if len(ids) > 1:
        raise InvalidInput(
            f"trace id {trace_id!r} is the start of {len(ids)} traces ({', '.join(ids[:5])}): give more of it"
        )
    raise NotFound(f"no trace {trace_id!r} in {path} (list them with `zhiku traces`)")


STREAMLIT_FLAGS = (
    "--server.headless true --browser.gatherUsageStats false --global.developmentMode false "
    "--server.fileWatcherType none --client.toolbarMode viewer"
)


def dashboard(
    index: IndexOpt = None,
    config: ConfigOpt = None,
    port: Annotated[int, typer.Option("--port", help="Port on 127.0.0.1.", min=1, max=65535)] = 8501,
) -> None:
    """Open the Streamlit dashboard on http://127.0.0.1:PORT (overview, data, ingestion, traces, evaluation)."""
    import importlib.util

    with _errors():
        settings = load_settings(config, index=index)
        if importlib.util.find_spec("streamlit") is None:
            raise MissingDependency("the dashboard needs Streamlit: pip install 'zhiku[dashboard]'")
        from zhiku.mcp.http_security import check_port_free

        check_port_free("127.0.0.1", port, what="the dashboard", fix="pass --port N, or stop what holds it")
    from zhiku.dashboard import APP

    env = {**os.environ, "ZHIKU_INDEX": str(Path(settings.index).resolve())}
    if config is not None:
        env["ZHIKU_DASHBOARD_CONFIG"] = str(config.resolve())
    args = [sys.executable, "-m", "streamlit", "run", str(APP), "--server.address", "127.0.0.1"]
    args += ["--server.port", str(port), *STREAMLIT_FLAGS.split()]
    err.print(f"zhiku dashboard on http://127.0.0.1:{port} · index {settings.index}")
    sys.stderr.flush()
    os.execvpe(args[0], args, env)  # the dashboard takes this process over (one PID to stop)


def register(app: typer.Typer) -> None:
    app.command()(traces)
    app.command()(dashboard)
