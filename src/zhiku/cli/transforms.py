"""CLI output of the LLM transforms: the ingest summary's transform part, the dry-run plan, per-chunk progress,
the LLM usage lines of ``zhiku history`` and the enrichments of query hits."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from zhiku.cli.common import err, out

TransformOpt = Annotated[
    Optional[str],
    typer.Option(
        "--transform",
        help="LLM transforms to run, comma-separated: contextual, refine, metadata, caption (default: settings "
        "`transforms.enabled`; `none` for none). Needs llm.base_url and llm.model; see docs/transforms.md.",
    ),
]
RewriteOpt = Annotated[
    Optional[str],
    typer.Option(
        "--rewrite",
        help="Query rewriting by llm.model: none, multi_query or hyde (default: settings `retrieval.rewrite`).",
    ),
]
TagOpt = Annotated[
    Optional[list[str]],
    typer.Option("--tag", help="Only passages whose tags (metadata transform) include this; repeatable."),
]


def usage_text(u: Any) -> str:
    approx = "≈" if u.estimated else ""
    cost = f" · {approx}{u.cost:.4f} {u.currency}" if u.cost else ""
    return (
        f"LLM: {u.calls} requests, {u.cached} from cache · {approx}{u.prompt_tokens} input + "
        f"{approx}{u.completion_tokens} output tokens{cost}"
    )


def report_json(report: Any) -> dict[str, Any]:
    return {"transforms": asdict(report.transforms)} if report.transforms is not None else {}


def print_report(report: Any) -> None:
    """The transform lines under the ingest summary: applied counts, usage, then the issues: one line per chunk
    when a reason is its own, one line per reason shared by several chunks (a dead endpoint fails every chunk the
    same way: a line each buried the summary), and what the next ingest does about them (``--json`` lists each)."""
    t = report.transforms
    if t is None:
        return
    applied = ", ".join(f"{name} {n}" for name, n in t.applied)
    out.print(f"transforms: {applied} · {usage_text(t.usage)}", markup=False)
    groups: dict[tuple[str, str, bool], list[Any]] = {}
    for i in t.issues:
        groups.setdefault((i.transform, i.reason, i.chunk_id is None), []).append(i)
    for (transform, reason, whole), issues in groups.items():
        if len(issues) == 1:
            i = issues[0]
            where = f"{i.source}#{i.chunk_id}" if i.chunk_id else i.source
        else:
            sources = list(dict.fromkeys(i.source for i in issues))
            shown = ", ".join(sources[:3]) + (f" and {len(sources) - 3} more" if len(sources) > 3 else "")
            where = f"{len(sources)} documents ({shown})" if whole else f"{len(issues)} chunks of {shown}"
        err.print(f"  {transform} skipped for {where}: {reason} (kept without it)", markup=False)
    if t.retried:
        err.print(
            "  the endpoint gave no answer for some chunks: the next `zhiku ingest` of these files asks again "
            "(replies already received come from the cache)",
            markup=False,
        )
    elif any(i.unreached for i in t.issues):  # no cache_dir, or RETRY_LIMIT ingests in a row without an answer
        err.print(
            "  the endpoint gave no answer for some chunks: a plain `zhiku ingest` does not ask again (no "
            "cache_dir, or 3 ingests in a row got none); run it with --force once the endpoint is back",
            markup=False,
        )


def print_plan(plan: Any, as_json: bool) -> None:
    if as_json:
        data = asdict(plan) | {"requests": plan.requests, "cached": plan.cached, "prompt_tokens": plan.prompt_tokens}
        sys_out(data)
        return
    out.print(
        f"dry run: {', '.join(plan.transforms)} over {plan.chunks} chunks of {plan.documents} documents would send "
        f"{plan.requests - plan.cached} requests ({plan.cached} already cached), ≈{plan.prompt_tokens} input tokens"
        + (f", ≈{plan.cost:.4f} {plan.currency} input cost" if plan.cost else ""),
        markup=False,
    )
    table = Table()
    for col in ("transform", "requests", "cached", "≈input tokens"):
        table.add_column(col)
    for x in plan.lines:
        table.add_row(x.transform, str(x.requests), str(x.cached), str(x.prompt_tokens))
    out.print(table)
    for call in plan.samples:
        out.print(f"--- {call.prompt_id} → {call.model} (≈{call.tokens} tokens) ---", markup=False)
        out.print(call.preview[:600] + ("…" if len(call.preview) > 600 else ""), markup=False)
    for f in plan.failed:
        err.print(f"  failed: {f.path}: {f.reason}", markup=False)


def sys_out(data: dict[str, Any]) -> None:
    from zhiku.cli.common import _print_json

    _print_json(data)


def progress_pair(
    progress: Callable[[int, int, str], None] | None,
) -> tuple[Callable[[int, int, str], None] | None, Callable[[str, str, int, int], None] | None]:
    """The ingest's per-document progress, and the transforms' per-chunk progress shown on the same bar or lines
    (documents done so far, then ``contextual 3/20 chunks · file.md`` as the note)."""
    if progress is None:
        return None, None
    docs = [0, 0]

    def files(done: int, total: int, name: str) -> None:
        docs[:] = [done, total]
        progress(done, total, name)

    def chunks(transform: str, source: str, done: int, total: int) -> None:
        progress(docs[0], docs[1], f"{transform} {done}/{total} chunks · {source}")

    return files, chunks


def print_usage_history(records: Sequence[Any]) -> None:
    if not records:
        return
    table = Table(title="LLM transforms")
    for col in ("collection", "source", "transforms", "requests", "cached", "tokens in/out", "cost", "issues"):
        table.add_column(col)
    for r in records:
        u = r.usage
        cost = f"{u.cost:.4f} {u.currency}" if u.cost else "-"
        tokens = f"{u.prompt_tokens}/{u.completion_tokens}"
        row = (r.collection, r.source, ",".join(r.transforms), str(u.calls), str(u.cached), tokens, cost)
        table.add_row(*row, str(len(r.issues)))
    out.print(table)
