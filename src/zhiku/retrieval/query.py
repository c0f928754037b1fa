"""The checks of a search's options, and the vectors of questions asked before."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from zhiku.cache import Cache
from zhiku.errors import InvalidInput
from zhiku.types import SearchMode

MODES: tuple[SearchMode, ...] = ("bm25", "dense", "hybrid")
MAX_TOP_K = 100
MAX_QUERY_CHARS = 2000  # a longer question is a pasted document, refused
MAX_EMBED_CHARS = 256  # a question's start that is embedded (its forms and clauses): ~0.3 s on one core at most
QUERY_VECTORS = 1024  # question (and clause) vectors kept in memory (agents repeat questions; a write empties the result cache, not these): these skip the embedder


def check_top_k(top_k: int) -> int:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
        raise InvalidInput(f"top_k must be an integer from 1 to {MAX_TOP_K}, got {top_k!r}")
    return top_k


def check_mode(mode: str) -> SearchMode:
    if mode not in MODES:
        raise InvalidInput(f"unknown search mode {mode!r}: use one of {', '.join(MODES)}")
    return mode


class QueryVectors(Cache[np.ndarray]):
    """The last ``size`` question vectors by text; a non-finite one is not kept (asking again embeds again)."""

    def __init__(self, size: int = QUERY_VECTORS) -> None:
        super().__init__(size)

    def put(self, key: Hashable, value: np.ndarray, version: int = 0) -> None:
        kept = np.array(value, copy=True)
        if np.isfinite(kept).all():
            kept.setflags(write=False)  # shared by every later search of this question
            super().put(key, kept, version)
