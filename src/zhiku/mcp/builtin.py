"""The built-in knowledge tools, resources and prompt, registered through the same path as a team's own."""

# No `from __future__ import annotations`: the SDK reads the parameter types from the signatures.
import functools
from collections.abc import Callable
from dataclasses import replace
from typing import Annotated, Any

import anyio.from_thread
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult
from pydantic import Field

from zhiku.api import MAX_QUERY_CHARS
from zhiku.extensions import PromptSpec, ResourceSpec, ToolSpec
from zhiku.mcp import text
from zhiku.mcp.hub import Hub, QueryArgs
from zhiku.mcp.models import (
    CHUNK_URI,
    DOC_URI,
    CollectionsResult,
    DeleteResult,
    DocumentSummary,
    IngestResult,
    QueryFilters,
    QueryResult,
)
from zhiku.mcp.registry import Registry, ok_result

Collection = Annotated[
    str | None, Field(min_length=1, max_length=64, description="Collection to search (default: all). 集合，默认全部。")
]
DocId = Annotated[
    str, Field(min_length=1, max_length=512, description="A citation's doc_id, or a source path as ingested. 文档 ID。")
]


def query_knowledge_hub(
    hub: Hub,
    query: Annotated[
        str,
        Field(
            min_length=1,
            max_length=MAX_QUERY_CHARS,
            description="The question in natural language, e.g. 试用期最长不得超过几个月？ 用自然语言提问。",
        ),
    ],
    top_k: Annotated[int, Field(ge=1, le=20, description="Number of passages to return (1–20). 返回段落数。")] = 5,
    collection: Collection = None,
    filters: Annotated[
        QueryFilters | None,
        Field(description="Optional filters; every one given must match. 过滤条件。"),
    ] = None,
    max_chars: Annotated[
        int,
        Field(ge=1000, le=50000, description="Characters for answer and citations; passages cut to fit. 字符预算。"),
    ] = 12000,
) -> Annotated[CallToolResult, QueryResult]:
    f = filters or QueryFilters()
    tags = tuple(f.tags) if f.tags else None
    result = hub.query(QueryArgs(query.strip(), top_k, collection, f.source, f.doc_type, max_chars, tags))
    return ok_result(result, hub.image_blocks(result))


def list_collections(
    hub: Hub,
    include_stats: Annotated[bool, Field(description="Include document/chunk/character counts. 是否包含统计。")] = True,
) -> Annotated[CallToolResult, CollectionsResult]:
    return ok_result(hub.collections(include_stats))


def get_document_summary(
    hub: Hub, doc_id: DocId, collection: Collection = None
) -> Annotated[CallToolResult, DocumentSummary]:
    return ok_result(hub.summary(doc_id, collection))


def ingest_documents(
    hub: Hub,
    ctx: Context,
    paths: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=4096)]],
        Field(
            min_length=1,
            max_length=1000,
            description="Files or folders under the server's ingest roots. 文件或文件夹路径。",
        ),
    ],
    collection: Annotated[
        str | None,
        Field(min_length=1, max_length=64, description="Collection to add to (default: the server's). 目标集合。"),
    ] = None,
) -> Annotated[CallToolResult, IngestResult]:
    def progress(done: int, total: int, name: str) -> None:
        report = functools.partial(ctx.report_progress, done, total or None, message=f"{done}/{total} {name}".strip())
        anyio.from_thread.run(report)

    return ok_result(hub.ingest(paths, collection, on_progress=progress))


def delete_document(
    hub: Hub,
    doc_id: Annotated[
        str,
        Field(
            min_length=1,
            max_length=128,
            description="Id of the document to delete (from citations or resources/list). 要删除的文档 ID。",
        ),
    ],
) -> Annotated[CallToolResult, DeleteResult]:
    return ok_result(hub.delete(doc_id))


def read_document(hub: Hub, doc_id: str) -> str:
    return hub.document_markdown(doc_id)


def read_chunk(hub: Hub, chunk_id: str, context: str | None = None) -> str:
    return hub.chunk_markdown(chunk_id, context)


def read_png(hub: Hub, sha256: str) -> bytes:
    return hub.image_bytes(f"{sha256}.png")


def read_jpg(hub: Hub, sha256: str) -> bytes:
    return hub.image_bytes(f"{sha256}.jpg")


def answer_with_citations(
    question: Annotated[
        str, Field(min_length=1, max_length=MAX_QUERY_CHARS, description="The user's question. 用户的问题。")
    ],
    collection: Annotated[str | None, Field(description="Collection to search (default: all). 集合。")] = None,
) -> str:
    scope = text.PROMPT_COLLECTION.format(collection=collection) if collection else ""
    return text.PROMPT.format(question=question, collection=scope)


def register_builtins(registry: Registry) -> None:
    for fn, t, writes in (
        (query_knowledge_hub, text.QUERY, False),
        (list_collections, text.LIST_COLLECTIONS, False),
        (get_document_summary, text.DOCUMENT_SUMMARY, False),
        (ingest_documents, text.INGEST, True),
        (delete_document, text.DELETE, True),
    ):
        spec = ToolSpec(fn, fn.__name__, t.description, t.when_to_use, t.examples, t.errors, title=t.title)
        # reads run concurrently, writes one at a time (the registry leaves them out on a read-only server)
        registry.add_tool(
            replace(spec, read_only=not writes, destructive=fn is delete_document, exclusive=writes, origin="built-in")
        )
    resources: list[tuple[Callable[..., Any], str, str, str, str, str]] = [
        (read_document, DOC_URI, "document", "文档全文 / Document text", "text/markdown", text.DOCUMENT_RESOURCE),
        (read_chunk, CHUNK_URI + "{?context}", "chunk", "段落 / Chunk", "text/markdown", text.CHUNK_RESOURCE),
        (read_png, "zhiku://image/{sha256}.png", "image-png", "图片 / Image", "image/png", text.IMAGE_RESOURCE),
        (read_jpg, "zhiku://image/{sha256}.jpg", "image-jpg", "图片 / Image", "image/jpeg", text.IMAGE_RESOURCE),
    ]
    for fn, uri, name, title, mime, description in resources:
        registry.add_resource(ResourceSpec(fn, uri, name, description, title, mime, origin="built-in"))
    title = "带引用回答 / Answer with citations"
    registry.add_prompt(
        PromptSpec(answer_with_citations, "answer_with_citations", text.PROMPT_DESCRIPTION, title, "built-in")
    )
