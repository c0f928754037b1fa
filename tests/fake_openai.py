"""A scripted OpenAI-compatible server on 127.0.0.1 for the openai-embedder and LLM-reranker tests.

Standard library only (``http.server`` in a daemon thread). ``/v1/embeddings`` answers deterministic vectors
(derived from the SHA-256 of each input, so equal texts get equal vectors); ``/v1/chat/completions`` answers
``chat_reply(prompt, n_passages)`` with token ``usage``; a vision request's prompt is its text parts joined, its
images counted in ``Recorded.images``. Tests queue one-off behaviours for the next requests with ``then(...)``:
a status with headers and a body (429 + Retry-After, 500, 400), a hang of N seconds, a raw body (malformed) or a
refusal (``("refuse",)``: empty content, ``finish_reason: content_filter``); ``always`` repeats one behaviour for
every chat request (a dead or rate-limited chat endpoint) and ``chat_delay_s`` slows every chat answer.
Every request is recorded (path, headers, JSON body, time) and the peak number of requests in flight is kept.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

DIM = 8


def fake_vector(text: str, dim: int = DIM) -> list[float]:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return [(b - 127.5) / 127.5 for b in digest[:dim]]


def count_passages(prompt: str) -> int:
    return len(re.findall(r"^\[\d+\] ", prompt, flags=re.M))


def ascending_scores(prompt: str, n: int) -> str:
    """The default chat reply: the LAST passage is best (grades 1..n), so reranking reverses the order."""
    return json.dumps({"scores": list(range(1, n + 1))})


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float
    images: int = 0  # image_url parts of a chat request (vision)


@dataclass
class FakeOpenAI:
    url: str = ""
    requests: list[Recorded] = field(default_factory=list)
    script: deque[tuple[Any, ...]] = field(default_factory=deque)
    chat_reply: Callable[[str, int], str] = ascending_scores
    embed_delay_s: float = 0.0
    chat_delay_s: float = 0.0
    always: tuple[Any, ...] | None = None
    inflight: int = 0
    max_inflight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def then(self, *behaviour: Any) -> FakeOpenAI:
        """Queue a behaviour for the next request: ("status", code, headers, body) · ("hang", s) · ("raw", text)."""
        self.script.append(behaviour)
        return self

    def paths(self) -> list[str]:
        return [r.path for r in self.requests]

    def chats(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]


def prompt_of(body: dict[str, Any]) -> tuple[str, int]:
    """The last message's text (text parts joined) and how many images it holds."""
    content = body.get("messages", [{}])[-1].get("content", "")
    if isinstance(content, str):
        return content, 0
    texts = [p.get("text", "") for p in content if p.get("type") == "text"]
    return "\n".join(texts), sum(1 for p in content if p.get("type") == "image_url")


def _handler(state: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # keep pytest output clean
            return None

        def _send(self, code: int, body: str, headers: dict[str, str] | None = None) -> None:
            data = body.encode("utf-8")
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {}
            with state._lock:
                images = prompt_of(body)[1] if self.path.endswith("/chat/completions") else 0
                state.requests.append(Recorded(self.path, dict(self.headers), body, time.monotonic(), images))
                chat = self.path.endswith("/chat/completions")
                behaviour = state.script.popleft() if state.script else (state.always if chat else None) or ("ok",)
                state.inflight += 1
                state.max_inflight = max(state.max_inflight, state.inflight)
            try:
                self._answer(behaviour, body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test)
            finally:
                with state._lock:
                    state.inflight -= 1

        def _answer(self, behaviour: tuple[Any, ...], body: dict[str, Any]) -> None:
            kind = behaviour[0]
            if kind == "status":
                _, code, headers, text = behaviour
                self._send(code, text, headers)
                return
            if kind == "hang":
                time.sleep(behaviour[1])
                self._send(200, json.dumps({"data": []}))
                return
            if kind == "raw":
                self._send(200, behaviour[1])
                return
            if kind == "refuse":
                choice = {
                    "index": 0,
                    "message": {"role": "assistant", "content": ""},
                    "finish_reason": "content_filter",
                }
                self._send(200, json.dumps({"choices": [choice]}))
                return
            if self.path.endswith("/embeddings"):
                if state.embed_delay_s:
                    time.sleep(state.embed_delay_s)
                inputs = body.get("input", [])
                inputs = [inputs] if isinstance(inputs, str) else inputs
                dim = int(body.get("dimensions") or DIM)
                data = [
                    {"object": "embedding", "index": i, "embedding": fake_vector(t, dim)}
                    for i, t in reversed(list(enumerate(inputs)))
                ]  # out of order on purpose: sorted by index
                self._send(200, json.dumps({"object": "list", "data": data, "model": body.get("model")}))
            elif self.path.endswith("/chat/completions"):
                if state.chat_delay_s:
                    time.sleep(state.chat_delay_s)
                prompt, _ = prompt_of(body)
                content = state.chat_reply(prompt, count_passages(prompt))
                choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                usage = {"prompt_tokens": len(prompt) // 2 + 1, "completion_tokens": len(content) // 2 + 1}
                self._send(200, json.dumps({"choices": [choice], "usage": usage}, ensure_ascii=False))
            else:
                self._send(404, json.dumps({"error": {"message": f"no route {self.path}"}}))

    return Handler


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    state = FakeOpenAI()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()
