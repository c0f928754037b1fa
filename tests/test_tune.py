"""`zhiku tune` over examples/laws: what it chooses, when it writes zhiku.yaml, and that the file then changes the
answers. Vectors come from the fake OpenAI-compatible server (deterministic, no model to load)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fake_openai import FakeOpenAI
from zhiku.api import KnowledgeBase
from zhiku.cli.app import app
from zhiku.settings import load_settings

LAWS = Path(__file__).resolve().parents[1] / "examples" / "laws"


def eval_yaml(path: Path, n: int) -> Path:
    """``n`` questions: the opening words of the laws' articles, each expecting its article's text."""
    rows = [
        {"query": f"{words}是怎么规定的", "expected": [{"source": law.name, "contains": words}]}
        for law in sorted(LAWS.glob("*.md"))
        for words in re.findall(r"^第[一二三四五六七八九十百]+条 +(\S{6,16}?)[，。；：]", law.read_text("utf-8"), re.M)
    ][:n]
    assert len(rows) == n
    path.write_text(yaml.safe_dump({"version": 1, "queries": rows}, allow_unicode=True), encoding="utf-8")
    return path


@pytest.fixture
def project(tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key in [k for k in __import__("os").environ if k.startswith("ZHIKU_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    embedding = {"provider": "openai", "model": "fake-embed", "base_url": fake_openai.url}
    config = {"index": "idx", "collection": "laws", "cache_dir": None, "embedding": embedding}
    (tmp_path / "zhiku.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    with KnowledgeBase(load_settings(tmp_path / "zhiku.yaml")) as kb:
        kb.ingest([LAWS], collection="laws")
    return tmp_path


def tune(*args: str) -> dict:
    r = CliRunner().invoke(app, ["tune", "--json", *args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def rounded(metrics: dict) -> dict:
    return {m: [round(v[k], 4) for k in ("before", "after")] for m, v in metrics.items()}


def test_a_small_set_is_measured_but_written_nowhere(project: Path) -> None:
    before = (project / "zhiku.yaml").read_text(encoding="utf-8")
    out = tune("--dataset", str(eval_yaml(project / "eval.yaml", 12)))
    # the Chinese and the English off-topic lists, whatever the language of the set's questions
    assert (out["questions"], out["offtopic"], out["write"], out["written"]) == (12, 275 + 106, {}, None)
    assert out["reasons"] == ["12 questions: fewer than 50 cannot tell a gain from chance"]
    assert out["before"] == {"fusion": "zscore:1,1,0.35", "min_score": 0.88}
    assert rounded(out["metrics"]) == {"ndcg@10": [0.8077, 0.8077], "hit@5": [0.9167, 0.9167]}
    assert (project / "zhiku.yaml").read_text(encoding="utf-8") == before


def test_a_large_enough_set_writes_what_it_can_tell_which_then_changes_the_answers(project: Path) -> None:
    dataset = str(eval_yaml(project / "eval.yaml", 60))
    before = (project / "zhiku.yaml").read_text(encoding="utf-8")
    scored = ["eval", "--dataset", dataset, "--json", "--max-queries", "6"]
    default = json.loads(CliRunner().invoke(app, scored).stdout)["ndcg@10"]
    dry = tune("--dataset", dataset, "--dry-run")
    assert (project / "zhiku.yaml").read_text(encoding="utf-8") == before and dry["written"] is None
    out = tune("--dataset", dataset)
    assert {k: v for k, v in out.items() if k != "written"} == {k: v for k, v in dry.items() if k != "written"}
    # random vectors (the fake embedder): BM25 weighs more, the clauses nothing; no threshold tells them apart
    assert rounded(out["metrics"]) == {"ndcg@10": [0.5612, 0.6306], "hit@5": [0.6667, 0.8167]}
    assert out["metrics"]["ndcg@10"]["ci99"][0] > 0
    assert (out["write"], out["written"]) == ({"retrieval.fusion": "zscore:1.5,1,0"}, "zhiku.yaml")
    assert out["reasons"] == [
        "answer.min_score: chosen out of fold, it flags 15.0% of off-topic questions (needs ≥ 90%) and 11.7% of "
        "answerable ones (needs ≤ 5%)"
    ]
    settings = load_settings(project / "zhiku.yaml")
    assert settings.retrieval.fusion == "zscore:1.5,1,0" and settings.answer.min_score == 0.88
    assert (settings.embedding.model, settings.collection) == ("fake-embed", "laws")  # the rest kept
    tuned = json.loads(CliRunner().invoke(app, scored).stdout)["ndcg@10"]
    assert (default, tuned) == (0.6154, 0.671)  # nDCG@10 of the first six questions


def test_fusion_weights_in_zhiku_yaml_change_the_ranking(project: Path) -> None:
    config = yaml.safe_load((project / "zhiku.yaml").read_text(encoding="utf-8"))
    same = {}
    for weights, mode in (("zscore:1,0,0", "bm25"), ("zscore:0,1,0", "dense")):
        (project / "zhiku.yaml").write_text(yaml.safe_dump({**config, "retrieval": {"fusion": weights}}), "utf-8")
        with KnowledgeBase(load_settings(project / "zhiku.yaml")) as kb:
            hybrid = kb.retrieve("试用期最长不得超过几个月", top_k=5).hits
            alone = kb.retrieve("试用期最长不得超过几个月", mode=mode, top_k=5).hits
        same[mode] = [h.chunk.chunk_id for h in hybrid] == [h.chunk.chunk_id for h in alone]
    assert same == {"bm25": True, "dense": True}  # BM25's weight alone ranks as BM25; the dense one alone, as dense


def test_an_english_question_is_weighed_against_the_threshold_the_answer_gives_it(project: Path) -> None:
    """A set mixing English and Chinese questions: tune flags a question at a threshold exactly when the answer
    would."""
    from zhiku.evaluation.datasets import load_dataset
    from zhiku.evaluation.tune import gather
    from zhiku.evaluation.tune import tune as tune_kb
    from zhiku.retrieval.confidence import judge

    path = eval_yaml(project / "eval.yaml", 4)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    english = ["How many days of annual leave after eight years of work?", "Can my employer fire me while pregnant?"]
    data["queries"] += [{"query": q, "expected": data["queries"][0]["expected"]} for q in english]
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    with KnowledgeBase(load_settings(project / "zhiku.yaml")) as kb:
        asked = gather(kb, [q["query"] for q in data["queries"]], "laws", None)
        assert [a.retrieval.query.cross_lingual for a in asked] == [False] * 4 + [True] * 2
        for a in asked:
            for t in sorted({a.confidence - 0.004, a.confidence + 0.004, 0.5, 0.88}):
                assert (a.confidence < t) == judge(a.retrieval, min_score=t, normalize=kb.text.normalize).low
        out = tune_kb(kb, load_dataset(path), collection="laws")
    assert (out.questions, out.offtopic) == (6, 275 + 106)
