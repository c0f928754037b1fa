"""The OpenAI-compatible client and embedder against a local scripted server (tests/fake_openai.py):
batching, ordering, concurrency limit, retries with backoff and Retry-After on 429/5xx, timeouts, refusals,
malformed answers, prefixes, the API key read from the variable the settings name, and the embedding cache."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from fake_openai import DIM, FakeOpenAI, fake_vector
from zhiku.embedding import CachedEmbedder, EmbeddingCache, OpenAIEmbedder, build_embedder
from zhiku.errors import EmbeddingError
from zhiku.openai_http import HttpApiError, OpenAICompatibleClient, backoff_s, retry_after_s
from zhiku.settings import EmbeddingSettings, load_settings


def client(fake: FakeOpenAI, **kw) -> OpenAICompatibleClient:
    opts = {"timeout": 2.0, "max_retries": 3, "backoff_s": 0.01, "max_backoff_s": 0.05, **kw}
    return OpenAICompatibleClient(fake.url, **opts)


def unit(v: list[float]) -> np.ndarray:
    a = np.asarray(v, dtype=np.float32)
    return a / np.linalg.norm(a)


def test_retry_after_and_backoff_are_computed_as_specified() -> None:
    assert retry_after_s("3") == 3.0 and retry_after_s("0.25") == 0.25 and retry_after_s(None) is None
    assert retry_after_s("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0  # an HTTP date, 10 s ahead
    assert retry_after_s("soon") is None and retry_after_s("-5") == 0.0

    class Fixed:
        def random(self) -> float:
            return 1.0

    assert [backoff_s(a, 0.5, 30.0, Fixed()) for a in range(8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert backoff_s(3, 0.5, 30.0, type("Zero", (), {"random": lambda self: 0.0})()) == 2.0  # jitter: [½, 1]·full


def test_batches_come_back_in_input_order_and_normalised(fake_openai: FakeOpenAI) -> None:
    texts = [f"第{i}条 劳动合同" for i in range(5)]
    emb = OpenAIEmbedder(client(fake_openai), "bge-m3", batch_size=2, concurrency=1)
    m = emb.embed_documents(texts)
    assert (m.shape, m.dtype) == ((5, DIM), np.float32)
    np.testing.assert_allclose(m, np.vstack([unit(fake_vector(t)) for t in texts]), rtol=1e-6)
    assert [len(r.body["input"]) for r in fake_openai.requests] == [2, 2, 1]
    assert {r.body["model"] for r in fake_openai.requests} == {"bge-m3"}
    assert emb.dim == DIM and emb.name.startswith("openai:bge-m3/")
    assert fake_openai.paths() == ["/v1/embeddings"] * 3
    assert emb.embed_documents([]).shape == (0, DIM)


def test_concurrency_is_limited(fake_openai: FakeOpenAI) -> None:
    fake_openai.embed_delay_s = 0.15
    emb = OpenAIEmbedder(client(fake_openai), "m", batch_size=1, concurrency=2)
    emb.embed_documents([f"t{i}" for i in range(6)])
    assert len(fake_openai.requests) == 6 and fake_openai.max_inflight == 2  # 0.15 s each: they overlap, two at most


def test_429_waits_retry_after_then_succeeds(fake_openai: FakeOpenAI) -> None:
    fake_openai.then("status", 429, {"Retry-After": "0.4"}, json.dumps({"error": {"message": "rate limited"}}))
    fake_openai.then("status", 503, {}, "overloaded")
    c = client(fake_openai)
    m = OpenAIEmbedder(c, "m").embed_documents(["年休假"])
    np.testing.assert_allclose(m[0], unit(fake_vector("年休假")), rtol=1e-6)
    t = [r.at for r in fake_openai.requests]
    assert len(t) == 3 and c.requests == 3
    assert t[1] - t[0] >= 0.39  # Retry-After honoured (a lower bound: a slow machine only waits longer)


def test_5xx_gives_up_after_max_retries_with_the_last_error(fake_openai: FakeOpenAI) -> None:
    for _ in range(3):
        fake_openai.then("status", 500, {}, json.dumps({"error": {"message": "GPU fell over"}}))
    with pytest.raises(EmbeddingError, match=r"failed after 3 attempt\(s\): HTTP 500: GPU fell over"):
        OpenAIEmbedder(client(fake_openai, max_retries=2), "m").embed_query("加班费")
    assert len(fake_openai.requests) == 3


def test_4xx_is_not_retried_and_names_the_key(fake_openai: FakeOpenAI) -> None:
    fake_openai.then("status", 401, {}, json.dumps({"error": {"message": "invalid api key"}}))
    with pytest.raises(HttpApiError, match="HTTP 401: invalid api key \\(check the API key"):
        client(fake_openai).post("embeddings", {"model": "m", "input": ["x"]})
    fake_openai.then("status", 400, {}, json.dumps({"error": {"message": "input too long"}}))
    with pytest.raises(EmbeddingError, match="refused the request: HTTP 400: input too long"):
        OpenAIEmbedder(client(fake_openai), "m").embed_documents(["x"])
    assert len(fake_openai.requests) == 2


def test_a_hanging_server_times_out_and_retries(fake_openai: FakeOpenAI) -> None:
    fake_openai.then("hang", 1.5)
    c = client(fake_openai, timeout=0.3, max_retries=1)
    v = OpenAIEmbedder(c, "m").embed_query("年假")  # first attempt times out, the retry answers
    assert v.shape == (DIM,) and len(fake_openai.requests) == 2 and c.requests == 2
    fake_openai.then("hang", 1.5).then("hang", 1.5)
    with pytest.raises(EmbeddingError, match=r"timed out after 0.3s"):
        OpenAIEmbedder(c, "m").embed_query("年假")


def test_a_deadline_bounds_the_attempt_not_only_the_retries(fake_openai: FakeOpenAI) -> None:
    """Query rewriting passes a deadline (llm.rewrite_timeout): a hung endpoint used to hold the request for the
    full llm.timeout (60 s) after the rewrite had given up, and `zhiku query --rewrite` waited for it to exit."""
    import time

    fake_openai.then("hang", 2.0)
    c = client(fake_openai, timeout=30.0, max_retries=2)
    with pytest.raises(HttpApiError) as e:
        c.post("chat/completions", {"model": "m"}, deadline=time.monotonic() + 0.3)
    message = str(e.value)
    assert re.fullmatch(
        r".*/chat/completions failed after 1 attempt\(s\): timed out after 0\.\d+s \(ReadTimeout\)", message
    )
    assert c.requests == 1  # no retry past the deadline


def test_a_deadline_bounds_a_reply_that_trickles_in() -> None:
    """httpx's timeouts bound each read: a reply arriving a byte at a time (a stalled proxy) held a request with a
    deadline (query rewriting) until its last byte, long past the deadline."""
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    body = b'{"choices": []}' + b" " * 15

    class Trickle(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                for i in range(len(body)):
                    self.wfile.write(body[i : i + 1])
                    self.wfile.flush()
                    time.sleep(0.05)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up at its deadline

    server = ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        c = OpenAICompatibleClient(f"http://127.0.0.1:{server.server_port}/v1", timeout=30.0, max_retries=2)
        with pytest.raises(HttpApiError) as e:
            c.post("chat/completions", {"model": "m"}, deadline=time.monotonic() + 0.4)
        assert re.fullmatch(
            r".*/chat/completions failed after 1 attempt\(s\): timed out after 0\.\d+s \(the reply was still arriving\)",
            str(e.value),
        )
        assert c.requests == 1
        assert c.post("chat/completions", {"model": "m"}) == {"choices": []}  # no deadline: the whole reply
    finally:
        server.shutdown()
        server.server_close()


def test_malformed_answers_are_clear_errors(fake_openai: FakeOpenAI) -> None:
    emb = OpenAIEmbedder(client(fake_openai), "m")
    for body, message in (
        ("not json", "non-JSON"),
        (json.dumps({"data": [{"index": 0, "embedding": [0.1] * DIM}]}), "answered 1 vectors for 2 texts"),
        (json.dumps({"data": [{"index": 0, "embedding": "abc"}, {"index": 1}]}), "malformed vectors"),
        (
            json.dumps(
                {"data": [{"index": 0, "embedding": [float("nan")] * DIM}, {"index": 1, "embedding": [1.0] * DIM}]}
            ),
            "non-finite",
        ),
    ):
        fake_openai.then("raw", body)
        with pytest.raises(EmbeddingError, match=message):
            emb.embed_documents(["a", "b"])


def test_known_family_prefixes_are_sent(fake_openai: FakeOpenAI) -> None:
    e5 = OpenAIEmbedder(client(fake_openai), "intfloat/multilingual-e5-large")
    assert e5.embed_query("试用期").shape == (DIM,)
    e5.embed_documents(["第十九条"])
    qwen = OpenAIEmbedder(client(fake_openai), "Qwen/Qwen3-Embedding-0.6B")
    qwen.embed_query("试用期")
    qwen.embed_documents(["第十九条"])
    assert [r.body["input"] for r in fake_openai.requests] == [
        ["query: 试用期"],
        ["passage: 第十九条"],
        ["Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:试用期"],
        ["第十九条"],
    ]
    assert e5.name.startswith("openai:intfloat/multilingual-e5-large/")
    assert e5.name.split("/")[-1] != qwen.name.split("/")[-1]  # the passage prefix changes stored vectors


def test_settings_read_the_key_from_the_named_variable_and_cache_vectors(
    fake_openai: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k in ("ZHIKU_EMBEDDING_API_KEY", "MY_EMBED_KEY"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("MY_EMBED_KEY", "sk-test-123")
    monkeypatch.chdir(tmp_path)
    settings = load_settings(
        None,
        embedding={
            "provider": "openai",
            "model": "bge-m3",
            "base_url": fake_openai.url,
            "api_key_env": "MY_EMBED_KEY",
            "batch_size": 10,
        },
        cache_dir=str(tmp_path / "cache"),
    )
    assert settings.embedding.api_key is not None and "sk-test" not in settings.model_dump_json()
    emb = build_embedder(settings.embedding, settings.cache_dir)
    assert isinstance(emb, CachedEmbedder) and isinstance(emb.inner, OpenAIEmbedder)
    first = emb.embed_documents(["第一条", "第二条"])
    # one request tells the model's size, one embeds the batch
    assert [r.body["input"] for r in fake_openai.requests] == [["dimension probe"], ["第一条", "第二条"]]
    assert {r.headers["Authorization"] for r in fake_openai.requests} == {"Bearer sk-test-123"}
    again = CachedEmbedder(emb.inner, EmbeddingCache(tmp_path / "cache" / "embeddings.sqlite")).embed_documents(
        ["第二条", "第一条"]
    )
    assert len(fake_openai.requests) == 2  # served from the cache, keyed by (fingerprint, text hash)
    np.testing.assert_array_equal(again, first[::-1])

    with pytest.raises(Exception, match="needs embedding.base_url"):
        EmbeddingSettings(provider="openai", model="m")
    with pytest.raises(Exception, match="needs embedding.model"):
        EmbeddingSettings(provider="sentence-transformers")


def test_several_questions_go_in_one_request_with_the_query_prefix(fake_openai: FakeOpenAI) -> None:
    from zhiku.embedding.base import embed_queries

    e5 = OpenAIEmbedder(client(fake_openai), "intfloat/multilingual-e5-large")
    m = embed_queries(e5, ["公司不签合同", "能要双倍工资吗"])  # a question's clauses: one round trip, not two
    assert [r.body["input"] for r in fake_openai.requests] == [["query: 公司不签合同", "query: 能要双倍工资吗"]]
    np.testing.assert_allclose(m[1], e5.embed_query("能要双倍工资吗"), rtol=1e-6)
