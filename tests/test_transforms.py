"""LLM transforms at ingest (contextual, refine, metadata, caption) against the local fake OpenAI-compatible server
(tests/fake_openai.py): outputs indexed and visible in traces, results and MCP; the reply cache (a second ingest
makes no request); failures (429, 5xx, timeouts, malformed, refused) keep every chunk with the reason reported;
the dry-run plan; the refine guard."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from fake_openai import DIM, FakeOpenAI
from helpers_kb import CORPUS_CHUNKS, SEC_PROBATION
from zhiku import llm as llm_service
from zhiku.embedding import OpenAIEmbedder
from zhiku.errors import ConfigError
from zhiku.ingest.transforms.builtin import guard
from zhiku.observability.trace import TRACE_FILE, read_traces
from zhiku.openai_http import OpenAICompatibleClient

TAGS = ["劳动法规", "试用期"]


def llm_reply(prompt: str, n: int) -> str:
    """Deterministic answers by prompt kind: a context naming the chunk's first words and a rare marker word,
    a refined text (the chunk with line breaks joined), metadata JSON, a caption, query rewrites."""
    chunk = re.search(r"<chunk>\n(.*?)\n</chunk>", prompt, re.S)
    if chunk:
        return f"<context>紫罗兰卷宗：此段讲{chunk.group(1).strip()[:6]}</context>"
    text = re.search(r"<text>\n(.*?)\n</text>", prompt, re.S)
    if text and '"tags"' in prompt:
        head = text.group(1).strip()[:8]
        return "```json\n" + json.dumps({"title": f"标题{head}", "summary": f"摘要：{head}", "tags": TAGS}) + "\n```"
    if text:
        return text.group(1).replace("\n", "")
    if "描述这张图片" in prompt:
        return "一张组织结构图，显示总经理与人事部"
    if '"queries"' in prompt:
        return json.dumps({"queries": ["试用期 期限", "试用期多长时间"]}, ensure_ascii=False)
    return "劳动合同期限一年以上不满三年的，试用期不得超过二个月。"


@pytest.fixture(autouse=True)
def _llm_client_constants(monkeypatch: pytest.MonkeyPatch) -> None:
    """The LLM client's fixed retries and concurrency, which ``llm_settings`` sets per test: restored after each."""
    for name in ("MAX_RETRIES", "CONCURRENCY"):
        monkeypatch.setattr(llm_service, name, getattr(llm_service, name))


def llm_settings(
    fake: FakeOpenAI, model: str, max_retries: int = 1, concurrency: int = 4, **extra: Any
) -> dict[str, Any]:
    llm_service.MAX_RETRIES, llm_service.CONCURRENCY = max_retries, concurrency  # (``_llm_client_constants``)
    return {"base_url": fake.url, "model": model, "timeout_s": 2.0, **extra}


def open_kb(kb_factory: Any, index: Path, fake: FakeOpenAI, model: str, transforms: list[str], **kw: Any) -> Any:
    """A KB whose LLM and embedder are the fake server (fast, deterministic vectors); ``model`` keeps this test's
    reply-cache entries apart from other tests'. ``cache=False``: no reply cache (no cache_dir)."""
    fake.chat_reply = llm_reply
    embedder = OpenAIEmbedder(OpenAICompatibleClient(fake.url, max_retries=0), "fake-embed")
    assert embedder.dim == DIM  # (its size asked now: a test may make the endpoint fail next)
    nocache = {} if kw.pop("cache", True) else {"cache_dir": None}
    llm = llm_settings(fake, model, **kw)
    return kb_factory(index, embedder=embedder, llm=llm, transforms={"enabled": transforms}, **nocache)


