"""An LLM judge over an OpenAI-compatible ``/v1/chat/completions`` endpoint, with an on-disk cache."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from zhiku.errors import InvalidInput, ZhikuError
from zhiku.llm.cache import ReplyCache, json_object_in
from zhiku.openai_http import HttpApiError, OpenAICompatibleClient
from zhiku.settings import Settings

CACHE_FILE = "judge.sqlite"
BREAKER = 3  # calls in a row the judge did not answer (after retries): the rest of the run sends none


class JudgeError(ZhikuError):
    code = "JUDGE_FAILED"


def parse_json_object(text: str) -> dict[str, Any]:
    """The JSON object in a model's reply (a ```json fence or surrounding prose is tolerated)."""
    try:
        return json_object_in(text)
    except ValueError as e:
        raise JudgeError(f"the judge {e}") from None


JudgeCache = ReplyCache  # the judge's responses: ``judge.sqlite`` in the cache folder


class JudgeClient:
    """Asks the judge model for JSON objects. ``calls`` counts HTTP requests (cache hits are free)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        cache: JudgeCache | None = None,
    ) -> None:
        base = base_url.rstrip("/")  # ``http://host:8000`` or ``http://host:8000/v1``
        base += "" if base.endswith("/v1") else "/v1"
        self.url = base + "/chat/completions"
        self.model = model
        self.cache = cache
        self.calls = 0
        self._failing, self._last = 0, ""  # calls in a row without an answer, and the last reason
        self._client = OpenAICompatibleClient(base, api_key=api_key, timeout=timeout, max_retries=2, backoff_s=0.25)

    def ask(self, system: str, user: str) -> dict[str, Any]:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        key = hashlib.sha256(json.dumps([self.model, messages], ensure_ascii=False).encode()).hexdigest()
        if self.cache is not None and (cached := self.cache.get(key)) is not None:
            return parse_json_object(cached)
        content = self._post(messages)
        value = parse_json_object(content)
        if self.cache is not None:
            self.cache.put(key, content)
        return value

    def _post(self, messages: list[dict[str, str]]) -> str:
        if self._failing >= BREAKER:
            raise JudgeError(f"not sent: the judge failed {self._failing} calls in a row (last: {self._last})")
        payload = {"model": self.model, "messages": messages, "temperature": 0}
        self.calls += 1
        try:
            content = self._client.chat(payload).content
        except HttpApiError as e:
            if e.status is not None and e.status < 300:
                raise JudgeError(f"the judge at {self.url} did not return an OpenAI-style JSON response") from None
            if e.status is not None:
                raise JudgeError(f"the judge at {self.url} answered HTTP {e.status}: {e}") from None
            self._failing, self._last = self._failing + 1, f"cannot reach the judge at {self.url}: {e}"
            raise JudgeError(f"{self._last} (check judge.base_url)") from None
        self._failing = 0
        return content


def build_judge(settings: Settings) -> JudgeClient | None:
    """The judge client, or None when no judge is configured (its API key read here, at the edge)."""
    j = settings.judge
    if not j.base_url or not j.model:
        return None
    if j.api_key_env and j.api_key is None:
        raise InvalidInput(f"judge.api_key_env names {j.api_key_env}, but that environment variable is empty")
    key = j.api_key.get_secret_value() if j.api_key else None
    cache = JudgeCache(settings.cache_dir / CACHE_FILE) if settings.cache_dir else None
    return JudgeClient(j.base_url, j.model, api_key=key, timeout=j.timeout_s, cache=cache)
