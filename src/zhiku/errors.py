"""zhiku's exception hierarchy. Messages are what users read: they name the bad value and the fix."""

from __future__ import annotations


class ZhikuError(Exception):
    """Base of every error zhiku raises on purpose. ``code`` is stable (SCREAMING_SNAKE_CASE)."""

    code = "ZHIKU_ERROR"
    retryable = False


class ConfigError(ZhikuError):
    code = "INVALID_CONFIG"


class InvalidInput(ZhikuError):
    """A request the caller can fix (empty query, k out of range, malformed filter)."""

    code = "INVALID_INPUT"


class IngestError(ZhikuError):
    code = "INGEST_FAILED"


class LoaderError(IngestError):
    """A file could not be read or decoded."""

    code = "LOADER_FAILED"


class UnsupportedFormat(IngestError):
    code = "UNSUPPORTED_FORMAT"


class StoreError(ZhikuError):
    code = "STORE_ERROR"


class IndexLocked(StoreError):
    code = "INDEX_LOCKED"
    retryable = True


class ReadOnlyIndex(StoreError):
    code = "INDEX_READ_ONLY"


class IndexMismatch(StoreError):
    """The index was built with another embedder, tokenizer or chunking; it needs a rebuild."""

    code = "INDEX_MISMATCH"


class NotFound(ZhikuError):
    code = "NOT_FOUND"


class IndexNotFound(StoreError, NotFound):
    """There is no index to read at the given directory."""

    code = "INDEX_NOT_FOUND"


class EmbeddingError(ZhikuError):
    code = "EMBEDDING_FAILED"
    retryable = True


class Busy(ZhikuError):
    """The server's embedding model had no turn for this call before its deadline."""

    code = "BUSY"
    retryable = True


class MissingDependency(ZhikuError):
    code = "MISSING_DEPENDENCY"


class ModelIntegrityError(ZhikuError):
    """A model file does not match the SHA-256 (or size) pinned in the model manifest."""

    code = "MODEL_INTEGRITY"


class RerankError(ZhikuError):
    """A reranker failed (model missing, endpoint unreachable, unparseable output); queries fall back to the fused order."""

    code = "RERANK_FAILED"
    retryable = True
