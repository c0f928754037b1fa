"""Evaluation framework: metrics against pytrec_eval, YAML sets (schema errors name line and field), runs
against an existing index, reports, gates and experiments."""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from helpers_kb import SEC_LEAVE, SEC_PROBATION, SEC_SEVERANCE
from test_eval_cli import BM25_METRICS, write_beir
from zhiku.cli.app import app
from zhiku.errors import InvalidInput
from zhiku.evaluation.datasets import EvalQuery, Expected, load_dataset, load_yaml_set, section_matches
from zhiku.evaluation.metrics import (
    Bar,
    check_gate,
    hit_at_k,
    mrr_at_k,
    ndcg_at_k,
    parse_gate,
    parse_metric,
    recall_at_k,
)
from zhiku.evaluation.runner import VARIANTS, evaluate, parse_variants, read_history
from zhiku.types import Chunk


# ------------------------------------------------------------------------------ metrics vs trec_eval
def test_metrics_match_pytrec_eval_on_random_runs() -> None:
    pytrec_eval = pytest.importorskip("pytrec_eval")
    rng = random.Random(20261129)
    docs = [f"d{i}" for i in range(40)]
    qrels: dict[str, dict[str, int]] = {}
    runs: dict[str, list[str]] = {}
    for q in range(300):
        qid = f"q{q}"
        judged = rng.sample(docs, rng.randint(1, 8))
        qrels[qid] = {d: rng.choice([0, 1, 1, 2, 3]) for d in judged}
        if not any(qrels[qid].values()):
            qrels[qid][judged[0]] = 1
        runs[qid] = rng.sample(docs, rng.randint(0, 30))
    ks = (1, 3, 5, 10, 20)
    # strictly decreasing scores: trec_eval sorts by score (ties by doc id), so the order is exactly ours
    run_scored = {q: {d: float(len(r) - i) for i, d in enumerate(r)} for q, r in runs.items()}
    measures = {
        f"ndcg_cut.{','.join(map(str, ks))}",
        f"recall.{','.join(map(str, ks))}",
        f"success.{','.join(map(str, ks))}",
    }
    ref = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run_scored)
    checked = 0
    for qid, ranked in runs.items():
        relevant = {d: g for d, g in qrels[qid].items() if g > 0}
        for k in ks:
            assert math.isclose(ndcg_at_k(ranked, relevant, k), ref[qid][f"ndcg_cut_{k}"], abs_tol=1e-9)
            assert math.isclose(recall_at_k(ranked, relevant, k), ref[qid][f"recall_{k}"], abs_tol=1e-9)
            assert math.isclose(hit_at_k(ranked, relevant, k), ref[qid][f"success_{k}"], abs_tol=1e-9)
            checked += 3
    for k in ks:  # MRR@k is trec_eval's recip_rank over the run cut at k
        cut = {q: {d: s for d, s in r.items() if s > len(runs[q]) - k} for q, r in run_scored.items()}
        rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(cut)
        for qid, ranked in runs.items():
            relevant = {d: g for d, g in qrels[qid].items() if g > 0}
            got = mrr_at_k(ranked, relevant, k)
            assert math.isclose(got, rr.get(qid, {}).get("recip_rank", 0.0), abs_tol=1e-9)
            checked += 1
    assert checked == 300 * 5 * 4


def test_parse_metric() -> None:
    assert parse_metric("NDCG@10") == ("ndcg", 10)
    assert parse_metric("hit_chars@4000") == ("hit_chars", 4000)
    for bad in ("ndcg", "map@10", "hit@0", "hit@x", "hit@2000", "hit_chars@0"):
        with pytest.raises(ValueError, match="unknown metric"):
            parse_metric(bad)


