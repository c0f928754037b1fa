"""The `zhiku` command line: parses flags, calls the library, formats the result.

Errors are one line on stderr (``error: …``) with a non-zero exit code; ``--json`` prints exactly one JSON
object on stdout. Command groups live in their own modules (eval, mcp, models, plugins, store) and are registered here.
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from zhiku.cli import eval as eval_cmds
from zhiku.cli import experiment as experiment_cmds
from zhiku.cli import mcp as mcp_cmds
from zhiku.cli import models as models_cmds
from zhiku.cli import plugins as plugins_cmds
from zhiku.cli import project as project_cmds
from zhiku.cli import store as store_cmds
from zhiku.cli import tables
from zhiku.cli import traces as traces_cmds
from zhiku.cli import transforms as tx
from zhiku.cli.common import (
    CollectionOpt,
    ConfigOpt,
    IndexOpt,
    JsonOpt,
    _errors,
    _kb,
    _line_progress,
    _print_json,
    _progress,
    _settings,
    err,
    filter_note,
    out,
    some_path_exists,
    unsupported_note,
)
from zhiku.errors import InvalidInput, NotFound

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


# ---------------------------------------------------------------------------------------------------
@app.command()
def ingest(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="Files or folders (.md .markdown .txt .text .pdf .docx .html .htm .xhtml).", show_default=False
        ),
    ],
    collection: CollectionOpt = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Re-index even unchanged files; rebuilds an index made with other models/settings."
        ),
    ] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Report what would change; write nothing.")] = False,
    sync: Annotated[
        bool, typer.Option("--sync", help="Also remove documents whose files are gone from the given folders.")
    ] = False,
    transform: tx.TransformOpt = None,
    as_json: JsonOpt = False,
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Index documents: unchanged files are skipped, changed ones replaced, one bad file never stops the batch.
    With --transform (or transforms.enabled) an LLM enriches chunks first; --dry-run then shows what it would send."""
    from zhiku.api import parse_transform_names

    with _errors(as_json):
        names = parse_transform_names(transform)
        settings = _settings(config, index, **({"transforms": {"enabled": names}} if names is not None else {}))
        some_path_exists(paths)
        bar = _progress(True, "ingesting") if err.is_terminal else _line_progress("ingesting")
        with _kb(settings) as kb, _progress(False, "") if as_json else bar as progress:
            if dry_run and settings.transforms.enabled:
                return tx.print_plan(kb.plan_transforms(paths, collection=collection, force=force), as_json)
            files, chunks = tx.progress_pair(progress)
            report = kb.ingest(
                paths,
                collection=collection,
                force=force,
                dry_run=dry_run,
                sync=sync,
                on_progress=files,
                on_transform=chunks,
            )
    counts = report.counts()
    if as_json:
        _print_json(
            {
                **counts,
                "chunks_written": report.chunks_written,
                "chunks_embedded": report.chunks_embedded,
                "chunks_over_window": report.chunks_over_window,
                "seconds": round(report.elapsed_s, 3),
                "dry_run": report.dry_run,
                "failures": [{"path": f.path, "reason": f.reason} for f in report.failed],
                "needs_ocr": [{"source": n.source, "pages": list(n.pages)} for n in report.needs_ocr],
                "gone": list(report.gone),
                "unsupported": dict(report.unsupported),
                **tx.report_json(report),
            }
        )
    else:
        from zhiku.api import needs_ocr_note

        verb = "would be " if dry_run else ""
        ocr = f" ({len(report.needs_ocr)} need OCR)" if report.needs_ocr else ""
        out.print(
            ", ".join(f"{n} {verb}{k}" for k, n in counts.items())
            + ocr
            + f" · {report.chunks_written} chunks written · {report.elapsed_s:.1f}s · index {settings.index}"
        )
        for f in report.failed:
            err.print(f"  failed: {f.path}: {f.reason}", markup=False)
        if report.chunks_over_window:
            err.print(
                f"  {report.chunks_over_window} chunks are longer than the embedder's window and are embedded "
                "diluted: lower chunking.size_chars",
                markup=False,
            )
        for n in report.needs_ocr:
            err.print(f"  {n.source}: {needs_ocr_note(n.pages, settings.loaders.ocr)}", markup=False)
        if report.unsupported:
            err.print(f"  {unsupported_note(report.unsupported)}", markup=False)
        if report.gone:
            shown = ", ".join(report.gone[:3]) + (f" and {len(report.gone) - 3} more" if len(report.gone) > 3 else "")
            err.print(
                f"  {len(report.gone)} indexed document(s) whose files are gone from these folders stay searchable "
                f"({shown}): add --sync to drop them",
                markup=False,
            )
        tx.print_report(report)
    if report.failed:
        raise typer.Exit(1)


