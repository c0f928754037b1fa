"""The `zhiku` command line, in-process through typer's CliRunner, plus two true end-to-end runs of the installed
script. ``--json`` prints exactly one JSON object; errors are one ``error: …`` line on stderr with exit code 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from helpers_kb import CORPUS, CORPUS_CHUNKS, SEC_LEAVE, SEC_PROBATION, RenamedEmbedder, make_settings
from zhiku.api import KnowledgeBase
from zhiku.cli.app import app

CORPUS_CHARS = 398  # characters of the corpus's four chunks
PROBATION = CORPUS["劳动合同法.md"].split("\n\n")[2]
COUNT_KEYS = {"added", "updated", "skipped", "removed", "failed"}
HIT_KEYS = {
    "n",
    "chunk_id",
    "doc_id",
    "source",
    "page",
    "section",
    "score",
    "text",
    "fused_rank",
    "rerank_score",
    "rerank_sigmoid",
}
ZHIKU = Path(sys.executable).parent / "zhiku"


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, embed_cache_dir: Path):
    """``cli(*args, env=None) -> Result``: runs `zhiku` in ``tmp_path`` with the shared embedding cache."""
    for key in [k for k in os.environ if k.startswith("ZHIKU_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("ZHIKU_CACHE_DIR", str(embed_cache_dir))
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()

    def run(*args: object, env: dict[str, str] | None = None) -> Result:
        return runner.invoke(app, [str(a) for a in args], env=env, catch_exceptions=False)

    return run


@pytest.fixture
def index(cli, corpus: Path, tmp_path: Path) -> Path:
    """An index of the corpus in collection ``hr``, built through the CLI."""
    idx = tmp_path / "idx"
    r = cli("ingest", corpus, "-c", "hr", "--index", idx, "--json")
    assert r.exit_code == 0, r.output
    return idx


def one_json(r: Result) -> dict:
    """The single JSON object the command printed (and nothing else on stdout)."""
    lines = r.stdout.splitlines()
    assert len(lines) == 1, r.stdout
    obj = json.loads(lines[0])
    assert isinstance(obj, dict)
    return obj


def error_line(r: Result) -> str:
    """The command failed with exit code 1 and exactly one ``error:`` line on stderr; nothing on stdout, or
    (``--json``) exactly one object holding the same error."""
    assert r.exit_code == 1, r.output
    assert r.stderr.endswith("\n") and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("error: ")
    if r.stdout:
        assert one_json(r)["error"]["message"] == r.stderr[len("error: ") : -1]
    return r.stderr[:-1]


# --- help ----------------------------------------------------------------------------------------------
def test_help_lists_the_commands(cli) -> None:
    r = cli("--help")
    assert r.exit_code == 0
    for command in ("ingest", "query", "collections", "documents", "delete", "history", "eval", "config"):
        assert f"│ {command} " in r.stdout, command
    assert cli().exit_code == 2  # no arguments: help, as a usage error


# --- ingest --------------------------------------------------------------------------------------------
def test_ingest_json_reports_counts_and_then_skips(cli, corpus: Path, tmp_path: Path) -> None:
    idx = tmp_path / "idx"
    first = one_json(cli("ingest", corpus, "-c", "hr", "--index", idx, "--json"))
    assert set(first) == COUNT_KEYS | {
        "chunks_written",
        "chunks_embedded",
        "chunks_over_window",
        "seconds",
        "dry_run",
        "failures",
        "needs_ocr",
        "gone",
        "unsupported",
    }
    assert {k: first[k] for k in COUNT_KEYS} == {"added": 3, "updated": 0, "skipped": 0, "removed": 0, "failed": 0}
    assert (first["chunks_written"], first["dry_run"], first["failures"], first["needs_ocr"]) == (
        CORPUS_CHUNKS,
        False,
        [],
        [],
    )
    assert first["chunks_over_window"] == 0  # every chunk fits the bundled model's 512-token window

    r = cli("ingest", corpus, "-c", "hr", "--index", idx, "--json")
    assert (r.exit_code, r.stderr) == (0, "")
    second = one_json(r)
    assert {k: second[k] for k in COUNT_KEYS} == {"added": 0, "updated": 0, "skipped": 3, "removed": 0, "failed": 0}
    assert (second["chunks_written"], second["chunks_embedded"]) == (0, 0)

    forced = one_json(cli("ingest", corpus, "-c", "hr", "--index", idx, "--json", "--force"))
    assert (forced["updated"], forced["chunks_written"], forced["chunks_embedded"]) == (3, CORPUS_CHUNKS, 0)


def test_ingest_text_summary_dry_run_and_sync(cli, corpus: Path, tmp_path: Path) -> None:
    idx = tmp_path / "idx"
    r = cli("ingest", corpus, "-c", "hr", "--index", idx)
    assert r.exit_code == 0
    assert r.stdout.startswith("3 added, 0 updated, 0 skipped, 0 removed, 0 failed · 4 chunks written · ")
    assert r.stdout.endswith(f"s · index {idx}\n")

    (corpus / "年休假条例.md").unlink()
    kept = cli("ingest", corpus, "-c", "hr", "--index", idx)  # without --sync a deleted file's document stays: say so
    assert kept.stdout.startswith("0 added, 0 updated, 2 skipped, 0 removed, 0 failed · 0 chunks written · ")
    assert kept.stderr.splitlines()[-1] == (
        "  1 indexed document(s) whose files are gone from these folders stay searchable (年休假条例.md): "
        "add --sync to drop them"
    )
    assert one_json(cli("ingest", corpus, "-c", "hr", "--index", idx, "--json"))["gone"] == ["年休假条例.md"]
    dry = cli("ingest", corpus, "-c", "hr", "--index", idx, "--sync", "--dry-run")
    assert dry.stdout.startswith(
        "0 would be added, 0 would be updated, 2 would be skipped, 1 would be removed, "
        "0 would be failed · 0 chunks written · "
    )
    docs = one_json(cli("documents", "--index", idx, "--json"))["documents"]
    assert [d["source"] for d in docs] == ["劳动合同法.md", "年休假条例.md", "规章/工资支付规定.txt"]

    synced = one_json(cli("ingest", corpus, "-c", "hr", "--index", idx, "--sync", "--json"))
    assert {k: synced[k] for k in COUNT_KEYS} == {"added": 0, "updated": 0, "skipped": 2, "removed": 1, "failed": 0}
    docs = one_json(cli("documents", "--index", idx, "--json"))["documents"]
    assert [d["source"] for d in docs] == ["劳动合同法.md", "规章/工资支付规定.txt"]
    hits = one_json(cli("query", "年休假有几天", "--index", idx, "--json", "-k", "10"))["hits"]
    assert "年休假条例.md" not in {h["source"] for h in hits}


def test_ingest_names_the_files_of_a_folder_it_cannot_read(cli, corpus: Path, tmp_path: Path) -> None:
    """A team folder's .numbers and .ppt files used to be skipped without a word ("3 added")."""
    for name in ("预算.numbers", "汇总.numbers", "旧课件.ppt", "规章/说明", ".DS_Store"):
        (corpus / name).write_bytes(b"\xd0\xcf\x11\xe0 not read")
    r = cli("ingest", corpus, "-c", "hr", "--index", tmp_path / "idx")
    assert r.exit_code == 0 and r.stdout.startswith("3 added, 0 updated, 0 skipped, 0 removed, 0 failed")
    assert r.stderr.splitlines()[-1] == (
        "  4 file(s) in these folders were not read, their type is not supported (2 .numbers, 1 without suffix, "
        "1 .ppt); zhiku reads .md .markdown .txt .text .pdf .docx .html .htm .xhtml .epub .xlsx .xlsm .xls .ods .csv "
        ".tsv .pptx .png .jpg .jpeg .tif .tiff .bmp .webp .doc .wps .rtf (plugins add more: `zhiku plugins`)"
    )
    again = one_json(cli("ingest", corpus, "-c", "hr", "--index", tmp_path / "idx", "--json"))
    assert again["unsupported"] == {"": 1, ".numbers": 2, ".ppt": 1}


