"""`zhiku eval` and what the evaluation commands share: the dataset/model options, loading the reranker before
queries are timed, and the --embedder/--reranker overrides. Heavy parts (evaluation) are imported inside."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from zhiku.cli import tables
from zhiku.cli.common import ConfigOpt, JsonOpt, _errors, _kb, _print_json, _progress, err, out
from zhiku.errors import InvalidInput
from zhiku.settings import JudgeSettings, Settings, load_settings, merge

DatasetOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--dataset",
        help="BEIR folder (corpus.jsonl, queries.jsonl, qrels.tsv), a YAML set (.yaml), or a folder with docs/ and "
        "eval.yaml (long documents: docs/ is ingested first, like a BEIR corpus). Default: ./eval.yaml (what "
        "`zhiku init` writes).",
    ),
]
DEFAULT_DATASET = Path("eval.yaml")


def dataset_path(dataset: Path | None) -> Path:
    """``--dataset``, or ./eval.yaml when it is not given (a project made by `zhiku init` has one)."""
    if dataset is not None:
        return dataset
    if DEFAULT_DATASET.is_file():
        return DEFAULT_DATASET
    if DEFAULT_DATASET.exists():
        raise InvalidInput(
            "./eval.yaml is a folder, not a YAML set: pass --dataset PATH (a BEIR folder, a YAML set, or a folder "
            "with docs/ and eval.yaml)"
        )
    raise InvalidInput(
        "no --dataset given and no eval.yaml in this folder: pass --dataset PATH (a BEIR folder, a YAML set, or a "
        "folder with docs/ and eval.yaml), or run in a project made by `zhiku init`"
    )


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
CutoffOpt = Annotated[int, typer.Option("-k", help="Cut-off for nDCG, recall and MRR.", min=1, max=100)]
BudgetOpt = Annotated[
    Optional[int],
    typer.Option(
        "--budget",
        help="Context budget in characters: the ranking metrics count a hit only within the first CHARS characters "
        "of returned text (compare chunkings at equal context cost); also reports hit_chars@CHARS.",
        min=1,
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
    if failed := kb.load_reranker():
        err.print(f"reranker failed to load ({failed}); queries fall back to the fused order", markup=False)


def with_models(settings: Settings, embedder: str | None, reranker: str | None) -> Settings:
    """``settings`` with the ``--embedder`` / ``--reranker`` overrides applied."""
    from zhiku.api import parse_reranker_spec
    from zhiku.embedding import parse_embedder_spec

    changes: dict[str, Any] = {}
    if embedder is not None:
        changes["embedding"] = parse_embedder_spec(embedder)
    if reranker is not None:
        changes["rerank"] = parse_reranker_spec(reranker)
    return merge(settings, **changes) if changes else settings


# ------------------------------------------------------------------------------------------- eval
def build_judge(settings: Settings) -> Any:
    """The judge client from the settings, or None when no judge is configured (its API key read here, at the edge)."""
    from zhiku.evaluation.judge import CACHE_FILE, JudgeCache, JudgeClient

    j: JudgeSettings = settings.judge
    if not j.base_url or not j.model:
        return None
    if j.api_key_env and j.api_key is None:
        raise InvalidInput(f"judge.api_key_env names {j.api_key_env}, but that environment variable is empty")
    key = j.api_key.get_secret_value() if j.api_key else None
    cache = JudgeCache(settings.cache_dir / CACHE_FILE) if settings.cache_dir else None
    return JudgeClient(j.base_url, j.model, api_key=key, timeout=j.timeout_s, cache=cache)


def eval_(
    dataset: DatasetOpt = None,
    mode: Annotated[Optional[str], typer.Option("--mode", help="bm25 | dense | hybrid.")] = None,
    k: CutoffOpt = 10,
    budget: BudgetOpt = None,
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
    baseline: Annotated[
        Optional[Path],
        typer.Option(
            "--baseline",
            help="summary.json (or --json output) of an earlier run of this set: each of its metrics is a bar at its "
            "value minus --max-drop, with --gate's output and exit 1.",
        ),
    ] = None,
    max_drop: Annotated[
        float, typer.Option("--max-drop", help="How far a metric may fall below --baseline's value.", min=0)
    ] = 0.01,
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
    """Evaluate retrieval: Hit@K, MRR, nDCG, recall, hits within 2,000/4,000 returned characters (overall and per
    category), latency; optional LLM-judged generation metrics; writes reports with --out and enforces bars with
    --gate."""
    from zhiku.evaluation.datasets import load_dataset
    from zhiku.evaluation.gate import baseline_bars, check_gate, parse_gate
    from zhiku.evaluation.generation import judge_generation, skipped
    from zhiku.evaluation.reports import append_history, check_out_dir, gate_json, history_entry, write_outputs
    from zhiku.evaluation.runner import evaluate, index_dataset

    with _errors(), tempfile.TemporaryDirectory(prefix="zhiku-eval-") as tmp:
        bars = parse_gate(gate) if gate is not None else ()
        check_out_dir(out_dir)
        data = load_dataset(dataset_path(dataset), max_queries=max_queries)
        yaml_set = data.kind == "yaml" and not data.docs  # runs against an existing index
        settings = load_settings(config, index=index if (index or yaml_set) else Path(tmp))
        settings = with_models(merge(settings, tracing={"enabled": trace}), embedder, reranker)
        mode_ = mode or settings.retrieval.mode
        if baseline is not None:
            bars += baseline_bars(
                baseline, max_drop=max_drop, dataset=data.name, mode=mode_, budget=budget, queries=len(data.queries)
            )
        client = build_judge(settings) if judge is not False else None
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
                    budget=budget,
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
        _print_json({**result.to_json(), **({"gate": gate_json(checked)} if checked else {})})
    else:
        _print_eval_table(result, stats, generation)
    for line in result.unmatched[:UNMATCHED_SHOWN]:
        err.print(f"warning: {line}", markup=False)
    if len(result.unmatched) > UNMATCHED_SHOWN:
        err.print(
            f"warning: … and {len(result.unmatched) - UNMATCHED_SHOWN} more (all in --out's report.md)", markup=False
        )
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


UNMATCHED_SHOWN = 10  # warnings printed for expected entries that match nothing


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
        for cats in _category_tables(result.categories, list(result.metrics)):
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
        for reason, n in generation.error_reasons():  # why, not only how many
            err.print(f"judge error ×{n}: {reason}", markup=False)


CATEGORY_COLUMNS = 5  # up to this many categories are columns of one table (a metric per row): 80 columns hold them


def _category_tables(categories: dict[str, dict[str, float]], names: list[str]) -> list[Table]:
    """Per-category metrics that fit a terminal: one column per category and a metric per row, in tables of
    ``CATEGORY_COLUMNS`` categories (a row per category would need 2 + one column per metric, more than 80
    columns hold without cutting numbers and names); numbers never cut."""
    items = list(categories.items())
    out = []
    for start in range(0, len(items), CATEGORY_COLUMNS):
        part = dict(items[start : start + CATEGORY_COLUMNS])
        title = "per category"
        if len(items) > CATEGORY_COLUMNS:
            title += f" ({start + 1}–{start + len(part)} of {len(items)})"
        # a long category name folds in its header; a number on one line is narrower than any header
        table = tables.table(("metric", *part), whole=("metric",), texts=tuple(part), title=title)
        table.add_row("queries", *(str(int(m["queries"])) for m in part.values()))
        for n in names:
            table.add_row(n, *(f"{m[n]:.4f}" for m in part.values()))
        out.append(table)
    return out


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_)