# ------------------------------------------------------------------------------------- YAML sets
GOOD_YAML = """\
version: 1
description: 劳动法检查集
queries:
  - query: 试用期最长多久
    category: 试用期
    expected:
      - source: 劳动合同法.md
        section: 第二章 劳动合同的订立 > 第十九条
    # reason: 第十九条 sets the probation limits
  - query: 经济补偿怎么算
    category: 补偿
    expected:
      - {source: "劳动合同*.md", section: 第四章}
  - query: 年休假有几天
    category: 休假
    expected: [{source: 年休假条例.md}, {source: 不存在.md}]
  - query: 哺乳期
    expected: [{source: 劳动合同法.md, page: 9}]
"""


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_yaml_set_loads(tmp_path: Path) -> None:
    s = load_yaml_set(write(tmp_path / "劳动.yaml", GOOD_YAML))
    assert (s.name, s.kind, s.description, len(s.queries)) == ("劳动", "yaml", "劳动法检查集", 4)
    q = s.queries[0]
    assert (q.qid, q.text, q.category) == ("q1", "试用期最长多久", "试用期")
    assert q.expected == (Expected("劳动合同法.md", None, "第二章 劳动合同的订立 > 第十九条"),)
    assert s.queries[2].relevant == {"expected[0]": 1, "expected[1]": 1}
    assert s.queries[3].category == "未分类" and s.queries[3].expected[0].page == 9
    assert sorted({q.category for q in s.queries}) == ["休假", "未分类", "补偿", "试用期"]
    assert load_dataset(tmp_path / "劳动.yaml", max_queries=2).queries == s.queries[:2]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "{p}: the file is empty: it needs `version: 1` and `queries:`"),
        ("version: 1\nqueries: [\n", "{p}:3: not valid YAML (expected the node content, but found '<stream end>')"),
        ("queries: []\n", "{p}:1: `version` is missing: add `version: 1`"),
        ("version: 2\nqueries: []\n", "{p}:1: version: 2 is not supported (use 1)"),
        ("version: 1\nqueries: []\n", "{p}:2: queries must be a non-empty list of `- query: …` entries"),
        (
            "version: 1\nqeuries: []\n",
            "{p}:2: the top level: unknown field 'qeuries' (allowed: version, description, queries)",
        ),
        ("version: 1\nqueries:\n  - expected: [{source: a.md}]\n", "{p}:3: queries[0].query is missing"),
        (
            "version: 1\nqueries:\n  - query: 试用期\n",
            "{p}:3: queries[0].expected is missing: list where the answer is, "
            "e.g. `expected: [{{source: 劳动合同法.md}}]`",
        ),
        (
            "version: 1\nqueries:\n  - query: 试用期\n    expected:\n      - section: 第十九条\n",
            "{p}:5: queries[0].expected[0] needs `source` (a path or glob, e.g. 劳动合同法*.md) "
            "or `contains` (text the chunk holds), or both",
        ),
        (
            "version: 1\nqueries:\n  - query: 试用期\n    expected:\n      - source: a.md\n        page: 零\n",
            "{p}:6: queries[0].expected[0].page must be a page number ≥ 1, got '零'",
        ),
        (
            "version: 1\nqueries:\n  - query: 试用期\n    expected:\n      - source: a.md\n        sectoin: 第一章\n",
            "{p}:6: queries[0].expected[0]: unknown field 'sectoin' (allowed: source, page, section, contains)",
        ),
        (
            "version: 1\nqueries:\n  - query: a\n    expected: [{source: a.md}]\n  - query: 试用期\n    expected: a.md\n",
            "{p}:6: queries[1].expected must be a non-empty list of `{{source: …, page: …, section: …, contains: …}}`",
        ),
        # strict types: YAML's 123 and true are not text or page numbers
        (
            "version: 1\nqueries:\n  - query: 123\n    expected: [{source: a.md}]\n",
            "{p}:3: queries[0].query must be non-empty text",
        ),
        (
            "version: 1\nqueries:\n  - query: a\n    expected: [{source: a.md, page: true}]\n",
            "{p}:4: queries[0].expected[0].page must be a page number ≥ 1, got True",
        ),
        (
            "version: 1\nqueries:\n  - query: a\n    id: x\n    expected: [{source: a.md}]\n"
            "  - query: b\n    id: x\n    expected: [{source: a.md}]\n",
            "{p}:7: queries[1].id 'x' is used twice",
        ),
        ("version: 1\nqueries:\n  - 试用期\n", "{p}:3: queries[0] must be a mapping, e.g. `- query: 试用期最长多久`"),
        ("- a\n", "{p}:1: the top level must be a mapping, e.g. `version: 1`"),
        (
            "version: 1\nqueries:\n  - query: a\n    category: ''\n    expected: [{source: a.md}]\n",
            "{p}:4: queries[0].category must be non-empty text",
        ),
    ],
)
def test_yaml_errors_name_the_line_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path / "坏.yaml", text)
    with pytest.raises(InvalidInput) as e:
        load_yaml_set(path)
    assert str(e.value) == message.format(p=path)