def test_ingest_of_only_missing_paths_is_an_error_that_writes_nothing(cli, tmp_path: Path) -> None:
    """A typo in the only path used to create an empty index in the current folder and report "1 failed"."""
    r = cli("ingest", "doc", "--index", tmp_path / "idx")  # the folder is docs
    assert r.exit_code == 1 and r.stdout == ""
    assert r.stderr == (
        f"error: no such file or folder: doc (nothing was ingested; check the path, relative ones start at "
        f"{Path.cwd()})\n"
    )
    assert not (tmp_path / "idx").exists()


def test_missing_index_errors_say_where_it_was_looked_for(cli, index: Path, tmp_path: Path) -> None:
    """`--index` given the database file, and `zhiku query` run outside the project folder."""
    db = index / "zhiku.db"
    for command in (["query", "试用期"], ["ingest", tmp_path], ["documents"]):
        r = cli(*command, "--index", db)
        assert (r.exit_code, r.stdout) == (1, ""), command
        assert (
            r.stderr
            == f"error: --index names the folder that holds the index, not a file: {db} (use --index {index})\n"
        )
    r = cli("query", "试用期")  # tmp_path holds no zhiku.yaml and no .zhiku
    assert r.stderr == (
        "error: no index at .zhiku: run `zhiku ingest PATH --index .zhiku` first (.zhiku is looked for in "
        f"{tmp_path}, which has no zhiku.yaml: run zhiku in your project's folder, or give --index the index's "
        "full path)\n"
    )
    (tmp_path / "zhiku.yaml").write_text("collection: hr\n", encoding="utf-8")  # in a project: the plain message
    assert cli("query", "试用期").stderr == "error: no index at .zhiku: run `zhiku ingest PATH --index .zhiku` first\n"


