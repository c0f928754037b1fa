"""Many tool calls at once: callers take turns at the embedding model; identical queries share one search."""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Generic, TypeVar

import numpy as np

from zhiku.embedding.base import Embedder, Wrapper, embed_queries
from zhiku.errors import Busy

V = TypeVar("V")
EMBED_SLICE = 16  # an ingest's texts embedded per turn (~1-2 s with the bundled model on 2 cores)
EMBED_WAIT_S = 10.0  # longest a query waits for its turn at the model; then BUSY (retryable)
CALLER: ContextVar[Hashable] = ContextVar("zhiku_caller")  # whose turn a call takes (an MCP session; else the thread)
_DEADLINE: ContextVar[float] = ContextVar("zhiku_embed_deadline", default=float("inf"))


@contextmanager
def deadline(seconds: float = EMBED_WAIT_S) -> Iterator[None]:
    """Within the block, waits for the model end ``seconds`` from now (together, not each)."""
    token = _DEADLINE.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


class FairEmbedder(Wrapper):
    """Callers take turns round robin, ``workers`` questions at once; an ingest goes in slices, alone."""

    def __init__(self, inner: Embedder, slice_size: int = EMBED_SLICE, workers: int = os.cpu_count() or 1) -> None:
        self.inner = inner
        self.slice_size = slice_size
        self.workers = workers
        self._cond = threading.Condition()
        self._waiting: dict[Hashable, deque[object]] = {}  # callers with calls waiting, whose turn is next first
        self._busy = 0

    @contextmanager
    def _turn(self, places: int) -> Iterator[None]:
        caller, ticket, until = CALLER.get(threading.get_ident()), object(), _DEADLINE.get()
        with self._cond:
            queue = self._waiting.setdefault(caller, deque())
            queue.append(ticket)
            try:
                while next(iter(self._waiting.values()))[0] is not ticket or self._busy + places > self.workers:
                    if (left := until - time.monotonic()) <= 0:
                        raise Busy("the embedding model is busy with other clients' questions: retry in a few seconds")
                    self._cond.wait(min(left, 60))
            finally:
                queue.remove(ticket)
                del self._waiting[caller]
                if queue:  # its next call waits behind the other callers'
                    self._waiting[caller] = queue
                self._cond.notify_all()
            self._busy += places
        try:
            yield
        finally:
            with self._cond:
                self._busy -= places
                self._cond.notify_all()

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        parts = []
        for start in range(0, len(texts), self.slice_size):
            with self._turn(self.workers):
                parts.append(self.inner.embed_documents(texts[start : start + self.slice_size]))
        return np.concatenate(parts) if parts else np.zeros((0, self.dim), np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        with self._turn(1):
            return self.inner.embed_query(text)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        with self._turn(1):
            return embed_queries(self.inner, texts)

    def __getattr__(self, name: str) -> object:  # `computed`, warm-up hooks and the like of the wrapped embedder
        return getattr(self.inner, name)


class SingleFlight(Generic[V]):
    """``run(key, fn)``: ``fn()``, shared by every caller that asks for the same key while it runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[Hashable, Future[V]] = {}

    def run(self, key: Hashable, fn: Callable[[], V]) -> V:
        with self._lock:
            leader = key not in self._calls
            call = self._calls.setdefault(key, Future())
        if not leader:
            return call.result()
        try:
            call.set_result(fn())
        except BaseException as e:
            call.set_exception(e)
            raise
        finally:
            with self._lock:
                del self._calls[key]
        return call.result()