def chunk(source: str, section: str = "", page: int | None = None, text: str = "文本", cid: str = "c") -> Chunk:
    return Chunk(cid, "d", "hr", source, "markdown", section, page, 0, len(text), 0, text)


def test_expected_matching_by_source_glob_page_and_section_prefix() -> None:
    assert section_matches(SEC_PROBATION, "劳动合同法 > 第二章")
    assert section_matches(SEC_PROBATION, "第二章 劳动合同的订立 > 第十九")  # from any level, last one cut short
    assert not section_matches(SEC_PROBATION, "第十九条 > 第二章")
    assert not section_matches(SEC_PROBATION, "订立")  # a prefix of a level, not a substring
    assert Expected("劳动*.md").matches(chunk("劳动合同法.md"))
    assert not Expected("劳动*.md").matches(chunk("规章/劳动.md"))
    assert Expected("*/工资*.txt").matches(chunk("规章/工资支付规定.txt"))
    assert Expected("a.pdf", page=3).matches(chunk("a.pdf", page=3))
    assert not Expected("a.pdf", page=3).matches(chunk("a.pdf", page=4))
    assert not Expected("劳动合同法.md", section="第四章").matches(chunk("劳动合同法.md", SEC_PROBATION))


def test_expected_contains_ignores_whitespace_and_combines_with_source_and_page() -> None:
    article = chunk("劳动合同法.md", text="第十九条 劳动合同期限三个月以上\n不满一年的，试用期不得超过一个月")
    assert Expected(contains="期限三个月以上不满 一年").matches(article)  # line break and space ignored
    assert not Expected(contains="试用期不得超过六个月").matches(article)
    assert Expected("劳动*.md", contains="试用期不得超过一个月").matches(article)
    assert not Expected("劳动法.md", contains="试用期不得超过一个月").matches(article)
    assert not Expected("劳动合同法.md", page=2, contains="第十九条").matches(article)
    assert not Expected(contains="试用期不得超过一个月").matches(
        article, "第十九条 劳动合同期限"
    )  # only the part given
    assert Expected(contains="第十九条").to_json() == {"source": "*", "contains": "第十九条"}


def test_within_budget_cuts_the_ranked_text_at_chars() -> None:
    from zhiku.evaluation.runner import within_budget
    from zhiku.types import Hit

    text = "0123456789"  # 10 characters per chunk; the expected text sits at characters 5–8 of the second one
    q = EvalQuery("q", "问题", "未分类", {"expected[0]": 1}, (Expected(contains="5678"),))
    hits = [Hit(chunk("a.md", text="abcdefghij", cid="c1"), 1.0), Hit(chunk("b.md", text=text, cid="c2"), 0.5)]
    assert within_budget(q, hits, 10) == ["chunk:c1"]
    assert within_budget(q, hits, 18) == ["chunk:c1", "chunk:c2"]  # "5678" is cut at "567"
    assert within_budget(q, hits, 19) == ["chunk:c1", "expected[0]"]
    assert within_budget(q, hits, 1000) == ["chunk:c1", "expected[0]"]