def test_ingest_failures_exit_1_but_ingest_the_rest(cli, corpus: Path, tmp_path: Path) -> None:
    (corpus / "坏文件.md").write_bytes(b"\x00\x01\x02")
    bad = str((corpus / "坏文件.md").resolve())
    missing = tmp_path / "不存在"
    idx = tmp_path / "idx"
    r = cli("ingest", corpus, missing, "-c", "hr", "--index", idx, "--json")
    assert r.exit_code == 1
    report = one_json(r)
    assert {k: report[k] for k in COUNT_KEYS} == {"added": 3, "updated": 0, "skipped": 0, "removed": 0, "failed": 2}
    assert report["failures"] == [
        {"path": str(missing), "reason": "no such file or directory"},
        {"path": bad, "reason": f"binary file, not text (it contains NUL bytes): {bad}"},
    ]

    text = cli("ingest", corpus, missing, "-c", "hr", "--index", idx)
    assert text.exit_code == 1
    assert text.stdout.startswith("0 added, 0 updated, 3 skipped, 0 removed, 2 failed · 0 chunks written · ")
    assert text.stderr.startswith("ingesting: 0/4 documents · ")  # progress lines: stderr is not a terminal
    assert text.stderr.split("\n", 2)[2] == (
        f"  failed: {missing}: no such file or directory\n"
        f"  failed: {bad}: binary file, not text (it contains NUL bytes): {bad}\n"
    )

    rows = one_json(cli("history", "--index", idx, "--json", "--limit", "100"))["history"]
    assert sorted((row["status"], row["path"]) for row in rows) == sorted(
        [("failed", str(missing)), ("failed", bad)] * 2
        + [("added", str((corpus / s).resolve())) for s in ("劳动合同法.md", "年休假条例.md", "规章/工资支付规定.txt")]
    )
    assert set(rows[0]) == {"path", "collection", "sha256", "size", "status", "error", "chunk_count", "at"}


def test_ingest_reports_chunks_longer_than_the_embedder_window(cli, tmp_path: Path) -> None:
    folder = tmp_path / "long"
    folder.mkdir()
    # one 1,200-character paragraph: 655 tokens for multilingual-e5 (window 512), one chunk at size 2000
    (folder / "长文.txt").write_text("劳动者依法享有休息休假的权利，用人单位应当保证。" * 50, encoding="utf-8")
    env = {"ZHIKU_CHUNKING__SIZE_CHARS": "2000"}
    r = cli("ingest", folder, "-c", "long", "--index", tmp_path / "idx", "--json", env=env)
    assert one_json(r)["chunks_over_window"] == 1
    r = cli("ingest", folder, "-c", "long", "--index", tmp_path / "idx2", env=env)
    assert (
        "1 chunks are longer than the embedder's window and are embedded diluted: lower chunking.size_chars" in r.stderr
    )
    assert (
        one_json(cli("ingest", folder, "-c", "long", "--index", tmp_path / "idx3", "--json"))["chunks_over_window"] == 0
    )  # the default size cuts it in pieces that fit


