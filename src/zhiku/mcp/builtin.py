"""The built-in knowledge tools, resources and prompt, registered through the same ``tool`` path as a
team's own (so the same conventions, hooks and errors apply)."""

# No `from __future__ import annotations`: the tools' parameter types are built at run time (bounds come from
# the settings) and the SDK reads them from the signatures, so annotations must stay real objects.
import functools
from collections.abc import Callable
from typing import Annotated, Any, cast

import anyio
import anyio.from_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult
from pydantic import Field

from zhiku.api import MAX_QUERY_CHARS
from zhiku.errors import ZhikuError
from zhiku.mcp import text as mcp_text
from zhiku.mcp.agent_errors import agent_message
from zhiku.mcp.calls import State, error_result, hub_resource, hub_tool, image_reader, ok_result, run_in_worker
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
from zhiku.settings import Settings

ToolDecorator = Callable[..., Callable[[Any], Any]]  # tool(name, title, text, read_only=, destructive=)


Collection = Annotated[
    str | None,
    Field(
        min_length=1,
        max_length=64,
        description=("Collection to search (default: all collections). 集合名，默认检索全部。"),
    ),
]
DocId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=512,
        description=(
            "Document id from a citation (e.g. '8a601916a370add6'), or its source path as ingested. 文档 ID。"
        ),
    ),
]


def register_builtins(server: MCPServer, tool: ToolDecorator, settings: Settings) -> None:
    """Add zhiku's knowledge tools (the registry leaves out the write tools when ``server.read_only``), resources and prompt."""
    _read_tools(tool, MAX_QUERY_CHARS)
    _write_tools(tool)  # skipped by the registry on a read-only server
    _resources(server)
    _prompt(server, MAX_QUERY_CHARS)


def _read_tools(tool: ToolDecorator, max_query: int) -> None:
    @tool("query_knowledge_hub", "知识库检索 / Search the knowledge hub", mcp_text.QUERY)
    async def query_knowledge_hub(
        ctx: Context,
        query: Annotated[
            str,
            Field(
                min_length=1,
                max_length=max_query,
                description=("The question in natural language, e.g. 试用期最长不得超过几个月？ 用自然语言提问。"),
            ),
        ],
        top_k: Annotated[int, Field(ge=1, le=20, description="Number of passages to return (1–20). 返回段落数。")] = 5,
        collection: Collection = None,
        filters: Annotated[
            QueryFilters | None,
            Field(
                description=(
                    "Optional filters: {source: glob over source path, doc_type: 'markdown'|'text'|'pdf'|'docx'|'html', "
                    "tags: ['试用期'] (passages carrying every tag; metadata transform)}. 过滤条件。"
                )
            ),
        ] = None,
        max_chars: Annotated[
            int,
            Field(
                ge=1000,
                le=50000,
                description=(
                    "Budget for answer plus citation texts, in characters; passages are cut to fit. 字符预算。"
                ),
            ),
        ] = 12000,
    ) -> Annotated[CallToolResult, QueryResult]:
        state = cast(State, ctx.request_context.lifespan_context)
        try:
            args = QueryArgs.of(query, top_k, collection, filters, max_chars)
            cached = state.hub.cached_query(args)
        except ZhikuError as e:
            return error_result(e.code, agent_message(e), e.retryable)
        if cached is not None:
            return ok_result(cached, await run_in_worker(ctx, Hub.image_blocks, cached))
        return await hub_tool(ctx, "query_knowledge_hub", Hub.query, args, images=True)  # reads run concurrently

    @tool("list_collections", "列出集合 / List collections", mcp_text.LIST_COLLECTIONS)
    async def list_collections(
        ctx: Context,
        include_stats: Annotated[
            bool, Field(description="Include document/chunk/character counts. 是否包含统计。")
        ] = True,
    ) -> Annotated[CallToolResult, CollectionsResult]:
        return await hub_tool(ctx, "list_collections", Hub.collections, include_stats)

    @tool("get_document_summary", "文档概况 / Document summary", mcp_text.DOCUMENT_SUMMARY)
    async def get_document_summary(
        ctx: Context,
        doc_id: DocId,
        collection: Collection = None,
    ) -> Annotated[CallToolResult, DocumentSummary]:
        return await hub_tool(ctx, "get_document_summary", Hub.summary, doc_id, collection)


def _write_tools(tool: ToolDecorator) -> None:
    @tool(
        "ingest_documents",
        "导入文档 / Ingest documents",
        mcp_text.INGEST,
        read_only=False,
    )
    async def ingest_documents(
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
            Field(
                min_length=1,
                max_length=64,
                description=("Collection to add to (default: the server's default collection). 目标集合。"),
            ),
        ] = None,
    ) -> Annotated[CallToolResult, IngestResult]:
        def progress(done: int, total: int, name: str) -> None:
            anyio.from_thread.run(
                functools.partial(ctx.report_progress, done, total or None, message=f"{done}/{total} {name}".strip())
            )

        return await hub_tool(
            ctx,
            "ingest_documents",
            functools.partial(Hub.ingest, on_progress=progress),
            paths,
            collection,
            exclusive=True,
        )

    @tool(
        "delete_document",
        "删除文档 / Delete a document",
        mcp_text.DELETE,
        read_only=False,
        destructive=True,
    )
    async def delete_document(
        ctx: Context,
        doc_id: Annotated[
            str,
            Field(
                min_length=1,
                max_length=128,
                description=("Id of the document to delete (from citations or resources/list). 要删除的文档 ID。"),
            ),
        ],
    ) -> Annotated[CallToolResult, DeleteResult]:
        return await hub_tool(ctx, "delete_document", Hub.delete, doc_id, exclusive=True)


def _resources(server: MCPServer) -> None:
    @server.resource(
        DOC_URI,
        name="document",
        title="文档全文 / Document text",
        mime_type="text/markdown",
        description="A document's text as Markdown, rebuilt from its chunks. 文档全文。",
    )
    async def read_document(doc_id: str, ctx: Context) -> str:
        return await hub_resource(ctx, Hub.document_markdown, doc_id)

    @server.resource(
        CHUNK_URI + "{?context}",
        name="chunk",
        title="段落 / Chunk",
        mime_type="text/markdown",
        description=(
            "One indexed passage with its citation (source, page, section); `?context=article` adds the rest of its"
            " article(s) or its neighbours, `?context=section` its section (chapter), within the answer budget."
            " 段落及出处；context=article|section 返回所在条文或章节。"
        ),
    )
    async def read_chunk(chunk_id: str, ctx: Context, context: str | None = None) -> str:
        return await hub_resource(ctx, functools.partial(Hub.chunk_markdown, context=context), chunk_id)

    for ext, mime in (("png", "image/png"), ("jpg", "image/jpeg")):  # images of cited passages, by content hash
        server.resource(
            f"zhiku://image/{{sha256}}.{ext}",
            name=f"image-{ext}",
            title="图片 / Image",
            mime_type=mime,
            description="An image extracted from a document. 文档中的图片。",
        )(image_reader(ext))


def _prompt(server: MCPServer, max_query: int) -> None:
    @server.prompt(
        name="answer_with_citations",
        title="带引用回答 / Answer with citations",
        description="Answer a question from the knowledge base, citing passages as [n]. 依据知识库作答并标注引用。",
    )
    def answer_with_citations(
        question: Annotated[
            str, Field(min_length=1, max_length=max_query, description=("The user's question. 用户的问题。"))
        ],
    ) -> str:
        return mcp_text.PROMPT.format(question=question)
