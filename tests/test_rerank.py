"""Rerankers: score bookkeeping, LLM output parsing, the fallback (exceptions, timeouts, garbage), the LLM
reranker against a local scripted server, and the whole query path (KnowledgeBase, trace, CLI --json, MCP)."""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from fake_openai import FakeOpenAI
from helpers_kb import SEC_LEAVE, SEC_PROBATION
from helpers_models import beir_set
from zhiku.errors import InvalidInput, RerankError
from zhiku.mcp.hub import Hub, QueryArgs
from zhiku.observability.trace import MemorySink
from zhiku.observability.tracing import Tracer
from zhiku.openai_http import OpenAICompatibleClient
from zhiku.retrieval import rerank as rerank_module
from zhiku.retrieval import rewrite as rewrite_module
from zhiku.retrieval import search as search_module
from zhiku.retrieval.rerank import (
    LLMReranker,
    Reranker,
    apply_scores,
    build_reranker,
    parse_reranker_spec,
    parse_scores,
    rerank_with_fallback,
    sigmoid,
)
from zhiku.settings import RerankSettings, merge
from zhiku.types import Chunk, Hit


def hit(n: int, text: str = "") -> Hit:
    c = Chunk(
        chunk_id=f"c{n}",
        doc_id="d",
        collection="hr",
        source=f"s{n}.md",
        doc_type="markdown",
        section="",
        page=None,
        start=0,
        end=1,
        ordinal=n,
        text=text or f"第{n}段",
    )
    return Hit(chunk=c, score=1.0 / (60 + n), fused_rank=n)


HITS = [hit(n) for n in range(1, 7)]


class ByScore:
    """A deterministic reranker for the plumbing tests: it scores passages with a fixed function."""

    name = "test:by-score"

    def __init__(self, score: Any) -> None:
        self.score = score

    def load(self) -> None:
        return None

    def rerank(self, query: str, hits: Sequence[Hit], top_k: int) -> list[Hit]:
        return apply_scores(hits, [self.score(h) for h in hits], top_k)


class Failing:
    name = "test:failing"

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.release = threading.Event()

    def load(self) -> None:
        if self.behaviour == "raise":
            raise RuntimeError("model file missing")

    def rerank(self, query: str, hits: Sequence[Hit], top_k: int) -> Any:
        if self.behaviour == "raise":
            raise RuntimeError("model file missing")
        if self.behaviour == "hang":
            self.release.wait(30)
            return list(hits)
        if self.behaviour == "foreign":
            return [hit(99)] + list(hits[1:])
        if self.behaviour == "repeat":
            return [hits[0], hits[0]]
        if self.behaviour == "short":
            return list(hits[:1])
        return "garbage"


REVERSE = ByScore(lambda h: float(h.fused_rank))  # the last candidate is best


# ----------------------------------------------------------------------------------- pure functions
def test_sigmoid_and_scores_are_recorded_raw_and_squashed() -> None:
    assert sigmoid(0.0) == 0.5 and sigmoid(-1000.0) == 0.0 and sigmoid(1000.0) == 1.0
    assert sigmoid(2.0) == pytest.approx(1 / (1 + math.exp(-2)))
    out = apply_scores(HITS[:4], [0.5, 3.0, -1.0, 3.0], top_k=3)
    assert [h.chunk.chunk_id for h in out] == ["c2", "c4", "c1"]  # a tie keeps the fused order
    assert [(h.rerank_rank, h.rerank_score, h.fused_rank) for h in out] == [(1, 3.0, 2), (2, 3.0, 4), (3, 0.5, 1)]
    assert out[0].rerank_sigmoid == pytest.approx(0.9525741268)
    assert out[0].score == HITS[1].score  # the fused score stays as it was
    llm = apply_scores(HITS[:2], [7, 5], top_k=2, offset=5.0)
    assert [h.rerank_sigmoid for h in llm] == [pytest.approx(sigmoid(2.0)), 0.5]
    with pytest.raises(RerankError, match="gave 1 scores for 2 passages"):
        apply_scores(HITS[:2], [1.0], top_k=2)
    with pytest.raises(RerankError, match="non-finite"):
        apply_scores(HITS[:2], [1.0, float("nan")], top_k=2)