# --- query ---------------------------------------------------------------------------------------------
def test_query_json_is_one_object_with_cited_hits(cli, index: Path, embed_cache_dir: Path) -> None:
    r = cli("query", "试用期最长多久", "-c", "hr", "--index", index, "--json", "-k", "3")
    assert (r.exit_code, r.stderr) == (0, "")
    out = one_json(r)
    assert set(out) == {
        "query",
        "mode",
        "answer",
        "rerank",
        "rewrite",
        "queries",
        "low_confidence",
        "confidence",
        "hits",
        "note",
    }
    assert (out["query"], out["mode"], out["rerank"], out["rewrite"]) == ("试用期最长多久", "hybrid", "off", "off")
    assert out["note"] is None
    assert out["low_confidence"] is False
    assert 0.88 < out["confidence"] <= 1.0  # the best cosine, above the default server.min_score
    assert [set(h) for h in out["hits"]] == [HIT_KEYS] * 3
    first = out["hits"][0]
    assert (first["n"], first["source"], first["page"], first["section"], first["text"]) == (
        1,
        "劳动合同法.md",
        None,
        SEC_PROBATION,
        PROBATION,
    )
    # The score is the library's fused score, rounded to 6 places. Its value depends on the CPU's float kernels
    # (the embedder's sums differ between Intel and AMD), so the test compares surfaces, not a literal.
    with KnowledgeBase(make_settings(index, embed_cache_dir), read_only=True) as kb:
        lib = kb.retrieve("试用期最长多久", top_k=3, collection="hr").hits
    assert [(h["chunk_id"], h["score"]) for h in out["hits"]] == [(h.chunk.chunk_id, round(h.score, 6)) for h in lib]
    assert out["hits"][0]["score"] > out["hits"][1]["score"] > out["hits"][2]["score"]
    docs = {d["source"]: d["doc_id"] for d in one_json(cli("documents", "--index", index, "--json"))["documents"]}
    assert first["doc_id"] == docs["劳动合同法.md"]
    assert [h["n"] for h in out["hits"]] == [1, 2, 3]
    assert out["answer"].startswith(
        f"**检索问题 / Query:** 试用期最长多久\n\n[1] {PROBATION} ({SEC_PROBATION})\n\n[2] "
    )
    assert f"**来源 / Sources**\n\n[1] 劳动合同法.md, {SEC_PROBATION}\n[2] " in out["answer"]

    sub = one_json(cli("query", "加班工资", "--index", index, "-c", "hr", "--json", "--mode", "bm25"))
    assert sub["mode"] == "bm25"
    assert sub["hits"][0]["source"] == "规章/工资支付规定.txt"  # relative to the ingest root
    long = cli("query", "劳动合同的订立和履行，" * 30 + "试用期最长多久", "-c", "hr", "--index", index)
    assert long.exit_code == 0 and long.stderr == (
        "问题较长：前 256 个字符按语义检索，全文按关键词检索 / "
        "A long question: its first 256 characters were searched by meaning, all of it by keywords.\n"
    )


def test_off_topic_questions_are_low_confidence_by_default(cli, index: Path) -> None:
    weather = one_json(cli("query", "今天天气怎么样？", "-c", "hr", "--index", index, "--json"))
    assert weather["low_confidence"] is True and weather["confidence"] < 0.88  # the default server.min_score
    assert "低置信度 / Low confidence" in weather["answer"]
    bm25 = one_json(cli("query", "今天天气怎么样？", "-c", "hr", "--index", index, "--json", "--mode", "bm25"))
    assert bm25["low_confidence"] is True  # bm25 mode: the passages hold none of the query's terms
    off = cli("query", "今天天气怎么样？", "-c", "hr", "--index", index, "--json", env={"ZHIKU_ANSWER__MIN_SCORE": "0"})
    assert json.loads(off.stdout)["low_confidence"] is False  # 0 turns the flag off


