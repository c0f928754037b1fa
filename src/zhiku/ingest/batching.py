"""Embedding batches counted in chunks, not documents.

Documents queue in order; their texts are embedded in calls of ``batch_chunks`` texts (a call may span small documents,
a large one spreads over calls), and a document comes out, with its vectors, once all its texts are embedded, in the
order they went in. When a shared call fails for a reason other than the embedding service (``EmbeddingError``: every
document would fail alike, so it is raised), each of its documents is embedded alone, so that only one that fails by
itself is lost (handed to ``on_error``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np

from zhiku.embedding.base import Embedder
from zhiku.errors import ConfigError, EmbeddingError
from zhiku.observability.tracing import span

T = TypeVar("T")


@dataclass(eq=False)
class _Queued(Generic[T]):
    item: T
    texts: Sequence[str]
    parts: list[np.ndarray] = field(default_factory=list)
    done: int = 0  # texts embedded

    @property
    def left(self) -> int:
        return len(self.texts) - self.done


class EmbedBatcher(Generic[T]):
    """Queue documents with ``add``; take the finished ones from what ``add`` and ``finish`` return; ``on_batch(embedded,
    queued)`` after each call is the ingest's per-chunk progress."""

    def __init__(
        self,
        embedder: Embedder,
        batch_chunks: int,
        *,
        on_error: Callable[[T, Exception], None],
        on_batch: Callable[[int, int], None] | None = None,
    ) -> None:
        self.embedder = embedder
        self.batch_chunks = max(1, batch_chunks)
        self.on_error = on_error
        self.on_batch = on_batch
        self._queue: deque[_Queued[T]] = deque()
        self._waiting = 0  # queued texts not embedded yet
        self._embedded = 0
        self._seen = 0

    def add(self, item: T, texts: Sequence[str]) -> list[tuple[T, np.ndarray]]:
        self._queue.append(_Queued(item, texts))
        self._waiting += len(texts)
        self._seen += len(texts)
        while self._waiting >= self.batch_chunks:
            self._embed_next(self.batch_chunks)
        return self._finished()

    def finish(self) -> list[tuple[T, np.ndarray]]:
        while self._waiting > 0:
            self._embed_next(min(self.batch_chunks, self._waiting))
        return self._finished()

    def _finished(self) -> list[tuple[T, np.ndarray]]:
        out = []
        while self._queue and self._queue[0].left == 0:
            q = self._queue.popleft()
            out.append((q.item, np.concatenate(q.parts) if q.parts else np.zeros((0, self.embedder.dim), np.float32)))
        return out

    def _embed_next(self, n: int) -> None:
        slices: list[tuple[_Queued[T], int]] = []  # (document, texts taken from it)
        taken = 0
        for q in self._queue:
            if taken == n:
                break
            if k := min(q.left, n - taken):
                slices.append((q, k))
                taken += k
        self._embed(slices)

    def _embed(self, slices: list[tuple[_Queued[T], int]]) -> bool:
        """One call; when a shared one fails, each document alone (one that fails by itself is dropped)."""
        try:
            vectors = self._call([t for q, k in slices for t in q.texts[q.done : q.done + k]])
        except (EmbeddingError, ConfigError):
            raise  # the service or model is down, or the embedding cache damaged: every document would fail alike
        except Exception as e:
            if len(slices) == 1:
                self._drop(slices[0][0], e)
            else:
                for q, _ in slices:
                    while q.left and self._embed([(q, min(q.left, self.batch_chunks))]):
                        pass
            return False
        offset = 0
        for q, k in slices:
            q.parts.append(vectors[offset : offset + k])
            q.done += k
            offset += k
        self._progress(offset)
        return True

    def _call(self, texts: Sequence[str]) -> np.ndarray:
        computed = getattr(self.embedder, "computed", 0)
        with span("embed") as sp:
            vectors = self.embedder.embed_documents(list(texts))
            sp.set(counts={"texts": len(texts), "computed": getattr(self.embedder, "computed", 0) - computed})
        if vectors.shape[0] != len(texts):
            raise ValueError(f"the embedder returned {vectors.shape[0]} vectors for {len(texts)} texts")
        return vectors

    def _drop(self, q: _Queued[T], error: Exception) -> None:
        self._queue.remove(q)
        self._waiting -= q.left
        self._seen -= len(q.texts)
        self._embedded -= q.done
        self.on_error(q.item, error)

    def _progress(self, k: int) -> None:
        self._waiting -= k
        self._embedded += k
        if self.on_batch is not None:
            self.on_batch(self._embedded, self._seen)
