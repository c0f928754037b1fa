"""Frozen, typed data that flows between zhiku's stages."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal, TypedDict, overload

SearchMode = Literal["bm25", "dense", "hybrid"]


@dataclass(frozen=True)
class PageSpan:
    """A page of the source document: 1-based ``number`` covering ``text[start:end]``."""

    number: int
    start: int
    end: int


@dataclass(frozen=True)
class ImageRef:
    """An image that belongs to a chunk; the file is ``<index>/images/<image_id>`` (content-addressed)."""

    image_id: str
    mime_type: str  # "image/png" | "image/jpeg"
    page: int | None = None
    bbox: tuple[float, float, float, float] | None = None
    width: int = 0  # pixels
    height: int = 0
    caption: str = ""


@dataclass(frozen=True)
class SourceImage:
    """An image a loader extracted: its reference, its bytes, and where it stands in ``SourceDoc.text``."""

    ref: ImageRef
    offset: int  # character offset into SourceDoc.text; the chunk holding it links the image
    data: bytes = field(repr=False, default=b"")


@dataclass(frozen=True)
class SourceDoc:
    """A loaded document, before chunking."""

    source: str  # path as ingested, relative to the ingest root, with forward slashes
    doc_type: str  # "markdown", "text", "pdf", "docx", "html"
    title: str
    text: str
    pages: tuple[PageSpan, ...] = ()
    encoding: str = "utf-8"
    images: tuple[SourceImage, ...] = ()
    needs_ocr_pages: tuple[int, ...] = ()
    ocr_pages: tuple[int, ...] = ()
    tags: tuple[str, ...] = ()  # the file's own (Markdown front matter): the ``tags`` filter finds them


@dataclass(frozen=True)
class Chunk:
    """A retrievable piece of a document with everything a citation needs."""

    chunk_id: str
    doc_id: str
    collection: str
    source: str
    doc_type: str
    section: str  # heading path, e.g. "第一章 总则 > 第三条"; "" before the first heading
    page: int | None
    start: int  # char offsets into SourceDoc.text
    end: int
    ordinal: int  # position of the chunk in its document, 0-based
    text: str
    images: tuple[ImageRef, ...] = ()  # images standing inside this chunk's span, in document order


class DocStatus(str, Enum):
    READY = "ready"
    NEEDS_OCR = "needs_ocr"  # some pages have no usable text layer and were not OCR'd (see DocRecord.needs_ocr_pages)
    FAILED = "failed"


@dataclass(frozen=True)
class DocRecord:
    """A stored document (one row per (collection, source))."""

    doc_id: str
    collection: str
    source: str
    path: str  # absolute path at ingestion time
    doc_type: str
    title: str
    sha256: str
    size: int
    chunk_count: int
    pages: int | None
    ingested_at: float  # unix seconds
    status: DocStatus = DocStatus.READY
    needs_ocr_pages: tuple[int, ...] = ()  # 1-based pages without usable text that were not OCR'd
    ocr_pages: tuple[int, ...] = ()  # 1-based pages whose text came from OCR


@dataclass(frozen=True)
class IngestionRecord:
    """One line of the ingestion history."""

    path: str
    collection: str
    sha256: str | None
    size: int | None
    status: str  # added | updated | skipped | removed | failed
    error: str | None
    chunk_count: int
    at: float


@dataclass(frozen=True)
class CollectionStats:
    name: str
    documents: int
    chunks: int
    chars: int


@dataclass(frozen=True)
class Filters:
    """Restrict retrieval. ``None`` means "no restriction"; a filter that matches nothing yields no hits."""

    collection: str | tuple[str, ...] | None = None  # a tuple: any of these
    source_glob: str | None = None  # fnmatch-style glob over the ingested source path
    doc_type: str | None = None


@dataclass(frozen=True)
class ScoredId:
    """A chunk id with a score from one retriever, best first; ``rank`` is 1-based."""

    chunk_id: str
    score: float
    rank: int


class Ranking(Sequence[ScoredId]):
    """A channel's candidates, best first, held as columns: ``ids``, ``scores`` and (from the SQLite store) the
    candidates' ``rows`` (rowids, a hint for later lookups)."""

    __slots__ = ("ids", "scores", "rows")
    ids: tuple[str, ...]
    scores: tuple[float, ...]
    rows: tuple[int, ...] | None

    def __init__(self, ids: Sequence[str], scores: Sequence[float], rows: Sequence[int] | None = None) -> None:
        if len(ids) != len(scores) or (rows is not None and len(rows) != len(ids)):
            raise ValueError(f"a ranking needs as many scores and rows as ids: {len(ids)}, {len(scores)}")
        set_ = object.__setattr__
        set_(self, "ids", tuple(ids))
        set_(self, "scores", tuple(scores))
        set_(self, "rows", None if rows is None else tuple(rows))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a Ranking is immutable (tried to set {name})")

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, i: int) -> ScoredId: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[ScoredId]: ...

    def __getitem__(self, i: int | slice) -> ScoredId | Sequence[ScoredId]:
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self.ids))
            if start == 0 and step == 1:  # a prefix keeps its ranks
                rows = None if self.rows is None else self.rows[:stop]
                return Ranking(self.ids[:stop], self.scores[:stop], rows)
            return [self[n] for n in range(start, stop, step)]
        n = range(len(self.ids))[i]  # IndexError past the end; negative from the end
        return ScoredId(self.ids[n], self.scores[n], n + 1)

    def __iter__(self) -> Iterator[ScoredId]:
        return map(ScoredId, self.ids, self.scores, range(1, len(self.ids) + 1))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Ranking):
            return self.ids == other.ids and self.scores == other.scores
        if isinstance(other, (list, tuple)):
            return len(other) == len(self.ids) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:  # a tuple's (equal to the tuple of its items: equal values hash alike)
        return hash(tuple(self))

    def __reduce__(self) -> tuple[type[Ranking], tuple[object, ...]]:  # pickle and copy (no attribute setting)
        return Ranking, (self.ids, self.scores, self.rows)

    def __repr__(self) -> str:
        return f"Ranking({len(self.ids)} candidates: {list(self.ids[:3])}{'…' if len(self.ids) > 3 else ''})"


