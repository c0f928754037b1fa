"""How the server runs many tool calls at once: reads in parallel, writes one at a time (the registry's
limiter), nobody starved. A reader sees a document before or after a write, never half of it (the store's
contract); a write holds up a reader for at most one store transaction or one embedding slice
(:class:`SerialEmbedder`); identical queries arriving together share one search (:class:`SingleFlight`: after
a write moves the index version every client misses the result cache at once)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np

from zhiku.embedding.base import Embedder, embed_queries

V = TypeVar("V")
EMBED_SLICE = 16  # texts embedded per hold of the model lock (~1-2 s with the bundled model on 2 cores)


class SerialEmbedder:
    """An ``Embedder`` whose model is used by one thread at a time: an ingest's texts in slices of
    ``EMBED_SLICE``, so a query's one text waits for at most one slice, not for the whole batch."""

    def __init__(self, inner: Embedder, slice_size: int = EMBED_SLICE) -> None:
        self.inner = inner
        self.slice_size = slice_size
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        parts = []
        for start in range(0, len(texts), self.slice_size):
            with self._lock:
                parts.append(self.inner.embed_documents(texts[start : start + self.slice_size]))
        return np.concatenate(parts) if parts else np.zeros((0, self.dim), np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        with self._lock:
            return self.inner.embed_query(text)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            return embed_queries(self.inner, texts)

    def __getattr__(self, name: str) -> object:  # `computed`, warm-up hooks and the like of the wrapped embedder
        return getattr(self.inner, name)


@dataclass
class _Call(Generic[V]):
    done: threading.Event = field(default_factory=threading.Event)
    value: V | None = None
    error: BaseException | None = None


class SingleFlight(Generic[V]):
    """``run(key, fn)``: ``fn()``, shared by every caller that asks for the same key while it runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[Hashable, _Call[V]] = {}

    def run(self, key: Hashable, fn: Callable[[], V]) -> V:
        with self._lock:
            call = self._calls.get(key)
            leader = call is None
            if call is None:
                call = self._calls[key] = _Call()
        if not leader:
            call.done.wait()
            if call.error is not None:
                raise call.error
            return call.value  # type: ignore[return-value]
        try:
            call.value = fn()
            return call.value
        except BaseException as e:
            call.error = e
            raise
        finally:
            with self._lock:
                del self._calls[key]
            call.done.set()
