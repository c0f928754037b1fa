"""The ``Store`` protocol: what every storage backend provides, split into the roles its callers use.

- ``Writer``: what an ingest needs (write/delete documents, the history, change detection);
- ``Retriever``: what a search needs (BM25, dense, the chunks of the hits, the version caches key on);
- ``Catalogue``: browsing what is stored (documents, their chunks, collections, history);
- ``IndexAdmin``: index metadata, version and closing.

A caller is typed against the role it needs; ``Store`` is all four (what a backend implements).

Backends hold documents, chunks, their index tokens (for BM25) and vectors (for dense search), the
ingestion history and index metadata. Every backend passes ``tests/contracts/test_store_contract.py``
unchanged. Retrieval, fusion and answers depend on this protocol, never on a concrete class.

A backend stores every field of ``DocRecord`` and ``Chunk`` and gives them back equal, including
``DocRecord.status`` / ``needs_ocr_pages`` / ``ocr_pages`` and ``Chunk.images`` (``ImageRef`` tuples); a
document may have no chunks at all (a scan that still needs OCR). Image files themselves are not the store's:
they live in ``<index>/images`` (``zhiku.ingest.images.ImageStore``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Protocol, runtime_checkable

import numpy as np

from zhiku.errors import InvalidInput
from zhiku.types import Chunk, CollectionStats, DocRecord, Filters, IngestionRecord, ScoredId


@runtime_checkable
class Writer(Protocol):
    def write_document(
        self, doc: DocRecord, chunks: Sequence[Chunk], tokens: Sequence[Sequence[str]], vectors: np.ndarray
    ) -> None:
        """Store ``doc`` with its chunks, replacing any older version of the same ``doc.doc_id``.

        ``tokens[i]`` are the BM25 index terms of ``chunks[i]``; ``vectors[i]`` its L2-normalised float32
        embedding (shape ``(len(chunks), dim)``). Atomic: readers see the old version or the new one, never
        a mix; on any error nothing changes. Raises ``StoreError``/``IndexMismatch`` on a wrong dim.
        """
        ...

    def delete_document(self, doc_id: str) -> bool:
        """Remove a document and all its chunks from every index. Returns False if it was not there."""
        ...

    def record_ingestion(self, record: IngestionRecord) -> None:
        """Append one line to the ingestion history."""
        ...

    def find_document(self, collection: str, source: str) -> DocRecord | None:
        """The stored document for a source path in a collection (used for change detection)."""
        ...

    def list_documents(self, collection: str | None = None) -> list[DocRecord]:
        """Every document (of one collection), ordered by collection, then source."""
        ...


@runtime_checkable
class Retriever(Protocol):
    def bm25_search(
        self, terms: Sequence[str], top_k: int, filters: Filters = Filters(), rare: Sequence[str] = ()
    ) -> Sequence[ScoredId]:
        """Chunks matching any of ``terms`` (OR), best BM25 first (each ``rank`` its 1-based position: hits report
        the position); scores are positive, higher is better. ``rare``: more terms, each scored only where it is
        rare in the index (a store that cannot tell leaves them out)."""
        ...

    def dense_search(self, vector: np.ndarray, top_k: int, filters: Filters = Filters()) -> Sequence[ScoredId]:
        """Nearest chunks by cosine similarity (vectors are L2-normalised), best first (``rank``: the position)."""
        ...

    def dense_scores(self, vector: np.ndarray, chunk_ids: Sequence[str]) -> dict[str, float]:
        """The exact cosine of each of ``chunk_ids`` (as ``dense_search`` scores it); unknown ids are left out.
        Hybrid fusion uses it for BM25 candidates outside the dense ranking."""
        ...

    def get_chunks(self, chunk_ids: Sequence[str]) -> list[Chunk]:
        """The chunks with these ids, in the order asked; unknown ids are left out."""
        ...

    def index_version(self) -> int:
        """A counter bumped by every write or delete (caches key on it)."""
        ...

    def warm(self) -> None:
        """Load now what the first search would load (e.g. the vectors), so the first query is not the slow one."""
        ...


@runtime_checkable
class BestCosines(Protocol):
    """Optional for a ``Retriever``: each chunk's best cosine over several query vectors in one call (the clause
    channel's; without it, ``dense_scores`` is called once per vector)."""

    def best_dense_scores(self, vectors: Sequence[np.ndarray], chunk_ids: Sequence[str]) -> dict[str, float]:
        """The highest of ``dense_scores(v, chunk_ids)`` over ``vectors``, per chunk (the same floats)."""
        ...


