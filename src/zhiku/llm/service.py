"""The cached, rate-limited chat service every LLM feature uses (``ChatService`` of the transform protocol)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zhiku.llm.cache import LLM_CACHE_FILE, ReplyCache, reply_key
from zhiku.llm.chat import TransformError
from zhiku.openai_http import HttpApiError, OpenAICompatibleClient, client_from
from zhiku.settings import LLMSettings
from zhiku.types import LLMUsage

_CJK = re.compile(r"[\u3000-\u9fff\uf900-\ufaff\uff00-\uffef]")
REFUSALS = ("content_filter", "content-filter", "safety")
CONCURRENCY = 4  # requests in flight at once: faster runs without tripping a hosted API's rate limit
MAX_RETRIES = 3  # on 429, 5xx, timeouts and lost connections (`Retry-After` honoured)
CURRENCY = "USD"  # the unit of `llm.price_input` / `llm.price_output`
BREAKER = 8  # consecutive requests that failed after their retries; then the endpoint is not called again this run


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate: one token per CJK character, one per four other characters."""
    cjk = len(_CJK.findall(text))
    return cjk + (len(text) - cjk + 3) // 4


def messages_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    total = 0
    for m in messages:
        content = m.get("content", "")
        parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
        for p in parts:
            total += estimate_tokens(str(p.get("text", ""))) if p.get("type") == "text" else 765  # one image tile set
    return total + 4 * len(messages)


@dataclass
class _Counter:
    calls: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated: bool = False
    failing: int = 0  # consecutive requests that failed after their retries
    last_error: str = ""


class LLMService:
    """``chat(messages, prompt_id=…)`` → the reply text, or ``TransformError`` with the reason."""

    def __init__(
        self,
        client: OpenAICompatibleClient,
        model: str,
        *,
        vision_model: str | None = None,
        cache: ReplyCache | None = None,
        concurrency: int = 4,
        prices: tuple[float, float] = (0.0, 0.0),
        deadline_s: float | None = None,
    ) -> None:
        self.client, self.model, self.vision_model = client, model, vision_model or model
        self.cache, self.prices, self.deadline_s = cache, prices, deadline_s
        self._gate = threading.Semaphore(concurrency)
        self._lock = threading.Lock()
        self._n = _Counter()

    def key(self, messages: Sequence[Mapping[str, Any]], prompt_id: str, vision: bool = False) -> str:
        return reply_key(self.vision_model if vision else self.model, prompt_id, list(messages))

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        prompt_id: str,
        max_tokens: int = 256,
        vision: bool = False,
        validate: Callable[[str], object] | None = None,
    ) -> str:
        model = self.vision_model if vision else self.model
        key = self.key(messages, prompt_id, vision)
        if self.cache is not None and (hit := self.cache.get(key)) is not None:
            with self._lock:
                self._n.cached += 1
            return hit
        payload = {"model": model, "messages": list(messages), "max_tokens": max_tokens, "temperature": 0}
        deadline = time.monotonic() + self.deadline_s if self.deadline_s else None
        with self._gate:
            with self._lock:
                if self._n.failing >= BREAKER:  # a dead endpoint: fail fast instead of retrying every chunk
                    raise TransformError(
                        f"not sent: the endpoint failed {self._n.failing} requests in a row (last: {self._n.last_error})",
                        unreached=True,
                    )
                self._n.calls += 1
            try:
                reply = self.client.chat(payload, deadline=deadline)
            except HttpApiError as e:
                with self._lock:  # retries exhausted (429, 5xx, timeouts, connection): count towards the breaker
                    if e.status is None:
                        self._n.failing, self._n.last_error = self._n.failing + 1, str(e)[:200]
                raise TransformError(str(e), unreached=e.status is None) from None
            with self._lock:
                self._n.failing = 0
        self._count(messages, reply.content, reply.prompt_tokens, reply.completion_tokens)
        if reply.finish_reason in REFUSALS:
            raise TransformError(f"the model refused the content (finish_reason {reply.finish_reason})")
        if not reply.content.strip():
            raise TransformError(f"the model answered nothing (finish_reason {reply.finish_reason or 'none'})")
        if validate is not None:
            try:
                validate(reply.content)
            except ValueError as e:
                raise TransformError(f"malformed reply: {e}") from None
        if self.cache is not None:  # only replies that passed: a malformed one is asked again next time
            self.cache.put(key, reply.content)
        return reply.content

    def _count(self, messages: Sequence[Mapping[str, Any]], content: str, prompt: int, completion: int) -> None:
        with self._lock:
            if not prompt:
                self._n.estimated = True
                prompt, completion = messages_tokens(messages), estimate_tokens(content)
            self._n.prompt_tokens += prompt
            self._n.completion_tokens += completion

    def usage(self) -> LLMUsage:
        with self._lock:
            n = self._n
            cost = (n.prompt_tokens * self.prices[0] + n.completion_tokens * self.prices[1]) / 1e6
            tokens = (n.prompt_tokens, n.completion_tokens)
            return LLMUsage(n.calls, n.cached, *tokens, round(cost, 6), CURRENCY, n.estimated)


@dataclass(frozen=True)
class PlannedCall:
    prompt_id: str
    model: str
    tokens: int  # estimated prompt tokens
    cached: bool
    preview: str  # the start of the last message's text


class PlanningService(LLMService):
    """A dry run: records each request."""

    def __init__(self, model: str, *, vision_model: str | None = None, cache: ReplyCache | None = None) -> None:
        super().__init__(None, model, vision_model=vision_model, cache=cache)  # type: ignore[arg-type]
        self.planned: list[PlannedCall] = []

    def chat(self, messages: Sequence[Mapping[str, Any]], *, prompt_id: str, vision: bool = False, **_: Any) -> str:
        key = self.key(messages, prompt_id, vision)
        cached = self.cache is not None and self.cache.get(key) is not None
        last = messages[-1].get("content", "") if messages else ""
        text = last if isinstance(last, str) else " ".join(str(p.get("text", "")) for p in last)
        model = self.vision_model if vision else self.model
        with self._lock:
            self.planned.append(PlannedCall(prompt_id, model, messages_tokens(messages), cached, text))
        raise TransformError("dry run: nothing sent")


def build_service(
    settings: LLMSettings, cache_dir: Path | None, *, deadline_s: float | None = None
) -> LLMService | None:
    """The chat service of ``llm.*`` (None when no endpoint or model is set)."""
    if not settings.base_url or not settings.model:
        return None
    cache = ReplyCache(cache_dir / LLM_CACHE_FILE) if cache_dir else None
    return LLMService(
        client_from(settings, max_retries=MAX_RETRIES, max_connections=CONCURRENCY),
        settings.model,
        vision_model=settings.vision_model,
        cache=cache,
        concurrency=CONCURRENCY,
        prices=(settings.price_input, settings.price_output),
        deadline_s=deadline_s,
    )
