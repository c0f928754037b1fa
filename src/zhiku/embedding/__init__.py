"""Embedders behind the ``Embedder`` protocol, and the persistent embedding cache."""

from __future__ import annotations

from zhiku.embedding.base import Embedder
from zhiku.embedding.bundled import BundledE5Embedder
from zhiku.embedding.cache import CachedEmbedder, EmbeddingCache
from zhiku.settings import EmbeddingSettings

__all__ = ["Embedder", "BundledE5Embedder", "CachedEmbedder", "EmbeddingCache", "build_embedder"]


def build_embedder(settings: EmbeddingSettings) -> Embedder:
    """The configured embedder, wrapped in the embedding cache when ``settings.cache`` is on."""
    inner: Embedder
    if settings.provider == "bundled":
        inner = BundledE5Embedder(threads=settings.threads, batch_size=settings.batch_size)
    else:  # pragma: no cover - the Literal type admits nothing else yet
        raise AssertionError(settings.provider)
    if not settings.cache:
        return inner
    return CachedEmbedder(inner, EmbeddingCache(settings.cache_dir / "embeddings.sqlite"))