# ------------------------------------------------------------------- YAML runs against an index
@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, embed_cache_dir: Path):
    for key in [k for k in os.environ if k.startswith("ZHIKU_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("ZHIKU_CACHE_DIR", str(embed_cache_dir))
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()

    def run(*args: object) -> Result:
        return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)

    return run


@pytest.fixture
def law_index(kb_factory, corpus: Path, tmp_path: Path) -> Path:
    kb_factory(tmp_path / "idx").ingest([corpus])
    return tmp_path / "idx"


def test_yaml_eval_per_category_and_per_query_hits(kb_factory, law_index: Path, tmp_path: Path) -> None:
    s = load_yaml_set(write(tmp_path / "劳动.yaml", GOOD_YAML))
    kb = kb_factory(law_index, read_only=True)
    r = evaluate(kb, s, mode="bm25", k=10)
    # BM25 by hand: q1 第十九条 first; q2 经济/补偿 only in 第四十七条 (第四章): first; q3 年休假 first;
    # q4 expects page 9 of a file without pages: never found
    assert [q.first_relevant for q in r.records] == [1, 1, 1, None]
    assert r.metrics["hit@1"] == 0.75 and r.metrics["mrr@10"] == 0.75
    assert r.metrics["recall@10"] == (1 + 1 + 0.5 + 0) / 4  # q3 finds one of its two expected entries
    assert r.categories["试用期"] == {**{n: 1.0 for n in r.metrics}, "queries": 1.0}
    assert r.categories["未分类"]["hit@5"] == 0.0
    top = r.records[1].hits[0]
    assert (top.source, top.section, top.target, top.relevant, top.bm25_rank) == (
        "劳动合同法.md",
        SEC_SEVERANCE,
        "expected[0]",
        True,
        1,
    )
    assert top.dense_rank is None and top.dense_distance is None and top.rerank_score is None
    assert r.records[2].relevant == ("source=年休假条例.md", "source=不存在.md")
    assert r.records[2].hits[0].section == SEC_LEAVE


def test_eval_cli_yaml_writes_reports_history_and_gates(cli, law_index: Path, tmp_path: Path) -> None:
    dataset = write(tmp_path / "劳动.yaml", GOOD_YAML)
    out = tmp_path / "out"
    r = cli(
        "eval",
        "--dataset",
        dataset,
        "--index",
        law_index,
        "--mode",
        "hybrid",
        "--out",
        out,
        "--gate",
        "hit@5>=0.7, mrr@3>=0.5",
    )
    assert r.exit_code == 0, r.output
    assert "gate: hit@5 = 0.7500 (bar >= 0.7): ok" in r.stderr and "gate: mrr@3 = " in r.stderr
    assert "generation metrics skipped: no LLM judge configured" in r.stdout
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert (summary["dataset"], summary["kind"], summary["mode"], summary["queries"]) == ("劳动", "yaml", "hybrid", 4)
    assert set(summary["categories"]) == {"试用期", "补偿", "休假", "未分类"}
    assert summary["metrics"]["mrr@3"] == summary["mrr@3"] and summary["gate"]["passed"] is True
    assert summary["generation"]["status"] == "skipped" and "judge.base_url" in summary["generation"]["reason"]
    per_query = json.loads((out / "per_query.json").read_text(encoding="utf-8"))
    hit = per_query[0]["hits"][0]
    assert set(hit) >= {"rank", "source", "section", "bm25_rank", "dense_distance", "rerank_score", "relevant"}
    assert hit["section"] == SEC_PROBATION and hit["bm25_rank"] == 1 and 0 < hit["dense_distance"] < 1
    report = (out / "report.md").read_text(encoding="utf-8")
    assert report.startswith("# Evaluation: 劳动\n") and "## Per category" in report and "## Gate: passed" in report
    assert "**哺乳期** (未分类; not found)" in report
    [entry] = read_history(law_index)
    assert (entry.dataset, entry.mode, entry.gate_passed, entry.queries) == ("劳动", "hybrid", True, 4)

    missed = cli("eval", "--dataset", dataset, "--index", law_index, "--mode", "bm25", "--gate", "hit@1>=0.9", "--json")
    assert missed.exit_code == 1
    assert json.loads(missed.stdout)["hit@1"] == 0.75
    assert json.loads(missed.stdout)["gate"] == {  # a CI step reading --json sees the verdict too
        "passed": False,
        "bars": [{"bar": "hit@1>=0.9", "value": 0.75, "passed": False}],
    }
    assert missed.stderr.splitlines()[-1] == "gate FAILED: hit@1 = 0.7500, needs >= 0.9"
    assert [e.gate_passed for e in read_history(law_index)] == [True, False]


@pytest.mark.parametrize(
    ("gate", "message"),
    [
        (
            "hit@5=>0.9",
            "error: invalid --gate bar 'hit@5=>0.9': write METRIC OP NUMBER, e.g. \"hit@5>=0.9,mrr@10>=0.8\" (OP is >=, >, <= or <)",
        ),
        (
            "map@10>=0.5",
            "error: invalid --gate bar 'map@10>=0.5': unknown metric 'map@10': use hit@K, mrr@K, ndcg@K, recall@K "
            "(K from 1 to 1000) or hit_chars@CHARS (a hit within the first CHARS characters of returned text)",
        ),
        ("hit@5>=90", "error: invalid --gate bar 'hit@5>=90': hit@5 lies between 0 and 1"),
        (" , ", 'error: --gate is empty: give bars like "hit@5>=0.9,mrr@10>=0.8"'),
    ],
)
def test_malformed_gate_is_a_one_line_error(cli, tmp_path: Path, gate: str, message: str) -> None:
    r = cli("eval", "--dataset", tmp_path / "none.yaml", "--gate", gate)
    assert (r.exit_code, r.stdout, r.stderr) == (1, "", message + "\n")


def test_gate_functions() -> None:
    bars = parse_gate("hit@5>=0.9,mrr@10>0.8,recall@100<=1,hit_chars@2000>=0.5")
    assert bars == (
        Bar("hit@5", ">=", 0.9),
        Bar("mrr@10", ">", 0.8),
        Bar("recall@100", "<=", 1.0),
        Bar("hit_chars@2000", ">=", 0.5),
    )
    got = check_gate(bars, {"hit@5": 0.9, "mrr@10": 0.8, "recall@100": 1.0, "hit_chars@2000": 0.4})
    assert [b.passed for b in got] == [True, False, True, False]


def test_a_baseline_is_passed_by_the_run_that_wrote_it(tmp_path: Path) -> None:
    """summary.json holds metrics to 4 decimals: with --max-drop 0 the very run that wrote it (mrr@10 0.123456,
    saved 0.1235) missed its own bar; a NaN in a baseline made a bar at 0 that every run passed."""
    from zhiku.evaluation.metrics import baseline_bars

    metrics = {"mrr@10": 0.123456, "hit@5": 0.899996}
    summary = {"dataset": "s", "mode": "bm25", "queries": 7, "metrics": {n: round(v, 4) for n, v in metrics.items()}}
    saved = write(tmp_path / "summary.json", json.dumps(summary))
    bars = baseline_bars(saved, max_drop=0.0, dataset="s", mode="bm25", budget=None, queries=7)
    assert bars == (Bar("mrr@10", ">=", 0.1235), Bar("hit@5", ">=", 0.9))
    assert [(str(b), b.passed) for b in check_gate(bars, metrics)] == [
        ("mrr@10 = 0.1235 (bar >= 0.1235): ok", True),
        ("hit@5 = 0.9000 (bar >= 0.9): ok", True),
    ]
    assert [b.passed for b in check_gate(bars, {"mrr@10": 0.12344, "hit@5": 0.89994})] == [False, False]
    summary["metrics"]["hit@5"] = math.nan
    broken = write(tmp_path / "nan.json", json.dumps(summary))
    with pytest.raises(InvalidInput) as e:
        baseline_bars(broken, max_drop=0.01, dataset="s", mode="bm25", budget=None, queries=7)
    assert str(e.value) == f"the baseline {broken} has hit@5 = nan: save a new baseline"


def test_yaml_set_needs_an_existing_index(cli, tmp_path: Path) -> None:
    dataset = write(tmp_path / "劳动.yaml", GOOD_YAML)
    r = cli("eval", "--dataset", dataset, "--index", tmp_path / "无索引")
    assert r.exit_code == 1 and r.stderr.startswith("error: ") and "无索引" in r.stderr


# ------------------------------------------------------------------------------------ experiments
def test_experiment_table_on_one_index(cli, tmp_path: Path) -> None:
    dataset = write_beir(tmp_path / "劳动小集")
    r = cli(
        "experiment",
        "--dataset",
        dataset,
        "--variants",
        "bm25,dense,hybrid,hybrid_rerank",
        "--out",
        tmp_path / "x",
        "--json",
    )
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    rows = {v["variant"]: v for v in data["variants"]}
    assert list(rows) == ["bm25", "dense", "hybrid", "hybrid_rerank"]
    assert {n: rows["bm25"]["metrics"][n] for n in BM25_METRICS} == BM25_METRICS  # hand-computed (test_eval_cli)
    for mode in ("dense", "hybrid"):  # the same numbers as `zhiku eval` in that mode
        alone = json.loads(cli("eval", "--dataset", dataset, "--mode", mode, "--json").stdout)
        assert {n: rows[mode]["metrics"][n] for n in BM25_METRICS} == {n: alone[n] for n in BM25_METRICS}
    assert rows["hybrid_rerank"]["status"] == "unavailable" and "no reranker" in rows["hybrid_rerank"]["reason"]
    assert rows["hybrid_rerank"]["metrics"] == {} and set(rows["dense"]["latency_ms"]) == {"p50", "p95"}
    saved = json.loads((tmp_path / "x" / "experiment.json").read_text(encoding="utf-8"))
    assert saved == data
    md = (tmp_path / "x" / "experiment.md").read_text(encoding="utf-8")
    assert "| hybrid_rerank | n/a |" in md and "`hybrid_rerank` unavailable: zhiku has no reranker yet" in md

    table = cli("experiment", "--dataset", dataset, "--variants", "bm25,hybrid_rerank")
    assert table.exit_code == 0
    assert table.stdout.startswith("劳动小集 · 4 queries · one index\n\n| variant (劳动小集, 4 queries) | ndcg@10 |")
    assert "| bm25 | 0.6577 | 0.7500 | 0.7500 | 0.6250 | 0.5000 | 0.7500 |" in table.stdout
    assert "- retrieval settings: mode=hybrid, top_k=5" in table.stdout
    assert "- `hybrid_rerank` unavailable: zhiku has no reranker yet" in table.stdout


def test_variants_registry() -> None:
    assert [v.name for v in parse_variants("hybrid, bm25,hybrid")] == ["hybrid", "bm25"]
    with pytest.raises(
        InvalidInput,
        match="unknown variant 'colbert': use bm25, dense, hybrid, hybrid_zscore, hybrid_rrf, hybrid_rerank",
    ):
        parse_variants("bm25,colbert")
    assert VARIANTS["hybrid_rerank"].mode == "hybrid"


# ------------------------------------------------------------------------ long documents (docs/ + eval.yaml)
LONGDOC_YAML = """\
version: 1
queries:
  - id: probation
    query: 试用期最长多久
    expected: [{source: 劳动合同法.md, contains: "试用期不得 超过一个月"}]  # spaces never matter
  - id: leave
    query: 年休假有几天
    expected: [{contains: 年休假5天}]  # any file
  - id: wrong-article
    query: 经济补偿怎么算
    expected: [{source: 劳动合同法.md, contains: 每满一年支付六个月}]  # no chunk holds this text
"""


def longdoc_folder(folder: Path, questions: str) -> Path:
    """A long-document set: two laws in ``docs/`` and ``questions`` as its eval.yaml."""
    (folder / "docs").mkdir(parents=True)
    write(
        folder / "docs" / "劳动合同法.md",
        "# 劳动合同法\n\n第十九条 劳动合同期限三个月以上不满一年的，试用期不得超过一个月。\n\n"
        "第四十七条 经济补偿按劳动者在本单位工作的年限，每满一年支付一个月工资的标准向劳动者支付。\n",
    )
    write(
        folder / "docs" / "年休假条例.md", "# 职工带薪年休假条例\n\n第三条 职工累计工作已满1年不满10年的，年休假5天。\n"
    )
    write(folder / "eval.yaml", questions)
    return folder


def test_eval_runs_a_long_document_folder(cli, tmp_path: Path) -> None:
    folder = longdoc_folder(tmp_path / "长文档", LONGDOC_YAML)
    r = cli("eval", "--dataset", folder, "--mode", "bm25", "--json", "--out", tmp_path / "out")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert (out["dataset"], out["queries"], out["indexing"]["documents"]) == ("长文档", 3, 2)
    # BM25: 试用期 and 年休假 each occur in one file only (rank 1); the third expects text no chunk holds
    assert (out["hit@1"], out["hit@5"], out["mrr@10"], out["hit_chars@2000"]) == (0.6667, 0.6667, 0.6667, 0.6667)
    per_query = json.loads((tmp_path / "out" / "per_query.json").read_text(encoding="utf-8"))
    assert [q["first_relevant"] for q in per_query] == [1, 1, None]
    assert per_query[1]["relevant"] == ["source=*, contains=年休假5天"]


def test_experiment_compares_the_two_fusions_on_one_index(cli, tmp_path: Path, monkeypatch) -> None:
    dataset = write_beir(tmp_path / "劳动小集")
    r = cli("experiment", "--dataset", dataset, "--variants", "hybrid,hybrid_zscore,hybrid_rrf", "--json")
    assert r.exit_code == 0, r.output
    rows = {v["variant"]: v for v in json.loads(r.stdout)["variants"]}
    assert rows["hybrid"]["description"] == "BM25 + dense fused by retrieval.fusion (the settings line)"
    assert (rows["hybrid"]["settings"], rows["hybrid_rrf"]["settings"]) == ({}, {"retrieval": {"fusion": "rrf"}})
    assert rows["hybrid_zscore"]["metrics"] == rows["hybrid"]["metrics"]  # z-score is the default fusion
    monkeypatch.setenv("ZHIKU_RETRIEVAL__FUSION", "rrf")
    rrf = json.loads(cli("eval", "--dataset", dataset, "--mode", "hybrid", "--json").stdout)
    assert {n: rows["hybrid_rrf"]["metrics"][n] for n in BM25_METRICS} == {n: rrf[n] for n in BM25_METRICS}
    table = cli("experiment", "--dataset", dataset, "--variants", "hybrid_rrf").stdout
    assert "- `hybrid_rrf` ran with retrieval.fusion=rrf\n" in table


TYPO_YAML = """\
version: 1
queries:
  - id: found
    query: 试用期最长多久
    expected: [{source: 劳动合同法.md, contains: 试用期不得超过一个月}]
  - id: typo
    query: 经济补偿怎么算
    expected: [{source: 劳动合同法.md, contains: 每满一年支付六个月}]
  - id: no-file
    query: 年休假有几天
    expected: [{source: 年假条例*.md}, {source: 年休假条例.md, section: 第九章}]
  - id: traditional
    query: 經濟補償怎麼算
    expected: [{contains: 每滿一年支付一個月工資}]
"""


def test_eval_names_the_expected_entries_that_match_nothing(cli, tmp_path: Path) -> None:
    folder = longdoc_folder(tmp_path / "错字集", TYPO_YAML)
    r = cli("eval", "--dataset", folder, "--mode", "bm25", "--json", "--out", tmp_path / "out")
    assert r.exit_code == 0, r.output
    of = "of the {} document(s) whose source matches {!r}"
    expected = [
        "typo expected[0] (source=劳动合同法.md, contains=每满一年支付六个月) can never be found: no chunk "
        + of.format(1, "劳动合同法.md")
        + " holds '每满一年支付六个月' (whitespace ignored; check the text against the document)",
        "no-file expected[0] (source=年假条例*.md) can never be found: no indexed document's source matches "
        "'年假条例*.md' (`zhiku documents` lists them)",
        "no-file expected[1] (source=年休假条例.md, section=第九章) can never be found: no chunk "
        + of.format(1, "年休假条例.md")
        + " has a section path with '第九章' at the start of a level",
    ]
    assert json.loads(r.stdout)["unmatched"] == expected
    assert r.stderr.splitlines()[: len(expected)] == [f"warning: {line}" for line in expected]
    report = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "## Expected entries that match nothing in the index (3)\n\n- typo expected[0] " in report
    per_query = json.loads((tmp_path / "out" / "per_query.json").read_text(encoding="utf-8"))
    # Traditional characters in the set are compared as the index sees them (text.t2s): found first
    assert [q["first_relevant"] for q in per_query] == [1, None, None, 1]
    table = cli("experiment", "--dataset", folder, "--variants", "bm25,hybrid").stdout
    assert (
        table.count("- warning: ") == len(expected) and f"- warning: {expected[0]}\n" in table
    )  # once, not per variant
    clean = cli("eval", "--dataset", folder, "--mode", "bm25", "--json", "--max-queries", "1")
    assert "unmatched" not in json.loads(clean.stdout) and "warning" not in clean.stderr


def test_eval_gates_against_a_saved_baseline(cli, law_index: Path, tmp_path: Path) -> None:
    dataset = write(tmp_path / "劳动.yaml", GOOD_YAML)
    run = ("eval", "--dataset", dataset, "--index", law_index, "--mode", "bm25")
    assert cli(*run, "--out", tmp_path / "base").exit_code == 0
    saved = tmp_path / "base" / "summary.json"
    same = cli(*run, "--baseline", saved, "--json")
    assert same.exit_code == 0, same.output
    bars = json.loads(same.stdout)["gate"]["bars"]
    names = ["ndcg@10", "recall@10", "recall@100", "mrr@10", "hit@1", "hit@5", "hit_chars@2000", "hit_chars@4000"]
    assert [b["bar"].split(">=")[0] for b in bars] == names and all(b["passed"] for b in bars)
    base = json.loads(saved.read_text(encoding="utf-8"))
    assert bars[4] == {"bar": f"hit@1>={base['hit@1'] - 0.01:g}", "value": base["hit@1"], "passed": True}

    base["metrics"]["hit@1"] = 0.99  # a better past: this run is a regression
    better = write(tmp_path / "better.json", json.dumps(base))
    regressed = cli(*run, "--baseline", better, "--max-drop", "0.02")
    assert regressed.exit_code == 1
    assert f"gate: hit@1 = {base['hit@1']:.4f} (bar >= 0.97): MISSED" in regressed.stderr
    assert regressed.stderr.splitlines()[-1] == f"gate FAILED: hit@1 = {base['hit@1']:.4f}, needs >= 0.97"

    other = cli(*run[:-1], "hybrid", "--baseline", saved)
    assert other.exit_code == 1
    assert other.stderr == (
        f"error: the baseline {saved} has mode 'bm25', this run 'hybrid': compare runs of the same set, mode, budget "
        "and queries (or save a new baseline)\n"
    )
    typo = cli(*run, "-c", "hrr")  # a collection that does not exist: an error, not 0 everywhere
    assert (typo.exit_code, typo.stderr) == (
        1,
        "error: no collection 'hrr' in this knowledge base; available: hr\n",
    )
    taken = write(tmp_path / "taken", "")
    for command in (run, ("experiment", "--dataset", dataset, "--index", law_index, "--variants", "bm25")):
        on_a_file = cli(*command, "--out", taken / "sub")  # refused before the run, not a traceback after it
        assert (on_a_file.exit_code, on_a_file.stderr) == (
            1,
            f"error: --out {taken / 'sub'}: {taken} is a file, not a folder (name a folder; it is created)\n",
        )
    garbage = cli(*run, "--baseline", write(tmp_path / "x.json", "[1, 2]"))
    assert garbage.stderr.startswith("error: the baseline ") and garbage.exit_code == 1