def test_query_markdown_filters_and_verbose(cli, index: Path) -> None:
    r = cli("query", "试用期最长多久", "-c", "hr", "--index", index, "--mode", "bm25")
    assert (r.exit_code, r.stderr) == (0, "")
    assert r.stdout == (
        "**检索问题 / Query:** 试用期最长多久\n\n"
        f"[1] {PROBATION} ({SEC_PROBATION})\n\n"
        "**来源 / Sources**\n\n"
        f"[1] 劳动合同法.md, {SEC_PROBATION}\n"
    )
    leave = one_json(cli("query", "年休假有几天", "--index", index, "--source", "年休*", "--json", "-k", "10"))
    assert [(h["source"], h["section"]) for h in leave["hits"]] == [("年休假条例.md", SEC_LEAVE)]
    text = one_json(cli("query", "工资", "--index", index, "--type", "text", "--json", "-k", "10"))
    assert [h["source"] for h in text["hits"]] == ["规章/工资支付规定.txt"]
    none = one_json(cli("query", "试用期", "--index", index, "--source", "无此文件*", "--json"))
    assert (none["hits"], none["low_confidence"], none["confidence"]) == ([], True, None)
    assert "未找到相关内容" in none["answer"]
    assert none["note"] == (  # --json says why as well (the hint went to stderr only, and not with --json)
        "no passage matched the filters (--source '无此文件*'): source '无此文件*' matches no document; "
        "sources here: '劳动合同法.md', '年休假条例.md', '规章/工资支付规定.txt'; `zhiku documents` lists the sources and "
        "types as ingested"
    )
    typo = cli("query", "试用期", "--index", index, "-c", "无此集合", "--json")
    message = "no collection '无此集合' in this knowledge base; available: hr"
    assert (typo.exit_code, json.loads(typo.stdout)) == (
        1,
        {"error": {"code": "NOT_FOUND", "message": message, "retryable": False}},
    )
    assert typo.stderr == f"error: {message}\n"

    verbose = cli("query", "试用期最长多久", "-c", "hr", "--index", index, "--verbose", "--mode", "bm25")
    assert verbose.exit_code == 0
    assert "terms: 试用 试用期 最长 多久 · bm25 1 · dense 0 candidates" in verbose.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["query", ""], "error: the query is empty: ask a question, e.g. 试用期最长多久"),
        (["query", "   "], "error: the query is empty: ask a question, e.g. 试用期最长多久"),
        (["query", "试用期", "-k", "0"], "error: top_k must be an integer from 1 to 100, got 0"),
        (["query", "试用期", "-k", "101", "--json"], "error: top_k must be an integer from 1 to 100, got 101"),
        (
            ["query", "试用期", "--mode", "semantic"],
            "error: unknown search mode 'semantic': use one of bm25, dense, hybrid",
        ),
        (
            ["delete", "[/x]"],
            "error: no document '[/x]' in {index} (a name, not a pattern: see `zhiku delete --glob`) (list them with `zhiku documents`)",
        ),
    ],
)
def test_errors_are_one_line_with_exit_1(cli, index: Path, args: list[str], message: str) -> None:
    assert error_line(cli(*args, "--index", index)) == message.format(index=index)


def test_delete_is_literal_and_a_glob_needs_yes_for_several(cli, index: Path) -> None:
    line = error_line(cli("delete", "*", "--index", index))
    assert line == (
        f"error: no document '*' in {index} (a name, not a pattern: see `zhiku delete --glob`)"
        " (list them with `zhiku documents`)"
    )
    docs = one_json(cli("documents", "--index", index, "--json"))["documents"]
    r = cli("delete", "--glob", "*", "--index", index)
    assert r.exit_code == 1 and r.stdout == ""
    would = "".join(f"  would delete {d['doc_id']} (hr/{d['source']})\n" for d in docs)
    assert r.stderr == would + "error: '*' matches 3 documents: add --yes to delete them all\n"
    assert len(one_json(cli("documents", "--index", index, "--json"))["documents"]) == 3
    one = docs[0]["source"]
    r = cli("delete", "--glob", one[:2] + "*", "--index", index)  # one match: deleted without --yes
    assert r.exit_code == 0 and r.stdout.startswith(f"deleted {docs[0]['doc_id']} (hr/{one}, ")
    r = cli("delete", "--glob", "*", "--yes", "--index", index)
    assert r.exit_code == 0 and r.stdout.count("deleted ") == 2
    assert one_json(cli("documents", "--index", index, "--json"))["documents"] == []


