"""zhiku's exception hierarchy. Messages are what users read: they name the bad value and the fix."""

from __future__ import annotations


class ZhikuError(Exception):
    """Base of every error zhiku raises on purpose. ``code`` is stable (SCREAMING_SNAKE_CASE)."""

    code = "ZHIKU_ERROR"
    retryable = False

    def __init_subclass__(cls, code: str = "", retryable: bool | None = None) -> None:
        super().__init_subclass__()
        cls.code = code or cls.code
        cls.retryable = cls.retryable if retryable is None else retryable


class ConfigError(ZhikuError, code="INVALID_CONFIG"): ...


class InvalidInput(ZhikuError, code="INVALID_INPUT"): ...  # a request the caller can fix


class IngestError(ZhikuError, code="INGEST_FAILED"): ...


class LoaderError(IngestError, code="LOADER_FAILED"): ...  # a file could not be read or decoded


class UnsupportedFormat(IngestError, code="UNSUPPORTED_FORMAT"): ...


class StoreError(ZhikuError, code="STORE_ERROR"): ...


class IndexLocked(StoreError, code="INDEX_LOCKED", retryable=True): ...


class ReadOnlyIndex(StoreError, code="INDEX_READ_ONLY"): ...


class IndexMismatch(StoreError, code="INDEX_MISMATCH"): ...  # built with another embedder, tokenizer or chunking


class NotFound(ZhikuError, code="NOT_FOUND"): ...


class IndexNotFound(StoreError, NotFound, code="INDEX_NOT_FOUND"): ...


class EmbeddingError(ZhikuError, code="EMBEDDING_FAILED", retryable=True): ...


class Busy(ZhikuError, code="BUSY", retryable=True): ...  # the embedding model had no turn before the deadline


class MissingDependency(ZhikuError, code="MISSING_DEPENDENCY"): ...


class ModelIntegrityError(ZhikuError, code="MODEL_INTEGRITY"): ...  # a file does not match its pinned SHA-256


class RerankError(ZhikuError, code="RERANK_FAILED", retryable=True): ...  # queries fall back to the fused order
