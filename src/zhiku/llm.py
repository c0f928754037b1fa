"""The LLM every feature talks to: the chat protocol and its error, prompts in Chinese and English (built in or from
``llm.prompts_dir``), the persistent reply cache (SQLite, ``key → content``) and the cached, rate-limited service."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any, Protocol

from zhiku.cache import memoized
from zhiku.errors import ConfigError, ZhikuError
from zhiku.openai_http import HttpApiError, OpenAICompatibleClient, client_from
from zhiku.settings import LLMSettings
from zhiku.types import LLMUsage


class TransformError(ZhikuError):
    """One transform step failed for one chunk or document (timeout, 429 after retries, malformed or refused output)."""

    code = "TRANSFORM_FAILED"
    retryable = True

    def __init__(self, message: str, *, unreached: bool = False) -> None:
        super().__init__(message)
        self.unreached = unreached  # the endpoint gave no answer (not a refused or malformed one)


class ChatService(Protocol):
    """The shared OpenAI-compatible chat endpoint, cached and rate-limited."""

    @property
    def model(self) -> str: ...

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        prompt_id: str,
        max_tokens: int = 256,
        vision: bool = False,
        validate: Callable[[str], object] | None = None,
    ) -> str: ...


_WRAP = re.compile(r"^\s*(?:<(\w+)>)?\s*(.*?)\s*(?:</\1>)?\s*$", re.S)


def clean_reply(text: str, limit: int = 0) -> str:
    """A reply without wrapping tags, quotes or blank runs; cut to ``limit`` characters when given."""
    m = _WRAP.match(text)
    body = (m.group(2) if m else text).strip().strip("\"'“”「」").strip()
    body = re.sub(r"\n\s*\n+", "\n", body)
    return body[:limit].rstrip() if limit and len(body) > limit else body


LLM_CACHE_FILE = "llm.sqlite"


class ReplyCache:
    """``responses(key, content)`` in SQLite; safe across threads and processes."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self._lock = threading.Lock()
        try:
            if read_only:
                self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30, check_same_thread=False)
                self._db.execute("select 1 from sqlite_master limit 1")
                return
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(path), timeout=30, check_same_thread=False, isolation_level=None)
            self._db.execute("create table if not exists responses(key text primary key, content text not null)")
        except sqlite3.DatabaseError as e:  # a damaged or foreign file: say which, and that it is only a cache
            raise ConfigError(
                f"the LLM reply cache {path} cannot be opened ({e}): it is only a cache, delete the file (or set "
                "cache_dir: null)"
            ) from None

    def get(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("select content from responses where key = ?", (key,)).fetchone()
        return str(row[0]) if row else None

    def put(self, key: str, content: str) -> None:
        with self._lock:
            self._db.execute("insert or replace into responses values (?, ?)", (key, content))


def json_object_in(text: str) -> dict[str, Any]:
    body = text.strip()
    if fence := re.search(r"```(?:json)?\s*(.*?)```", body, re.S):
        body = fence.group(1).strip()
    if not body.startswith("{"):
        start, end = body.find("{"), body.rfind("}")
        body = body[start : end + 1] if 0 <= start < end else body
    try:
        value = json.loads(body)
    except json.JSONDecodeError as e:
        raise ValueError(f"did not reply with JSON ({e.msg} at char {e.pos}): {text[:80]!r}") from None
    if not isinstance(value, dict):
        raise ValueError(f"replied with JSON {type(value).__name__}, not an object: {text[:80]!r}")
    return value


PROMPT_NAMES = ("contextual", "refine", "metadata", "caption", "multi_query", "hyde")
PROMPTS = 64  # prompt texts kept (names × languages)
_CJK_LETTERS = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def detect_language(text: str) -> str:
    """``zh`` when at least a fifth of the letters (sampled from the first 4000 characters) are CJK, else ``en``."""
    sample = text[:4000]
    letters = sum(ch.isalpha() for ch in sample)
    return "zh" if letters and len(_CJK_LETTERS.findall(sample)) / letters >= 0.2 else "en"


class Prompts:
    """Prompt texts by (name, language); user files win over the built-in ones."""

    def __init__(self, override_dir: Path | None = None) -> None:
        if override_dir is not None and not override_dir.is_dir():
            raise ConfigError(f"llm.prompts_dir {override_dir} is not a folder (create it or unset llm.prompts_dir)")
        self.override_dir = override_dir
        self._texts = memoized(PROMPTS)(self._read)

    def text(self, name: str, language: str) -> str:
        return self._texts(f"{name}.{language}.txt")

    def _read(self, file: str) -> str:
        user = self.override_dir / file if self.override_dir is not None else None
        if user is not None and user.is_file():
            return user.read_text(encoding="utf-8")
        try:
            return resources.files("zhiku").joinpath(f"data/prompts/{file}").read_text("utf-8")
        except FileNotFoundError:
            raise ConfigError(f"no prompt {file!r} (built-in prompts: {', '.join(PROMPT_NAMES)})") from None

    def render(self, name: str, language: str, **values: object) -> str:
        return Template(self.text(name, language)).safe_substitute({k: str(v) for k, v in values.items()})

    def id_of(self, name: str) -> str:
        """The prompt's id in cache keys: ``contextual@builtin-1`` or ``contextual@user-1``."""
        user = self.override_dir is not None and any(self.override_dir.glob(f"{name}.*.txt"))
        return f"{name}@{'user' if user else 'builtin'}-1"


_CJK_WIDE = re.compile(r"[\u3000-\u9fff\uf900-\ufaff\uff00-\uffef]")
REFUSALS = ("content_filter", "content-filter", "safety")
CONCURRENCY = 4  # requests in flight at once: faster runs without tripping a hosted API's rate limit
MAX_RETRIES = 3  # on 429, 5xx, timeouts and lost connections (`Retry-After` honoured)
CURRENCY = "USD"  # the unit of `llm.price_input` / `llm.price_output`
BREAKER = 8  # consecutive requests that failed after their retries; then the endpoint is not called again this run


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate: one token per CJK character, one per four other characters."""
    cjk = len(_CJK_WIDE.findall(text))
    return cjk + (len(text) - cjk + 3) // 4


def messages_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    total = 0
    for m in messages:
        content = m.get("content", "")
        parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
        for p in parts:
            total += estimate_tokens(str(p.get("text", ""))) if p.get("type") == "text" else 765  # one image tile set
    return total + 4 * len(messages)


class LLMService:
    """``chat(messages, prompt_id=…)`` → the reply text, or ``TransformError`` with the reason."""

    def __init__(
        self,
        client: OpenAICompatibleClient,
        model: str,
        *,
        vision_model: str | None = None,
        cache: ReplyCache | None = None,
        prices: tuple[float, float] = (0.0, 0.0),
        deadline_s: float | None = None,
    ) -> None:
        self.client, self.model, self.vision_model = client, model, vision_model or model
        self.cache, self.prices, self.deadline_s = cache, prices, deadline_s
        self._gate = threading.Semaphore(CONCURRENCY)
        self._lock = threading.Lock()
        self._calls = self._cached = self._prompt_tokens = self._completion_tokens = 0
        self._estimated, self._failing, self._last_error = False, 0, ""  # _failing: requests that failed in a row

    def key(self, messages: Sequence[Mapping[str, Any]], prompt_id: str, vision: bool = False) -> str:
        parts = [self.vision_model if vision else self.model, prompt_id, list(messages)]
        return hashlib.sha256(json.dumps(parts, ensure_ascii=False, sort_keys=True).encode()).hexdigest()

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
                self._cached += 1
            return hit
        payload = {"model": model, "messages": list(messages), "max_tokens": max_tokens, "temperature": 0}
        deadline = time.monotonic() + self.deadline_s if self.deadline_s else None
        with self._gate:
            with self._lock:
                if self._failing >= BREAKER:  # a dead endpoint: fail fast instead of retrying every chunk
                    raise TransformError(
                        f"not sent: the endpoint failed {self._failing} requests in a row (last: {self._last_error})",
                        unreached=True,
                    )
                self._calls += 1
            try:
                reply = self.client.chat(payload, deadline=deadline)
            except HttpApiError as e:
                with self._lock:  # retries exhausted (429, 5xx, timeouts, connection): count towards the breaker
                    if e.status is None:
                        self._failing, self._last_error = self._failing + 1, str(e)[:200]
                raise TransformError(str(e), unreached=e.status is None) from None
            with self._lock:
                self._failing = 0
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
                self._estimated = True
                prompt, completion = messages_tokens(messages), estimate_tokens(content)
            self._prompt_tokens += prompt
            self._completion_tokens += completion

    def usage(self) -> LLMUsage:
        with self._lock:
            tokens = (self._prompt_tokens, self._completion_tokens)
            cost = (tokens[0] * self.prices[0] + tokens[1] * self.prices[1]) / 1e6
            return LLMUsage(self._calls, self._cached, *tokens, round(cost, 6), CURRENCY, self._estimated)


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
        prices=(settings.price_input, settings.price_output),
        deadline_s=deadline_s,
    )