@pytest.mark.parametrize(
    "command", [["query", "试用期最长多久"], ["query", "试用期", "--json"], ["collections"], ["documents"], ["history"]]
)
def test_missing_index_is_a_one_line_error(cli, tmp_path: Path, command: list[str]) -> None:
    idx = tmp_path / "a-rather-long-directory-name-so-the-message-is-wider-than-eighty-columns" / "索引"
    line = error_line(cli(*command, "--index", idx))
    assert line == f"error: no index at {idx}: run `zhiku ingest PATH --index {idx}` first"
    assert not idx.exists()


def test_missing_config_file_is_an_error(cli, tmp_path: Path) -> None:
    assert error_line(cli("config", "show", "--config", "nope.yaml")) == (
        "error: config file not found: nope.yaml (create it or drop --config)"
    )


# --- catalogue -----------------------------------------------------------------------------------------
def test_collections_documents_delete_history(cli, index: Path, corpus: Path) -> None:
    assert one_json(cli("collections", "--index", index, "--json")) == {
        "collections": [{"name": "hr", "documents": 3, "chunks": CORPUS_CHUNKS, "chars": CORPUS_CHARS}]
    }
    table = cli("collections", "--index", index)
    assert table.exit_code == 0
    assert table.stdout.split("\n")[3].split() == ["│", "hr", "│", "3", "│", "4", "│", f"{CORPUS_CHARS}", "│"]

    docs = one_json(cli("documents", "--index", index, "--json"))["documents"]
    assert [(d["collection"], d["source"], d["doc_type"], d["chunk_count"], d["title"]) for d in docs] == [
        ("hr", "劳动合同法.md", "markdown", 2, "劳动合同法"),
        ("hr", "年休假条例.md", "markdown", 1, "职工带薪年休假条例"),
        ("hr", "规章/工资支付规定.txt", "text", 1, "工资支付规定"),
    ]
    assert one_json(cli("documents", "-c", "notes", "--index", index, "--json")) == {"documents": []}

    leave_id = docs[1]["doc_id"]
    r = cli("delete", "年休假条例.md", "-c", "hr", "--index", index)
    assert (r.exit_code, r.stdout, r.stderr) == (0, f"deleted {leave_id} (hr/年休假条例.md, 1 chunks)\n", "")
    assert [d["source"] for d in one_json(cli("documents", "--index", index, "--json"))["documents"]] == [
        "劳动合同法.md",
        "规章/工资支付规定.txt",
    ]
    assert one_json(cli("collections", "--index", index, "--json"))["collections"][0]["documents"] == 2
    for mode in ("bm25", "dense", "hybrid"):
        hits = one_json(cli("query", "年休假有几天", "--index", index, "--mode", mode, "--json", "-k", "10"))["hits"]
        assert leave_id not in {h["doc_id"] for h in hits}
    r = cli("delete", docs[0]["doc_id"], "--index", index)  # by id
    assert r.stdout == f"deleted {docs[0]['doc_id']} (hr/劳动合同法.md, 2 chunks)\n"

    history = one_json(cli("history", "--index", index, "--json"))["history"]
    assert sorted((h["status"], h["collection"], h["chunk_count"], h["error"]) for h in history) == [
        ("added", "hr", 1, None),
        ("added", "hr", 1, None),
        ("added", "hr", 2, None),
    ]
    assert "added" in cli("history", "--index", index).stdout


def test_config_show_reflects_env_yaml_and_flags(cli, tmp_path: Path, embed_cache_dir: Path) -> None:
    shown = one_json(cli("config", "show", "--json", env={"ZHIKU_RETRIEVAL__MODE": "bm25"}))
    assert shown["retrieval"]["mode"] == "bm25"
    assert (shown["index"], shown["collection"]) == (".zhiku", "default")
    assert shown["cache_dir"] == str(embed_cache_dir)
    assert sum(len(v) if isinstance(v, dict) else 1 for v in shown.values()) == 60  # keys, sections flattened
    assert "  mode: bm25\n" in cli("config", "show", env={"ZHIKU_RETRIEVAL__MODE": "bm25"}).stdout

    (tmp_path / "zhiku.yaml").write_text("collection: 人事\nretrieval: {top_k: 7, mode: dense}\n", encoding="utf-8")
    shown = one_json(
        cli("config", "show", "--json", "--index", tmp_path / "别处", env={"ZHIKU_RETRIEVAL__MODE": "bm25"})
    )
    assert (shown["collection"], shown["retrieval"]["top_k"], shown["retrieval"]["mode"]) == ("人事", 7, "bm25")
    assert shown["index"] == str(tmp_path / "别处")

    assert error_line(cli("config", "show", env={"ZHIKU_RETRIEVAL__TOP_K": "0"})) == (
        "error: invalid settings: retrieval.top_k: Input should be greater than or equal to 1 "
        "(got '0' from ZHIKU_RETRIEVAL__TOP_K)"
    )


