"""The `zhiku` command line: parses flags, calls the library, formats the result."""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from zhiku.cli import eval as eval_cmds
from zhiku.cli import models as models_cmds
from zhiku.cli import store as store_cmds
from zhiku.cli import tokens as tokens_cmds
from zhiku.cli import traces as traces_cmds
from zhiku.cli.common import (
    CollectionOpt,
    ConfigOpt,
    IndexOpt,
    JsonOpt,
    Progressed,
    _errors,
    _kb,
    _print_json,
    _progress,
    err,
    out,
    table,
)
from zhiku.errors import InvalidInput, NotFound
from zhiku.observability.trace import TRACE_FILE, read_traces
from zhiku.settings import load_settings
from zhiku.types import DocStatus

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


def some_path_exists(paths: list[Path]) -> None:
    """A typo in the only path would make an empty index in the current folder."""
    if paths and not any(p.expanduser().exists() for p in paths):
        names = ", ".join(str(p) for p in paths)
        raise InvalidInput(
            f"no such file or folder: {names} (nothing was ingested; check the path, relative ones start at "
            f"{Path.cwd()})"
        )


def unsupported_note(counts: tuple[tuple[str, int], ...]) -> str:
    from zhiku.api import supported_suffixes

    files = sum(n for _, n in counts)
    kinds = ", ".join(f"{n} {suffix or 'without suffix'}" for suffix, n in sorted(counts, key=lambda c: (-c[1], c[0])))
    return (
        f"{files} file(s) in these folders were not read, their type is not supported ({kinds}); "
        f"zhiku reads {' '.join(supported_suffixes())} (plugins add more: `zhiku plugins`)"
    )


def filter_note(kb: Any, collection: str | None, source: str | None, doc_type: str | None) -> str | None:
    """Why ``--source``/``--type`` left nothing, for stderr and ``--json``."""
    if not (source or doc_type):
        return None
    given = " ".join(f"{flag} {v!r}" for flag, v in (("--source", source), ("--type", doc_type)) if v)
    hint = kb.filter_hint(collection, source, doc_type) or "loosen or drop them"
    return (
        f"no passage matched the filters ({given}): {hint}; `zhiku documents` lists the sources and types as ingested"
    )