@app.command()
def query(
    text: Annotated[str, typer.Argument(help="The question, e.g. 试用期最长多久？", show_default=False)],
    collection: Annotated[
        Optional[str], typer.Option("--collection", "-c", help="Search only this collection (default: all of them).")
    ] = None,
    top_k: Annotated[
        Optional[int],
        typer.Option("-k", "--top-k", help="Number of passages (1–100; default settings `retrieval.top_k`)."),
    ] = None,
    mode: Annotated[
        Optional[str], typer.Option("--mode", help="bm25 | dense | hybrid (default settings `retrieval.mode`).")
    ] = None,
    source: Annotated[
        Optional[str], typer.Option("--source", help="Only sources matching this glob, e.g. '劳动合同法*'.")
    ] = None,
    doc_type: Annotated[
        Optional[str],
        typer.Option(
            "--type", help="Only documents of this type (markdown, text, pdf, docx, html; plugins add theirs)."
        ),
    ] = None,
    as_json: JsonOpt = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            help="Show the trace: stage timings and counts, both channels' ranks and scores, rank changes.",
        ),
    ] = False,
    rerank: Annotated[
        Optional[bool],
        typer.Option(
            "--rerank/--no-rerank",
            help="Run the configured reranker (settings `rerank`; default: when one is configured) or skip it.",
        ),
    ] = None,
    tag: tx.TagOpt = None,
    rewrite: tx.RewriteOpt = None,
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Search the index: BM25 and dense retrieval fused (then reranked, when configured), printed as a cited
    Markdown answer."""
    with _errors(as_json):
        settings = _settings(config, index, **({"retrieval": {"rewrite": rewrite}} if rewrite else {}))
        with _kb(settings, read_only=True) as kb:
            if rerank is not False:  # load the model first: rerank.timeout_s then bounds the reranking itself
                eval_cmds.warm_reranker(kb)
            with kb.tracer.trace("query", capture=verbose) as trace:
                answer = kb.query(
                    text,
                    top_k=top_k,
                    mode=mode,
                    collection=collection,
                    source=source,
                    doc_type=doc_type,
                    rerank=rerank,
                    tags=tag,
                )
                note = None if answer.hits else filter_note(kb, collection, source, doc_type)
                extra = kb.enrichment_rows([c.chunk_id for c in answer.citations]) if as_json else {}
    if as_json:
        _print_json(
            {
                "query": answer.query,
                "mode": answer.mode,
                "answer": answer.markdown,
                "rerank": answer.rerank,
                "rewrite": answer.rewrite,
                "queries": list(answer.queries),
                "low_confidence": answer.low_confidence,
                "confidence": None if answer.confidence is None else round(answer.confidence, 6),
                "hits": [asdict(c) | extra.get(c.chunk_id, {}) for c in answer.citations],
                "note": note,
            }
        )
        return
    out.print(answer.markdown, markup=False)
    if note:
        err.print(note, markup=False)
    if answer.rerank.startswith("fallback"):
        err.print(f"rerank {answer.rerank} (answered in the fused order)", markup=False)
    if answer.rewrite.startswith("fallback"):
        err.print(f"rewrite {answer.rewrite} (searched the plain query)", markup=False)
    if verbose and trace is not None:
        bm25, dense = answer.candidate_counts
        out.print(f"terms: {' '.join(answer.terms)} · bm25 {bm25} · dense {dense} candidates", markup=False)
        traces_cmds.print_trace(out, trace)


@app.command()
def collections(as_json: JsonOpt = False, index: IndexOpt = None, config: ConfigOpt = None) -> None:
    """List collections with their document and chunk counts."""
    with _errors(as_json):
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
def documents(
    collection: CollectionOpt = None, as_json: JsonOpt = False, index: IndexOpt = None, config: ConfigOpt = None
) -> None:
    """List indexed documents (id, collection, source, chunks, status: ready, or needs_ocr with its pages)."""
    with _errors(as_json):
        settings = _settings(config, index)
        with _kb(settings, read_only=True) as kb:
            docs = kb.documents(collection)
    if as_json:
        _print_json({"documents": [asdict(d) for d in docs]})
        return
    from zhiku.api import page_list
    from zhiku.types import DocStatus

    table = tables.table(
        ("doc_id", "collection", "source", "type", "chunks", "status"), whole=["doc_id"], texts=["source"]
    )
    for d in docs:
        status = DocStatus(d.status).value + (f" (pages {page_list(d.needs_ocr_pages)})" if d.needs_ocr_pages else "")
        table.add_row(d.doc_id, d.collection, d.source, d.doc_type, str(d.chunk_count), status)
    out.print(table)


@app.command()
def delete(
    ref: Annotated[
        str,
        typer.Argument(
            help="Document id, or its source path as ingested (taken literally; see --glob).", show_default=False
        ),
    ],
    glob: Annotated[
        bool, typer.Option("--glob", help="REF is a pattern over source paths (* ? [..]): delete every match.")
    ] = False,
    yes: Annotated[
        bool, typer.Option("--yes", help="With --glob: delete when more than one document matches.")
    ] = False,
    collection: CollectionOpt = None,
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Delete a document from every index (it never comes back in results). REF is literal; with --glob it is a
    pattern, and more than one match needs --yes (`zhiku delete --glob '*'` alone deletes nothing)."""
    with _errors():
        settings = _settings(config, index)
        with _kb(settings) as kb:
            if not glob:
                docs = [kb.delete(ref, collection)]
            else:
                docs = [d for d in kb.documents(collection) if fnmatch.fnmatchcase(d.source, ref)]
                if not docs:
                    raise NotFound(f"no document's source matches {ref!r} in {settings.index}")
                if len(docs) > 1 and not yes:
                    for d in docs:
                        err.print(f"  would delete {d.doc_id} ({d.collection}/{d.source})", markup=False)
                    raise InvalidInput(f"{ref!r} matches {len(docs)} documents: add --yes to delete them all")
                docs = [kb.delete(d.doc_id) for d in docs]
    for doc in docs:
        out.print(f"deleted {doc.doc_id} ({doc.collection}/{doc.source}, {doc.chunk_count} chunks)", markup=False)


