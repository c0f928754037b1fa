"""The `zhiku` command line: parses flags, calls the library, formats the result.

Errors are one line on stderr (``error: …``) with a non-zero exit code; ``--json`` prints exactly one JSON
object on stdout.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from zhiku.errors import ZhikuError
from zhiku.settings import Settings, load_settings

app = typer.Typer(
    name="zhiku",
    help="知库 zhiku — a Chinese-first RAG knowledge server: ingest documents, search them with cited answers, "
    "serve them to AI assistants over MCP.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
config_app = typer.Typer(help="Inspect the effective settings.", no_args_is_help=True)
app.add_typer(config_app, name="config")

out = Console(soft_wrap=True, highlight=False)
err = Console(stderr=True, highlight=False, soft_wrap=True)  # soft_wrap: an error stays one line

IndexOpt = Annotated[Optional[Path], typer.Option("--index", help="Index directory (default: settings `index`, .zhiku).")]
ConfigOpt = Annotated[Optional[Path], typer.Option("--config", help="Settings file (default: ./zhiku.yaml if present).")]
CollectionOpt = Annotated[Optional[str], typer.Option("--collection", "-c", help="Collection name (default: settings `collection`).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print exactly one JSON object on stdout.")]


def _settings(config: Path | None, index: Path | None, **overrides: Any) -> Settings:
    return load_settings(config, index=index, **overrides)


@contextmanager
def _errors() -> Iterator[None]:
    """Turn library errors into a one-line message and exit code 1."""
    try:
        yield
    except ZhikuError as e:
        err.print(f"[bold red]error:[/] {escape(str(e))}", markup=True, highlight=False)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        err.print("interrupted")
        raise typer.Exit(130) from None


def _kb(settings: Settings, *, read_only: bool = False):  # noqa: ANN202
    from zhiku.api import KnowledgeBase

    return KnowledgeBase(settings, read_only=read_only)


@contextmanager
def _progress(enabled: bool, label: str) -> Iterator[Callable[[int, int, str], None] | None]:
    if not enabled:
        yield None
        return
    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=err, transient=True) as bar:
        task = bar.add_task("", total=None)

        def update(done: int, total: int, name: str) -> None:
            bar.update(task, completed=done, total=total or None, description=name[-40:])

        yield update


def _print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")


# ---------------------------------------------------------------------------------------------------
@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Files or folders (.md .markdown .txt .text).", show_default=False)],
    collection: CollectionOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Re-index even unchanged files; rebuilds an index made with other models/settings.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Report what would change; write nothing.")] = False,
    sync: Annotated[bool, typer.Option("--sync", help="Also remove documents whose files are gone from the given folders.")] = False,
    as_json: JsonOpt = False,
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Index documents: unchanged files are skipped, changed ones replaced, one bad file never stops the batch."""
    with _errors():
        settings = _settings(config, index)
        with _kb(settings) as kb, _progress(not as_json and err.is_terminal, "ingesting") as progress:
            report = kb.ingest(paths, collection=collection, force=force, dry_run=dry_run, sync=sync, on_progress=progress)
    counts = report.counts()
    if as_json:
        _print_json({**counts, "chunks_written": report.chunks_written, "chunks_embedded": report.chunks_embedded,
                     "seconds": round(report.elapsed_s, 3), "dry_run": report.dry_run,
                     "failures": [{"path": f.path, "reason": f.reason} for f in report.failed]})
    else:
        verb = "would be " if dry_run else ""
        out.print(", ".join(f"{n} {verb}{k}" for k, n in counts.items())
                  + f" · {report.chunks_written} chunks written · {report.elapsed_s:.1f}s · index {settings.index}")
        for f in report.failed:
            err.print(f"  failed: {f.path}: {f.reason}", markup=False)
    if report.failed:
        raise typer.Exit(1)