@app.command()
def ingest(
    paths: Annotated[
        list[str],
        typer.Argument(
            help="Files or folders (docs/formats.md), or web pages: https://… (a sitemap.xml: its pages).",
            show_default=False,
        ),
    ],
    collection: CollectionOpt = None,
    force: Annotated[
        bool, typer.Option("--force", help="Re-index even unchanged files; rebuilds an index of other models/settings.")
    ] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Report what would change; write nothing.")] = False,
    sync: Annotated[
        bool, typer.Option("--sync", help="Also remove documents whose files are gone from the given folders.")
    ] = False,
    max_pages: Annotated[
        Optional[int], typer.Option("--max-pages", min=1, help="Web: crawl same-site links from the URL, to N pages.")
    ] = None,
    transform: Annotated[
        Optional[str],
        typer.Option(
            "--transform",
            help="LLM transforms to run, comma-separated: contextual, refine, metadata, caption (default: settings "
            "`transforms.enabled`; `none` for none). Needs llm.base_url and llm.model; see docs/transforms.md.",
        ),
    ] = None,
    as_json: JsonOpt = False,
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Index documents: unchanged files are skipped, changed ones replaced, one bad file never stops the batch.
    With --transform (or transforms.enabled) an LLM enriches chunks first; --dry-run then shows what it would send."""
    from zhiku.api import is_url, needs_ocr_note, parse_transform_names

    with _errors(as_json):
        names = parse_transform_names(transform)
        settings = load_settings(
            config, index=index, **({"transforms": {"enabled": names}} if names is not None else {})
        )
        urls = [p for p in paths if is_url(p)]
        if urls and len(urls) < len(paths):
            raise InvalidInput("ingest web pages and files in separate runs")
        files = [Path(p) for p in paths]
        if not urls:
            some_path_exists(files)
        with _kb(settings) as kb, _progress(not as_json, "ingesting", lines=True) as progress:
            if urls:
                report = kb.ingest_urls(urls, collection=collection, max_pages=max_pages, sync=sync)
            elif dry_run and settings.transforms.enabled:
                return _print_plan(kb.plan_transforms(files, collection=collection, force=force), as_json)
            else:
                on_files, on_chunks = _progress_pair(progress)
                report = kb.ingest(
                    files,
                    collection=collection,
                    force=force,
                    dry_run=dry_run,
                    sync=sync,
                    on_progress=on_files,
                    on_transform=on_chunks,
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
                **({"transforms": asdict(report.transforms)} if report.transforms is not None else {}),
            }
        )
    else:
        verb = "would be " if dry_run else ""
        ocr = f" ({len(report.needs_ocr)} need OCR)" if report.needs_ocr else ""
        out.print(
            ", ".join(f"{n} {verb}{k}" for k, n in counts.items())
            + ocr
            + f" · {report.chunks_written} chunks written · {report.elapsed_s:.1f}s · index {settings.index}"
        )
        notes = [f"failed: {f.path}: {f.reason}" for f in report.failed]
        if report.chunks_over_window:
            notes.append(
                f"{report.chunks_over_window} chunks are longer than the embedder's window and are embedded "
                "diluted: lower chunking.size_chars"
            )
        notes += [f"{n.source}: {needs_ocr_note(n.pages, settings.loaders.ocr)}" for n in report.needs_ocr]
        if report.unsupported:
            notes.append(unsupported_note(report.unsupported))
        if report.gone:
            notes.append(
                f"{len(report.gone)} indexed document(s) whose files are gone from these folders stay searchable "
                f"({_some(report.gone)}): add --sync to drop them"
            )
        for note in notes:
            err.print(f"  {note}")
        _print_transforms(report.transforms)
    if report.failed:
        raise typer.Exit(1)


def _some(names: Sequence[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _print_transforms(t: Any) -> None:
    """One line per issue, or per reason shared by several chunks (a dead endpoint fails every one alike)."""
    if t is None:
        return
    u, approx = t.usage, "≈" if t.usage.estimated else ""
    applied = ", ".join(f"{name} {n}" for name, n in t.applied) + f" · LLM: {u.calls} requests, {u.cached} from cache"
    tokens = f"{approx}{u.prompt_tokens} input + {approx}{u.completion_tokens} output tokens"
    cost = f" · {approx}{u.cost:.4f} {u.currency}" if u.cost else ""
    out.print(f"transforms: {applied} · {tokens}{cost}")
    groups: dict[tuple[str, str, bool], list[Any]] = {}
    for i in t.issues:
        groups.setdefault((i.transform, i.reason, i.chunk_id is None), []).append(i)
    for (transform, reason, whole), issues in groups.items():
        if len(issues) == 1:
            i = issues[0]
            where = f"{i.source}#{i.chunk_id}" if i.chunk_id else i.source
        else:
            sources = list(dict.fromkeys(i.source for i in issues))
            where = (
                f"{len(sources)} documents ({_some(sources)})" if whole else f"{len(issues)} chunks of {_some(sources)}"
            )
        err.print(f"  {transform} skipped for {where}: {reason} (kept without it)")
    if t.retried:
        then = "the next `zhiku ingest` of these files asks again (replies already received come from the cache)"
    else:  # no cache_dir, or RETRY_LIMIT ingests in a row without an answer
        then = "a plain `zhiku ingest` does not ask again (no cache_dir, or 3 ingests in a row got none); run it with --force once the endpoint is back"
    if t.retried or any(i.unreached for i in t.issues):
        err.print(f"  the endpoint gave no answer for some chunks: {then}")


def _print_plan(plan: Any, as_json: bool) -> None:
    if as_json:
        _print_json(
            asdict(plan) | {"requests": plan.requests, "cached": plan.cached, "prompt_tokens": plan.prompt_tokens}
        )
        return
    out.print(
        f"dry run: {', '.join(plan.transforms)} over {plan.chunks} chunks of {plan.documents} documents would send "
        f"{plan.requests - plan.cached} requests ({plan.cached} already cached), ≈{plan.prompt_tokens} input tokens"
        + (f", ≈{plan.cost:.4f} {plan.currency} input cost" if plan.cost else "")
    )
    rows = table(("transform", "requests", "cached", "≈input tokens"))
    for x in plan.lines:
        rows.add_row(x.transform, str(x.requests), str(x.cached), str(x.prompt_tokens))
    out.print(rows)
    for call in plan.samples:
        out.print(f"--- {call.prompt_id} → {call.model} (≈{call.tokens} tokens) ---")
        out.print(call.preview[:600] + ("…" if len(call.preview) > 600 else ""))
    for f in plan.failed:
        err.print(f"  failed: {f.path}: {f.reason}")


def _progress_pair(progress: Progressed | None) -> tuple[Progressed | None, Any]:
    """Per-document progress, and the transforms' per-chunk progress as its note (``contextual 3/20 chunks · a.md``)."""
    if progress is None:
        return None, None
    docs = [0, 0]

    def files(done: int, total: int, name: str) -> None:
        docs[:] = [done, total]
        progress(done, total, name)

    def chunks(transform: str, source: str, done: int, total: int) -> None:
        progress(docs[0], docs[1], f"{transform} {done}/{total} chunks · {source}")

    return files, chunks


@app.command()
def watch(
    folders: Annotated[list[Path], typer.Argument(help="Folders to keep in sync.", show_default=False)],
    collection: CollectionOpt = None,
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Keep folders in sync until Ctrl-C: ingest them now, then new and changed files within seconds of a save,
    deleted and moved-away ones removed; a bad file is reported and skipped. `zhiku serve --watch` does it too."""
    import time

    def synced(report: Any) -> None:  # an IngestReport
        counts = ", ".join(f"{n} {k}" for k, n in report.counts().items() if n)
        err.print(f"{time.strftime('%H:%M:%S')} {counts or 'no changes'}")
        for f in report.failed:
            err.print(f"  failed: {f.path}: {f.reason}")

    from zhiku.api import watch_roots

    with _errors():
        roots, settings = watch_roots(folders), load_settings(config, index=index)
        with _kb(settings) as kb:
            err.print(f"watching {', '.join(map(str, roots))} (Ctrl-C stops)")
            kb.watch(roots, collection=collection, on_sync=synced)


@app.command()
def query(
    text: Annotated[str, typer.Argument(help="The question, e.g. 试用期最长多久？", show_default=False)],
    collection: Annotated[
        Optional[str], typer.Option("--collection", "-c", help="Search only this collection (default: all of them).")
    ] = None,
    top_k: Annotated[
        Optional[int], typer.Option("-k", "--top-k", help="Number of passages (1–100; default `retrieval.top_k`).")
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
    tag: Annotated[
        Optional[list[str]],
        typer.Option("--tag", help="Only passages tagged this (metadata transform or front matter); repeatable."),
    ] = None,
    rewrite: Annotated[
        Optional[str],
        typer.Option(
            "--rewrite",
            help="Query rewriting by llm.model: none, multi_query or hyde (default: settings `retrieval.rewrite`).",
        ),
    ] = None,
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Search the index: BM25 and dense retrieval fused (then reranked, when configured), printed as a cited
    Markdown answer."""
    with _errors(as_json):
        settings = load_settings(config, index=index, **({"retrieval": {"rewrite": rewrite}} if rewrite else {}))
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
                note = answer.note if answer.hits else filter_note(kb, collection, source, doc_type)
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
    out.print(answer.markdown)
    if note:
        err.print(note)
    if answer.rerank.startswith("fallback"):
        err.print(f"rerank {answer.rerank} (answered in the fused order)")
    if answer.rewrite.startswith("fallback"):
        err.print(f"rewrite {answer.rewrite} (searched the plain query)")
    if verbose and trace is not None:
        bm25, dense = answer.candidate_counts
        out.print(f"terms: {' '.join(answer.terms)} · bm25 {bm25} · dense {dense} candidates")
        traces_cmds.print_trace(out, trace)


@app.command()
def collections(as_json: JsonOpt = False, index: IndexOpt = None, config: ConfigOpt = None) -> None:
    """List collections with their document and chunk counts."""
    with _errors(as_json), _kb(load_settings(config, index=index), read_only=True) as kb:
        stats = kb.collections()
    if as_json:
        _print_json({"collections": [asdict(s) for s in stats]})
        return
    rows = table(("collection", "documents", "chunks", "characters"))
    for s in stats:
        rows.add_row(s.name, str(s.documents), str(s.chunks), str(s.chars))
    out.print(rows if stats else f"no collections in {kb.settings.index} yet: run `zhiku ingest PATH`")


@app.command()
def documents(
    collection: CollectionOpt = None, as_json: JsonOpt = False, index: IndexOpt = None, config: ConfigOpt = None
) -> None:
    """List indexed documents (id, collection, source, chunks, status: ready, or needs_ocr with its pages)."""
    with _errors(as_json), _kb(load_settings(config, index=index), read_only=True) as kb:
        docs = kb.documents(collection)
    if as_json:
        _print_json({"documents": [asdict(d) for d in docs]})
        return
    from zhiku.api import page_list

    rows = table(("doc_id", "collection", "source", "type", "chunks", "status"), whole=["doc_id"], texts=["source"])
    for d in docs:
        status = DocStatus(d.status).value + (f" (pages {page_list(d.needs_ocr_pages)})" if d.needs_ocr_pages else "")
        rows.add_row(d.doc_id, d.collection, d.source, d.doc_type, str(d.chunk_count), status)
    out.print(rows)


@app.command()
def delete(
    ref: Annotated[
        str, typer.Argument(help="Document id, or source path as ingested (literal; see --glob).", show_default=False)
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
        settings = load_settings(config, index=index)
        with _kb(settings) as kb:
            if not glob:
                docs = [kb.delete(ref, collection)]
            else:
                docs = [d for d in kb.documents(collection) if fnmatch.fnmatchcase(d.source, ref)]
                if not docs:
                    raise NotFound(f"no document's source matches {ref!r} in {settings.index}")
                if len(docs) > 1 and not yes:
                    for d in docs:
                        err.print(f"  would delete {d.doc_id} ({d.collection}/{d.source})")
                    raise InvalidInput(f"{ref!r} matches {len(docs)} documents: add --yes to delete them all")
                docs = [kb.delete(d.doc_id) for d in docs]
    for doc in docs:
        out.print(f"deleted {doc.doc_id} ({doc.collection}/{doc.source}, {doc.chunk_count} chunks)")


@app.command()
def history(
    limit: Annotated[int, typer.Option(help="Rows to show.")] = 20,
    as_json: JsonOpt = False,
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Show the ingestion history, newest first, grouped per run, with times."""
    with _errors(as_json):
        settings = load_settings(config, index=index)
        with _kb(settings, read_only=True) as kb:
            rows = kb.history(limit)
            llm = kb.enrichments.usage_history(limit)
        runs = traces_cmds.group_runs(rows, read_traces(settings.index / TRACE_FILE, kind="ingest", limit=10_000))
    if as_json:
        _print_json(
            {
                "history": [asdict(r) for r in rows],
                "runs": [{"started_at": r.started_at, "trace_id": r.trace_id, "records": len(r.records)} for r in runs],
                "llm_usage": [asdict(u) for u in llm],
            }
        )
        return
    traces_cmds.print_history(out, runs)
    if llm:
        usage = table(
            ("collection", "source", "transforms", "requests", "cached", "tokens in/out", "cost", "issues"),
            title="LLM transforms",
        )
        for r in llm:
            u = r.usage
            cost = f"{u.cost:.4f} {u.currency}" if u.cost else "-"
            row = (r.collection, r.source, ",".join(r.transforms), str(u.calls), str(u.cached))
            usage.add_row(*row, f"{u.prompt_tokens}/{u.completion_tokens}", cost, str(len(r.issues)))
        out.print(usage)


@config_app.command("show")
def config_show(as_json: JsonOpt = False, index: IndexOpt = None, config: ConfigOpt = None) -> None:
    """Print the effective settings (defaults < zhiku.yaml < ZHIKU_* env < flags)."""
    with _errors(as_json):
        data = json.loads(load_settings(config, index=index).model_dump_json())
    if as_json:
        _print_json(data)
    else:
        import yaml

        out.print(yaml.safe_dump(data, allow_unicode=True, sort_keys=False).rstrip())


def serve(
    transport: Annotated[
        Optional[str], typer.Option("--transport", help="stdio | http (default: `server.transport`, ZHIKU_TRANSPORT).")
    ] = None,
    host: Annotated[
        Optional[str],
        typer.Option(
            "--host", help="HTTP bind address (default 127.0.0.1; env ZHIKU_HOST). Non-loopback needs a token."
        ),
    ] = None,
    port: Annotated[Optional[str], typer.Option("--port", help="HTTP port (default 8765; env ZHIKU_PORT).")] = None,
    read_only: Annotated[
        Optional[bool],
        typer.Option("--read-only", help="Hide the tools that change the index (ingest, delete).", show_default=False),
    ] = None,
    watch: Annotated[
        Optional[list[Path]],
        typer.Option("--watch", help="Keep this folder in sync while serving (repeatable); see `zhiku watch`."),
    ] = None,
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Serve the index to AI assistants over MCP (stdio, or Streamable HTTP at http://HOST:PORT/mcp)."""
    from zhiku.mcp.transport import start  # the MCP SDK is imported only here: `zhiku --help` never pays for it

    flags = {"transport": transport, "host": host, "port": port, "read_only": read_only}
    start(config, index, flags, watch=watch or ())


def plugins(as_json: JsonOpt = False) -> None:
    """List installed plugins (loaders, embedders, rerankers, transforms, tools) and where they come from."""
    from zhiku.plugin_check import checked_plugins
    from zhiku.plugins import GROUPS

    found = checked_plugins()  # a broken plugin is listed with its error; zhiku skips it and the command exits 0
    if as_json:
        _print_json({"groups": list(GROUPS), "plugins": [asdict(p) for p in found]})
        return
    if not found:
        out.print(f"no plugins installed (groups: {', '.join(GROUPS)}; see docs/extending.md)")
    for p in found:  # one line each (paths are long: a table would fold them)
        status = "ok" if p.ok else f"BROKEN (skipped): {p.error}"
        out.print(f"{p.group}  {p.name} = {p.value}  [{p.distribution} {p.version}, {p.location}]  {status}")


def init(
    directory: Annotated[
        Path, typer.Argument(help="Project folder (created if missing; default: the current folder).")
    ] = Path("."),
    force: Annotated[bool, typer.Option("--force", help="Overwrite files zhiku init wrote before.")] = False,
    samples: Annotated[
        Optional[bool],
        typer.Option(
            "--samples/--no-samples",
            help="Write the sample documents and eval.yaml (default: unless docs/ already holds documents).",
            show_default=False,
        ),
    ] = None,
    write: Annotated[
        bool, typer.Option("--write", help="Client configs that may add and delete documents (default: read-only).")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Create a ready project: settings, sample documents, an eval set and MCP client configs.

    Writes zhiku.yaml (every setting, commented), docs/ with sample documents (their licence in SOURCES.md) and
    eval.yaml over them (not when docs/ already holds documents, or with --no-samples), and MCP client configs for Claude Desktop, Cursor, VS Code, Cline and Cherry Studio
    with absolute paths (read-only unless --write); then prints the commands to ingest, ask and serve."""
    from zhiku.scaffold.init import create_project

    with _errors():
        report = create_project(directory, force=force, samples=samples, write=write)
    if as_json:
        _print_json({**asdict(report), "next": report.next_steps()})
        return
    out.print(f"zhiku project in {report.root}: {len(report.written)} files written")
    for rel in report.written:
        out.print(f"  + {rel}")
    if not report.samples:
        out.print("  (no sample documents: docs/ is yours; put the files to serve there)")
    if report.kept:
        err.print(f"  kept {len(report.kept)} existing files (--force overwrites them): {', '.join(report.kept)}")
    out.print("\nNext:")
    for step in report.next_steps():
        out.print(f"  {step}")
    out.print("Then connect a client: see mcp-clients/README.md; check everything with `zhiku doctor`.")


MARK = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL", "off": " -  "}


def doctor(
    as_json: JsonOpt = False,
    index: IndexOpt = None,
    config: ConfigOpt = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="SQLite's quick_check; vector files read only if changed since checked.")
    ] = False,
) -> None:
    """Check the install, settings, index, models, extras and MCP client configs, each problem with its fix.

    Models are verified against their pinned SHA-256; the index by SQLite's integrity_check and every vector block
    against its checksum. Exits 1 when something is broken (FAIL), 0 otherwise."""
    from zhiku.scaffold.doctor import run_doctor

    checks = run_doctor(config, index, quick)
    failed = [c for c in checks if c.status == "fail"]
    if as_json:
        _print_json({"ok": not failed, "checks": [asdict(c) for c in checks]})
    else:
        for c in checks:
            out.print(f"{MARK[c.status]}  {c.area:<8} {c.detail}")
            if c.fix and c.status != "ok":
                out.print(f"{'':14} fix: {c.fix}")
        warned = sum(c.status == "warn" for c in checks)
        out.print(f"\n{len(failed)} problems, {warned} warnings")
    if failed:
        raise typer.Exit(1)


app.command()(serve)
eval_cmds.register(app)
traces_cmds.register(app)
store_cmds.register(app)
models_cmds.register(app)
tokens_cmds.register(app)
app.command()(plugins)
app.command()(init)
app.command()(doctor)


def main() -> None:
    app()
