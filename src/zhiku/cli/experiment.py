"""`zhiku experiment`: retrieval variants side by side on one index."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from zhiku.cli.common import ConfigOpt, JsonOpt, _errors, _kb, _print_json, _progress, err, out
from zhiku.cli.eval import (
    BudgetOpt,
    CollectionOpt,
    CutoffOpt,
    DatasetOpt,
    EmbedderOpt,
    RerankerOpt,
    dataset_path,
    warm_reranker,
    with_models,
)
from zhiku.settings import load_settings, merge

VARIANTS_HELP = (
    "Comma-separated: bm25, dense, hybrid, hybrid_zscore, hybrid_rrf (the two fusions), hybrid_rerank, "
    "hybrid+contextual, hybrid+multi_query, hybrid+hyde (docs/transforms.md)."
)


def experiment(
    dataset: DatasetOpt = None,
    variants: Annotated[str, typer.Option("--variants", help=VARIANTS_HELP)] = "bm25,dense,hybrid,hybrid_rerank",
    k: CutoffOpt = 10,
    budget: BudgetOpt = None,
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
    from zhiku.evaluation.experiments import parse_variants, run_experiment, variant_indexes
    from zhiku.evaluation.reports import check_out_dir
    from zhiku.evaluation.runner import index_dataset

    with _errors(), tempfile.TemporaryDirectory(prefix="zhiku-experiment-") as tmp:
        chosen = parse_variants(variants)
        check_out_dir(out_dir)
        data = load_dataset(dataset_path(dataset), max_queries=max_queries)
        yaml_set = data.kind == "yaml" and not data.docs  # runs against an existing index
        settings = merge(
            load_settings(config, index=index if (index or yaml_set) else Path(tmp)), tracing={"enabled": False}
        )
        settings = with_models(settings, embedder, reranker)
        with _kb(settings, read_only=yaml_set) as kb, variant_indexes(settings, data) as other:
            warm_reranker(kb)
            if not yaml_set:
                collection = data.name
                with _progress(not as_json and err.is_terminal, "indexing") as progress:
                    index_dataset(kb, data, collection=collection, on_progress=progress)

            def progress_for(v: Any) -> None:
                if not as_json and err.is_terminal:
                    err.print(f"running {v.name} …", markup=False)

            result = run_experiment(
                kb, data, chosen, k=k, collection=collection, on_variant=progress_for, budget=budget, kb_for=other
            )
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
        if r.status != "ok":
            table.add_row(r.variant, *["n/a"] * (len(names) + 2))
            continue
        latency = [f"{r.latency_ms[p]:.1f}" for p in ("p50", "p95")]
        table.add_row(r.variant, *(f"{r.metrics[n]:.4f}" for n in names), *latency)
    out.print(table)
    for r in result.rows:
        if r.status != "ok":
            out.print(f"{r.variant}: unavailable — {r.reason}", markup=False)


def register(app: typer.Typer) -> None:
    app.command()(experiment)
