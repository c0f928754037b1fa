"""CLI commands to look inside: `zhiku traces`, `zhiku dashboard`, and the stage/rank tables that
`zhiku query --verbose` prints (Streamlit is imported only when the dashboard runs)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from zhiku.cli import tables
from zhiku.cli.common import ConfigOpt, IndexOpt, JsonOpt, _errors, _print_json, err, out
from zhiku.cli.traces_view import print_ingest_trace, stage_table
from zhiku.errors import MissingDependency
from zhiku.observability.trace import TRACE_FILE, Trace, ordered_stages, read_traces
from zhiku.settings import load_settings


def _fmt(v: Any, spec: str = "") -> str:
    return "–" if v is None else format(v, spec)


def print_trace(console: Console, trace: Trace) -> None:
    """The stages (status, timings, counts) and the rank table of one query trace."""
    console.print(stage_table(trace))
    hits = {h["chunk_id"]: h for h in trace.data.get("hits", [])}
    fusion = trace.stage("fusion")
    fused = fusion is not None and fusion.status == "ok"
    table = tables.table(
        ("n", "Δ", "before", "bm25", "bm25 score", "dense", "cosine", "score", "source", "section"),
        whole=["n", "Δ", "before", "bm25", "bm25 score", "dense", "cosine", "score"],
        texts=["source", "section"],
        title="ranks: before = best channel rank; Δ = before − after (+ moved up)" if fused else "hits",
    )
    rows = (
        fusion.data.get("changes", [])
        if fused and fusion is not None
        else [
            {
                "chunk_id": h["chunk_id"],
                "rank_after": h["rank"],
                "rank_before": None,
                "status": "",
                "delta": None,
                "bm25_rank": h["bm25_rank"],
                "dense_rank": h["dense_rank"],
                "source": h["source"],
                "section": h["section"],
            }
            for h in hits.values()
        ]
    )
    channel: dict[str, dict[str, Any]] = {}
    for name in ("bm25", "dense"):
        stage = trace.stage(name)
        channel[name] = {x["chunk_id"]: x["score"] for x in (stage.data.get("ranking", []) if stage else [])}
    for c in rows:
        h = hits.get(c["chunk_id"]) or {
            "bm25_score": channel["bm25"].get(c["chunk_id"]),
            "dense_score": channel["dense"].get(c["chunk_id"]),
        }
        delta = {"new": "new", "dropped": "dropped", "": ""}.get(c["status"], f"{c['delta']:+d}" if c["delta"] else "=")
        table.add_row(
            _fmt(c["rank_after"]),
            delta,
            _fmt(c["rank_before"]),
            _fmt(c["bm25_rank"]),
            _fmt(h.get("bm25_score"), ".3f"),
            _fmt(c["dense_rank"]),
            _fmt(h.get("dense_score"), ".3f"),
            _fmt(h.get("score"), ".4f"),
            c.get("source", ""),
            c.get("section", ""),
        )
    console.print(table)
    if fused and fusion is not None:
        summary = fusion.data.get("summary", {})
        console.print("fusion: " + ", ".join(f"{k} {v}" for k, v in summary.items()), markup=False)
    _print_rerank(console, trace)


def _print_rerank(console: Console, trace: Trace) -> None:
    """The rerank stage of a query trace: its status and reason, or its table (fused rank → reranked rank)."""
    rerank = trace.stage("rerank")
    if rerank is not None and rerank.status != "ok":
        console.print(f"rerank: {rerank.status} ({rerank.data.get('reason', '')})", markup=False)
    elif rerank is not None:
        table = Table(
            title=f"rerank ({rerank.data.get('reranker', '')}, top_m {rerank.data.get('top_m', '')}): "
            "before = fused rank; raw score and sigmoid"
        )
        for col in ("after", "Δ", "before", "raw", "sigmoid", "source", "section"):
            table.add_column(col)
        scores = {row["chunk_id"]: row for row in rerank.data.get("scores", [])}
        hits = {h["chunk_id"]: h for h in trace.data.get("hits", [])}  # a sampled-out trace's rows have no labels
        for c in rerank.data.get("changes", []):
            delta = {"new": "new", "dropped": "dropped"}.get(c["status"], f"{c['delta']:+d}" if c["delta"] else "=")
            sc, h = scores.get(c["chunk_id"], {}), hits.get(c["chunk_id"], {})
            table.add_row(
                _fmt(c["rank_after"]),
                delta,
                _fmt(c["rank_before"]),
                _fmt(sc.get("raw"), ".3f"),
                _fmt(sc.get("sigmoid"), ".3f"),
                c.get("source") or h.get("source", ""),
                c.get("section") or h.get("section", ""),
            )
        console.print(table)


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
        out.print(
            f"{t.kind} {t.trace_id}: " + " ".join(f"{k}={v}" for k, v in t.attrs.items() if v is not None), markup=False
        )
        (print_ingest_trace if t.kind == "ingest" else print_trace)(out, t)
        return
    table = tables.table(("trace", "kind", "status", "ms", "what", "stages"), whole=["trace", "ms"], texts=["what"])
    for t in found:
        what = t.attrs.get("query") or ", ".join(t.attrs.get("paths") or []) or str(t.attrs.get("documents", ""))
        stages = " ".join(
            f"{s.name}:{s.elapsed_ms:.0f}" if s.status == "ok" else f"{s.name}:{s.status}" for s in ordered_stages(t)
        )
        table.add_row(t.trace_id, t.kind, t.status, f"{t.elapsed_ms:.1f}", str(what)[:60], stages)
    out.print(table if found else f"no traces in {settings.index} yet (tracing.enabled: {settings.tracing.enabled})")


def _by_id(found: list[Trace], trace_id: str, path: Path) -> list[Trace]:
    """The trace whose id is ``trace_id`` or starts with it (an id cut short in a narrow table still works)."""
    from zhiku.errors import InvalidInput, NotFound

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
    args = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(APP),
        "--server.address",
        "127.0.0.1",
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--global.developmentMode",
        "false",
        "--server.fileWatcherType",
        "none",
        "--client.toolbarMode",
        "viewer",
    ]
    err.print(f"zhiku dashboard on http://127.0.0.1:{port} · index {settings.index}", markup=False)
    sys.stderr.flush()
    os.execvpe(args[0], args, env)  # the dashboard takes this process over (one PID to stop)


def register(app: typer.Typer) -> None:
    app.command()(traces)
    app.command()(dashboard)
