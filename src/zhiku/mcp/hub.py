"""What the MCP tools do, as plain synchronous code (``server.py`` adapts it to the MCP SDK)."""

from __future__ import annotations

import base64
import functools
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from zhiku.access import ACCESS
from zhiku.api import KnowledgeBase, files_to_ingest, framed_passage, place
from zhiku.cache import Cache
from zhiku.embedding import build_embedder
from zhiku.errors import InvalidInput, NotFound, ZhikuError
from zhiku.mcp.concurrency import FairEmbedder, SingleFlight, deadline
from zhiku.mcp.models import (
    CitationOut,
    CollectionInfo,
    CollectionsResult,
    DeleteResult,
    DocumentSummary,
    ImageRef,
    IngestResult,
    QueryResult,
    chunk_uri,
    doc_uri,
    transforms_out,
)
from zhiku.settings import Settings
from zhiku.types import Answer, DocRecord, DocStatus

log = logging.getLogger("zhiku.mcp.server")

MAX_IMAGES = 3  # images of cited passages sent with an answer; more would crowd a client's context
TOOL_ANSWERS_KEPT = 256  # tool answers cached until the index changes; any write, by any process, empties it
MAX_INLINE_IMAGE_BYTES = 2 * 1024 * 1024  # larger images are listed (with their URI) but not sent inline
QUERY_TOOL = "query_knowledge_hub"
DOC_REF_HINT = "doc ids come from query_knowledge_hub citations or resources/list"
SEE_ROOTS = "list_collections shows the roots: pass paths under one of them"


class PathNotAllowed(InvalidInput, code="PATH_NOT_ALLOWED"): ...


def ingest_roots(settings: Settings) -> list[Path]:
    return [Path(r).expanduser().resolve() for r in settings.server.ingest_roots]


def allowed_paths(settings: Settings, paths: Sequence[str]) -> tuple[list[Path], dict[Path, str]]:
    """``paths`` resolved under the roots, and the files in them that link outside every root, with the reason."""
    roots = ingest_roots(settings)
    if not roots:
        raise PathNotAllowed(
            "this server accepts no ingest paths (its ingest roots are empty); ask the user to add the folder "
            "to the server's ingest roots, or to ingest the files themselves"
        )
    out = []
    for given in paths:
        if "\x00" in given:
            raise InvalidInput(f"invalid path {given!r}: it contains a NUL byte")
        p = Path(given).expanduser()
        p = (p if p.is_absolute() else roots[0] / p).resolve()
        if not any(p.is_relative_to(r) for r in roots):
            raise PathNotAllowed(f"{given!r} is outside the allowed ingest roots; {SEE_ROOTS}")
        out.append(p)
    outside = "links outside the allowed ingest roots: skipped"
    return out, {f: outside for f in files_to_ingest(out) if not any(f.resolve().is_relative_to(r) for r in roots)}


