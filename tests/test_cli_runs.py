"""The CLI's view of ingestion runs and its newcomer hints: `traces --id` on an ingest trace, `history` grouped per
run with times, `query --help` about collections, the empty-filter hint, progress lines without a terminal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from test_cli import cli, index  # noqa: F401  (fixtures)
from zhiku.cli.traces import RUN_GAP_S, Run, group_runs, print_history
from zhiku.ingest import pipeline
from zhiku.observability.trace import Trace
from zhiku.types import IngestionRecord


def record(path: str, at: float, status: str = "added") -> IngestionRecord:
    return IngestionRecord(path, "hr", None, None, status, None, 1, at)


def test_group_runs_by_trace_span_else_by_gap() -> None:
    traces = [
        Trace(kind="ingest", trace_id="t2", started_at=1000.0, elapsed_ms=5000.0),
        Trace(kind="ingest", trace_id="t1", started_at=900.0, elapsed_ms=2000.0),
        Trace(kind="query", trace_id="q", started_at=500.0, elapsed_ms=10_000.0),
    ]
    records = [  # newest first, as the store returns them
        record("c.md", 1004.0),
        record("b.md", 1001.0, "updated"),
        record("a.md", 901.5),
        record("x.md", 505.0),  # no ingest trace: grouped by gaps
        record("y.md", 505.0 - RUN_GAP_S + 1),
        record("z.md", 505.0 - 2 * RUN_GAP_S - 5),
    ]
    runs = group_runs(records, traces)
    assert [(r.trace_id, r.started_at, [x.path for x in r.records]) for r in runs] == [
        ("t2", 1000.0, ["c.md", "b.md"]),
        ("t1", 900.0, ["a.md"]),
        (None, 505.0 - RUN_GAP_S + 1, ["x.md", "y.md"]),
        (None, 505.0 - 2 * RUN_GAP_S - 5, ["z.md"]),
    ]


def test_ingest_runs_in_history_and_traces(cli, index: Path, corpus: Path) -> None:  # noqa: F811
    (corpus / "年休假条例.md").write_text("# 职工带薪年休假条例\n\n第三条 年休假5天到15天不等，按工龄计算。\n", "utf-8")
    (corpus / "empty.md").write_text("", encoding="utf-8")
    second = cli("ingest", corpus, "-c", "hr", "--index", index)
    assert second.exit_code == 1  # the empty file failed; the rest went in
    assert "ingesting: 0/4 documents" in second.stderr and "ingesting: 4/4 documents" in second.stderr

    data = json.loads(cli("history", "--index", index, "--json").stdout)
    assert [r["records"] for r in data["runs"]] == [2, 3]  # newest first: 1 updated + 1 failed; then 3 added
    text = cli("history", "--index", index, env={"COLUMNS": "250"}).stdout
    assert text.count("── run (trace ") == 2 and "1 updated, 1 failed" in text and "3 added" in text

    traces = json.loads(cli("traces", "--index", index, "--kind", "ingest", "--json").stdout)["traces"]
    newest = traces[0]["trace_id"]
    shown = cli("traces", "--index", index, "--id", newest, env={"COLUMNS": "250"}).stdout
    assert "documents (4)" in shown and "0 added, 1 updated, 2 skipped, 0 removed, 1 failed" in shown
    assert "unchanged (same SHA-256)" in shown and "empty.md" in shown and "upsert" in shown


def test_query_help_and_the_empty_filter_hint(cli, index: Path) -> None:  # noqa: F811
    help_text = " ".join(cli("query", "--help", env={"COLUMNS": "250"}).stdout.split())
    assert "Search only this collection (default: all of them)." in help_text
    r = cli("query", "试用期", "--index", index, "--source", "nothing*", "--type", "pdf")
    assert r.exit_code == 0
    docs = "; `zhiku documents` lists the sources and types as ingested\n"
    assert r.stderr == (  # each filter that matches no document, and what is there
        "no passage matched the filters (--source 'nothing*' --type 'pdf'): source 'nothing*' matches no document; "
        "sources here: '劳动合同法.md', '年休假条例.md', '规章/工资支付规定.txt'; type 'pdf' matches no document; "
        "types here: markdown, text" + docs
    )
    # the plain word people type first: the hint names the file it meant and the pattern that finds it
    word = cli("query", "试用期", "--index", index, "--source", "劳动合同法")
    assert word.stderr == (
        "no passage matched the filters (--source '劳动合同法'): source '劳动合同法' matches no document: it is a "
        "pattern over the names as ingested, e.g. '劳动合同法.md'; use '*劳动合同法*' or a whole name" + docs
    )
    both = cli("query", "试用期", "--index", index, "--source", "*.txt", "--type", "markdown")  # each alone matches
    assert (
        both.stderr == "no passage matched the filters (--source '*.txt' --type 'markdown'): loosen or drop them" + docs
    )
    assert "no passage matched" not in cli("query", "试用期", "--index", index).stderr
    guessed = cli("query", "试用期", "--index", index, "--source", "劳动合同法", "--type", "md")  # the usual two misses
    assert guessed.stderr == (
        "no passage matched the filters (--source '劳动合同法' --type 'md'): source '劳动合同法' matches no document: "
        "it is a pattern over the names as ingested, e.g. '劳动合同法.md'; use '*劳动合同法*' or a whole name; "
        "type 'md' matches no document; types here: markdown, text (a type is one of doc, docx, epub, html, image, markdown, pdf, sheet, slides, text)"
        + docs
    )
    found = cli("query", "试用期", "--index", index, "--source", "*劳动合同法*", "--type", "markdown", "--json")
    assert {h["source"] for h in json.loads(found.stdout)["hits"]} == {"劳动合同法.md"}


def test_progress_lines_without_a_terminal_note_embedded_chunks(
    cli,  # noqa: F811
    corpus: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the corpus is 2 + 1 + 1 chunks: one call of 3 once the second document is queued, then the last chunk
    monkeypatch.setattr(pipeline, "BATCH_CHUNKS", 3)
    r = cli("ingest", corpus, "-c", "hr", "--index", tmp_path / "fresh")
    assert r.exit_code == 0, r.output
    lines = r.stderr.splitlines()
    assert [ln.split(" · ", 1)[0] + " · " + ln.split(" · ")[-1] for ln in lines if "chunks embedded" in ln] == [
        "ingesting: 2/3 documents · 3/3 chunks embedded",
        "ingesting: 3/3 documents · 4/4 chunks embedded",
    ]
    assert lines[0].startswith("ingesting: 0/3 documents · ") and lines[-1].startswith("ingesting: 3/3 documents · ")


def test_ids_and_paths_survive_an_80_column_table(cli, index: Path, corpus: Path) -> None:  # noqa: F811
    """Piped output (and many terminals) is 80 columns wide: ids used to be cut to `5a85caaaf87869…`, which
    `zhiku traces --id` then refused, and paths to `/tmp/…`. Ids stay whole, paths fold, nothing is cut."""
    narrow = {"COLUMNS": "80"}
    cli("query", "试用期最长多久", "--index", index)
    docs = json.loads(cli("documents", "--index", index, "--json").stdout)["documents"]
    traces = json.loads(cli("traces", "--index", index, "--json").stdout)["traces"]
    assert len(docs) == 3 and len(traces) >= 2
    for command in (["documents"], ["traces"], ["history"], ["query", "试用期最长多久", "--verbose"]):
        text = cli(*command, "--index", index, env=narrow).stdout
        assert "…" not in text, command
    listed = cli("documents", "--index", index, env=narrow).stdout
    assert all(d["doc_id"] in listed for d in docs)
    listed = cli("traces", "--index", index, env=narrow).stdout
    assert all(t["trace_id"] in listed for t in traces)
    newest = traces[0]["trace_id"]
    shown = cli("traces", "--index", index, "--id", newest[:8], env=narrow)  # a prefix names one trace
    assert shown.exit_code == 0 and shown.stdout.startswith(f"query {newest}: ")
    missing = cli("traces", "--index", index, "--id", "zz")
    assert missing.exit_code == 1
    assert missing.stderr.strip() == f"error: no trace 'zz' in {index / 'traces.jsonl'} (list them with `zhiku traces`)"


def test_history_without_errors_has_no_error_column(tmp_path: Path) -> None:
    """The error column is left out when no record has one; the rows still passed six cells, and Rich added a
    sixth column without a header for them, blank all the way down."""
    runs = [Run(0.0, None, (record(str(tmp_path / "a.md"), 0.0),))]
    console = Console(width=80, record=True)
    print_history(console, runs)
    header = console.export_text().splitlines()[1]
    assert [cell.strip() for cell in header.split("┃")[1:-1]] == ["time", "status", "collection", "path", "chunks"]
    failed = IngestionRecord(str(tmp_path / "b.md"), "default", None, None, "failed", "bad", 0, 0.0)
    print_history(console := Console(width=80, record=True), [Run(0.0, None, (failed,))])
    header = console.export_text().splitlines()[1]
    assert [c.strip() for c in header.split("┃")[1:-1]] == ["time", "status", "collection", "path", "chunks", "error"]
