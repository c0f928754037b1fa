"""The ``Transform`` protocol: one optional stage between chunking and embedding.

A transform gets a ``DocumentBatch`` (the loaded document, its chunks and what earlier transforms added) and returns
a new one. It never changes ``Chunk.text`` (citations quote the original); it adds to the chunk's ``Enrichment``
(a context, a refined text for indexing, a title, summary and tags), to the document's ``DocMeta``, or fills
``ImageRef.caption``. Anything it could not do goes into ``issues`` — the chunk is kept without it.

LLM calls go through ``TransformContext.llm`` (a ``ChatService``): it caches answers by (model, prompt id with its
version, input hash), limits concurrency, retries and counts tokens. A ``ChatService`` raises ``TransformError``
with a reason the ingest summary shows; a transform catches it per chunk and records an issue.

Third-party transforms are classes registered in the ``zhiku.transforms`` entry-point group; they are
instantiated with no arguments and must satisfy this protocol. This module is the stable contract: add optional
fields with defaults, never remove or rename.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, runtime_checkable

from zhiku.llm.chat import ChatService, TransformError
from zhiku.types import Chunk, SourceDoc, TransformIssue

Language = Literal["zh", "en"]
__all__ = [
    "ChatService",
    "DocMeta",
    "DocumentBatch",
    "Enrichment",
    "Transform",
    "TransformContext",
    "TransformError",
    "TransformIssue",
]


@dataclass(frozen=True)
class Enrichment:
    """What transforms added to one chunk. ``refined`` (when not empty) replaces the text that is embedded and
    BM25-indexed, never the stored text; ``context`` is prepended to it."""

    context: str = ""
    refined: str = ""
    title: str = ""
    summary: str = ""
    tags: tuple[str, ...] = ()

    def is_empty(self) -> bool:
        return self == Enrichment()


@dataclass(frozen=True)
class DocMeta:
    """Document-level title, summary and tags; ``kind`` says who wrote them."""

    title: str = ""
    summary: str = ""
    tags: tuple[str, ...] = ()
    kind: Literal["llm", "extractive"] = "llm"


@dataclass(frozen=True)
class DocumentBatch:
    """A document on its way to the index. ``enrichments[i]`` belongs to ``chunks[i]``."""

    doc: SourceDoc
    doc_id: str
    chunks: tuple[Chunk, ...]
    enrichments: tuple[Enrichment, ...]
    meta: DocMeta | None = None
    issues: tuple[TransformIssue, ...] = ()

    @classmethod
    def start(cls, doc: SourceDoc, doc_id: str, chunks: Sequence[Chunk]) -> DocumentBatch:
        return cls(doc, doc_id, tuple(chunks), tuple(Enrichment() for _ in chunks))

    def enrich(self, i: int, **changes: Any) -> DocumentBatch:
        """A copy with ``enrichments[i]`` changed (e.g. ``batch.enrich(0, context="…")``)."""
        items = list(self.enrichments)
        items[i] = replace(items[i], **changes)
        return replace(self, enrichments=tuple(items))

    def with_chunk(self, i: int, chunk: Chunk) -> DocumentBatch:
        """A copy with ``chunks[i]`` replaced (same id; e.g. its ``images`` with captions filled)."""
        if chunk.chunk_id != self.chunks[i].chunk_id:
            raise ValueError(f"with_chunk: chunk id {chunk.chunk_id} is not {self.chunks[i].chunk_id}")
        items = list(self.chunks)
        items[i] = chunk
        return replace(self, chunks=tuple(items))

    def with_issue(
        self, transform: str, reason: str, chunk_id: str | None = None, *, unreached: bool = False
    ) -> DocumentBatch:
        issue = TransformIssue(transform, reason, self.doc.source, chunk_id, unreached)
        return replace(self, issues=(*self.issues, issue))


@dataclass(frozen=True)
class TransformContext:
    """What a transform may use. ``llm`` is None when no endpoint is configured; ``prompt(name)`` returns the
    prompt template (``$placeholders``; the user's override file, else the built-in one in ``language``) and
    ``prompt_id(name)`` its id for ``ChatService.chat``; ``options`` are the ``transforms.*`` settings
    (plus ``concurrency``); ``on_chunk(transform)`` reports progress, once per chunk handled."""

    llm: ChatService | None
    language: Language = "zh"
    prompt: Callable[[str], str] = field(default=lambda name: "")
    prompt_id: Callable[[str], str] = field(default=lambda name: f"{name}@1")
    options: Mapping[str, Any] = field(default_factory=dict)
    on_chunk: Callable[[str], None] = field(default=lambda name: None)


@runtime_checkable
class Transform(Protocol):
    """One enrichment step. ``name`` is what ``--transform`` and ``transforms.enabled`` use; ``needs_llm``: the
    stage refuses to run it without an endpoint (it would fail every chunk)."""

    name: str
    needs_llm: bool

    def apply(self, batch: DocumentBatch, ctx: TransformContext) -> DocumentBatch: ...
