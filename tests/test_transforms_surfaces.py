"""The LLM features on every surface, against the local fake OpenAI-compatible server: image captions (DOCX) over
MCP, contexts and tags in MCP citations, the LLM document summary, query rewriting (multi_query, hyde, timeout
fallback), the CLI (``--transform``, ``--dry-run``, ``--json``, ``history``) and the summaries of
``examples/`` without any LLM."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from typer.testing import CliRunner

from fake_openai import FakeOpenAI
from helpers_kb import CORPUS_CHUNKS, SEC_PROBATION, make_settings
from test_docx_html import handbook_docx
from test_transforms import TAGS, _llm_client_constants, llm_reply  # noqa: F401 (an autouse fixture)
from zhiku import llm as llm_service
from zhiku.api import KnowledgeBase
from zhiku.cli.app import app
from zhiku.mcp.server import build_server
from zhiku.observability.trace import TRACE_FILE, read_traces
from zhiku.retrieval import rewrite
from zhiku.settings import Settings, merge

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def fake_settings(tmp_path: Path, fake: FakeOpenAI, model: str, transforms: list[str], **extra: Any) -> Settings:
    """Embeddings and chat both from the fake server (deterministic vectors, no model to load: ranking assertions
    use bm25 mode)."""
    fake.chat_reply = llm_reply
    embedding = {"provider": "openai", "model": "fake-embed", "base_url": fake.url}
    llm_service.MAX_RETRIES = 0  # (``_llm_client_constants`` restores it)
    llm = {"base_url": fake.url, "model": model, "timeout_s": 2.0, **extra.pop("llm", {})}
    return make_settings(
        tmp_path / "idx",
        tmp_path / "cache",
        embedding=embedding,
        llm=llm,
        transforms={"enabled": transforms},
        server={"ingest_roots": [str(tmp_path)]},
        **extra,
    )


def call_tools(settings: Settings, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    async def main() -> list[Any]:
        async with Client(build_server(settings)) as client:
            return [await client.call_tool(name, args) for name, args in calls]

    return anyio.run(main)


def test_docx_images_are_captioned_indexed_and_sent_over_mcp(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    (tmp_path / "docs").mkdir()
    handbook_docx(tmp_path / "docs" / "手册.docx")
    settings = fake_settings(tmp_path, fake_openai, "m-caption", ["caption"])
    with KnowledgeBase(settings) as kb:
        report = kb.ingest([tmp_path / "docs"])
        assert dict(report.transforms.applied) == {"caption": 1} and report.transforms.issues == ()
        [vision] = fake_openai.chats()
        assert vision.images == 1 and vision.body["messages"][0]["content"][1]["image_url"]["url"].startswith(
            "data:image/png;base64,"
        )
        hit = kb.retrieve("总经理", mode="bm25").hits[0]  # a word only the generated caption holds
        assert [im.caption for im in hit.chunk.images] == ["图 1 公司组织结构图 — 一张组织结构图，显示总经理与人事部"]
    config = tmp_path / "zhiku.json.yaml"
    config.write_text(json.dumps(settings.model_dump(mode="json")), encoding="utf-8")
    q = CliRunner().invoke(app, ["query", "总经理", "--config", str(config), "--json", "--mode", "bm25", "-k", "1"])
    assert json.loads(q.stdout)["hits"][0]["captions"] == ["图 1 公司组织结构图 — 一张组织结构图，显示总经理与人事部"]
    ingest_trace = next(t for t in read_traces(tmp_path / "idx" / TRACE_FILE) if t.kind == "ingest")
    rows = next(s for s in ingest_trace.stages if s.name == "transform").data["chunks"]
    assert [r["captions"] for r in rows if "captions" in r] == [
        ["图 1 公司组织结构图 — 一张组织结构图，显示总经理与人事部"]
    ]
    [result] = call_tools(settings, [("query_knowledge_hub", {"query": "组织结构图 总经理"})])
    images = result.structured_content["images"]
    assert images[0]["caption"] == "图 1 公司组织结构图 — 一张组织结构图，显示总经理与人事部"
    assert [c.type for c in result.content][:2] == ["text", "image"]


def test_mcp_citations_carry_context_and_tags_and_the_llm_summary(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    from helpers_kb import write_corpus

    write_corpus(tmp_path / "docs")
    settings = fake_settings(tmp_path, fake_openai, "m-mcp", ["contextual", "metadata"], retrieval={"mode": "bm25"})
    with KnowledgeBase(settings) as kb:
        assert kb.ingest([tmp_path / "docs"]).transforms.issues == ()
        doc_id = kb.resolve_document("劳动合同法.md").doc_id
    query, summary, tagged, untagged = call_tools(
        settings,
        [
            ("query_knowledge_hub", {"query": "试用期最长多久", "top_k": 2}),
            ("get_document_summary", {"doc_id": doc_id}),
            ("query_knowledge_hub", {"query": "试用期最长多久", "top_k": 2, "filters": {"tags": ["试用期"]}}),
            ("query_knowledge_hub", {"query": "试用期最长多久", "top_k": 2, "filters": {"tags": ["没有这个标签"]}}),
        ],
    )
    # the tag filter (every chunk carries the fake's TAGS): a carried tag keeps the hits, another one leaves none
    assert [c["chunk_id"] for c in tagged.structured_content["citations"]] == [
        c["chunk_id"] for c in query.structured_content["citations"]
    ]
    assert untagged.structured_content["citations"] == [] and "过滤条件" in untagged.structured_content["note"]
    top = query.structured_content["citations"][0]  # the compact form: no passage text, but what transforms added
    assert (top["context"], top["tags"], "text" in top) == ("紫罗兰卷宗：此段讲第十九条 劳", TAGS, False)
    assert (
        "第十九条 劳动合同期限" in query.content[0].text and "紫罗兰" not in query.content[0].text
    )  # quotes the original
    full = merge(settings, server={"structured_passages": True})
    [query] = call_tools(full, [("query_knowledge_hub", {"query": "试用期最长多久", "top_k": 2})])
    top = query.structured_content["citations"][0]
    assert top["section"] == SEC_PROBATION and top["text"].startswith("第十九条")
    assert (top["context"], top["tags"]) == ("紫罗兰卷宗：此段讲第十九条 劳", TAGS)
    s = summary.structured_content
    assert (s["summary_kind"], s["keywords"]) == ("llm", TAGS)
    assert summary.content[0].text.endswith("## 概要 / Summary (llm)\n\n摘要：# 劳动合同法")


def test_a_named_article_stays_first_when_the_rewrites_rank_another_laws_first(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    from helpers_kb import write_corpus

    write_corpus(
        tmp_path / "docs",
        {
            "劳动法.md": "# 劳动法\n\n第八十二条 用人单位违反本法规定的，由劳动行政部门责令改正。\n",
            "劳动合同法.md": "# 劳动合同法\n\n第八十二条 用人单位自用工之日起超过一个月不满一年未与劳动者订立书面合同的，"
            "应当向劳动者每月支付二倍的工资。\n",
        },
    )
    settings = fake_settings(tmp_path, fake_openai, "m-named", [], retrieval={"rewrite": "multi_query", "mode": "bm25"})
    fake_openai.chat_reply = lambda prompt, n: json.dumps(
        {"queries": ["第八十二条 责令改正", "劳动行政部门 第八十二条"]}
    )
    with KnowledgeBase(settings) as kb:
        kb.ingest([tmp_path / "docs"])
        r = kb.retrieve("劳动合同法第八十二条", top_k=2)
    # the variants rank 劳动法's 第八十二条 first, and the fused ranking did too: the lookup was undone
    assert (r.rewrite, [h.chunk.source for h in r.hits]) == ("ok", ["劳动合同法.md", "劳动法.md"])


def test_query_rewriting_fuses_variants_and_falls_back_on_timeout(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    from helpers_kb import write_corpus

    write_corpus(tmp_path / "docs")
    settings = fake_settings(
        tmp_path, fake_openai, "m-rewrite", [], retrieval={"rewrite": "multi_query", "mode": "bm25"}
    )
    with KnowledgeBase(settings) as kb:
        kb.ingest([tmp_path / "docs"])
        r = kb.retrieve("试用期最长多久", top_k=3)
        assert (r.rewrite, r.queries) == ("ok", ("试用期 期限", "试用期多长时间"))
        assert r.hits[0].chunk.section == SEC_PROBATION
        chats = len(fake_openai.chats())
        assert kb.retrieve("试用期最长多久", top_k=3).rewrite == "ok" and len(fake_openai.chats()) == chats  # cached
        trace = read_traces(tmp_path / "idx" / TRACE_FILE)[0]
        stage = next(s for s in trace.stages if s.name == "rewrite")
        assert (stage.counts, stage.data["queries"], trace.data["rewrite"]) == (
            {"queries": 2},
            ["试用期 期限", "试用期多长时间"],
            "ok",
        )
    [mcp] = call_tools(settings, [("query_knowledge_hub", {"query": "试用期最长多久", "top_k": 2})])
    assert mcp.structured_content["rewrite"] == "ok"
    slow = fake_settings(
        tmp_path,
        fake_openai,
        "m-rewrite-slow",
        [],
        retrieval={"rewrite": "hyde", "mode": "bm25"},
    )
    monkeypatch.setattr(rewrite, "REWRITE_TIMEOUT_S", 0.3)
    fake_openai.chat_delay_s = 1.5
    with KnowledgeBase(slow) as kb:
        r = kb.retrieve("年休假有几天", top_k=2)
        assert r.rewrite == "fallback: timeout: no rewrite within 0.3s" and r.queries == ()
        assert r.hits[0].chunk.source == "年休假条例.md"  # the plain query's hits
    fake_openai.chat_delay_s = 0.0
    with KnowledgeBase(
        fake_settings(tmp_path, fake_openai, "m-hyde", [], retrieval={"rewrite": "hyde", "mode": "bm25"})
    ) as kb:
        r = kb.retrieve("试用期最长多久", top_k=2)
        assert (r.rewrite, r.queries) == ("ok", ("劳动合同期限一年以上不满三年的，试用期不得超过二个月。",))


def test_cli_transform_json_dry_run_and_history(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    from helpers_kb import write_corpus

    for key in [k for k in os.environ if k.startswith("ZHIKU_")]:
        monkeypatch.delenv(key)
    write_corpus(tmp_path / "docs")
    fake_openai.chat_reply = llm_reply
    config = tmp_path / "zhiku.yaml"
    config.write_text(
        json.dumps(
            {
                "index": str(tmp_path / "idx"),
                "embedding": {
                    "provider": "openai",
                    "model": "fake-embed",
                    "base_url": fake_openai.url,
                },
                "cache_dir": str(tmp_path / "cache"),
                "llm": {"base_url": fake_openai.url, "model": "m-cli", "price_input": 1.0, "price_output": 2.0},
            }
        ),
        encoding="utf-8",
    )
    run = CliRunner().invoke
    dry = run(
        app, ["ingest", str(tmp_path / "docs"), "--config", str(config), "--transform", "contextual", "--dry-run"]
    )
    assert (
        dry.exit_code == 0
        and f"over {CORPUS_CHUNKS} chunks of 3 documents would send {CORPUS_CHUNKS} requests" in dry.stdout
    )
    assert "<chunk>" in dry.stdout and fake_openai.chats() == []
    done = run(app, ["ingest", str(tmp_path / "docs"), "--config", str(config), "--transform", "contextual", "--json"])
    out = json.loads(done.stdout)
    assert (out["added"], out["transforms"]["enabled"], out["transforms"]["usage"]["calls"]) == (3, ["contextual"], 4)
    assert out["transforms"]["usage"]["cost"] > 0 and out["transforms"]["issues"] == []
    q = json.loads(
        run(app, ["query", "试用期最长多久", "--config", str(config), "--json", "-k", "1", "--mode", "bm25"]).stdout
    )
    assert q["hits"][0]["context"] == "紫罗兰卷宗：此段讲第十九条 劳"
    args = ["query", "试用期最长多久", "--config", str(config), "--json", "--mode", "bm25", "--rewrite", "multi_query"]
    rewritten = json.loads(run(app, args).stdout)
    assert (rewritten["rewrite"], rewritten["queries"]) == ("ok", ["试用期 期限", "试用期多长时间"])
    bad = run(app, [*args[:-1], "hyde2"])
    assert bad.exit_code == 1 and "retrieval.rewrite" in bad.stderr and "hyde2" in bad.stderr
    history = json.loads(run(app, ["history", "--config", str(config), "--json"]).stdout)["llm_usage"]
    assert sorted(h["source"] for h in history) == ["劳动合同法.md", "年休假条例.md", "规章/工资支付规定.txt"]
    assert sum(h["usage"]["calls"] for h in history) == CORPUS_CHUNKS
    text = run(app, ["history", "--config", str(config)]).stdout
    assert "LLM transforms" in text
    # ingested without transforms: nothing is owed (what an earlier ingest bought stays), the history unchanged
    off = json.loads(
        run(app, ["ingest", str(tmp_path / "docs"), "--config", str(config), "--transform", "none", "--json"]).stdout
    )
    assert (off["updated"], off["skipped"]) == (0, 3)
    shown = json.loads(run(app, ["history", "--config", str(config), "--json", "--limit", "3"]).stdout)["llm_usage"]
    assert [h["transforms"] for h in shown] == [["contextual"]] * 3
    assert sum(h["usage"]["calls"] for h in shown) == CORPUS_CHUNKS


LABOUR_CONTRACT_CHAPTERS = [
    "第一章 总则（第一条—第六条）",
    "第二章 劳动合同的订立（第七条—第二十八条）",
    "第三章 劳动合同的履行和变更（第二十九条—第三十五条）",
    "第四章 劳动合同的解除和终止（第三十六条—第五十条）",
    "第五章 特别规定（第五十一条—第七十二条）",
    "第六章 监督检查（第七十三条—第七十九条）",
    "第七章 法律责任（第八十条—第九十五条）",
    "第八章 附则（第九十六条—第九十八条）",
]
RANGE = re.compile(r"^\S.*（第[一二三四五六七八九十百零]+条(—第[一二三四五六七八九十百零]+条)?）$")


def test_every_example_has_a_summary_that_fits_it_without_an_llm(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    settings = fake_settings(tmp_path, fake_openai, "unused", [], llm={"base_url": None, "model": None})
    with KnowledgeBase(settings) as kb:
        kb.ingest([EXAMPLES])
        docs = kb.documents()
        suffixes = {".md", ".markdown", ".txt", ".text", ".pdf", ".docx", ".html", ".htm", ".xhtml"}
        assert len(docs) == sum(1 for p in EXAMPLES.rglob("*") if p.suffix in suffixes) >= 6
        summaries = {d.source: kb.summary_fields(d.doc_id) for d in docs}
        assert fake_openai.chats() == []
    laws = {k.removeprefix("laws/").split("(")[0]: v for k, v in summaries.items() if k.startswith("laws/")}
    assert len(laws) == 5
    for name, s in laws.items():
        chapters = [line for line in s["summary"].splitlines() if not line.startswith("- ")]
        assert s["summary_kind"] == "statute" and chapters and all(RANGE.match(c) for c in chapters), name
    assert laws["劳动合同法"]["summary"].splitlines() == LABOUR_CONTRACT_CHAPTERS
    assert laws["劳动法"]["summary"].splitlines()[3:5] == [
        "第四章 工作时间和休息休假（第三十六条—第四十五条）",
        "第五章 工资（第四十六条—第五十一条）",
    ]
    assert laws["劳动法"]["summary"].splitlines()[-1] == "第十三章 附则（第一百零六条—第一百零七条）"
    # no chapters: the whole range, then what each article (or run of articles in one chunk) says
    leave = laws["职工带薪年休假条例"]["summary"].splitlines()
    assert leave[:2] == [
        "职工带薪年休假条例（第一条—第十条）",
        "- 第一条：为了维护职工休息休假权利，调动职工工作积极性，根据劳动法和公务员法，制定本条例。",
    ]
    assert leave[3] == "- 第四条：职工有下列情形之一的，不享受当年的年休假："
    assert laws["劳动合同法"]["keywords"][:3] == ["劳动者", "用人单位", "劳动合同"]
    plain = summaries["SOURCES.md"]  # no structure: its top sentences
    assert plain["summary_kind"] == "extractive" and len(plain["summary"]) >= 20 and len(plain["keywords"]) >= 5
    results = call_tools(settings, [("get_document_summary", {"doc_id": d.doc_id}) for d in docs])  # over MCP
    for d, r in zip(docs, results, strict=True):
        s = r.structured_content
        assert s["summary_kind"] == summaries[d.source]["summary_kind"] and s["keywords"] and "summary" not in s
        assert r.content[0].text.count(summaries[d.source]["summary"]) == 1, d.source  # sent once


def test_experiment_hybrid_vs_hybrid_contextual(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    from test_eval_cli import write_beir
    from zhiku.evaluation.datasets import load_dataset
    from zhiku.evaluation.runner import index_dataset, parse_variants, run_experiment, variant_indexes

    data = load_dataset(write_beir(tmp_path / "劳动小集"))
    variants = parse_variants("hybrid,hybrid+contextual,hybrid+multi_query")
    settings = fake_settings(tmp_path, fake_openai, "m-exp", [])
    with KnowledgeBase(settings) as kb, variant_indexes(settings, data) as other:
        index_dataset(kb, data, collection=data.name)
        result = run_experiment(kb, data, variants, collection=data.name, kb_for=other)
    assert [(r.variant, r.status) for r in result.rows] == [
        ("hybrid", "ok"),
        ("hybrid+contextual", "ok"),
        ("hybrid+multi_query", "ok"),
    ]
    # one context per (one-chunk) document, one rewrite per query
    assert len(fake_openai.chats()) == len(data.corpus) + len(data.queries)
    contextual = KnowledgeBase(merge_index(settings, tmp_path / "idx" / "variant-contextual"), read_only=True)
    with contextual:
        assert len(contextual.retrieve("紫罗兰卷宗", mode="bm25", top_k=10).hits) == len(data.corpus)
    no_llm = fake_settings(tmp_path / "n", fake_openai, "x", [], llm={"base_url": None, "model": None})
    with KnowledgeBase(no_llm) as kb, variant_indexes(no_llm, data) as other:
        rows = run_experiment(kb, data, variants[1:], collection=data.name, kb_for=other).rows
    reason = "needs an LLM endpoint: set llm.base_url and llm.model (docs/transforms.md)"
    assert [(row.status, row.reason) for row in rows] == [("unavailable", reason)] * 2


def merge_index(settings: Settings, index: Path) -> Settings:
    return merge(settings, index=str(index), transforms={"enabled": []})
