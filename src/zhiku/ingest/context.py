"""What is embedded and BM25-indexed for a chunk, and whether it fits the embedder's window.

The stored and cited text is always the user's text (``Chunk.text``); only the *index text* gains the document
title and section path (``chunking.index_context``) so that a chunk that says ``本条`` or holds one article of
a long law still carries the law's name and chapter into retrieval, without an LLM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


def index_text(title: str, section: str, text: str, captions: Sequence[str] = (), *, context: bool = True) -> str:
    """What is embedded and tokenised for a chunk: (with ``context``) its title/section path, its text, then the
    captions of its images that the text does not already hold (so that "search text, find the picture" works)."""
    head = ""
    if context:
        head = section if title and section.startswith(title) else " > ".join(p for p in (title, section) if p)
    body = f"{head}\n{text}" if head else text
    extra = [c for c in dict.fromkeys(captions) if c and c not in text]
    return body + "".join(f"\n图片：{c}" for c in extra)


@runtime_checkable
class CountsTokens(Protocol):
    """An embedder that can say how many tokens it feeds for a passage, and its window."""

    @property
    def max_tokens(self) -> int: ...

    def token_count(self, text: str) -> int: ...


@dataclass(frozen=True)
class WindowCheck:
    """Index texts longer than the embedder's window (``max_tokens``), by position; ``None`` when the
    embedder cannot count tokens."""

    max_tokens: int | None
    over: tuple[int, ...] = ()
    longest: int = 0


def check_window(embedder: object, texts: Sequence[str]) -> WindowCheck:
    """Count the index texts the embedder cannot see whole (it would truncate or window them)."""
    inner = getattr(embedder, "inner", embedder)  # the embedding cache wraps the model
    if not isinstance(inner, CountsTokens):
        return WindowCheck(None)
    counts = [inner.token_count(t) for t in texts]
    limit = inner.max_tokens
    return WindowCheck(limit, tuple(i for i, n in enumerate(counts) if n > limit), max(counts, default=0))


def note_window(embedder: object, texts: Sequence[str], span: Any) -> int:
    """``check_window`` recorded on the ingest trace's ``embed`` span; returns how many texts are over."""
    window = check_window(embedder, texts)
    span.set(counts={"over_window": len(window.over)}, max_tokens=window.max_tokens, longest_tokens=window.longest)
    return len(window.over)
