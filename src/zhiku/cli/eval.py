"""CLI commands for observability and evaluation: `zhiku eval`, `zhiku experiment`, `zhiku traces`,
`zhiku dashboard`, and the stage/rank tables that `zhiku query --verbose` prints.

Heavy parts (evaluation, Streamlit) are imported inside the commands.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from zhiku.cli.common import ConfigOpt, IndexOpt, JsonOpt, _errors, _kb, _print_json, _progress, err, out
from zhiku.cli.traces_view import print_ingest_trace, stage_table
from zhiku.errors import InvalidInput, MissingDependency
from zhiku.llm.settings import JudgeSettings
from zhiku.observability.trace import Trace, ordered_stages
from zhiku.settings import Settings, load_settings, merge

DatasetOpt = Annotated[
    Path, typer.Option("--dataset", help="BEIR folder (corpus.jsonl, queries.jsonl, qrels.tsv) or a YAML set (.yaml).")
]
OutOpt = Annotated[Optional[Path], typer.Option("--out", help="Write summary.json, report.md and per_query.json here.")]
CollectionOpt = Annotated[
    Optional[str], typer.Option("--collection", "-c", help="YAML sets: search only this collection.")
]
EmbedderOpt = Annotated[
    Optional[str],
    typer.Option(
        "--embedder",
        help="Override the embedder: bundled, sentence-transformers:MODEL_OR_FOLDER, openai:MODEL (endpoint from embedding.base_url).",
    ),
]
RerankerOpt = Annotated[
    Optional[str],
    typer.Option(
        "--reranker",
        help="Override the reranker: none, cross-encoder:MODEL_OR_FOLDER, llm or llm:MODEL (endpoint from rerank.base_url).",
    ),
]


def warm_reranker(kb: Any) -> None:
    """Load the configured reranker before queries are timed (a load failure is left to the per-query fallback)."""
    if kb.reranker is None:
        return
    try:
        kb.reranker.load()
    except Exception as e:  # noqa: BLE001 - every query will then say `fallback: <reason>`
        err.print(
            f"reranker failed to load ({type(e).__name__}: {e}); queries fall back to the fused order", markup=False
        )


def with_models(settings: Settings, embedder: str | None, reranker: str | None) -> Settings:
    """``settings`` with the ``--embedder`` / ``--reranker`` overrides applied."""
    from zhiku.embedding import parse_embedder_spec
    from zhiku.retrieval.rerank import parse_reranker_spec

    changes: dict[str, Any] = {}
    if embedder is not None:
        changes["embedding"] = parse_embedder_spec(embedder)
    if reranker is not None:
        changes["rerank"] = parse_reranker_spec(reranker)
    return merge(settings, **changes) if changes else settings


# ------------------------------------------------------------------------------- query --verbose
def _fmt(v: Any, spec: str = "") -> str:
    return "–" if v is None else format(v, spec)


def print_trace(console: Console, trace: Trace) -> None:
    """The stages (status, timings, counts) and the rank table of one query trace."""
    console.print(stage_table(trace))
    hits = {h["chunk_id"]: h for h in trace.data.get("hits", [])}
    fusion = trace.stage("fusion")
    fused = fusion is not None and fusion.status == "ok"
    table = Table(title="ranks: before = best channel rank; Δ = before − after (+ moved up)" if fused else "hits")
    for col in ("n", "Δ", "before", "bm25", "bm25 score", "dense", "cosine", "score", "source", "section"):
        table.add_column(col)
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
    channel = {
        name: {x["chunk_id"]: x["score"] for x in (stage.data.get("ranking", []) if stage is not None else [])}
        for name in ("bm25", "dense")
        for stage in (trace.stage(name),)
    }
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
        for c in rerank.data.get("changes", []):
            delta = {"new": "new", "dropped": "dropped"}.get(c["status"], f"{c['delta']:+d}" if c["delta"] else "=")
            sc = scores.get(c["chunk_id"], {})
            table.add_row(
                _fmt(c["rank_after"]),
                delta,
                _fmt(c["rank_before"]),
                _fmt(sc.get("raw"), ".3f"),
                _fmt(sc.get("sigmoid"), ".3f"),
                c.get("source", ""),
                c.get("section", ""),
            )
        console.print(table)


# ------------------------------------------------------------------------------------------- eval
def build_judge(settings: Settings, env: dict[str, str]) -> Any:
    """The judge client from the settings, or None when no judge is configured (its API key read here, at the edge)."""
    from zhiku.evaluation.judge import CACHE_FILE, JudgeCache, JudgeClient

    j: JudgeSettings = settings.judge
    if not j.base_url or not j.model:
        return None
    key = None
    if j.api_key_env:
        key = env.get(j.api_key_env)
        if not key:
            raise InvalidInput(f"judge.api_key_env names {j.api_key_env}, but that environment variable is empty")
    cache = JudgeCache(settings.embedding.cache_dir / CACHE_FILE) if j.cache else None
    return JudgeClient(j.base_url, j.model, api_key=key, timeout=j.timeout, cache=cache)


def eval_(
    dataset: DatasetOpt,
    mode: Annotated[Optional[str], typer.Option("--mode", help="bm25 | dense | hybrid.")] = None,
    k: Annotated[int, typer.Option("-k", help="Cut-off for nDCG, recall and MRR.", min=1, max=100)] = 10,
    max_queries: Annotated[
        Optional[int], typer.Option("--max-queries", help="Evaluate only the first N queries.", min=1)
    ] = None,
    as_json: JsonOpt = False,
    index: Annotated[
        Optional[Path],
        typer.Option(
            "--index",
            help="BEIR: index to (re)use (default: a temporary one). YAML sets: the index to query (default: settings `index`).",
        ),
    ] = None,
    config: ConfigOpt = None,
    collection: CollectionOpt = None,
    out_dir: OutOpt = None,
    gate: Annotated[
        Optional[str],
        typer.Option("--gate", help='Bars that must hold, e.g. "hit@5>=0.9,mrr@10>=0.8"; exit 1 when one is missed.'),
    ] = None,
    trace: Annotated[
        bool, typer.Option("--trace/--no-trace", help="Write a trace per query (off by default: faster).")
    ] = False,
    judge: Annotated[
        Optional[bool],
        typer.Option(
            "--judge/--no-judge", help="Score generation with the LLM judge (default: when judge.base_url is set)."
        ),
    ] = None,
    judge_queries: Annotated[int, typer.Option("--judge-queries", help="Queries the judge scores.", min=1)] = 20,
    embedder: EmbedderOpt = None,
    reranker: RerankerOpt = None,
) -> None:
    """Evaluate retrieval: Hit@K, MRR, nDCG, recall (overall and per category), latency; optional LLM-judged
    generation metrics; writes reports with --out and enforces bars with --gate."""
    from zhiku.evaluation.datasets import load_dataset
    from zhiku.evaluation.gate import check_gate, parse_gate
    from zhiku.evaluation.generation import judge_generation, skipped
    from zhiku.evaluation.reports import append_history, history_entry, write_outputs
    from zhiku.evaluation.runner import evaluate, index_dataset

    with _errors(), tempfile.TemporaryDirectory(prefix="zhiku-eval-") as tmp:
        bars = parse_gate(gate) if gate is not None else ()
        data = load_dataset(dataset, max_queries=max_queries)
        yaml_set = data.kind == "yaml"
        settings = load_settings(config, index=index if (index or yaml_set) else Path(tmp))
        settings = with_models(merge(settings, tracing={"enabled": trace}), embedder, reranker)
        mode_ = mode or settings.retrieval.mode
        client = build_judge(settings, dict(os.environ)) if judge is not False else None
        if judge and client is None:
            raise InvalidInput(
                "--judge needs an LLM judge: set judge.base_url and judge.model (ZHIKU_JUDGE__BASE_URL, ZHIKU_JUDGE__MODEL)"
            )
        stats = None
        with _kb(settings, read_only=yaml_set) as kb:
            warm_reranker(kb)
            if not yaml_set:
                collection = data.name
                with _progress(not as_json and err.is_terminal, "indexing") as progress:
                    stats = index_dataset(kb, data, collection=collection, on_progress=progress)
            with _progress(not as_json and err.is_terminal, "querying") as progress:
                result = evaluate(
                    kb,
                    data,
                    mode=mode_,
                    k=k,
                    collection=collection,
                    extra_metrics=[b.metric for b in bars],
                    on_progress=progress,
                )
            generation = (
                judge_generation(kb, data, client, mode=mode_, collection=collection, max_queries=judge_queries)
                if client is not None
                else skipped()
            )
        result = type(result)(**{**result.__dict__, "indexing": stats})
        checked = check_gate(bars, result.metrics)
        if out_dir is not None:
            write_outputs(
                out_dir,
                result,
                gate=checked,
                generation=generation,
                index=str(settings.index) if index or yaml_set else None,
            )
        if index or yaml_set:
            append_history(settings.index, history_entry(result, gate=checked, generation=generation, out=out_dir))
    if as_json:
        _print_json(result.to_json())
    else:
        _print_eval_table(result, stats, generation)
    for b in checked:
        err.print(f"gate: {b}", markup=False)
    if checked and not all(b.passed for b in checked):
        missed = [b for b in checked if not b.passed]
        err.print(
            "gate FAILED: "
            + "; ".join(f"{b.bar.metric} = {b.value:.4f}, needs {b.bar.op} {b.bar.threshold:g}" for b in missed),
            markup=False,
        )
        raise typer.Exit(1)


def _print_eval_table(result: Any, stats: Any, generation: Any) -> None:
    table = Table(title=f"{result.dataset} · {result.mode} · {result.queries} queries")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, v in result.metrics.items():
        table.add_row(name, f"{v:.4f}")
    table.add_row("latency p50 / p95 (ms)", f"{result.latency_ms['p50']:.1f} / {result.latency_ms['p95']:.1f}")
    if stats is not None:
        table.add_row(
            "indexing (chunks/s)", f"{stats.chunks_per_s:.1f} ({stats.chunks} chunks, {stats.chunks_embedded} embedded)"
        )
    if getattr(result, "rerank", None):
        table.add_row("rerank (queries)", ", ".join(f"{k} {v}" for k, v in sorted(result.rerank.items())))
    out.print(table)
    if len(result.categories) > 1:
        cats = Table(title="per category")
        names = list(result.metrics)
        for col in ("category", "queries", *names):
            cats.add_column(col)
        for c, m in result.categories.items():
            cats.add_row(c, str(int(m["queries"])), *(f"{m[n]:.4f}" for n in names))
        out.print(cats)
    if generation.status == "skipped":
        out.print(f"generation metrics skipped: {generation.reason}", markup=False)
    else:
        out.print(
            "generation (LLM judge): "
            + ", ".join(f"{n} {'–' if v is None else f'{v:.4f}'}" for n, v in generation.metrics.items())
            + f" · {generation.queries} queries, {generation.errors} unscored",
            markup=False,
        )


# ------------------------------------------------------------------------------------- experiment
def experiment(
    dataset: DatasetOpt,
    variants: Annotated[
        str, typer.Option("--variants", help="Comma-separated: bm25, dense, hybrid, hybrid_rerank.")
    ] = "bm25,dense,hybrid,hybrid_rerank",
    k: Annotated[int, typer.Option("-k", help="Cut-off for nDCG, recall and MRR.", min=1, max=100)] = 10,
    max_queries: Annotated[
        Optional[int], typer.Option("--max-queries", help="Use only the first N queries.", min=1)
    ] = None,
    as_json: JsonOpt = False,
    index: Annotated[
        Optional[Path],
        typer.Option(
            "--index", help="BEIR: index to (re)use (default: a temporary one). YAML sets: the index to query."
        ),
    ] = None,
    config: ConfigOpt = None,
    collection: CollectionOpt = None,
    out_dir: Annotated[
        Optional[Path], typer.Option("--out", help="Write experiment.json and experiment.md here.")
    ] = None,
    embedder: EmbedderOpt = None,
    reranker: RerankerOpt = None,
) -> None:
    """Run retrieval variants side by side on ONE index: metrics and p50/p95 latency per variant."""
    from zhiku.evaluation.datasets import load_dataset
    from zhiku.evaluation.experiments import parse_variants, run_experiment
    from zhiku.evaluation.runner import index_dataset

    with _errors(), tempfile.TemporaryDirectory(prefix="zhiku-experiment-") as tmp:
        chosen = parse_variants(variants)
        data = load_dataset(dataset, max_queries=max_queries)
        yaml_set = data.kind == "yaml"
        settings = merge(
            load_settings(config, index=index if (index or yaml_set) else Path(tmp)), tracing={"enabled": False}
        )
        settings = with_models(settings, embedder, reranker)
        with _kb(settings, read_only=yaml_set) as kb:
            warm_reranker(kb)
            if not yaml_set:
                collection = data.name
                with _progress(not as_json and err.is_terminal, "indexing") as progress:
                    index_dataset(kb, data, collection=collection, on_progress=progress)

            def progress_for(v: Any) -> Any:
                if as_json or not err.is_terminal:
                    return None
                err.print(f"running {v.name} …", markup=False)
                return None

            result = run_experiment(kb, data, chosen, k=k, collection=collection, on_variant=progress_for)
        if out_dir is not None:
            result.save(out_dir)
    if as_json:
        _print_json(result.to_json())
        return
    if not out.is_terminal:  # logs and pipes get the Markdown table, whole
        out.print(f"{result.dataset} · {result.queries} queries · one index\n\n{result.markdown()}", markup=False)
        return
    names = result.metric_names()
    table = Table(title=f"{result.dataset} · {result.queries} queries · one index")
    for col in ("variant", *names, "p50 ms", "p95 ms"):
        table.add_column(col, justify="left" if col == "variant" else "right")
    for r in result.rows:
        if r.status == "ok":
            table.add_row(
                r.variant,
                *(f"{r.metrics[n]:.4f}" for n in names),
                f"{r.latency_ms['p50']:.1f}",
                f"{r.latency_ms['p95']:.1f}",
            )
        else:
            table.add_row(r.variant, *(["n/a"] * (len(names) + 2)))
    out.print(table)
    for r in result.rows:
        if r.status != "ok":
            out.print(f"{r.variant}: unavailable — {r.reason}", markup=False)


# ----------------------------------------------------------------------------------------- traces
def traces(
    kind: Annotated[Optional[str], typer.Option("--kind", help="query | ingest (default: both).")] = None,
    limit: Annotated[int, typer.Option("-n", "--limit", help="How many, newest first.", min=1)] = 20,
    trace_id: Annotated[Optional[str], typer.Option("--id", help="Show this trace's stages and rank table.")] = None,
    as_json: JsonOpt = False,
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """List recent traces (queries and ingestion runs) from <index>/traces.jsonl, or show one."""
    from zhiku.errors import NotFound
    from zhiku.observability.trace import TRACE_FILE, read_traces

    with _errors():
        settings = load_settings(config, index=index)
        found = read_traces(settings.index / TRACE_FILE, kind=kind, limit=10_000 if trace_id else limit)
        if trace_id:
            found = [t for t in found if t.trace_id == trace_id]
            if not found:
                raise NotFound(
                    f"no trace {trace_id!r} in {settings.index / TRACE_FILE} (list them with `zhiku traces`)"
                )
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
    table = Table()
    for col in ("trace", "kind", "status", "ms", "what", "stages"):
        table.add_column(col)
    for t in found:
        what = t.attrs.get("query") or ", ".join(t.attrs.get("paths") or []) or str(t.attrs.get("documents", ""))
        stages = " ".join(
            f"{s.name}:{s.elapsed_ms:.0f}" if s.status == "ok" else f"{s.name}:{s.status}" for s in ordered_stages(t)
        )
        table.add_row(t.trace_id, t.kind, t.status, f"{t.elapsed_ms:.1f}", str(what)[:60], stages)
    out.print(table if found else f"no traces in {settings.index} yet (tracing.enabled: {settings.tracing.enabled})")


# -------------------------------------------------------------------------------------- dashboard
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
    app.command("eval")(eval_)
    app.command()(experiment)
    app.command()(traces)
    app.command()(dashboard)