@app.command()
def query(
    text: Annotated[str, typer.Argument(help="The question, e.g. 试用期最长多久？", show_default=False)],
    collection: CollectionOpt = None,
    top_k: Annotated[Optional[int], typer.Option("-k", "--top-k", help="Number of passages (1–100; default settings `retrieval.top_k`).")] = None,
    mode: Annotated[Optional[str], typer.Option("--mode", help="bm25 | dense | hybrid (default settings `retrieval.mode`).")] = None,
    source: Annotated[Optional[str], typer.Option("--source", help="Only sources matching this glob, e.g. '劳动合同法*'.")] = None,
    doc_type: Annotated[Optional[str], typer.Option("--type", help="Only documents of this type (markdown, text, …).")] = None,
    as_json: JsonOpt = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show both channels' ranks and scores for every hit.")] = False,
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Search the index: BM25 and dense retrieval fused by RRF, printed as a cited Markdown answer."""
    with _errors():
        settings = _settings(config, index)
        with _kb(settings, read_only=True) as kb:
            r = kb.retrieve(text, top_k=top_k, mode=mode, collection=collection, source=source, doc_type=doc_type)
            answer = kb.answer(r)
    if as_json:
        _print_json({"query": answer.query, "mode": answer.mode, "answer": answer.markdown,
                     "hits": [asdict(c) for c in answer.citations]})
        return
    out.print(answer.markdown, markup=False)
    if verbose:
        table = Table(title=f"terms: {' '.join(r.query.terms)} · bm25 {len(r.bm25)} · dense {len(r.dense)} candidates")
        for col in ("n", "score", "bm25 rank", "bm25 score", "dense rank", "cosine", "source", "section"):
            table.add_column(col)
        for n, h in enumerate(r.hits, 1):
            table.add_row(str(n), f"{h.score:.4f}", str(h.bm25_rank or "–"),
                          f"{h.bm25_score:.3f}" if h.bm25_score is not None else "–", str(h.dense_rank or "–"),
                          f"{h.dense_score:.3f}" if h.dense_score is not None else "–", h.chunk.source, h.chunk.section)
        out.print(table)


@app.command()
def collections(as_json: JsonOpt = False, index: IndexOpt = None, config: ConfigOpt = None) -> None:
    """List collections with their document and chunk counts."""
    with _errors():
        settings = _settings(config, index)
        with _kb(settings, read_only=True) as kb:
            stats = kb.collections()
    if as_json:
        _print_json({"collections": [asdict(s) for s in stats]})
        return
    table = Table()
    for col in ("collection", "documents", "chunks", "characters"):
        table.add_column(col)
    for s in stats:
        table.add_row(s.name, str(s.documents), str(s.chunks), str(s.chars))
    out.print(table if stats else f"no collections in {settings.index} yet: run `zhiku ingest PATH`")


@app.command()
def documents(collection: CollectionOpt = None, as_json: JsonOpt = False, index: IndexOpt = None,
              config: ConfigOpt = None) -> None:
    """List indexed documents (id, collection, source, chunks)."""
    with _errors():
        settings = _settings(config, index)
        with _kb(settings, read_only=True) as kb:
            docs = kb.documents(collection)
    if as_json:
        _print_json({"documents": [asdict(d) for d in docs]})
        return
    table = Table()
    for col in ("doc_id", "collection", "source", "type", "chunks"):
        table.add_column(col)
    for d in docs:
        table.add_row(d.doc_id, d.collection, d.source, d.doc_type, str(d.chunk_count))
    out.print(table)


@app.command()
def delete(
    ref: Annotated[str, typer.Argument(help="Document id, or its path as ingested.", show_default=False)],
    collection: CollectionOpt = None,
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Delete a document from every index (it never comes back in results)."""
    with _errors():
        settings = _settings(config, index)
        with _kb(settings) as kb:
            doc = kb.delete(ref, collection)
    out.print(f"deleted {doc.doc_id} ({doc.collection}/{doc.source}, {doc.chunk_count} chunks)", markup=False)


@app.command()
def history(limit: Annotated[int, typer.Option(help="Rows to show.")] = 20, as_json: JsonOpt = False,
            index: IndexOpt = None, config: ConfigOpt = None) -> None:
    """Show the ingestion history, newest first."""
    with _errors():
        settings = _settings(config, index)
        with _kb(settings, read_only=True) as kb:
            rows = kb.history(limit)
    if as_json:
        _print_json({"history": [asdict(r) for r in rows]})
        return
    table = Table()
    for col in ("status", "collection", "path", "chunks", "error"):
        table.add_column(col)
    for r in rows:
        table.add_row(r.status, r.collection, r.path, str(r.chunk_count), r.error or "")
    out.print(table)


@app.command("eval")
def eval_(
    dataset: Annotated[Path, typer.Option("--dataset", help="BEIR folder: corpus.jsonl, queries.jsonl, qrels.tsv.")],
    mode: Annotated[Optional[str], typer.Option("--mode", help="bm25 | dense | hybrid.")] = None,
    k: Annotated[int, typer.Option("-k", help="Cut-off for nDCG, recall and MRR.", min=1, max=100)] = 10,
    max_queries: Annotated[Optional[int], typer.Option("--max-queries", help="Evaluate only the first N queries.", min=1)] = None,
    as_json: JsonOpt = False,
    index: Annotated[Optional[Path], typer.Option("--index", help="Index to (re)use; default: a temporary one.")] = None,
    config: ConfigOpt = None,
) -> None:
    """Evaluate retrieval on a BEIR dataset: nDCG, recall, MRR, hit rate, latency and indexing throughput."""
    from zhiku.evaluation.beir import load_beir
    from zhiku.evaluation.runner import evaluate, index_dataset

    with _errors(), tempfile.TemporaryDirectory(prefix="zhiku-eval-") as tmp:
        settings = _settings(config, index or Path(tmp))
        data = load_beir(dataset, max_queries=max_queries)
        mode_ = mode or settings.retrieval.mode
        with _kb(settings) as kb:
            with _progress(not as_json and err.is_terminal, "indexing") as progress:
                stats = index_dataset(kb, data, collection=data.name, on_progress=progress)
            with _progress(not as_json and err.is_terminal, "querying") as progress:
                result = evaluate(kb, data, mode=mode_, k=k, collection=data.name, on_progress=progress)
        result = type(result)(**{**result.__dict__, "indexing": stats})
    if as_json:
        _print_json(result.to_json())
        return
    table = Table(title=f"{result.dataset} · {result.mode} · {result.queries} queries")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, v in result.metrics.items():
        table.add_row(name, f"{v:.4f}")
    table.add_row("latency p50 / p95 (ms)", f"{result.latency_ms['p50']:.1f} / {result.latency_ms['p95']:.1f}")
    table.add_row("indexing (chunks/s)", f"{stats.chunks_per_s:.1f} ({stats.chunks} chunks, {stats.chunks_embedded} embedded)")
    out.print(table)


@config_app.command("show")
def config_show(as_json: JsonOpt = False, index: IndexOpt = None, config: ConfigOpt = None) -> None:
    """Print the effective settings (defaults < zhiku.yaml < ZHIKU_* env < flags)."""
    with _errors():
        settings = _settings(config, index)
    data = json.loads(settings.model_dump_json())
    if as_json:
        _print_json(data)
    else:
        import yaml

        out.print(yaml.safe_dump(data, allow_unicode=True, sort_keys=False).rstrip(), markup=False)


def _register_surfaces() -> None:
    """Commands that live in their own modules (they import heavy parts lazily)."""
    from zhiku import cli_mcp

    cli_mcp.register(app)


def main() -> None:
    _register_surfaces()
    app()


if __name__ == "__main__":
    main()
