"""What is embedded and BM25-indexed for a chunk, and whether it fits the embedder's window.

The stored and cited text is always the user's text (``Chunk.text``); only the *index text* gains the document
title and section path so that a chunk that says ``本条`` or holds one article of
a long law still carries the law's name and chapter into retrieval, without an LLM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


def index_text(title: str, section: str, text: str, captions: Sequence[str] = ()) -> str:
    """What is embedded and tokenised for a chunk: its title/section path, its text, then the captions of its
    images that the text does not already hold (so that "search text, find the picture" works)."""
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


@runtime_checkable
class BoundsTokens(Protocol):
    """An embedder that can bound a passage's tokens cheaply (``token_bound(text) >= token_count(text)``)."""

    def token_bound(self, text: str) -> int: ...


@dataclass(frozen=True)
class WindowCheck:
    """Index texts longer than the embedder's window (``max_tokens``), by position; ``None`` when the
    embedder cannot count tokens. ``longest``: the most tokens of one text (at most that many, when the embedder's
    cheap bound already put every text inside the window and none was counted)."""

    max_tokens: int | None
    over: tuple[int, ...] = ()
    longest: int = 0


def check_window(embedder: object, texts: Sequence[str]) -> WindowCheck:
    """Count the index texts the embedder cannot see whole (it would truncate or window them). Texts that the
    embedder's ``token_bound`` puts inside the window are not tokenised (tokenising costs more than the BM25 tokens)."""
    inner = getattr(embedder, "inner", embedder)  # the embedding cache wraps the model
    if not isinstance(inner, CountsTokens):
        return WindowCheck(None)
    limit = inner.max_tokens
    bounds = [inner.token_bound(t) for t in texts] if isinstance(inner, BoundsTokens) else [limit + 1] * len(texts)
    counts = [inner.token_count(t) if b > limit else b for t, b in zip(texts, bounds, strict=True)]
    return WindowCheck(limit, tuple(i for i, n in enumerate(counts) if n > limit), max(counts, default=0))