@pytest.mark.parametrize(
    ("text", "scores"),
    [
        ('{"scores": [3, 9, 0.5]}', [3.0, 9.0, 0.5]),
        ('```json\n{"scores": [1, 2, 3]}\n```', [1.0, 2.0, 3.0]),
        ('<think>第二段最好 {"scores": [0]}</think>\n{"scores": [2, 8, 5]}', [2.0, 8.0, 5.0]),
        ('Here you go: {"scores": {"2": 7, "1": 4, "3": 0}} hope it helps', [4.0, 7.0, 0.0]),
        ("1: 6\n[2]: 9/10\n3 - 1.5", [6.0, 9.0, 1.5]),
        ("（1）：8\n（2）：2\n（3）：10", [8.0, 2.0, 10.0]),
    ],
)
def test_llm_output_is_parsed(text: str, scores: list[float]) -> None:
    assert parse_scores(text, 3) == scores


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "answered nothing"),
        ("I think passage 2 is the best.", "cannot read grades"),
        ('{"scores": [1, 2]}', "gave 2 grades for 3 passages"),
        ('{"scores": ["high", "low", "none"]}', "not numbers"),
        ('{"scores": [1, true, 3]}', "not finite numbers"),
        ('{"scores": [1, NaN, 3]}', "not finite numbers"),
        ("1: 5\n3: 2", r"graded passages \[1, 3\], expected 1..3"),
    ],
)
def test_garbage_llm_output_is_an_error(text: str, message: str) -> None:
    with pytest.raises(RerankError, match=message):
        parse_scores(text, 3)


def test_specs_and_settings() -> None:
    assert parse_reranker_spec("cross-encoder:/models/bge-reranker-v2-m3") == {
        "provider": "cross-encoder",
        "model": "/models/bge-reranker-v2-m3",
    }
    assert parse_reranker_spec("llm") == {"provider": "llm"}
    assert parse_reranker_spec("llm:qwen2.5-7b-instruct") == {"provider": "llm", "model": "qwen2.5-7b-instruct"}
    assert parse_reranker_spec("none") == {"provider": "none"}
    for bad in ("cross-encoder", "colbert:x", "none:x"):
        with pytest.raises(InvalidInput, match="use none, cross-encoder:MODEL_OR_FOLDER, llm or llm:MODEL"):
            parse_reranker_spec(bad)
    with pytest.raises(ValueError, match="needs rerank.model"):
        RerankSettings(provider="cross-encoder")
    with pytest.raises(ValueError, match="needs rerank.base_url"):
        RerankSettings(provider="llm", model="qwen")
    assert build_reranker(RerankSettings(), cache_dir=Path("/nonexistent")) is None


# ---------------------------------------------------------------------------------------- fallback
def test_reranked_candidates_come_first_then_the_rest_in_fused_order() -> None:
    out = rerank_with_fallback(REVERSE, "q", HITS, top_m=3, top_k=5, timeout=5)
    assert out.status == "ok" and out.ok
    assert [h.chunk.chunk_id for h in out.hits] == ["c3", "c2", "c1", "c4", "c5"]
    assert [h.rerank_rank for h in out.hits] == [1, 2, 3, None, None]
    fewer = rerank_with_fallback(REVERSE, "q", HITS, top_m=6, top_k=2, timeout=5)
    assert [h.chunk.chunk_id for h in fewer.hits] == ["c6", "c5"]
    assert rerank_with_fallback(REVERSE, "q", [], top_m=6, top_k=2, timeout=5).hits == ()


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [
        ("raise", "fallback: RuntimeError: model file missing"),
        ("foreign", "fallback: RerankError: the reranker returned passages it was not given, or one twice"),
        ("repeat", "fallback: RerankError: the reranker returned passages it was not given, or one twice"),
        ("short", "fallback: RerankError: the reranker returned 1 of the 3 passages asked for"),
        ("garbage", "fallback: RerankError: the reranker returned str, not a list of hits"),
    ],
)
def test_failures_fall_back_to_the_fused_order(behaviour: str, reason: str) -> None:
    out = rerank_with_fallback(Failing(behaviour), "q", HITS, top_m=4, top_k=3, timeout=5)
    assert out.status == reason and not out.ok
    assert out.hits == tuple(HITS[:3])