def test_every_transform_output_is_indexed_traced_and_returned(
    kb_factory: Any, corpus: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    kb = open_kb(kb_factory, tmp_path / "idx", fake_openai, "m-all", ["contextual", "refine", "metadata"])
    report = kb.ingest([corpus])
    t = report.transforms
    assert report.chunks_written == CORPUS_CHUNKS and t is not None and t.issues == ()
    assert t.enabled == ("refine", "metadata", "contextual")  # built-ins run in their fixed order
    # refine joined the one chunk with a line break inside (年休假条例's two articles)
    assert dict(t.applied) == {"refine": 1, "metadata": CORPUS_CHUNKS + 3, "contextual": CORPUS_CHUNKS}
    # one request per chunk per transform, plus one document-level metadata request per document
    assert (t.usage.calls, t.usage.cached) == (3 * CORPUS_CHUNKS + 3, 0) and len(fake_openai.chats()) == 15
    assert t.usage.prompt_tokens > 0 and t.usage.completion_tokens > 0 and not t.usage.estimated

    # the context is BM25-indexed: its marker word finds every chunk; the citation quotes the original text
    r = kb.retrieve("紫罗兰卷宗", mode="bm25", top_k=10)
    assert len(r.hits) == CORPUS_CHUNKS
    assert all("紫罗兰" not in h.chunk.text for h in r.hits)
    # ... and embedded: the embedder was sent every chunk's context before its text
    embedded = [t for r in fake_openai.requests if r.path.endswith("/embeddings") for t in r.body["input"]]
    assert len([t for t in embedded if t.startswith("紫罗兰卷宗：此段讲")]) == CORPUS_CHUNKS
    # the refined text (年休假条例's two articles joined) is what was embedded, and title + tags after it
    refined = [t for t in embedded if "年休假15天。第五条" in t]
    assert len(refined) == 1 and refined[0].endswith("劳动法规 试用期")
    assert len(kb.retrieve("法规", mode="bm25", top_k=10).hits) == CORPUS_CHUNKS  # a word only the tags hold
    probation = next(h for h in r.hits if h.chunk.section == SEC_PROBATION)
    e = kb.enrichments.chunk_enrichments([probation.chunk.chunk_id])[probation.chunk.chunk_id]
    assert (e.context, e.title, e.tags) == ("紫罗兰卷宗：此段讲第十九条 劳", "标题第十九条 劳动合", tuple(TAGS))

    # traces: the ingest trace lists every chunk's context and tags; the query trace labels hits with them
    traces = read_traces(tmp_path / "idx" / TRACE_FILE)
    ingest = next(tr for tr in traces if tr.kind == "ingest")
    stage = next(s for s in ingest.stages if s.name == "transform")
    assert stage.counts == {"chunks": CORPUS_CHUNKS, "issues": 0}
    assert {row["context"][:5] for row in stage.data["chunks"]} == {"紫罗兰卷宗"}
    assert ingest.data["transforms"]["usage"]["calls"] == 15
    query = next(tr for tr in traces if tr.kind == "query")
    assert all(h["context"].startswith("紫罗兰卷宗") and h["tags"] == TAGS for h in query.data["hits"])

    # tags filter; the document summary is the LLM's
    assert len(kb.retrieve("劳动", mode="bm25", tags=["试用期"], top_k=10).hits) == CORPUS_CHUNKS
    assert kb.retrieve("劳动", mode="bm25", tags=["没有这个标签"]).hits == ()
    doc = kb.resolve_document("劳动合同法.md")
    summary = kb.summary_fields(doc.doc_id)
    assert summary == {"summary": "摘要：# 劳动合同法", "summary_kind": "llm", "keywords": TAGS}


def test_a_second_ingest_makes_no_llm_request(
    kb_factory: Any, corpus: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    first = open_kb(kb_factory, tmp_path / "a", fake_openai, "m-cache", ["contextual", "metadata"])
    assert first.ingest([corpus]).transforms.usage.calls == 2 * CORPUS_CHUNKS + 3
    sent = len(fake_openai.chats())
    again = first.ingest([corpus], force=True).transforms  # same index, forced
    other = open_kb(kb_factory, tmp_path / "b", fake_openai, "m-cache", ["contextual", "metadata"])
    fresh = other.ingest([corpus]).transforms  # a new index over the same corpus
    assert len(fake_openai.chats()) == sent
    assert (again.usage.calls, again.usage.cached) == (0, 2 * CORPUS_CHUNKS + 3)
    assert (fresh.usage.calls, fresh.usage.cached, fresh.issues) == (0, 2 * CORPUS_CHUNKS + 3, ())
    hits = other.retrieve("紫罗兰卷宗", mode="bm25", top_k=10).hits
    assert len(hits) == CORPUS_CHUNKS


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [
        (("status", 429, {"Retry-After": "0"}, json.dumps({"error": {"message": "rate limited"}})), "HTTP 429"),
        (("status", 500, {}, json.dumps({"error": {"message": "GPU fell over"}})), "HTTP 500: GPU fell over"),
        (("raw", json.dumps({"choices": [{"message": {"content": "not json at all"}}]})), "malformed reply"),
        (("refuse",), "refused the content"),
    ],
)
def test_a_failing_endpoint_loses_no_chunk_and_reports_each_reason(
    kb_factory: Any, corpus: Path, tmp_path: Path, fake_openai: FakeOpenAI, behaviour: tuple, reason: str
) -> None:
    fake_openai.always = behaviour
    kb = open_kb(kb_factory, tmp_path / "idx", fake_openai, f"m-fail-{behaviour[0]}", ["metadata"])
    report = kb.ingest([corpus])
    assert report.chunks_written == CORPUS_CHUNKS and report.failed == ()
    issues = report.transforms.issues
    per_chunk = [i for i in issues if i.chunk_id is not None]
    assert len(per_chunk) == CORPUS_CHUNKS and len(issues) == CORPUS_CHUNKS + 3  # + document-level metadata
    assert all(reason in i.reason and i.transform == "metadata" for i in issues)
    assert len(kb.retrieve("试用期", mode="bm25").hits) >= 1  # searchable without the transform
    assert kb.enrichments.chunk_enrichments([i.chunk_id for i in per_chunk]) == {}
    history = kb.enrichments.usage_history()
    assert sum(len(h.issues) for h in history) == len(issues)


def test_a_slow_endpoint_times_out_per_chunk(
    kb_factory: Any, corpus: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.chat_delay_s = 1.0
    kb = open_kb(kb_factory, tmp_path / "idx", fake_openai, "m-slow", ["contextual"], timeout_s=0.2, max_retries=0)
    report = kb.ingest([corpus])
    assert report.chunks_written == CORPUS_CHUNKS
    assert [i.reason for i in report.transforms.issues] == [
        "http://127.0.0.1:{}/v1/chat/completions failed after 1 attempt(s): timed out after 0.2s (ReadTimeout)".format(
            fake_openai.url.split(":")[2].split("/")[0]
        )
    ] * CORPUS_CHUNKS


def test_refine_guard_and_fallback(kb_factory: Any, corpus: Path, tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    text = "劳动合同期限三个月以上不满一年的，\n试用期不得超过一个月。"
    assert guard(text, text.replace("\n", ""), min_ratio=0.7, max_ratio=1.2, min_overlap=0.85) is None
    assert guard(text, "试用期一个月。", min_ratio=0.7, max_ratio=1.2, min_overlap=0.85) == (
        "length ratio 0.25 outside [0.7, 1.2]"
    )
    invented = "劳动合同期限六个月以上不满两年的，试用期不得超过半年。"
    assert guard(text, invented, min_ratio=0.7, max_ratio=1.2, min_overlap=0.85) == (
        "keeps 82% of the original's characters (< 85%): content dropped"
    )
    assert guard(text, text + "另外加班费三倍", min_ratio=0.7, max_ratio=1.5, min_overlap=0.85) == (
        "only 80% of its characters are in the original (< 85%): content invented"
    )
    kb = open_kb(kb_factory, tmp_path / "idx", fake_openai, "m-refine", ["refine"])
    fake_openai.chat_reply = lambda prompt, n: "全部删掉了"
    report = kb.ingest([corpus])
    assert report.chunks_written == CORPUS_CHUNKS and len(report.transforms.issues) == CORPUS_CHUNKS
    assert all(
        i.reason.startswith("refined text rejected, original kept: length ratio") for i in report.transforms.issues
    )
    assert dict(report.transforms.applied) == {"refine": 0}


def test_dry_run_plans_requests_and_sends_nothing(
    kb_factory: Any, corpus: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    kb = open_kb(kb_factory, tmp_path / "idx", fake_openai, "m-plan", ["contextual", "metadata"], price_input=2.0)
    plan = kb.plan_transforms([corpus])
    assert (plan.documents, plan.chunks, plan.requests, plan.cached) == (3, CORPUS_CHUNKS, 2 * CORPUS_CHUNKS + 3, 0)
    assert [(x.transform, x.requests) for x in plan.lines] == [("metadata", 7), ("contextual", 4)]
    assert plan.prompt_tokens > 0 and plan.cost == pytest.approx(plan.prompt_tokens * 2.0 / 1e6)
    assert "<document>" in plan.samples[-1].preview or "<text>" in plan.samples[0].preview
    assert fake_openai.chats() == [] and kb.documents() == []
    kb.ingest([corpus])
    replan = kb.plan_transforms([corpus], force=True)
    assert (replan.requests, replan.cached, replan.prompt_tokens) == (2 * CORPUS_CHUNKS + 3, 2 * CORPUS_CHUNKS + 3, 0)


def test_transforms_need_an_endpoint_and_known_names(kb_factory: Any, corpus: Path, tmp_path: Path) -> None:
    kb = kb_factory(tmp_path / "idx", transforms={"enabled": ["contextual"]})
    with pytest.raises(ConfigError, match="contextual needs an LLM endpoint: set llm.base_url and llm.model"):
        kb.ingest([corpus])
    kb2 = kb_factory(tmp_path / "idx2", transforms={"enabled": ["summarise"]})
    with pytest.raises(ConfigError, match="unknown transform 'summarise': use any of caption, refine"):
        kb2.ingest([corpus])
    assert kb.documents() == [] and kb2.documents() == []


def test_settings_edge_key_env_and_transform_list(
    fake_openai: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zhiku.llm import build_service
    from zhiku.settings import load_settings

    for key in [k for k in os.environ if k.startswith("ZHIKU_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("MY_LLM_KEY", "sk-llm-789")
    monkeypatch.setenv("ZHIKU_TRANSFORMS__ENABLED", "contextual, metadata")
    monkeypatch.chdir(tmp_path)
    s = load_settings(llm={"base_url": fake_openai.url, "model": "m-key", "api_key_env": "MY_LLM_KEY"})
    assert s.transforms.enabled == ("contextual", "metadata")
    assert "sk-llm-789" not in s.model_dump_json()  # the key is never printed
    service = build_service(s.llm, tmp_path / "cache")
    assert service is not None
    assert service.chat([{"role": "user", "content": "你好"}], prompt_id="t@1") == '{"scores": []}'  # the default
    assert fake_openai.chats()[0].headers["Authorization"] == "Bearer sk-llm-789"
    assert service.chat([{"role": "user", "content": "你好"}], prompt_id="t@1") and len(fake_openai.chats()) == 1
    assert (service.usage().calls, service.usage().cached) == (1, 1)


def test_pdf_images_are_captioned_once_each(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    """A real PDF's images (tests/fixtures/pdf) go to the vision model as data URIs; a failing one keeps its own
    caption and says why."""
    from zhiku.ingest.chunking import chunk_document
    from zhiku.ingest.loaders import default_loaders, load_document
    from zhiku.ingest.transforms.base import DocumentBatch, TransformContext
    from zhiku.ingest.transforms.builtin import Caption
    from zhiku.llm import LLMService, Prompts
    from zhiku.settings import ChunkingSettings

    pdf = Path(__file__).parent / "fixtures" / "pdf" / "bithesis-graduation-thesis-sample.pdf"
    doc = load_document(pdf, "thesis.pdf", default_loaders())
    chunks = [c for c in chunk_document(doc, collection="c", doc_id="d", settings=ChunkingSettings()) if c.images]
    fake_openai.chat_reply = llm_reply
    fake_openai.then("status", 400, {}, json.dumps({"error": {"message": "image too small"}}))  # the first image
    service = LLMService(OpenAICompatibleClient(fake_openai.url, max_retries=0), "m", vision_model="vl-m")
    prompts = Prompts()
    ctx = TransformContext(service, "zh", lambda n: prompts.text(n, "zh"), prompts.id_of)
    out = Caption().apply(DocumentBatch.start(doc, "d", chunks), ctx)
    captions = [im.caption for c in out.chunks for im in c.images]
    assert captions == ["", "图 1-1 标题序号 — 一张组织结构图，显示总经理与人事部"]
    assert [r.body["model"] for r in fake_openai.chats()] == ["vl-m", "vl-m"]
    assert [r.images for r in fake_openai.chats()] == [1, 1]
    [issue] = out.issues
    assert issue.transform == "caption" and issue.reason.endswith("HTTP 400: image too small")


def test_a_dead_endpoint_is_not_called_for_every_chunk(tmp_path: Path) -> None:
    from zhiku.ingest.transforms.base import TransformError
    from zhiku.llm import BREAKER, LLMService

    client = OpenAICompatibleClient("http://127.0.0.1:9/v1", max_retries=0, timeout=0.5)  # nothing listens there
    service = LLMService(client, "m")
    reasons = []
    for i in range(BREAKER + 5):
        with pytest.raises(TransformError) as e:
            service.chat([{"role": "user", "content": f"第{i}段"}], prompt_id="t@1")
        reasons.append(str(e.value))
    assert client.requests == BREAKER and service.usage().calls == BREAKER
    assert all("connection failed" in r for r in reasons[:BREAKER])
    assert reasons[-1].startswith(
        f"not sent: the endpoint failed {BREAKER} requests in a row (last: http://127.0.0.1:9"
    )