def cache_key(tool: str, args: Mapping[str, Any]) -> str:
    """The same arguments in any key order (and ``None`` vs. missing) give the same key."""
    canonical = {k: v for k, v in args.items() if v is not None}
    body = json.dumps(canonical, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return f"{tool}\x00{body}"


@dataclass(frozen=True)
class QueryArgs:
    """One ``query_knowledge_hub`` call's arguments, normalised: the result-cache key."""

    query: str
    top_k: int = 5
    collection: str | tuple[str, ...] | None = None  # a tuple: the collections a scoped caller sees
    source: str | None = None
    doc_type: str | None = None
    max_chars: int = 12000
    tags: tuple[str, ...] | None = None  # a tuple: the arguments are hashed (one search per identical call)


class Hub:
    """One opened index with the server's policies (ingest roots, answer budget, result cache)."""

    def __init__(self, kb: KnowledgeBase, settings: Settings) -> None:
        self.kb = kb
        self.settings = settings
        self.cache: Cache[Any] = Cache(TOOL_ANSWERS_KEPT)  # query results, and answers of tools cached
        self._flights: SingleFlight[QueryResult] = SingleFlight()

    @classmethod
    def open(cls, settings: Settings, *, warm: bool = True) -> Hub:
        """Open the index and load the models once; queries and ingests take turns at the embedder."""
        embedder = FairEmbedder(build_embedder(settings.embedding, settings.cache_dir))
        kb = KnowledgeBase(settings, read_only=settings.server.read_only, embedder=embedder)
        hub = cls(kb, settings)
        try:
            if warm:
                hub.warm()
        except BaseException:
            kb.close()
            raise
        return hub

    def warm(self) -> None:
        """Load the models and the vectors now, so the first query is not the slow one."""
        started = time.perf_counter()
        self.kb.embedder.embed_query("预热 warm-up")
        self.kb.warm_index()
        if failed := self.kb.load_reranker():
            log.warning("reranker failed to load, queries fall back to the fused order: %s", failed)
        if stale := self.kb.stale():
            log.warning(
                "index %s is stale (%s): queries may fail with INDEX_MISMATCH", self.settings.index, ", ".join(stale)
            )
        log.info("models loaded in %.2fs", time.perf_counter() - started)

    def close(self) -> None:
        self.kb.close()

    def scoped(self, args: QueryArgs) -> QueryArgs:
        """The caller's collections for a query of none; one it may not see reads as missing (no existence leak)."""
        access = ACCESS.get()
        if access.collections is None:
            return args
        if args.collection is None:
            return replace(args, collection=access.collections)
        if args.collection not in (visible := [c.name for c in self.kb.collections() if access.sees(c.name)]):
            shown = ", ".join(visible) or "(none yet)"
            raise NotFound(f"no collection {args.collection!r} in this knowledge base; available: {shown}")
        return args

    def query(self, args: QueryArgs) -> QueryResult:
        """A cached result at this index version, else one search shared by the identical calls meanwhile."""
        version, args = self.kb.index_version(), self.scoped(args)
        if (hit := self.cache.get(cache_key(QUERY_TOOL, asdict(args)), version)) is not None:
            return hit.model_copy(update={"cache": "hit"})  # type: ignore[no-any-return]
        return self._flights.run((version, args), functools.partial(self._query, args, version))

    def _query(self, args: QueryArgs, version: int) -> QueryResult:
        # one trace: retrieval stages, then the answer; a busy model fails the call in EMBED_WAIT_S
        with self.kb.tracer.trace("query", surface="mcp", **_caller()), deadline():
            try:
                answer = self.kb.query(**asdict(args), framed=True)
            except NotFound as e:  # a collection that does not exist
                raise NotFound(f"{e} (see list_collections)") from None
        citations, low = self._citations(answer), answer.low_confidence
        result = QueryResult(
            query=answer.query,
            mode=answer.mode,
            answer=answer.markdown,
            citations=citations,
            images=self._images(answer, citations),
            low_confidence=low,
            confidence=None if answer.confidence is None else round(answer.confidence, 6),
            cache="miss",
            note=answer.note,
            rerank=answer.rerank,
            rewrite=answer.rewrite,
        ).with_passages(self.settings.server.structured_passages)
        if not low and "fallback" not in (answer.rerank[:8], answer.rewrite[:8]):  # a degraded answer is not kept
            self.cache.put(cache_key(QUERY_TOOL, asdict(args)), result, version)
        return result

    def _citations(self, answer: Answer) -> list[CitationOut]:
        """Each citation with what the ingest transforms added: its context, refined text, title and tags."""
        compact = not self.settings.server.structured_passages
        found = self.kb.enrichments.chunk_enrichments([c.chunk_id for c in answer.citations])
        citations = []
        for c, t in zip(answer.citations, answer.snippets, strict=False):
            fields = asdict(c) | {"text": t, "truncated": len(c.text) > len(t), "uri": chunk_uri(c.chunk_id)}
            if compact:
                fields["section"] = self._below_title(c.doc_id, c.section)
            if (e := found.get(c.chunk_id)) is not None:
                fields |= {k: getattr(e, k) or None for k in ("context", "refined", "title")} | {
                    "tags": list(e.tags) or None
                }
            citations.append(CitationOut(**fields))
        return citations

    def _below_title(self, doc_id: str, section: str) -> str:
        """``section`` without the document's title it begins with: ``source`` names the document, and the text
        block's frame and the chunk at ``uri`` keep the whole path."""
        doc = self.kb.document(doc_id)
        return section.removeprefix(f"{doc.title} > ") if doc and doc.title else section

    @staticmethod
    def _images(answer: Answer, citations: Sequence[CitationOut]) -> list[ImageRef]:
        """The images of the cited passages, in citation order, each once."""
        chunks = {h.chunk.chunk_id: h.chunk for h in answer.hits}
        out: dict[str, ImageRef] = {}
        for c in citations:
            for im in chunks[c.chunk_id].images if c.chunk_id in chunks else ():
                out.setdefault(
                    im.image_id,
                    ImageRef(
                        citation=c.n,
                        uri=f"zhiku://image/{im.image_id}",  # image_id: "<sha256>.png" or "<sha256>.jpg"
                        mime_type=im.mime_type,
                        caption=im.caption or None,
                        page=im.page,
                    ),
                )
        return list(out.values())

    def image_blocks(self, result: QueryResult) -> list[tuple[str, str]]:
        """Base64 ``(mime_type, data)`` of the first ``MAX_IMAGES`` cited images on disk, if small enough."""
        blocks: list[tuple[str, str]] = []
        for im in result.images:
            if len(blocks) >= MAX_IMAGES:
                break
            try:
                data = self.kb.images.read(im.uri.rsplit("/", 1)[-1])
            except ZhikuError as e:
                log.warning("image %s of a cited passage is not readable: %s", im.uri, e)
                continue
            if len(data) <= MAX_INLINE_IMAGE_BYTES:
                blocks.append((im.mime_type, base64.b64encode(data).decode("ascii")))
        return blocks

    def image_bytes(self, image_id: str) -> bytes:
        scope = ACCESS.get().collections
        if scope is not None and image_id not in self._images_seen(self.kb.index_version(), scope):
            raise NotFound(f"no image {image_id} in this index (re-ingest the document that holds it)")
        return self.kb.images.read(image_id)

    @functools.lru_cache(maxsize=8)  # noqa: B019 (one hub per server)
    def _images_seen(self, version: int, collections: tuple[str, ...]) -> frozenset[str]:
        """The images of the chunks of ``collections`` at index ``version``."""
        docs = self.kb.documents(collections)
        return frozenset(im.image_id for d in docs for c in self.kb.document_chunks(d.doc_id) for im in c.images)

    def collections(self, include_stats: bool = True) -> CollectionsResult:
        items = [
            CollectionInfo(**asdict(s)) if include_stats else CollectionInfo(name=s.name)
            for s in self.kb.collections()
            if ACCESS.get().sees(s.name)
        ]
        writes = ACCESS.get().write and not self.settings.server.read_only  # who has the ingest tool sees its roots
        roots = [str(r) for r in ingest_roots(self.settings)] if writes else None
        return CollectionsResult(collections=items, index_version=self.kb.index_version(), ingest_roots=roots)

    def summary(self, ref: str, collection: str | None = None) -> DocumentSummary:
        try:
            doc = self.kb.resolve_document(ref, collection or ACCESS.get().collections)  # globs: visible ones
            if not ACCESS.get().sees(doc.collection):
                raise NotFound(ref)
        except NotFound:
            where = f" in collection {collection!r}" if collection else ""
            raise NotFound(f"no document {ref!r}{where}; {DOC_REF_HINT}") from None
        except InvalidInput:  # an empty reference, or a path several documents match
            raise InvalidInput(f"{ref.strip()!r} does not name exactly one document; {DOC_REF_HINT}") from None
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(doc.ingested_at))
        fields = asdict(doc) | {"status": DocStatus(doc.status).value, "size_bytes": doc.size, "ingested_at": when}
        return DocumentSummary(**fields, **self.kb.summary_fields(doc.doc_id), uri=doc_uri(doc.doc_id))

    def documents(self) -> list[DocRecord]:
        return [d for d in self.kb.documents() if ACCESS.get().sees(d.collection)]

    def complete(self, argument: str, prefix: str) -> list[str]:
        """Values of a prompt or resource-template argument starting with ``prefix`` (a source completes to its id)."""
        if argument == "context":
            return [c for c in ("article", "section") if c.startswith(prefix)]
        if argument == "collection":  # only what the caller may see
            return [c.name for c in self.kb.collections() if ACCESS.get().sees(c.name) and c.name.startswith(prefix)]
        if argument == "doc_id":
            return [d.doc_id for d in self.documents() if d.doc_id.startswith(prefix) or d.source.startswith(prefix)]
        return []

    def document_markdown(self, doc_id: str) -> str:
        return self.kb.document_text(self._document(doc_id).doc_id)

    def chunk_markdown(self, chunk_id: str, context: str | None = None) -> str:
        """A chunk in its ``<document>`` frame; ``context`` (``article`` | ``section``) adds the text around it."""
        ctx = self.kb.chunk_context(chunk_id, context or "chunk")
        c = ctx.chunk
        if not ACCESS.get().sees(c.collection):
            raise NotFound(f"no chunk {chunk_id!r} (chunk ids come from query citations)")
        doc = self.kb.document(c.doc_id)
        page = None if c.page is None else place(c.doc_type, c.page, c.text)
        total = f"/{doc.chunk_count}" if doc else ""
        lines = [
            f"> collection: {c.collection} · doc: {doc_uri(c.doc_id)} · chunk {c.ordinal + 1}{total}"
            f" · chars {c.start}–{c.end}",
        ]
        if ctx.context != "chunk":
            shown = f"chunks {ctx.chunks[0].ordinal + 1}–{ctx.chunks[-1].ordinal + 1}"
            lines.append(f"> context: {ctx.context} · {shown}" + ("" if ctx.complete else " (cut to the budget)"))
        return "\n".join([*lines, "", framed_passage(None, ctx.text, c.source, page, c.section)])

    def _document(self, doc_id: str) -> DocRecord:
        doc = self.kb.document(doc_id) if doc_id else None
        if doc is None or not ACCESS.get().sees(doc.collection):
            raise NotFound(f"no document {doc_id!r}; {DOC_REF_HINT}")
        return doc

    def ingest(
        self,
        paths: Sequence[str],
        collection: str | None = None,
        on_progress: Callable[[int, int, str], None] | None = None,
    ) -> IngestResult:
        access, target = ACCESS.get(), collection or self.settings.collection
        if not access.write or not access.sees(target):
            mine = f"; it may write to: {', '.join(access.collections)}" if access.write and access.collections else ""
            raise InvalidInput(f"this caller may not write to collection {target!r}{mine}")
        resolved, skip = allowed_paths(self.settings, paths)
        with self.kb.tracer.trace("ingest", surface="mcp", **_caller()):
            report = self.kb.ingest(resolved, collection=collection, on_progress=on_progress, skip=skip)
        seconds, transforms = round(report.elapsed_s, 3), transforms_out(report.transforms)
        fields = asdict(report) | {"seconds": seconds, "transforms": transforms}  # failed, needs_ocr: as models
        return IngestResult(**fields, collection=target, index_version=self.kb.index_version())

    def delete(self, doc_id: str) -> DeleteResult:
        doc = self._document(doc_id)
        if not ACCESS.get().write:
            raise InvalidInput("this caller may not change the knowledge base")
        self.kb.delete(doc.doc_id, doc.collection)  # its enrichments go with it
        return DeleteResult(
            doc_id=doc.doc_id,
            collection=doc.collection,
            source=doc.source,
            chunks_removed=doc.chunk_count,
            index_version=self.kb.index_version(),
        )

    def health(self) -> dict[str, object]:
        read_only = self.settings.server.read_only
        if damage := self.kb.damage():
            return {"status": "damaged", "ready": False, "error": damage, "read_only": read_only}
        return {"status": "ok", "ready": True, "index_version": self.kb.index_version(), "read_only": read_only}


def _caller() -> dict[str, Any]:
    """Who asked, for traces: the caller's token name (none for the local user)."""
    name = ACCESS.get().name
    return {"caller": name} if name else {}
