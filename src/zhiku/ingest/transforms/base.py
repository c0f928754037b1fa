"""The ``Transform`` contract, stable for plugins (``zhiku.transforms`` entry points): add optional fields, never
rename or remove.

A transform gets a ``DocumentBatch`` and returns a new one. It never changes ``Chunk.text`` (citations quote the
original); it adds to the chunks' ``Enrichment``, the document's ``DocMeta`` or ``ImageRef.caption``, and records what
it could not do in ``issues`` (the chunk is kept). LLM calls go through ``TransformContext.llm``, a ``ChatService``
that caches, limits concurrency, retries, counts tokens and raises ``TransformError`` with a reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, runtime_checkable

from zhiku.llm import ChatService, TransformError
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
    """``refined`` replaces the indexed text (never the stored one); ``context`` is prepended to it."""

    context: str = ""
    refined: str = ""
    title: str = ""
    summary: str = ""
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class DocMeta:
    title: str = ""
    summary: str = ""
    tags: tuple[str, ...] = ()
    kind: Literal["llm", "extractive", "file"] = "llm"  # file: the document's own tags, no summary


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
        meta = DocMeta(doc.title, "", doc.tags, "file") if doc.tags else None
        return cls(doc, doc_id, tuple(chunks), tuple(Enrichment() for _ in chunks), meta)

    def enrich(self, i: int, **changes: Any) -> DocumentBatch:
        """A copy with ``enrichments[i]`` changed: ``batch.enrich(0, context="…")``."""
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
    """What a transform may use: ``llm`` (None without an endpoint), ``prompt(name)`` (a ``$placeholder`` template in
    ``language``) with its ``prompt_id(name)``, ``options`` (the ``transforms.*`` settings and ``concurrency``), and
    ``on_chunk(transform)`` once per chunk handled."""

    llm: ChatService | None
    language: Language = "zh"
    prompt: Callable[[str], str] = field(default=lambda name: "")
    prompt_id: Callable[[str], str] = field(default=lambda name: f"{name}@1")
    options: Mapping[str, Any] = field(default_factory=dict)
    on_chunk: Callable[[str], None] = field(default=lambda name: None)


@runtime_checkable
class Transform(Protocol):
    """``name`` is what ``--transform`` and ``transforms.enabled`` use; ``needs_llm``: refused without an endpoint."""

    name: str
    needs_llm: bool

    def apply(self, batch: DocumentBatch, ctx: TransformContext) -> DocumentBatch: ...