def test_a_hung_reranker_is_abandoned_after_the_timeout() -> None:
    hung = Failing("hang")  # blocks until released, which happens only after the call returned
    out = rerank_with_fallback(hung, "q", HITS, top_m=4, top_k=3, timeout=0.3)
    assert not hung.release.is_set()  # the answer came while the reranker was still stuck
    hung.release.set()
    assert out.status == "fallback: timeout after 0.3s" and out.hits == tuple(HITS[:3])


# -------------------------------------------------------------------------------------- LLM reranker
def llm(fake: FakeOpenAI, timeout: float = 2.0) -> LLMReranker:
    return LLMReranker(
        OpenAICompatibleClient(fake.url, timeout=timeout, max_retries=1, backoff_s=0.01),
        "qwen-test",
        timeout=timeout,
    )


def test_llm_reranker_grades_every_candidate_in_one_call(fake_openai: FakeOpenAI) -> None:
    hits = [hit(1, "试用期" * 201), hit(2, "年休假"), hit(3, "加班费")]
    out = rerank_with_fallback(llm(fake_openai), "试用期多久", hits, top_m=3, top_k=3, timeout=2)
    assert out.status == "ok"
    assert [(h.chunk.chunk_id, h.rerank_score, h.rerank_sigmoid) for h in out.hits] == [
        ("c3", 3.0, pytest.approx(sigmoid(-2.0))),
        ("c2", 2.0, pytest.approx(sigmoid(-3.0))),
        ("c1", 1.0, pytest.approx(sigmoid(-4.0))),
    ]
    [req] = fake_openai.requests
    body = req.body
    assert req.path == "/v1/chat/completions" and body["model"] == "qwen-test" and body["temperature"] == 0
    prompt = body["messages"][1]["content"]
    assert prompt.startswith("Query: 试用期多久\n\nPassages (3):\n[1] " + "试用期" * 200 + "…\n[2] 年休假\n[3] 加班费")
    assert body["messages"][0]["content"].endswith(
        '{"scores": [g1, g2, ...]}: one number per passage, in the order given, nothing else.'
    )


@pytest.mark.parametrize(
    ("behaviour", "reason_start"),
    [
        (
            ("raw", json.dumps({"choices": [{"message": {"content": "passage 2 looks best"}}]})),
            "fallback: RerankError: cannot read grades",
        ),
        (("raw", json.dumps({"id": "x"})), "fallback: RerankError: the LLM endpoint's answer has no choices"),
        (("raw", "<html>502</html>"), "fallback: HttpApiError: "),
        (("status", 500, {}, "boom"), "fallback: HttpApiError: "),
        (
            ("status", 404, {}, json.dumps({"error": {"message": "model qwen-test not found"}})),
            "fallback: HttpApiError: ",
        ),
    ],
)
def test_llm_failures_fall_back(fake_openai: FakeOpenAI, behaviour: tuple, reason_start: str) -> None:
    fake_openai.then(*behaviour).then(*behaviour)  # a retry gets the same answer
    out = rerank_with_fallback(llm(fake_openai), "q", HITS[:3], top_m=3, top_k=3, timeout=2)
    assert out.status.startswith(reason_start), out.status
    assert out.hits == tuple(HITS[:3])


def test_a_hanging_llm_endpoint_is_bounded_by_the_timeout(fake_openai: FakeOpenAI) -> None:
    fake_openai.then("hang", 3).then("hang", 3)
    # the HTTP read timeout (10 s) outlasts the hang (3 s): only the rerank timeout (0.4 s) can end the call
    out = rerank_with_fallback(llm(fake_openai, timeout=10), "q", HITS[:3], top_m=3, top_k=3, timeout=0.4)
    assert out.status == "fallback: timeout after 0.4s" and out.hits == tuple(HITS[:3])


def test_an_unreachable_endpoint_falls_back() -> None:
    dead = LLMReranker(OpenAICompatibleClient("http://127.0.0.1:9/v1", timeout=0.5, max_retries=0), "m")
    out = rerank_with_fallback(dead, "q", HITS[:2], top_m=2, top_k=2, timeout=2)
    assert out.status.startswith("fallback: HttpApiError: ") and "connection failed" in out.status


