"""`zhiku eval`, `zhiku experiment` and `zhiku tune` (the evaluation package is imported inside the commands)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from zhiku.cli.common import ConfigOpt, JsonOpt, _errors, _kb, _print_json, _progress, err, out, table
from zhiku.errors import InvalidInput
from zhiku.settings import DEFAULT_CONFIG_FILE, Settings, load_settings, merge

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
MaxQueriesOpt = Annotated[Optional[int], typer.Option("--max-queries", help="Use only the first N queries.", min=1)]
IndexOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--index",
        help="BEIR: index to (re)use (default: a temporary one). YAML sets: the index to query (default: settings `index`).",
    ),
]
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
VARIANTS_HELP = (
    "Comma-separated: bm25, dense, hybrid, hybrid_zscore, hybrid_rrf (the two fusions), hybrid_rerank, "
    "hybrid+contextual, hybrid+multi_query, hybrid+hyde (docs/transforms.md)."
)
UNMATCHED_SHOWN = 10  # warnings printed for expected entries that match nothing
CATEGORY_COLUMNS = 5  # categories per table (a metric per row): 80 columns hold five without cutting numbers


def warm_reranker(kb: Any) -> None:
    """Load the configured reranker before queries are timed (a load failure is left to the per-query fallback)."""
    if failed := kb.load_reranker():
        err.print(f"reranker failed to load ({failed}); queries fall back to the fused order")


def _dataset(dataset: Path | None, max_queries: int | None) -> Any:
    """``--dataset``, or ./eval.yaml (a project made by `zhiku init` has one)."""
    from zhiku.evaluation.datasets import load_dataset

    kinds = "pass --dataset PATH (a BEIR folder, a YAML set, or a folder with docs/ and eval.yaml)"
    if dataset is None and DEFAULT_DATASET.exists() and not DEFAULT_DATASET.is_file():
        raise InvalidInput(f"./eval.yaml is a folder, not a YAML set: {kinds}")
    if dataset is None and not DEFAULT_DATASET.is_file():
        raise InvalidInput(
            f"no --dataset given and no eval.yaml in this folder: {kinds}, or run in a project made by `zhiku init`"
        )
    return load_dataset(dataset or DEFAULT_DATASET, max_queries=max_queries)


def _setup(
    dataset: Path | None,
    max_queries: int | None,
    config: Path | None,
    index: Path | None,
    tmp: str,
    trace: bool = False,
    embedder: str | None = None,
    reranker: str | None = None,
) -> tuple[Any, bool, Settings]:
    """The dataset, whether it is a YAML set (run against an existing index; a corpus is indexed into ``index`` or a
    temporary one), and the settings."""
    from zhiku.api import parse_reranker_spec
    from zhiku.embedding import parse_embedder_spec

    data = _dataset(dataset, max_queries)
    yaml_set = data.kind == "yaml" and not data.docs
    settings = load_settings(config, index=index if (index or yaml_set) else Path(tmp))
    changes: dict[str, Any] = {"tracing": {"enabled": trace}}
    if embedder is not None:
        changes["embedding"] = parse_embedder_spec(embedder)
    if reranker is not None:
        changes["rerank"] = parse_reranker_spec(reranker)
    return data, yaml_set, merge(settings, **changes)


def _index(kb: Any, data: Any, yaml_set: bool, as_json: bool, collection: str | None) -> tuple[str | None, Any]:
    """The collection to search and the indexing stats: a corpus goes into a collection of its name first."""
    from zhiku.evaluation.runner import index_dataset

    if yaml_set:
        return collection, None
    with _progress(not as_json, "indexing") as progress:
        return data.name, index_dataset(kb, data, collection=data.name, on_progress=progress)


def eval_(
    dataset: DatasetOpt = None,
    mode: Annotated[Optional[str], typer.Option("--mode", help="bm25 | dense | hybrid.")] = None,
    k: CutoffOpt = 10,
    budget: BudgetOpt = None,
    max_queries: MaxQueriesOpt = None,
    as_json: JsonOpt = False,
    index: IndexOpt = None,
    config: ConfigOpt = None,
    collection: CollectionOpt = None,
    out_dir: Annotated[
        Optional[Path], typer.Option("--out", help="Write summary.json, report.md and per_query.json here.")
    ] = None,
    gate: Annotated[
        Optional[str], typer.Option("--gate", help='Bars to hold, e.g. "hit@5>=0.9,mrr@10>=0.8"; exit 1 if one fails.')
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
    from zhiku.evaluation.generation import build_judge, judge_generation, skipped
    from zhiku.evaluation.metrics import baseline_bars, check_gate, parse_gate
    from zhiku.evaluation.runner import append_history, check_out_dir, evaluate, gate_json, history_entry, write_outputs

    with _errors(), tempfile.TemporaryDirectory(prefix="zhiku-eval-") as tmp:
        bars = parse_gate(gate) if gate is not None else ()
        check_out_dir(out_dir)
        data, yaml_set, settings = _setup(dataset, max_queries, config, index, tmp, trace, embedder, reranker)
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
        with _kb(settings, read_only=yaml_set) as kb:
            warm_reranker(kb)
            collection, stats = _index(kb, data, yaml_set, as_json, collection)
            with _progress(not as_json, "querying") as progress:
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
        kept = index or yaml_set  # a temporary index keeps no history
        if out_dir is not None:
            index_name = str(settings.index) if kept else None
            write_outputs(out_dir, result, gate=checked, generation=generation, index=index_name)
        if kept:
            append_history(settings.index, history_entry(result, gate=checked, generation=generation, out=out_dir))
    if as_json:
        _print_json({**result.to_json(), **({"gate": gate_json(checked)} if checked else {})})
    else:
        _print_eval_table(result, stats, generation)
    for line in result.unmatched[:UNMATCHED_SHOWN]:
        err.print(f"warning: {line}")
    if len(result.unmatched) > UNMATCHED_SHOWN:
        err.print(f"warning: … and {len(result.unmatched) - UNMATCHED_SHOWN} more (all in --out's report.md)")
    for b in checked:
        err.print(f"gate: {b}")
    if missed := [b for b in checked if not b.passed]:
        err.print(
            "gate FAILED: "
            + "; ".join(f"{b.bar.metric} = {b.value:.4f}, needs {b.bar.op} {b.bar.threshold:g}" for b in missed)
        )
        raise typer.Exit(1)


def _print_eval_table(result: Any, stats: Any, generation: Any) -> None:
    rows = Table(title=f"{result.dataset} · {result.mode} · {result.queries} queries")
    rows.add_column("metric")
    rows.add_column("value", justify="right")
    for name, v in result.metrics.items():
        rows.add_row(name, f"{v:.4f}")
    rows.add_row("latency p50 / p95 (ms)", f"{result.latency_ms['p50']:.1f} / {result.latency_ms['p95']:.1f}")
    if stats is not None:
        rows.add_row(
            "indexing (chunks/s)", f"{stats.chunks_per_s:.1f} ({stats.chunks} chunks, {stats.chunks_embedded} embedded)"
        )
    if getattr(result, "rerank", None):
        rows.add_row("rerank (queries)", ", ".join(f"{k} {v}" for k, v in sorted(result.rerank.items())))
    out.print(rows)
    if len(result.categories) > 1:
        for cats in _category_tables(result.categories, list(result.metrics)):
            out.print(cats)
    if generation.status == "skipped":
        out.print(f"generation metrics skipped: {generation.reason}")
    else:
        out.print(
            "generation (LLM judge): "
            + ", ".join(f"{n} {'–' if v is None else f'{v:.4f}'}" for n, v in generation.metrics.items())
            + f" · {generation.queries} queries, {generation.errors} unscored"
        )
        for reason, n in generation.error_reasons():
            err.print(f"judge error ×{n}: {reason}")


def _category_tables(categories: dict[str, dict[str, float]], names: list[str]) -> list[Table]:
    """A column per category and a row per metric, ``CATEGORY_COLUMNS`` categories a table; numbers never cut."""
    items = list(categories.items())
    tables = []
    for start in range(0, len(items), CATEGORY_COLUMNS):
        part = dict(items[start : start + CATEGORY_COLUMNS])
        title = "per category"
        if len(items) > CATEGORY_COLUMNS:
            title += f" ({start + 1}–{start + len(part)} of {len(items)})"
        # a long category name folds in its header; a number on one line is narrower than any header
        t = table(("metric", *part), whole=("metric",), texts=tuple(part), title=title)
        t.add_row("queries", *(str(int(m["queries"])) for m in part.values()))
        for n in names:
            t.add_row(n, *(f"{m[n]:.4f}" for m in part.values()))
        tables.append(t)
    return tables


def experiment(
    dataset: DatasetOpt = None,
    variants: Annotated[str, typer.Option("--variants", help=VARIANTS_HELP)] = "bm25,dense,hybrid,hybrid_rerank",
    k: CutoffOpt = 10,
    budget: BudgetOpt = None,
    max_queries: MaxQueriesOpt = None,
    as_json: JsonOpt = False,
    index: IndexOpt = None,
    config: ConfigOpt = None,
    collection: CollectionOpt = None,
    out_dir: Annotated[
        Optional[Path], typer.Option("--out", help="Write experiment.json and experiment.md here.")
    ] = None,
    embedder: EmbedderOpt = None,
    reranker: RerankerOpt = None,
) -> None:
    """Run retrieval variants side by side on ONE index: metrics and p50/p95 latency per variant."""
    from zhiku.evaluation.runner import check_out_dir, parse_variants, run_experiment, variant_indexes

    with _errors(), tempfile.TemporaryDirectory(prefix="zhiku-experiment-") as tmp:
        chosen = parse_variants(variants)
        check_out_dir(out_dir)
        data, yaml_set, settings = _setup(dataset, max_queries, config, index, tmp, False, embedder, reranker)
        with _kb(settings, read_only=yaml_set) as kb, variant_indexes(settings, data) as other:
            warm_reranker(kb)
            collection = _index(kb, data, yaml_set, as_json, collection)[0]
            show = not as_json and err.is_terminal
            on_variant = (lambda v: err.print(f"running {v.name} …")) if show else None
            result = run_experiment(
                kb, data, chosen, k=k, collection=collection, on_variant=on_variant, budget=budget, kb_for=other
            )
        if out_dir is not None:
            result.save(out_dir)
    if as_json:
        _print_json(result.to_json())
        return
    out.print(f"{result.dataset} · {result.queries} queries · one index\n\n{result.markdown()}")


def tune(
    dataset: DatasetOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the choice; write nothing.")] = False,
    as_json: JsonOpt = False,
    index: IndexOpt = None,
    config: ConfigOpt = None,
    collection: CollectionOpt = None,
) -> None:
    """Choose the fusion weights (retrieval.fusion) and the refusal threshold (answer.min_score) from your own eval
    set by 5-fold cross-validation, against a shipped list of everyday off-topic questions: before / after (out of
    fold) with 99 % bootstrap intervals. Writes the choice to zhiku.yaml (or --config) only when the set can tell
    (≥ 50 questions and a gain whose interval excludes 0; a threshold that holds ≥ 90 % off-topic and ≤ 5 %
    answerable flagged out of fold), and says why not otherwise."""
    from zhiku.evaluation.tune import FOLDS, write_settings
    from zhiku.evaluation.tune import tune as choose

    with _errors(as_json), tempfile.TemporaryDirectory(prefix="zhiku-tune-") as tmp:
        data, yaml_set, settings = _setup(dataset, None, config, index, tmp)
        # searched with the clause channel on, whatever the weights in use: the grid weighs it from 0
        with _kb(merge(settings, retrieval={"fusion": "zscore"}), read_only=yaml_set) as kb:
            collection = _index(kb, data, yaml_set, as_json, collection)[0]
            with _progress(not as_json, "querying") as progress:
                result = choose(kb, data, collection=collection, current=settings, on_progress=progress)
        target = config or Path(DEFAULT_CONFIG_FILE)
        if result.write and not dry_run:
            write_settings(target, result.write)
            result.written = str(target)
    if as_json:
        _print_json(result.to_json())
        return
    title = f"{data.name} · {result.questions} questions, {result.offtopic} off-topic · {FOLDS}-fold cross-validation"
    gain = "gain [99 % interval]"
    t = table(("", "before", "after, out of fold", gain), whole=(gain,), title=title)
    for name, m in result.metrics.items():
        low, high = m["ci99"]
        t.add_row(name, f"{m['before']:.4f}", f"{m['after']:.4f}", f"{m['gain']:+.4f} [{low:+.4f}, {high:+.4f}]")
    for who in ("offtopic", "answerable"):
        before, after = (result.refusal[when][f"{who}_flagged"] for when in ("before", "after"))
        t.add_row(f"{who.replace('off', 'off-')} flagged", f"{before:.1%}", f"{after:.1%}", "")
    out.print(t)
    for name in ("fusion", "min_score"):
        out.print(f"{name}: {result.before[name]} → {result.after[name]}")
    for reason in result.reasons:
        out.print(f"not written: {reason}")
    changes = ", ".join(f"{k}: {v}" for k, v in result.write.items())
    if not result.write:
        out.print("nothing to write: the settings in use stay")
    elif result.written:
        out.print(f"written to {result.written}: {changes}")
    else:
        out.print(f"--dry-run: would write {changes} to {target}")


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_)
    app.command()(experiment)
    app.command()(tune)
