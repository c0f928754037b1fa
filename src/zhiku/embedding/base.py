"""The ``Embedder`` protocol."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from zhiku.errors import EmbeddingError


@runtime_checkable
class Embedder(Protocol):
    @property
    def name(self) -> str:
        """Fingerprint of the model (id + revision/weights hash); stored in the index and the embedding cache."""
        ...

    @property
    def dim(self) -> int: ...

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), dim)`` float32, each row L2-normalised."""
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """``(dim,)`` float32, L2-normalised."""
        ...


class Wrapper:
    """An embedder around ``inner``, with its name and dim."""

    inner: Embedder

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dim(self) -> int:
        return self.inner.dim


def embed_queries(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """Several questions in one call of ``embed_queries`` when the embedder has one, else one ``embed_query`` each."""
    batched = getattr(embedder, "embed_queries", None)
    if batched is not None:
        out = np.asarray(batched(texts), dtype=np.float32)
        if out.ndim == 1 and len(texts) == 1:
            out = out.reshape(1, -1)
        if out.ndim != 2 or out.shape[0] != len(texts):  # a reshape would cut a short answer into wrong vectors
            got = out.shape[0] if out.ndim == 2 else f"an array of shape {out.shape} as"
            raise EmbeddingError(
                f"embedder answered {got} vectors for {len(texts)} questions ({embedder.name}): "
                "its embed_queries must return one row per text"
            )
        return out
    return np.vstack([embedder.embed_query(t) for t in texts]) if texts else np.zeros((0, 0), np.float32)


def takes_several_queries(embedder: object) -> bool:
    """Whether ``embed_queries(embedder, texts)`` is one call of the model (the embedder and each it wraps)."""
    while getattr(embedder, "embed_queries", None) is not None:
        inner = getattr(embedder, "inner", None)
        if inner is None:
            return True
        embedder = inner
    return False