# ------------------------------------------------------------------------------- the query path
def fewer_candidates(mp: pytest.MonkeyPatch, n: int) -> None:
    """The reranker scores ``n`` fused candidates instead of ``TOP_M``."""
    for module in (rerank_module, search_module, rewrite_module):
        mp.setattr(module, "TOP_M", n)


def test_knowledge_base_reranks_traces_and_can_skip(
    kb_factory, corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kb = kb_factory(tmp_path / "idx")
    kb.ingest([corpus])
    plain = kb.retrieve("试用期最长多久", top_k=4)
    assert plain.rerank == "off" and [h.fused_rank for h in plain.hits] == [1, 2, 3, 4]

    sink = MemorySink()
    fewer_candidates(monkeypatch, 3)
    kb2 = kb_factory(tmp_path / "idx", read_only=True, reranker=REVERSE)
    kb2.tracer = Tracer([sink])
    r = kb2.retrieve("试用期最长多久", top_k=4)
    assert r.rerank == "ok"
    fused = [h.chunk.chunk_id for h in plain.hits]
    assert [h.chunk.chunk_id for h in r.hits] == [fused[2], fused[1], fused[0], fused[3]]
    assert [(h.fused_rank, h.rerank_rank, h.rerank_score) for h in r.hits] == [
        (3, 1, 3.0),
        (2, 2, 2.0),
        (1, 3, 1.0),
        (4, None, None),
    ]
    assert r.hits[2].chunk.section == SEC_PROBATION and r.hits[2].bm25_rank == 1  # channel evidence is kept
    [t] = sink.traces
    stage = t.stage("rerank")
    assert (stage.status, stage.counts) == ("ok", {"candidates": 3, "returned": 4})
    assert stage.data["reranker"] == "test:by-score" and stage.data["top_m"] == 3
    assert [(c["rank_before"], c["rank_after"], c["status"]) for c in stage.data["changes"]] == [
        (3, 1, "up"),
        (2, 2, "same"),
        (1, 3, "down"),
    ]
    assert stage.data["changes"][2]["section"] == SEC_PROBATION  # rows are labelled with their source/section
    assert [s["raw"] for s in stage.data["scores"]] == [3.0, 2.0, 1.0]
    assert t.data["rerank"] == "ok" and [h["fused_rank"] for h in t.data["hits"]] == [3, 2, 1, 4]

    skipped = kb2.retrieve("试用期最长多久", top_k=4, rerank=False)
    assert skipped.rerank == "off" and [h.chunk.chunk_id for h in skipped.hits] == fused
    assert sink.traces[-1].stage("rerank").data == {"reason": "switched off for this query"}
    with pytest.raises(InvalidInput, match="no reranker is configured: set rerank.provider"):
        kb.retrieve("试用期", rerank=True)

    fewer_candidates(monkeypatch, 4)
    capped = kb_factory(tmp_path / "idx", read_only=True, reranker=REVERSE)
    assert [h.chunk.chunk_id for h in capped.retrieve("试用期最长多久", top_k=2).hits] == [fused[3], fused[2]]

    broken = kb_factory(tmp_path / "idx", read_only=True, reranker=Failing("raise"))
    broken.tracer = Tracer([sink])
    fb = broken.retrieve("试用期最长多久", top_k=4)
    assert fb.rerank == "fallback: RuntimeError: model file missing"
    assert [h.chunk.chunk_id for h in fb.hits] == fused and all(h.rerank_score is None for h in fb.hits)
    stage = sink.traces[-1].stage("rerank")
    assert (stage.status, stage.data["reason"]) == ("fallback", "RuntimeError: model file missing")
    assert sink.traces[-1].data["rerank"] == "fallback: RuntimeError: model file missing"
    answer = broken.answer(fb)
    assert answer.citations[0].rerank_score is None and answer.citations[0].fused_rank == 1


def test_llm_reranker_from_settings_through_the_cli_json(
    cli_env, fake_openai: FakeOpenAI, corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fewer_candidates(monkeypatch, 3)
    cli = cli_env
    idx = tmp_path / "idx"
    assert cli("ingest", corpus, "-c", "hr", "--index", idx, "--json").exit_code == 0
    (tmp_path / "zhiku.yaml").write_text(
        f"rerank: {{provider: llm, model: qwen-test, base_url: '{fake_openai.url}', timeout_s: 2}}\n",
        encoding="utf-8",
    )
    r = cli("query", "试用期最长多久", "-c", "hr", "--index", idx, "--json", "-k", "3")
    out = json.loads(r.stdout)
    assert (r.exit_code, out["rerank"]) == (0, "ok")
    assert [h["fused_rank"] for h in out["hits"]] == [3, 2, 1]
    assert [h["rerank_score"] for h in out["hits"]] == [3.0, 2.0, 1.0]
    assert out["hits"][0]["rerank_sigmoid"] == round(sigmoid(-2.0), 6)

    fake_openai.chat_reply = lambda prompt, n: "I cannot grade these."
    r = cli("query", "试用期最长多久", "-c", "hr", "--index", idx, "--json", "-k", "3")
    out = json.loads(r.stdout)
    assert r.exit_code == 0 and out["rerank"].startswith("fallback: RerankError: cannot read grades")
    assert [h["fused_rank"] for h in out["hits"]] == [1, 2, 3] and out["hits"][0]["section"] == SEC_PROBATION

    r = cli("query", "试用期最长多久", "-c", "hr", "--index", idx, "--json", "-k", "3", "--no-rerank")
    assert json.loads(r.stdout)["rerank"] == "off"
    calls = len(fake_openai.requests)
    r = cli("query", "年休假几天", "-c", "hr", "--index", idx, "-k", "2", "--verbose", "--rerank")
    assert (
        r.exit_code == 0 and "rerank: fallback (RerankError: cannot read grades" in r.stdout and SEC_LEAVE in r.stdout
    )
    assert len(fake_openai.requests) == calls + 1


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, embed_cache_dir: Path):
    from typer.testing import CliRunner

    from zhiku.cli.app import app

    for key in [k for k in os.environ if k.startswith("ZHIKU_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("ZHIKU_CACHE_DIR", str(embed_cache_dir))
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_mcp_answers_with_a_broken_reranker_and_says_so(mcp_index, fake_openai: FakeOpenAI) -> None:
    from mcp import Client

    from zhiku.mcp.server import build_server

    fake_openai.chat_reply = lambda prompt, n: '{"scores": "lots"}'
    settings = merge(
        mcp_index.settings,
        rerank={"provider": "llm", "model": "qwen-test", "base_url": fake_openai.url, "timeout_s": 2},
    )
    args = {"query": "试用期最长不得超过几个月？", "top_k": 3}

    async def body(c: Client) -> tuple[Any, Any, Any]:
        first = await c.call_tool("query_knowledge_hub", args)
        second = await c.call_tool("query_knowledge_hub", dict(args))
        fake_openai.chat_reply = lambda prompt, n: json.dumps({"scores": [1] * (n - 1) + [9]})
        third = await c.call_tool("query_knowledge_hub", dict(args))
        return first, second, third

    async def main() -> tuple[Any, Any, Any]:
        async with Client(build_server(settings)) as client:
            return await body(client)

    first, second, third = anyio.run(main)
    for result in (first, second):
        s = result.structured_content
        assert not result.is_error and s["rerank"].startswith("fallback: RerankError: the LLM reranker gave")
        assert s["cache"] == "miss"  # a degraded answer is never cached
        assert s["citations"][0]["source"] == "劳动合同法.md" and s["citations"][0]["rerank_score"] is None
    s = third.structured_content
    # the index holds 4 chunks, all candidates (top_m 20): the last fused one graded 9 comes first
    assert s["rerank"] == "ok" and s["citations"][0]["rerank_score"] == 9.0 and s["citations"][0]["fused_rank"] == 4


def test_hub_warm_survives_a_reranker_that_cannot_load(mcp_index, caplog: pytest.LogCaptureFixture) -> None:
    from zhiku.api import KnowledgeBase

    kb = KnowledgeBase(mcp_index.settings, read_only=True, reranker=Failing("raise"))
    hub = Hub(kb, mcp_index.settings)
    try:
        with caplog.at_level("WARNING"):
            hub.warm()
        assert "reranker failed to load" in caplog.text
        result = hub.query(QueryArgs("女职工产假有多少天", top_k=2))
        assert result.rerank == "fallback: RuntimeError: model file missing" and result.citations
    finally:
        hub.close()


def test_reranker_protocol() -> None:
    assert isinstance(REVERSE, Reranker) and isinstance(Failing("raise"), Reranker)


def test_rerank_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from zhiku.errors import ConfigError
    from zhiku.settings import load_settings

    for key in [k for k in os.environ if k.startswith("ZHIKU_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZHIKU_RERANK__PROVIDER", "llm")
    with pytest.raises(ConfigError, match="rerank.provider 'llm' needs rerank.model"):
        load_settings()
    for key, value in (
        ("MODEL", "qwen2.5-7b-instruct"),
        ("BASE_URL", "http://127.0.0.1:8000/v1"),
        ("TIMEOUT_S", "2.5"),
    ):
        monkeypatch.setenv(f"ZHIKU_RERANK__{key}", value)
    monkeypatch.setenv("ZHIKU_RERANK_API_KEY", "sk-rerank")
    s = load_settings()
    r = s.rerank
    assert (r.provider, r.model, r.base_url, r.timeout_s) == (
        "llm",
        "qwen2.5-7b-instruct",
        "http://127.0.0.1:8000/v1",
        2.5,
    )
    assert r.api_key is not None and r.api_key.get_secret_value() == "sk-rerank"
    assert "sk-rerank" not in s.model_dump_json() and "api_key" not in json.loads(s.model_dump_json())["rerank"]
    reranker = build_reranker(r, cache_dir=tmp_path)
    assert (
        isinstance(reranker, LLMReranker)
        and reranker.client.timeout == 2.5
        and reranker.name == "llm:qwen2.5-7b-instruct"
    )
    monkeypatch.setenv("ZHIKU_RERANK__TIMEOUT_S", "0")
    with pytest.raises(ConfigError, match="rerank.timeout_s: .*ZHIKU_RERANK__TIMEOUT_S"):
        load_settings()


def test_eval_and_experiment_take_a_reranker_override(cli_env, fake_openai: FakeOpenAI, tmp_path: Path) -> None:

    data = beir_set(tmp_path / "beir")
    (tmp_path / "zhiku.yaml").write_text(f"rerank: {{base_url: '{fake_openai.url}', timeout_s: 5}}\n", encoding="utf-8")
    plain = json.loads(cli_env("eval", "--dataset", data, "--mode", "hybrid", "--json").stdout)
    assert "rerank" not in plain
    r = cli_env("eval", "--dataset", data, "--mode", "hybrid", "--reranker", "llm:qwen-test", "--json")
    out = json.loads(r.stdout)
    assert r.exit_code == 0 and out["rerank"] == {"ok": 2} and out["queries"] == 2
    assert {req.body["model"] for req in fake_openai.requests} == {"qwen-test"}
    # the fake grades the last candidate best: the judged document falls from first place
    assert out["mrr@10"] < plain["mrr@10"] == 1.0

    fake_openai.chat_reply = lambda prompt, n: "no grades"
    out = json.loads(
        cli_env("eval", "--dataset", data, "--mode", "hybrid", "--reranker", "llm:qwen-test", "--json").stdout
    )
    assert out["rerank"] == {"fallback": 2} and out["mrr@10"] == plain["mrr@10"]

    r = cli_env(
        "experiment", "--dataset", data, "--variants", "hybrid,hybrid_rerank", "--reranker", "llm:qwen-test", "--json"
    )
    rows = {row["variant"]: row for row in json.loads(r.stdout)["variants"]}
    assert rows["hybrid_rerank"]["status"] == "ok"
    assert rows["hybrid_rerank"]["reason"] == "the reranker fell back to the fused order on 2 of 2 queries"
    assert rows["hybrid"]["reason"] is None and rows["hybrid"]["metrics"] == rows["hybrid_rerank"]["metrics"]
    bad = cli_env("eval", "--dataset", data, "--reranker", "colbert:x")
    assert bad.exit_code == 1 and "--reranker 'colbert:x': use none, cross-encoder" in bad.stderr
