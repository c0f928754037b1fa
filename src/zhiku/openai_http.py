"""The one client for OpenAI-compatible HTTP APIs (``/v1/embeddings``, ``/v1/chat/completions``)."""

from __future__ import annotations

import email.utils
import json
import random
import threading
import time
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zhiku.errors import MissingDependency, ZhikuError

if TYPE_CHECKING:
    from zhiku.settings import Endpoint

RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
MAX_RETRY_AFTER_S = 120.0


class HttpApiError(ZhikuError):
    """A request to an OpenAI-compatible endpoint failed (after its retries)."""

    code = "UPSTREAM_ERROR"
    retryable = True

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class _Retryable(Exception):
    """One failed attempt that may be retried; ``wait`` is the server's Retry-After."""

    def __init__(self, reason: str, wait: float | None = None) -> None:
        super().__init__(reason)
        self.reason, self.wait = reason, wait


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    with suppress(ValueError):
        return max(0.0, float(value))
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def backoff_s(attempt: int, base: float, cap: float, rng: Any = None) -> float:
    """Exponential backoff with full jitter in [base·2^attempt / 2, base·2^attempt], capped."""
    full = min(cap, base * (2**attempt))
    return float(full / 2 + (rng or random).random() * full / 2)


@dataclass(frozen=True)
class ChatReply:
    """A chat completion's text and the token counts the endpoint reported (0 when it did not)."""

    content: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = ""


class OpenAICompatibleClient:
    """POSTs JSON to ``base_url + path`` with retries; thread-safe (one pooled ``httpx.Client``)."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 5,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        max_connections: int = 8,
    ) -> None:
        try:
            import httpx
        except ImportError as e:
            raise MissingDependency(
                f"OpenAI-compatible endpoints need httpx: pip install 'zhiku[remote]' ({e})"
            ) from None
        self._httpx = httpx
        self.base_url = base_url.rstrip("/")
        self.timeout, self.max_retries = timeout, max_retries
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        headers = {"Content-Type": "application/json", "User-Agent": "zhiku"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(timeout, pool=None),
            limits=httpx.Limits(max_connections=max_connections),
        )
        self._count = threading.Lock()
        self.requests = 0  # HTTP attempts made (tests and benchmarks read it)

    def post(self, path: str, payload: dict[str, Any], *, deadline: float | None = None) -> dict[str, Any]:
        url = f"{self.base_url}/{path.lstrip('/')}"
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        attempts = 0
        while True:
            try:
                return self._attempt(url, body, deadline)
            except _Retryable as e:
                attempts += 1
                pause = backoff_s(attempts - 1, self.backoff_s, self.max_backoff_s)
                pause = pause if e.wait is None else min(e.wait, MAX_RETRY_AFTER_S)
                if attempts > self.max_retries or (deadline is not None and time.monotonic() + pause >= deadline):
                    raise HttpApiError(f"{url} failed after {attempts} attempt(s): {e.reason}") from None
                time.sleep(pause)

    def _attempt(self, url: str, body: bytes, deadline: float | None = None) -> dict[str, Any]:
        httpx = self._httpx
        with self._count:
            self.requests += 1
        limit = self.timeout if deadline is None else max(0.05, min(self.timeout, deadline - time.monotonic()))
        try:
            resp = self._post_by(url, body, limit, deadline)
        except httpx.TimeoutException as e:
            raise _Retryable(f"timed out after {limit:.3g}s ({type(e).__name__})") from None
        except httpx.TransportError as e:
            raise _Retryable(f"connection failed ({type(e).__name__}: {e})") from None
        if resp.status_code >= 300:
            last = f"HTTP {resp.status_code}: {_error_text(resp)}"
            if resp.status_code in RETRY_STATUSES:
                raise _Retryable(last, retry_after_s(resp.headers.get("Retry-After")))
            hint = " (check the API key and its environment variable)" if resp.status_code in (401, 403) else ""
            raise HttpApiError(f"{url} refused the request: {last}{hint}", resp.status_code)
        try:
            data = resp.json()
        except ValueError:
            raise HttpApiError(
                f"{url} answered {resp.status_code} with non-JSON: {resp.text[:200]!r}", resp.status_code
            ) from None
        if not isinstance(data, dict):
            raise HttpApiError(f"{url} answered JSON that is not an object: {resp.text[:200]!r}", resp.status_code)
        return data

    def _post_by(self, url: str, body: bytes, limit: float, deadline: float | None) -> Any:
        """A POST whose whole reply must have arrived by ``deadline`` (if any): httpx's timeouts bound each read."""
        httpx = self._httpx
        request = self._client.build_request("POST", url, content=body, timeout=httpx.Timeout(limit, pool=None))
        resp = self._client.send(request, stream=True)
        try:
            raw = bytearray()
            for part in resp.iter_raw():
                raw += part
                if deadline is not None and time.monotonic() >= deadline:
                    raise _Retryable(f"timed out after {limit:.3g}s (the reply was still arriving)")
        finally:
            resp.close()
        return httpx.Response(resp.status_code, headers=resp.headers, content=bytes(raw), request=request)

    def chat(self, payload: dict[str, Any], *, deadline: float | None = None) -> ChatReply:
        """POST ``chat/completions``; the first choice's text with the reported token usage."""
        data = self.post("chat/completions", payload, deadline=deadline)
        try:
            choice = data["choices"][0]
            content = choice["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise HttpApiError(
                f"the chat endpoint's answer has no choices[0].message.content: {str(data)[:160]}", 200
            ) from None
        if not isinstance(content, str):
            raise HttpApiError(f"the chat endpoint answered content that is not text: {str(content)[:160]}", 200)
        usage = data["usage"] if isinstance(data.get("usage"), dict) else {}
        tokens = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        return ChatReply(content, *tokens, str(choice.get("finish_reason") or ""))


def client_from(settings: Endpoint, *, max_retries: int = 5, max_connections: int = 8) -> OpenAICompatibleClient:
    """The client for a settings section's endpoint: its base URL, API key and timeout."""
    if not settings.base_url:
        raise ZhikuError("no endpoint configured: set base_url (e.g. http://127.0.0.1:8000/v1)")
    return OpenAICompatibleClient(
        settings.base_url,
        api_key=settings.api_key.get_secret_value() if settings.api_key else None,
        timeout=settings.timeout_s,
        max_retries=max_retries,
        max_connections=max_connections,
    )


def _error_text(resp: Any) -> str:
    try:
        data = resp.json()
        err = data.get("error", data) if isinstance(data, dict) else data
        msg = err.get("message", err) if isinstance(err, dict) else err
        return str(msg)[:300]
    except ValueError:
        return str(resp.text[:300] or resp.reason_phrase)