@dataclass(frozen=True)
class Hit:
    """A search result with the evidence of every stage that saw it."""

    chunk: Chunk
    score: float  # the fused score (RRF or z-score, or the channel's own score in single-channel modes); hits are in final order
    bm25_rank: int | None = None
    bm25_score: float | None = None
    dense_rank: int | None = None
    dense_score: float | None = None  # cosine similarity
    fused_rank: int | None = None  # 1-based rank before reranking (the fused or single-channel rank)
    rerank_rank: int | None = None  # 1-based rank the reranker gave; None when it did not score this hit
    rerank_score: float | None = None  # the reranker's raw score (cross-encoder logit, LLM grade 0–10)
    rerank_sigmoid: float | None = None  # the raw score squashed into (0, 1) (LLM grades: sigmoid(grade − 5))


@dataclass(frozen=True)
class Citation:
    n: int
    chunk_id: str
    doc_id: str
    source: str
    page: int | None
    section: str
    score: float
    text: str
    fused_rank: int | None = None  # rank before reranking
    rerank_score: float | None = None  # the reranker's raw score, when it scored this passage
    rerank_sigmoid: float | None = None


class QueryOptions(TypedDict, total=False):
    """What ``KnowledgeBase.retrieve``/``query`` accept besides the question (absent: the settings' value)."""

    top_k: int | None
    mode: str | None
    collection: str | tuple[str, ...] | None  # a tuple: any of these
    source: str | None  # a glob over document sources
    doc_type: str | None
    per_source_k: int | None  # candidates taken from each retriever before fusion
    rerank: bool | None  # None: the configured reranker; False: skip; True: require one
    tags: Sequence[str] | None  # only chunks (or documents) carrying every tag


