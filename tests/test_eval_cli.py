"""`zhiku eval` on a tiny BEIR folder: one JSON object, metric values computed by hand for BM25."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from zhiku.cli.app import app

CORPUS = [
    {"_id": "d1", "title": "试用期", "text": "劳动合同期限三个月以上不满一年的，试用期不得超过一个月。"},
    {"_id": "d2", "title": "年休假", "text": "职工累计工作已满1年不满10年的，年休假5天。"},
    {"_id": "d3", "title": "经济补偿", "text": "经济补偿按劳动者在本单位工作的年限，每满一年支付一个月工资。"},
    {"_id": "d4", "title": "经济补偿金", "text": "用人单位解除劳动合同时应当依法向劳动者支付经济补偿。"},
    {"_id": "d5", "title": "加班工资", "text": "安排劳动者延长工作时间的，支付不低于工资的百分之一百五十的加班工资。"},
    {"_id": "d6", "title": "女职工产假", "text": "女职工生育享受九十八天产假，其中产前可以休假十五天。"},
]
QUERIES = [
    {"_id": "q1", "text": "试用期最长多久"},  # only d1 holds 试用期: relevant at rank 1
    {"_id": "q2", "text": "经济补偿"},  # d3 and d4, both relevant, are the only documents with 经济/补偿: ranks 1-2
    {"_id": "q3", "text": "加班工资"},  # d5 has 加班 and 工资, the relevant d3 only 工资: relevant at rank 2
    {"_id": "q4", "text": "哺乳期"},  # no document holds 哺乳期: BM25 retrieves nothing
    {"_id": "q5", "text": "没有判断的查询"},  # no qrels line: not evaluated
]
QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\nq2\td3\t1\nq2\td4\t1\nq3\td3\t1\nq4\td6\t1\n"

# By hand, per query (q1, q2, q3, q4):
#   nDCG@10  1, 1, (1/log2 3)/1 = 0.63093, 0  → mean 0.65773
#   recall   1, 1, 1, 0                       → 0.75 (at 10 and at 100)
#   MRR@10   1, 1, 1/2, 0                     → 0.625
#   hit@1    1, 1, 0, 0                       → 0.5
#   hit@5    1, 1, 1, 0                       → 0.75
BM25_METRICS = {
    "ndcg@10": round((2 + 1 / math.log2(3)) / 4, 4),
    "recall@10": 0.75,
    "recall@100": 0.75,
    "mrr@10": 0.625,
    "hit@1": 0.5,
    "hit@5": 0.75,
    "hit_chars@2000": 0.75,  # every returned document fits into 2,000 characters: as hit@100
    "hit_chars@4000": 0.75,
}
# hybrid (z-score fusion): q4 moves to rank 1 (dense); q3's d3, BM25's weaker of only two matches, gets BM25 z = -1,
# the same floor as documents BM25 missed, and dense puts it 5th: rank 5. q1, q2 at rank 1.
HYBRID_METRICS = {
    "ndcg@10": round((3 + 1 / math.log2(6)) / 4, 4),
    "recall@10": 1.0,
    "recall@100": 1.0,
    "mrr@10": 0.8,
    "hit@1": 0.75,
    "hit@5": 1.0,
    "hit_chars@2000": 1.0,
    "hit_chars@4000": 1.0,
}
KEYS = {
    "dataset",
    "mode",
    "queries",
    "ndcg@10",
    "recall@10",
    "recall@100",
    "mrr@10",
    "hit@1",
    "hit@5",
    "hit_chars@2000",
    "hit_chars@4000",
    "latency_ms",
    "indexing",
}


def write_beir(folder: Path, *, qrels: str = QRELS) -> Path:
    folder.mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in CORPUS), encoding="utf-8"
    )
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps(q, ensure_ascii=False) + "\n" for q in QUERIES), encoding="utf-8"
    )
    (folder / "qrels.tsv").write_text(qrels, encoding="utf-8")
    return folder


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


def one_json(r: Result) -> dict:
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert len(lines) == 1, r.stdout
    return json.loads(lines[0])


def test_eval_bm25_metrics_match_hand_computed_values(cli, tmp_path: Path) -> None:
    dataset = write_beir(tmp_path / "劳动小集")
    out = one_json(cli("eval", "--dataset", dataset, "--mode", "bm25", "--json"))
    assert set(out) == KEYS
    assert (out["dataset"], out["mode"], out["queries"]) == ("劳动小集", "bm25", 4)
    assert {k: out[k] for k in BM25_METRICS} == BM25_METRICS
    assert set(out["latency_ms"]) == {"p50", "p95"}
    assert 0 <= out["latency_ms"]["p50"] <= out["latency_ms"]["p95"]
    assert set(out["indexing"]) == {"documents", "chunks", "seconds", "chunks_per_s", "chunks_embedded"}
    assert (out["indexing"]["documents"], out["indexing"]["chunks"]) == (6, 6)

    first_two = one_json(cli("eval", "--dataset", dataset, "--mode", "bm25", "--json", "--max-queries", "2"))
    assert first_two["queries"] == 2
    assert {k: first_two[k] for k in BM25_METRICS} == {k: 1.0 for k in BM25_METRICS}


def test_eval_hybrid_reuses_an_index_and_finds_every_relevant_document(cli, tmp_path: Path) -> None:
    dataset = write_beir(tmp_path / "劳动小集")
    idx = tmp_path / "eval-index"
    out = one_json(cli("eval", "--dataset", dataset, "--json", "--index", idx))
    assert set(out) == KEYS
    assert (out["mode"], out["queries"]) == ("hybrid", 4)
    # z-score fusion: q1, q2 stay at rank 1, q3's relevant d3 drops to rank 5, dense adds q4 (哺乳期 → 产假, d6) at rank 1
    assert {k: out[k] for k in BM25_METRICS} == HYBRID_METRICS
    again = one_json(cli("eval", "--dataset", dataset, "--json", "--index", idx))
    assert again["indexing"]["chunks_embedded"] == 0  # the documents were already in --index
    assert {k: again[k] for k in BM25_METRICS} == {k: out[k] for k in BM25_METRICS}

    table = cli("eval", "--dataset", dataset, "--mode", "bm25", "--index", idx)
    assert table.exit_code == 0
    assert "劳动小集 · bm25 · 4 queries" in table.stdout
    assert "│ mrr@10 " in table.stdout and "0.6250 │" in table.stdout


def test_budget_counts_only_the_first_chars_of_returned_text(cli, tmp_path: Path) -> None:
    """BM25 ranks d5 (34 characters) above q3's relevant d3: a 34-character budget holds d5 only; 35 holds the first
    character of d3 too (a chunk counts when part of it is returned). q2's d3/d4 (26 and 30 characters) both fit
    into 34 characters, at least in part."""
    dataset = write_beir(tmp_path / "劳动小集")
    idx = tmp_path / "idx"
    cut = one_json(cli("eval", "--dataset", dataset, "--mode", "bm25", "--index", idx, "--budget", 34, "--json"))
    assert set(cut) == KEYS | {"budget", "hit_chars@34"} and cut["budget"] == 34
    assert {k: cut[k] for k in ("hit@1", "hit@5", "mrr@10", "ndcg@10", "recall@10", "hit_chars@34")} == {
        "hit@1": 0.5,
        "hit@5": 0.5,
        "mrr@10": 0.5,
        "ndcg@10": 0.5,
        "recall@10": 0.5,
        "hit_chars@34": 0.5,
    }
    assert (cut["hit_chars@2000"], cut["hit_chars@4000"]) == (0.75, 0.75)
    more = one_json(cli("eval", "--dataset", dataset, "--mode", "bm25", "--index", idx, "--budget", 35, "--json"))
    assert (more["hit@5"], more["mrr@10"], more["hit_chars@35"]) == (0.75, 0.625, 0.75)
    r = cli("eval", "--dataset", dataset, "--budget", 0)
    assert r.exit_code == 2 and "--budget" in r.stderr


def _error(r: Result) -> str:
    assert (r.exit_code, r.stdout) == (1, ""), r.output
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: "), r.stderr
    return r.stderr.rstrip("\n")


def test_bad_dataset_folders_are_clear_errors(cli, tmp_path: Path) -> None:
    missing = tmp_path / "没有"
    assert _error(cli("eval", "--dataset", missing, "--json")) == f"error: dataset folder not found: {missing}"
    assert _error(cli("eval", "--dataset", "evl.yaml")) == "error: YAML set not found: evl.yaml"  # not a "folder"

    partial = write_beir(tmp_path / "缺语料")
    (partial / "corpus.jsonl").unlink()
    assert _error(cli("eval", "--dataset", partial, "--json")) == (
        f"error: {partial} is not a BEIR dataset: corpus.jsonl is missing "
        "(expected corpus.jsonl, queries.jsonl and qrels.tsv)"
    )

    broken = write_beir(tmp_path / "坏行")
    with (broken / "queries.jsonl").open("a", encoding="utf-8") as f:
        f.write("{not json\n")
    assert _error(cli("eval", "--dataset", broken, "--json")).startswith(
        f"error: {broken / 'queries.jsonl'}:6: not valid JSON ("
    )

    unjudged = write_beir(tmp_path / "无判断", qrels="query-id\tcorpus-id\tscore\nq9\td1\t1\n")
    assert _error(cli("eval", "--dataset", unjudged, "--json")) == (
        f"error: {unjudged}: no query in queries.jsonl has a judgement in qrels.tsv"
    )

    bad_score = write_beir(tmp_path / "坏分数", qrels="q1\td1\thigh\n")
    assert _error(cli("eval", "--dataset", bad_score)) == (
        f"error: {bad_score / 'qrels.tsv'}:1: score 'high' is not a number"
    )


def test_eval_and_experiment_default_to_the_projects_eval_yaml(cli, tmp_path: Path, monkeypatch) -> None:
    assert _error(cli("eval", "--json")) == (
        "error: no --dataset given and no eval.yaml in this folder: pass --dataset PATH (a BEIR folder, a YAML set, "
        "or a folder with docs/ and eval.yaml), or run in a project made by `zhiku init`"
    )
    assert cli("init", "项目").exit_code == 0
    monkeypatch.chdir(tmp_path / "项目")
    assert cli("ingest", "docs").exit_code == 0
    implied = one_json(cli("eval", "--mode", "bm25", "--json"))
    named = one_json(cli("eval", "--dataset", "eval.yaml", "--mode", "bm25", "--json"))
    assert (implied["dataset"], implied["queries"]) == (named["dataset"], named["queries"]) == ("eval", 8)
    assert {k: implied[k] for k in BM25_METRICS} == {k: named[k] for k in BM25_METRICS}
    experiment = one_json(cli("experiment", "--variants", "bm25", "--json"))
    assert (experiment["dataset"], experiment["queries"]) == ("eval", 8)
    # the per-category table at 80 columns (piped): one column per category, no value cut to `1.00…`
    text = cli("eval", "--mode", "bm25").stdout  # CliRunner: not a terminal, 80 columns
    assert "…" not in text
    per_category = text[text.index("per category") :].splitlines()
    assert per_category[2].split() == ["┃", "metric", "┃", "女职工", "┃", "工资", "┃", "年休假", "┃"]
    assert per_category[4].split() == ["│", "queries", "│", "2", "│", "3", "│", "3", "│"]
    assert [row.split()[1] for row in per_category[5:13]] == list(BM25_METRICS)[:8]


def test_an_eval_yaml_folder_is_not_reported_as_missing(cli, tmp_path: Path) -> None:
    (tmp_path / "eval.yaml").mkdir()
    expected = (
        "error: ./eval.yaml is a folder, not a YAML set: pass --dataset PATH (a BEIR folder, a YAML set, or a folder "
        "with docs/ and eval.yaml)"
    )
    assert _error(cli("eval", "--json")) == expected
    assert _error(cli("experiment", "--variants", "bm25", "--json")) == expected


def test_per_category_numbers_stay_whole_under_long_or_many_category_names(cli, tmp_path: Path) -> None:
    """Category names are the headers of the per-category table: with names as long as the documents' titles,
    headers that could not fold squeezed the numbers back to `0.8…` at 80 columns; with more than 5 categories
    (a row each, a column per metric) the numbers were cut and the names blanked. Tables of 5 categories now."""
    titles = ["女职工劳动保护特别规定", "工资支付暂行规定", "职工带薪年休假条例", "劳动合同解除", "经济补偿", "工时"]
    (tmp_path / "集" / "docs").mkdir(parents=True)
    for d in CORPUS:
        (tmp_path / "集" / "docs" / f"{d['_id']}.md").write_text(f"# {d['title']}\n\n{d['text']}\n", encoding="utf-8")
    for count, parts in ((5, [5]), (6, [5, 1])):
        queries = "".join(  # one query a category, each finding its document first
            f"  - query: {d['text']}\n    category: {t}\n    expected: [{{source: {d['_id']}.md}}]\n"
            for d, t in zip(CORPUS[:count], titles, strict=False)
        )
        (tmp_path / "集" / "eval.yaml").write_text(f"version: 1\nqueries:\n{queries}", encoding="utf-8")
        r = cli("eval", "--dataset", tmp_path / "集", "--mode", "bm25")
        assert r.exit_code == 0, r.output
        text = r.stdout[r.stdout.index("per category") :]  # CliRunner: not a terminal, 80 columns
        assert "…" not in text
        rows = [line.split() for line in text.splitlines() if line.startswith("│")]
        assert [row[1] for row in rows] == ["queries", *BM25_METRICS] * len(parts)
        expected = [[["1"] * n] + [["1.0000"] * n] * len(BM25_METRICS) for n in parts]
        assert [row[3::2] for row in rows] == [row for table in expected for row in table]
    assert "per category (6–6 of 6)" in text and "工时" in text


def test_a_beir_folder_given_as_dot_and_judged_ids_missing_from_the_corpus(cli, tmp_path: Path, monkeypatch) -> None:
    """`--dataset .` named the set "" and indexed it into collection "": 6 documents, 0 chunks, every metric 0. A
    qrels id that is not in the corpus (D6 for d6) scored its query 0 without a word."""
    folder = write_beir(tmp_path / "劳动小集", qrels=QRELS.replace("q4\td6", "q4\tD6"))
    monkeypatch.chdir(folder)
    r = cli("eval", "--dataset", ".", "--mode", "bm25", "--json")
    out = json.loads(r.stdout)
    assert (out["dataset"], out["indexing"]["chunks"]) == ("劳动小集", 6)
    assert {k: out[k] for k in BM25_METRICS} == BM25_METRICS  # q4 was never found: the same numbers
    message = (
        "q4 judges 'D6' relevant, which is not in the corpus (corpus.jsonl has no such `_id`): it can never be found"
    )
    assert out["unmatched"] == [message] and r.stderr.splitlines() == [f"warning: {message}"]


def test_a_beir_folder_reached_through_a_link_keeps_the_links_name(tmp_path: Path, monkeypatch) -> None:
    """The set's name is its collection and what a --baseline compares: `--dataset .` must not make it "", and a
    link (eval/current -> eval/劳动小集_v2) must not rename it to its target (the same set indexed again under
    another collection, its baselines refused)."""
    from zhiku.evaluation.datasets import load_beir

    folder = write_beir(tmp_path / "劳动小集_v2")
    (tmp_path / "current").symlink_to(folder, target_is_directory=True)
    assert load_beir(tmp_path / "current").name == "current"
    monkeypatch.chdir(tmp_path)
    assert load_beir(Path("current")).name == "current"


def test_a_judged_id_missing_from_the_corpus_is_named_when_its_query_found_the_others(cli, tmp_path: Path) -> None:
    """Only the queries that found nothing were checked: q2 finds d3 first, so its typo'd D4 (never retrievable,
    recall@10 capped at 0.5) went unnamed."""
    folder = write_beir(tmp_path / "劳动小集", qrels=QRELS.replace("q2\td4", "q2\tD4"))
    out = json.loads(cli("eval", "--dataset", folder, "--mode", "bm25", "--json").stdout)
    assert out["unmatched"] == [
        "q2 judges 'D4' relevant, which is not in the corpus (corpus.jsonl has no such `_id`): it can never be found"
    ]