@runtime_checkable
class FilledDense(Protocol):
    """Optional for a ``Retriever``: ``dense_search`` and the ``dense_scores`` of ``others``' candidates outside
    its ranking in one call (hybrid fusion's; without it, the two calls)."""

    def dense_filled(
        self, vector: np.ndarray, top_k: int, filters: Filters, others: Sequence[ScoredId]
    ) -> tuple[Sequence[ScoredId], dict[str, float]]: ...


@runtime_checkable
class StoredVectors(Protocol):
    """Optional for a ``Retriever``: the stored vectors of chunks (an English question's second dense search)."""

    def chunk_vectors(self, chunk_ids: Sequence[str]) -> np.ndarray: ...


@runtime_checkable
class WeightedBM25(Protocol):
    """Optional for a ``Retriever``: BM25 with a weight per term, and how many chunks hold each term (bridged terms
    of an English question; without it, ``bm25_search`` of every term)."""

    def bm25_weighted(
        self, weights: Mapping[str, float], top_k: int, filters: Filters = Filters()
    ) -> Sequence[ScoredId]: ...

    def term_counts(self, terms: Sequence[str]) -> dict[str, int]: ...


@runtime_checkable
class ChunkPlaces(Protocol):
    """Optional for a ``Retriever``: where chunks are without decoding them (trace labels of ranked candidates;
    without it, ``get_chunks``)."""

    def chunk_places(self, chunk_ids: Sequence[str]) -> dict[str, tuple[str, str, int | None]]:
        """``(source, section, page)`` of each of ``chunk_ids`` that exists, by chunk id."""
        ...


def places_reader(store: Retriever) -> Callable[[Sequence[str]], dict[str, tuple[str, str, int | None]]]:
    """``store.chunk_places`` (``ChunkPlaces``), or the same read from its chunks for a store without it."""
    if isinstance(store, ChunkPlaces):
        return store.chunk_places
    return lambda chunk_ids: {c.chunk_id: (c.source, c.section, c.page) for c in store.get_chunks(chunk_ids)}


@runtime_checkable
class OneVersion(Protocol):
    """Optional for a ``Retriever``: the reads of one search (its channels, the fill, the chunks and articles of
    its hits) see the index at one version, read once; a store without it reads the version at each call."""

    def pinned(self) -> AbstractContextManager[None]:
        """Inside it, this thread's reads see one index version (nested: the outer one's)."""
        ...


@runtime_checkable
class Catalogue(Protocol):
    def get_document(self, doc_id: str) -> DocRecord | None: ...

    def find_document(self, collection: str, source: str) -> DocRecord | None: ...

    def list_documents(self, collection: str | None = None) -> list[DocRecord]: ...

    def get_chunks(self, chunk_ids: Sequence[str]) -> list[Chunk]: ...

    def document_chunks(self, doc_id: str) -> list[Chunk]:
        """All chunks of a document in order."""
        ...

    def collections(self) -> list[CollectionStats]: ...

    def ingestion_history(self, limit: int = 100) -> list[IngestionRecord]:
        """Newest first."""
        ...


@runtime_checkable
class IndexAdmin(Protocol):
    def get_meta(self) -> dict[str, str]:
        """Index metadata (tokenizer, embedder, dim, chunking, schema version, index version)."""
        ...

    def set_meta(self, values: dict[str, str]) -> None: ...

    def index_version(self) -> int:
        """A counter bumped by every write or delete (caches key on it)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Store(Writer, Retriever, Catalogue, IndexAdmin, Protocol):
    """Every role: what a backend implements (``tests/contracts`` checks it)."""


ROLES: tuple[type, ...] = (Writer, Retriever, Catalogue, IndexAdmin)


def check_meta(values: Mapping[str, str], managed: frozenset[str]) -> None:
    """``set_meta``'s values: strings, none of the keys the store manages itself."""
    for key, value in values.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidInput(f"index metadata keys and values must be strings, got {key!r}: {value!r}")
        if key in managed:
            raise InvalidInput(f"index metadata {key!r} is managed by the store and cannot be set")
