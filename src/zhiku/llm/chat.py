"""The chat protocol every LLM feature talks to, the error it raises and how a reply is cleaned."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from zhiku.errors import ZhikuError


class TransformError(ZhikuError):
    """One transform step failed for one chunk or document (timeout, 429 after retries, malformed or refused output)."""

    code = "TRANSFORM_FAILED"
    retryable = True

    def __init__(self, message: str, *, unreached: bool = False) -> None:
        super().__init__(message)
        self.unreached = unreached  # the endpoint gave no answer (not a refused or malformed one)


@runtime_checkable
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
