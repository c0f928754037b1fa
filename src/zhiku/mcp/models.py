"""The MCP tools' typed inputs and outputs: an output model is a tool's ``outputSchema``, ``to_markdown()`` its text."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StringConstraints

from zhiku.api import page_list

if TYPE_CHECKING:
    from zhiku.types import TransformReport

DOC_URI = "zhiku://doc/{doc_id}"
CHUNK_URI = "zhiku://chunk/{chunk_id}"


def doc_uri(doc_id: str) -> str:
    return DOC_URI.format(doc_id=doc_id)


def chunk_uri(chunk_id: str) -> str:
    return CHUNK_URI.format(chunk_id=chunk_id)


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class QueryFilters(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str | None = Field(
        None, min_length=1, max_length=512, description="Glob over source paths, e.g. '劳动合同法*' or 'laws/*.md'."
    )
    doc_type: str | None = Field(
        None,
        pattern=r"^[a-z0-9_\-]{1,32}$",
        description="markdown, text, pdf, docx, html, epub, sheet, slides, image or doc.",
    )
    tags: list[Annotated[str, StringConstraints(min_length=1, max_length=64)]] | None = Field(
        None,
        min_length=1,
        max_length=10,
        description="Only passages whose tags (metadata transform) include every one of these, e.g. ['试用期'].",
    )


class CitationOut(_Out):
    n: int = Field(description="The [n] marker used in the answer.")
    chunk_id: str
    doc_id: str = Field("", description="Document id for get_document_summary, zhiku://doc/{doc_id} (full form only).")
    source: str = Field(description="Source path as ingested.")
    page: int | None = Field(None, description="Page number when the format has pages.")
    section: str = Field(
        "",
        description="Heading path, e.g. '劳动合同法 > 第二章 > 第十九条'; the compact form drops the document title.",
    )
    score: float = Field(
        0.0,
        description="Fused score (RRF or z-score) before any reranking; only its order is meaningful (full form only).",
    )
    text: str = Field("", description="The passage, cut to fit the answer budget when `truncated` (full form only).")
    truncated: bool = Field(False, description="True when `text` is a snippet; read the full chunk at `uri`.")
    uri: str = Field(description="Resource URI of the full chunk, zhiku://chunk/{chunk_id}.")
    fused_rank: int | None = Field(None, description="Rank before reranking (the fused or single-channel rank).")
    rerank_score: float | None = Field(
        None, description="The reranker's raw score (cross-encoder logit, LLM grade 0–10); null when not reranked."
    )
    rerank_sigmoid: float | None = Field(None, description="`rerank_score` squashed into (0, 1).")
    context: str | None = Field(
        None, description="The LLM-written context situating the passage in its document (contextual transform)."
    )
    refined: str | None = Field(
        None, description="The cleaned text indexed instead of `text` (refine transform); `text` is the original."
    )
    title: str | None = Field(None, description="The passage's title (metadata transform).")
    tags: list[str] | None = Field(None, description="The passage's tags (metadata transform).")


class ImageRef(_Out):
    """An image standing in a cited passage (a figure of a PDF or Word document)."""

    citation: int = Field(description="The [n] of the passage the image belongs to.")
    uri: str = Field(description="Resource URI of the image file (zhiku://image/{sha256}.png|jpg).")
    mime_type: str
    caption: str | None = Field(None, description="Caption or alt text, e.g. '图 1-1 标题序号'.")
    page: int | None = Field(None, description="Page of the image when the format has pages.")


class QueryResult(_Out):
    query: str = Field("", description="The question as sent (full form only: the text block begins with it).")
    mode: Literal["bm25", "dense", "hybrid"]
    answer: str = Field(
        "", description="Markdown, each passage in a <document> frame (full form only: by default the text block)."
    )
    citations: list[CitationOut]
    images: list[ImageRef] = Field(
        default_factory=list,
        description="Images of the cited passages, in citation order; the first few are also sent as image content.",
    )
    low_confidence: bool = Field(
        description="True when `confidence` is below answer.min_score (unless the first passage holds every code the "
        "query names, e.g. ORD-4290), or nothing matched."
    )
    confidence: float | None = Field(
        description="Best cosine of a passage to the query, moved by its BM25 evidence in hybrid mode (bm25 mode: the "
        "share of the query's terms the passages hold)."
    )
    cache: Literal["hit", "miss"] = Field(description="Whether this answer came from the result cache.")
    note: str | None = Field(
        None, description="Why the answer is empty or thin, when it is; or that a long query was embedded in part."
    )
    rewrite: str = Field(
        "off",
        description="Query rewriting: `off`, `ok` (rewrites searched too) or `fallback: <reason>` (plain query only).",
    )
    _passages: bool = PrivateAttr(False)
    rerank: str = Field(
        "off", description="`off`, `ok` (in the reranker's order) or `fallback: <reason>` (in the fused order)."
    )

    def to_markdown(self) -> str:
        if self.note:
            return f"{self.answer}\n\n_{self.note}_"
        return self.answer

    def with_passages(self, passages: bool) -> QueryResult:
        """This result, whose ``structured()`` form is full when ``passages`` (``server.structured_passages``)."""
        out = self.model_copy()
        out._passages = passages
        return out

    def structured(self, mode: Literal["json"] = "json") -> dict[str, Any]:
        """Everything ``with_passages(True)``; else no passage text, which the text block carries."""
        if self._passages:
            return self.model_dump(mode=mode)
        compact = self.model_dump(
            mode=mode,
            exclude_none=True,
            exclude_defaults=True,
            exclude={"query": True, "answer": True, "citations": {"__all__": FULL_ONLY}},
        )
        compact.setdefault("confidence", None)  # required, and None when nothing matched (a filter left nothing)
        return compact


FULL_ONLY = {"doc_id", "score", "text", "truncated", "fused_rank", "refined"}


class CollectionInfo(_Out):
    name: str
    documents: int | None = None
    chunks: int | None = None
    chars: int | None = None


class CollectionsResult(_Out):
    collections: list[CollectionInfo]
    index_version: int
    ingest_roots: list[str] | None = Field(
        None,
        description="Folders ingest_documents may read (server.ingest_roots), when this server accepts ingests; "
        "an empty list: it refuses every path. Absent on a read-only server.",
    )

    def to_markdown(self) -> str:
        parts = []
        if self.ingest_roots == []:
            parts.append("**可导入目录 / Ingest roots:** none — ingest_documents refuses every path on this server.")
        elif self.ingest_roots:
            roots = ", ".join(self.ingest_roots)
            parts.append(f"**可导入目录 / Ingest roots** (ingest_documents reads only under these): {roots}")
        if not self.collections:
            parts.append("知识库为空 / The knowledge base is empty: no collections yet.")
        elif self.collections[0].documents is None:
            parts.append("**集合 / Collections:** " + ", ".join(c.name for c in self.collections))
        else:
            rows = [f"| {c.name} | {c.documents} | {c.chunks} | {c.chars} |" for c in self.collections]
            head = ["| 集合 collection | 文档 documents | 分块 chunks | 字符 chars |", "| --- | --- | --- | --- |"]
            parts.append("\n".join(head + rows))
        return "\n\n".join(parts)


class DocumentSummary(_Out):
    doc_id: str
    collection: str
    title: str
    source: str
    doc_type: str
    pages: int | None
    status: Literal["ready", "needs_ocr"] = Field(
        "ready", description="'needs_ocr': some pages have no usable text layer (scans) and are not searchable yet."
    )
    needs_ocr_pages: list[int] = Field(default_factory=list, description="Pages without usable text (1-based).")
    ocr_pages: list[int] = Field(default_factory=list, description="Pages whose text came from OCR (1-based).")
    chunk_count: int
    size_bytes: int
    ingested_at: str = Field(description="Ingestion time, ISO 8601 UTC.")
    summary: str | None = Field(
        None,
        description="What fits the document: a statute's chapters with their article ranges (`statute`), a report's "
        "headings with a line each (`outline`), the LLM's summary (`llm`, metadata transform), else its top sentences "
        "(`extractive`). In the text block only: structuredContent leaves it out (a client forwarding both pays for "
        "it once).",
    )
    summary_kind: Literal["llm", "statute", "outline", "extractive"] | None = None
    keywords: list[str] = Field(
        default_factory=list, description="The LLM's tags (metadata transform), else TextRank's."
    )
    uri: str = Field(description="Resource URI of the full text (zhiku://doc/{doc_id}).")

    def to_markdown(self) -> str:
        lines = [f"# {self.title}", "", f"- 来源 source: {self.source} ({self.doc_type}, collection {self.collection})"]
        lines.append(f"- 分块 chunks: {self.chunk_count}" + (f" · 页数 pages: {self.pages}" if self.pages else ""))
        if self.needs_ocr_pages:
            pages = page_list(self.needs_ocr_pages)
            lines.append(
                f"- 状态 status: needs_ocr — 第 {pages} 页无可用文字层 / pages {pages} have no usable text layer "
                "(scanned); install zhiku[ocr] and re-ingest"
            )
        if self.ocr_pages:
            lines.append(f"- OCR: pages {page_list(self.ocr_pages)}")
        lines += [f"- 入库时间 ingested: {self.ingested_at}", f"- 全文 full text: {self.uri}"]
        if self.keywords:
            lines.append(f"- 关键词 keywords: {'、'.join(self.keywords)}")
        if self.summary:
            lines += ["", f"## 概要 / Summary ({self.summary_kind})", "", self.summary]
        return "\n".join(lines)

    def structured(self, mode: Literal["json"] = "json") -> dict[str, Any]:
        return self.model_dump(mode=mode, exclude={"summary"})


class IngestFailure(_Out):
    path: str
    reason: str


class NeedsOcr(_Out):
    source: str
    pages: list[int] = Field(description="Pages without a usable text layer, not OCR'd (1-based).")


class TransformsOut(_Out):
    applied: dict[str, int] = Field(description="Chunks (and documents) each LLM transform enriched in this run.")
    kept_without: int = Field(description="Chunks or documents kept without a transform (indexed as usual).")
    reasons: list[str] = Field(description="The most frequent reasons they were kept without it, with counts.")
    retried: bool = Field(description="No answer for some: the next ingest of these files asks the endpoint again.")


def transforms_out(t: TransformReport | None) -> TransformsOut | None:
    if t is None:
        return None
    return TransformsOut(
        applied=dict(t.applied),
        kept_without=len(t.issues),
        reasons=[f"{reason} (×{n})" for reason, n in t.reasons()],
        retried=t.retried,
    )


class IngestResult(_Out):
    collection: str
    added: list[str]
    updated: list[str]
    skipped: list[str]
    failed: list[IngestFailure]
    needs_ocr: list[NeedsOcr] = Field(
        default_factory=list, description="Documents with scanned pages not searchable (install zhiku[ocr], re-ingest)."
    )
    chunks_written: int
    seconds: float
    index_version: int
    transforms: TransformsOut | None = Field(None, description="What the LLM transforms did (None: none ran).")

    def to_markdown(self) -> str:
        lines = [
            f"已入库 / Ingested into `{self.collection}`: {len(self.added)} added, {len(self.updated)} updated, "
            f"{len(self.skipped)} unchanged, {len(self.failed)} failed · {self.chunks_written} chunks · "
            f"{self.seconds:.1f}s",
            *(f"- failed: {f.path}: {f.reason}" for f in self.failed),
            *(f"- needs OCR: {n.source}: pages {page_list(n.pages)} have no usable text layer" for n in self.needs_ocr),
        ]
        if (t := self.transforms) is not None:
            lines.append("LLM transforms: " + (", ".join(f"{k} {v}" for k, v in t.applied.items()) or "none"))
            lines += [f"- kept without a transform: {r}" for r in t.reasons]
            if t.retried:
                lines.append("- the endpoint gave no answer for some: ingesting these files again retries them")
        return "\n".join(lines)


class DeleteResult(_Out):
    doc_id: str
    collection: str
    source: str
    chunks_removed: int
    index_version: int

    def to_markdown(self) -> str:
        return (
            f"已删除 / Deleted {self.doc_id} ({self.collection}/{self.source}, {self.chunks_removed} chunks); "
            "it no longer appears in results."
        )


class ErrorInfo(_Out):
    code: str = Field(description="Stable SCREAMING_SNAKE_CASE code, e.g. INVALID_INPUT, NOT_FOUND, INDEX_MISMATCH.")
    message: str
    retryable: bool

    def to_markdown(self) -> str:
        again = "retrying may help" if self.retryable else "retrying the same call will fail again"
        return f"错误 / Error {self.code}: {self.message} ({again})"