def test_config_show_reads_a_moved_key_and_says_so_once(cli, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "zhiku.yaml").write_text("server: {min_score: 0.5}\nretrieval: {rrf_k: 10}\n", encoding="utf-8")
    r = cli("config", "show", "--json")
    assert r.exit_code == 0 and one_json(r)["answer"]["min_score"] == 0.5
    assert [m.getMessage() for m in caplog.records if m.name == "zhiku.settings"] == [
        "zhiku.yaml: server.min_score is now answer.min_score (read as that; rename it)",
        "zhiku.yaml: retrieval.rrf_k is no longer a setting (60); remove it",
    ]


# --- an index built with another embedder ------------------------------------------------------------------
def test_index_from_another_embedder_is_refused_until_rebuilt(
    cli, cached_embedder, corpus: Path, tmp_path: Path, embed_cache_dir: Path, e5
) -> None:
    idx = tmp_path / "idx"
    with KnowledgeBase(
        make_settings(idx, embed_cache_dir), embedder=RenamedEmbedder(cached_embedder(), "bge-m3")
    ) as kb:
        kb.ingest([corpus])
    hint = (
        f"rebuild it with `zhiku ingest PATH... --index {idx} --force` (re-embeds everything), or use another --index"
    )
    line = error_line(cli("query", "试用期最长多久", "--index", idx))
    assert line == (
        f"error: index {idx} was built with embedder 'bge-m3' but the settings use {e5.name!r}; "
        f"vectors from different models cannot be mixed: {hint}"
    )
    bm25 = one_json(cli("query", "试用期最长多久", "--index", idx, "--mode", "bm25", "--json"))
    assert bm25["hits"][0]["section"] == SEC_PROBATION

    line = error_line(cli("ingest", corpus, "-c", "hr", "--index", idx))
    assert line == (
        f"error: index {idx} was built differently (embedder: index has 'bge-m3', settings give {e5.name!r}): {hint}"
    )
    rebuilt = one_json(cli("ingest", corpus, "-c", "hr", "--index", idx, "--force", "--json"))
    assert {k: rebuilt[k] for k in COUNT_KEYS} == {"added": 3, "updated": 0, "skipped": 0, "removed": 0, "failed": 0}
    assert rebuilt["chunks_embedded"] == 0
    hybrid = one_json(cli("query", "试用期最长多久", "--index", idx, "--json"))
    assert (hybrid["hits"][0]["source"], hybrid["hits"][0]["section"]) == ("劳动合同法.md", SEC_PROBATION)


# --- end to end: the installed script in a subprocess ---------------------------------------------------------
def test_installed_script_end_to_end(corpus: Path, tmp_path: Path, embed_cache_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZHIKU_")}
    env["ZHIKU_CACHE_DIR"] = str(embed_cache_dir)
    idx = tmp_path / "idx"

    def zhiku(*args: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(ZHIKU), *map(str, args)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
        )

    help_ = zhiku("--help")
    assert help_.returncode == 0
    for command in ("ingest", "query", "collections", "documents", "delete", "history", "eval", "config"):
        assert f"│ {command} " in help_.stdout

    ingest = zhiku("ingest", corpus, "--index", idx, "--json")
    assert (ingest.returncode, ingest.stderr) == (0, "")
    assert json.loads(ingest.stdout)["added"] == 3

    query = zhiku("query", "試用期最長多久", "--index", idx, "--json", "-k", "1")
    assert (query.returncode, query.stderr, query.stdout.count("\n")) == (0, "", 1)
    [hit] = json.loads(query.stdout)["hits"]
    assert (hit["source"], hit["section"], hit["text"]) == ("劳动合同法.md", SEC_PROBATION, PROBATION)

    empty = zhiku("query", "", "--index", idx)
    assert (empty.returncode, empty.stdout) == (1, "")
    assert empty.stderr == "error: the query is empty: ask a question, e.g. 试用期最长多久\n"