@app.command()
def history(
    limit: Annotated[int, typer.Option(help="Rows to show.")] = 20,
    as_json: JsonOpt = False,
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Show the ingestion history, newest first, grouped per run, with times."""
    from zhiku.cli.traces_view import group_runs, print_history
    from zhiku.observability.trace import TRACE_FILE, read_traces

    with _errors(as_json):
        settings = _settings(config, index)
        with _kb(settings, read_only=True) as kb:
            rows = kb.history(limit)
            llm = kb.enrichments.usage_history(limit)
        runs = group_runs(rows, read_traces(settings.index / TRACE_FILE, kind="ingest", limit=10_000))
    if as_json:
        _print_json(
            {
                "history": [asdict(r) for r in rows],
                "runs": [{"started_at": r.started_at, "trace_id": r.trace_id, "records": len(r.records)} for r in runs],
                "llm_usage": [asdict(u) for u in llm],
            }
        )
        return
    print_history(out, runs)
    tx.print_usage_history(llm)


@config_app.command("show")
def config_show(as_json: JsonOpt = False, index: IndexOpt = None, config: ConfigOpt = None) -> None:
    """Print the effective settings (defaults < zhiku.yaml < ZHIKU_* env < flags)."""
    with _errors(as_json):
        settings = _settings(config, index)
    data = json.loads(settings.model_dump_json())
    if as_json:
        _print_json(data)
    else:
        import yaml

        out.print(yaml.safe_dump(data, allow_unicode=True, sort_keys=False).rstrip(), markup=False)


mcp_cmds.register(app)
eval_cmds.register(app)
experiment_cmds.register(app)
traces_cmds.register(app)
store_cmds.register(app)
models_cmds.register(app)
plugins_cmds.register(app)
project_cmds.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