@dataclass(frozen=True)
class Answer:
    query: str
    mode: SearchMode
    markdown: str
    citations: tuple[Citation, ...]
    hits: tuple[Hit, ...]
    low_confidence: bool = False
    # the score ``low_confidence`` was decided on (best cosine, moved by the best BM25 score in hybrid mode; an
    # English question: plus its bridged phrases held, ``confidence.judge``; bm25: term coverage)
    confidence: float | None = None
    note: str | None = None  # why nothing was found, and what to change; that a long question was embedded in part
    rerank: str = "off"  # "off" | "ok" | "fallback: <reason>" (the passages then keep the fused order)
    rewrite: str = "off"  # query rewriting: "off" | "ok" | "fallback: <reason>"
    queries: tuple[str, ...] = ()  # the rewritten queries searched besides the question
    terms: tuple[str, ...] = ()  # the question's BM25 terms
    candidate_counts: tuple[int, int] = (0, 0)  # how many passages BM25 and the dense channel found
    snippets: tuple[str, ...] = ()  # within a budget (``KnowledgeBase.query(max_chars=…)``): each citation's text


@dataclass(frozen=True)
class FileFailure:
    path: str
    reason: str


@dataclass(frozen=True)
class OcrNeeded:
    """A document that was ingested, but whose ``pages`` have no usable text layer and were not OCR'd."""

    source: str
    pages: tuple[int, ...]


@dataclass(frozen=True)
class TransformIssue:
    """An ingest transform that did not apply: to a chunk (``chunk_id``) or a whole document (``chunk_id`` None)."""

    transform: str
    reason: str
    source: str = ""
    chunk_id: str | None = None
    unreached: bool = False


@dataclass(frozen=True)
class LLMUsage:
    """LLM requests of an ingestion run (or a dry run's plan): sent, served from the cache, tokens and cost."""

    calls: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    currency: str = "USD"
    estimated: bool = False  # token counts are estimates (the endpoint reported none, or a dry run)


@dataclass(frozen=True)
class TransformReport:
    """What the ingest transforms did: ``applied`` chunks (or documents) per transform, usage and issues."""

    enabled: tuple[str, ...]
    applied: tuple[tuple[str, int], ...] = ()
    usage: LLMUsage = LLMUsage()
    issues: tuple[TransformIssue, ...] = ()
    retried: bool = False  # the next plain ingest asks again for the chunks the endpoint never answered

    def reasons(self, n: int = 3) -> list[tuple[str, int]]:
        """The ``n`` most frequent ``transform: reason`` of the issues, with how many chunks or documents had it."""
        return Counter(f"{i.transform}: {i.reason}" for i in self.issues).most_common(n)


@dataclass(frozen=True)
class IngestReport:
    added: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    failed: tuple[FileFailure, ...] = ()
    chunks_written: int = 0
    chunks_embedded: int = 0  # chunks whose vectors were computed (not served from the embedding cache)
    elapsed_s: float = 0.0
    dry_run: bool = False
    needs_ocr: tuple[OcrNeeded, ...] = ()  # added/updated documents with pages that need OCR
    chunks_over_window: int = 0  # chunks whose index text is longer than the embedder's window (embedded diluted)
    transforms: TransformReport | None = None  # None: no transform enabled
    gone: tuple[str, ...] = ()  # without sync: indexed documents whose files are gone from the given folders (kept)
    unsupported: tuple[tuple[str, int], ...] = ()  # (suffix, files) a folder held but no loader reads: not read

    def counts(self) -> dict[str, int]:
        return {k: len(getattr(self, k)) for k in ("added", "updated", "skipped", "removed", "failed")}


def frozen(ranking: Sequence[ScoredId]) -> Sequence[ScoredId]:
    """``ranking`` as an immutable sequence (a ``Ranking`` already is one)."""
    return ranking if isinstance(ranking, Ranking) else tuple(ranking)
