"""A small client for OpenAI-compatible HTTP APIs (``/v1/embeddings``, ``/v1/chat/completions``).

Works with vLLM, Hugging Face TEI, Ollama, DashScope (compatible mode), SiliconFlow and OpenAI itself. It retries
a request that failed with 429, a 5xx status, a timeout or a lost connection, waiting ``Retry-After`` when the
server sends it (seconds or an HTTP date) and otherwise ``backoff_s * 2**attempt`` with jitter, capped at
``max_backoff_s``. Other 4xx statuses fail at once with the server's message. httpx is imported when a client is
made (``pip install 'zhiku[remote]'``).
"""

from __future__ import annotations

import email.utils
import json
import random
import time
from typing import Any

from zhiku.errors import MissingDependency, ZhikuError

RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class HttpApiError(ZhikuError):
    """A request to an OpenAI-compatible endpoint failed (after its retries)."""

    code = "UPSTREAM_ERROR"
    retryable = True

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def backoff_s(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Exponential backoff with full jitter in [base·2^attempt / 2, base·2^attempt], capped."""
    full = min(cap, base * (2**attempt))
    return full / 2 + (rng or random).random() * full / 2


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
        user_agent: str = "zhiku",
    ) -> None:
        try:
            import httpx
        except ImportError as e:
            raise MissingDependency(
                f"OpenAI-compatible endpoints need httpx: pip install 'zhiku[remote]' ({e})"
            ) from None
        self._httpx = httpx
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        headers = {"Content-Type": "application/json", "User-Agent": user_agent}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.Client(
            headers=headers, timeout=httpx.Timeout(timeout), limits=httpx.Limits(max_connections=max_connections)
        )
        self.requests = 0  # HTTP attempts made (tests and benchmarks read it)

    def close(self) -> None:
        self._client.close()

    def post(self, path: str, payload: dict[str, Any], *, deadline: float | None = None) -> dict[str, Any]:
        """The JSON object the endpoint answered. ``deadline`` (a ``time.monotonic()`` value) stops retrying."""
        url = f"{self.base_url}/{path.lstrip('/')}"
        httpx = self._httpx
        last = "no attempt"
        for attempt in range(self.max_retries + 1):
            wait: float | None = None
            try:
                self.requests += 1
                resp = self._client.post(url, content=json.dumps(payload, ensure_ascii=False).encode("utf-8"))
            except httpx.TimeoutException as e:
                last = f"timed out after {self.timeout:g}s ({type(e).__name__})"
            except httpx.TransportError as e:
                last = f"connection failed ({type(e).__name__}: {e})"
            else:
                if resp.status_code < 300:
                    try:
                        data = resp.json()
                    except ValueError:
                        raise HttpApiError(
                            f"{url} answered {resp.status_code} with non-JSON: {resp.text[:200]!r}", resp.status_code
                        ) from None
                    if not isinstance(data, dict):
                        raise HttpApiError(
                            f"{url} answered JSON that is not an object: {resp.text[:200]!r}", resp.status_code
                        )
                    return data
                last = f"HTTP {resp.status_code}: {_error_text(resp)}"
                if resp.status_code not in RETRY_STATUSES:
                    hint = " (check the API key and its environment variable)" if resp.status_code in (401, 403) else ""
                    raise HttpApiError(f"{url} refused the request: {last}{hint}", resp.status_code)
                wait = retry_after_s(resp.headers.get("Retry-After"))
            if attempt == self.max_retries:
                break
            delay = backoff_s(attempt, self.backoff_s, self.max_backoff_s) if wait is None else min(wait, 120.0)
            if deadline is not None and time.monotonic() + delay >= deadline:
                break
            time.sleep(delay)
        raise HttpApiError(f"{url} failed after {attempt + 1} attempt(s): {last}")


def _error_text(resp: Any) -> str:
    try:
        data = resp.json()
        err = data.get("error", data) if isinstance(data, dict) else data
        msg = err.get("message", err) if isinstance(err, dict) else err
        return str(msg)[:300]
    except ValueError:
        return resp.text[:300] or resp.reason_phrase
