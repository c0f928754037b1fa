"""The MCP server: ``build_server(settings) -> MCPServer``. The only module that imports the MCP SDK.

A lifespan opens the index and loads the models once (``Hub.open``); tools run the library in worker
threads. Searches, ingests and deletes run one at a time (the embedder is not thread-safe); catalogue
reads run alongside them, and result-cache hits are answered on the event loop. Every tool failure is an ``isError`` result carrying a stable code (``ZhikuError.code``;
``INTERNAL_ERROR`` for anything unexpected, whose traceback goes to the log, never to the client) in its
text and in ``_meta["zhiku/error"]``. Under stdio nothing but protocol reaches stdout.

``python -m zhiku.mcp.server --tool-reference`` prints the tool reference (docs/mcp-tools.md) from the real schemas.
"""

# No `from __future__ import annotations`: the tools' parameter types are built at run time (bounds come from
# the settings) and the SDK reads them from the signatures, so annotations must stay real objects.
import base64
import functools
import inspect
import logging
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar, get_type_hints

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, CallToolResult, ImageContent, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from zhiku.errors import NotFound, ZhikuError
from zhiku.mcp import text as mcp_text
from zhiku.mcp.hub import Hub, QueryArgs
from zhiku.mcp.models import (
    CHUNK_URI,
    DOC_URI,
    CollectionsResult,
    DeleteResult,
    DocumentSummary,
    ErrorInfo,
    IngestResult,
    QueryFilters,
    QueryResult,
    doc_uri,
)
from zhiku.settings import Settings

log = logging.getLogger("zhiku.mcp.server")
T = TypeVar("T")
READ_ONLY = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
WRITE_TOOLS = ("ingest_documents", "delete_document")
RESOURCE_PAGE = 50
ERROR_META = "zhiku/error"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("zhiku")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0"


@dataclass
class _State:
    hub: Hub
    limiter: anyio.CapacityLimiter


class _Ready:
    """What /healthz reports: set while the lifespan holds an open hub."""

    hub: Hub | None = None


def error_result(code: str, message: str, retryable: bool = False) -> CallToolResult:
    """An ``isError`` result: the error as text and in ``_meta["zhiku/error"]``. No ``structuredContent``:
    clients (the TypeScript SDK, hence the Inspector) validate it against the tool's output schema even on
    errors."""
    err = ErrorInfo(code=code, message=message, retryable=retryable)
    return CallToolResult(
        content=[TextContent(type="text", text=err.to_markdown())],
        is_error=True,
        _meta={ERROR_META: err.model_dump(mode="json")},
    )


def ok_result(model: Any, images: Any = ()) -> CallToolResult:
    """The model as text and structured content, then ``images`` (``(mime_type, base64)``) as image content."""
    return CallToolResult(
        content=[
            TextContent(type="text", text=model.to_markdown()),
            *(ImageContent(type="image", data=data, mime_type=mime) for mime, data in images),
        ],
        structured_content=model.model_dump(mode="json"),
    )


async def _run(ctx: Context, fn: Callable[..., T], *args: Any, exclusive: bool = False) -> T:
    """``fn(hub, *args)`` in a worker thread; ``exclusive`` work (the embedder, writes) runs one at a time."""
    state: _State = ctx.request_context.lifespan_context
    return await anyio.to_thread.run_sync(
        functools.partial(fn, state.hub, *args), limiter=state.limiter if exclusive else None
    )


async def _tool(
    ctx: Context, name: str, fn: Callable[..., Any], *args: Any, exclusive: bool = False, images: bool = False
) -> CallToolResult:
    try:
        result = await _run(ctx, fn, *args, exclusive=exclusive)
        return ok_result(result, await _run(ctx, Hub.image_blocks, result) if images else ())
    except ZhikuError as e:
        log.info("tool %s failed: %s %s", name, e.code, e)
        return error_result(e.code, str(e), e.retryable)
    except Exception:
        log.exception("tool %s raised an unexpected exception", name)
        return error_result("INTERNAL_ERROR", f"{name} failed unexpectedly; the server log has the details")


async def _resource(ctx: Context, fn: Callable[..., str], ident: str) -> str:
    try:
        return await _run(ctx, fn, ident)
    except NotFound as e:
        raise ResourceNotFoundError(str(e)) from None
    except ZhikuError as e:
        raise ResourceError(f"{e.code}: {e}") from None


def _image_reader(ext: str) -> Callable[..., Any]:
    async def read_image(sha256: str, ctx: Context) -> bytes:
        return await _resource(ctx, Hub.image_bytes, f"{sha256}.{ext}")  # type: ignore[arg-type,return-value]

    return read_image


# -- argument errors with codes -------------------------------------------------------------------
def _arg_model(fn: Callable[..., Any]) -> type[BaseModel]:
    """A model of ``fn``'s parameters (as the SDK validates them), to explain a rejected call."""
    hints = get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    for name, p in inspect.signature(fn).parameters.items():
        if hints.get(name) is not Context:
            fields[name] = (hints[name], ... if p.default is inspect.Parameter.empty else p.default)
    return create_model(f"{fn.__name__}_args", __config__=ConfigDict(extra="forbid"), **fields)


def explain_arguments(model: type[BaseModel], arguments: Any) -> str | None:
    """What is wrong with ``arguments``, one clause per field; None when they are valid."""
    try:
        model.model_validate(arguments if isinstance(arguments, dict) else {})
    except ValidationError as e:
        parts = []
        for err in e.errors():
            loc = ".".join(str(x) for x in err["loc"]) or "arguments"
            given = repr(err.get("input"))
            parts.append(f"{loc}: {err['msg']} (got {given[:60] + '…' if len(given) > 60 else given})")
        return "invalid arguments: " + "; ".join(parts)
    return None


def _wire_error(code: str, message: str) -> dict[str, Any]:
    return error_result(code, message).model_dump(mode="json", by_alias=True, exclude_none=True)


def _cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"docs:{offset}".encode()).decode()


def _offset(cursor: Any) -> int:
    try:
        kind, _, n = base64.urlsafe_b64decode(str(cursor).encode()).decode().partition(":")
        if kind == "docs" and n.isdigit():
            return int(n)
    except (ValueError, UnicodeDecodeError):
        pass
    raise MCPError(INVALID_PARAMS, f"invalid resources/list cursor {cursor!r}: pass back a nextCursor unchanged")


def _middleware(tools: dict[str, type[BaseModel]], read_only: bool) -> Callable[..., Any]:
    async def middleware(ctx: Any, call_next: Callable[[Any], Any]) -> Any:
        params = ctx.params or {}
        if ctx.method == "tools/call":
            name = params.get("name")
            if name not in tools:  # the spec's protocol error for an unknown tool, not an isError result
                hint = " (this server is read-only)" if read_only and name in WRITE_TOOLS else ""
                raise MCPError(INVALID_PARAMS, f"unknown tool {name!r}{hint}; available: {', '.join(tools)}")
            result = await call_next(ctx)
            if isinstance(result, dict) and result.get("isError") and ERROR_META not in (result.get("_meta") or {}):
                # rejected by the SDK (its argument validation, or a crash it caught): our error shape and codes
                why = explain_arguments(tools[name], params.get("arguments"))
                error = (
                    _wire_error("INVALID_INPUT", why)
                    if why
                    else _wire_error("INTERNAL_ERROR", f"{name} failed unexpectedly; the server log has the details")
                )
                result = {
                    **result,
                    "content": error["content"],
                    "_meta": {**(result.get("_meta") or {}), **error["_meta"]},
                }
            return result
        if ctx.method == "resources/list":
            result = await call_next(ctx)
            state: _State = ctx.lifespan_context
            docs = await anyio.to_thread.run_sync(state.hub.documents)
            start = _offset(params["cursor"]) if params.get("cursor") else 0
            page = docs[start : start + RESOURCE_PAGE]
            result = {
                **result,
                "resources": [
                    {
                        "uri": doc_uri(d.doc_id),
                        "name": d.source,
                        "title": d.title,
                        "mimeType": "text/markdown",
                        "description": f"{d.collection} · {d.doc_type} · {d.chunk_count} chunks",
                    }
                    for d in page
                ],
            }
            if start + RESOURCE_PAGE < len(docs):
                result["nextCursor"] = _cursor(start + RESOURCE_PAGE)
            return result
        return await call_next(ctx)

    return middleware


# -- the server -----------------------------------------------------------------------------------
def build_server(settings: Settings, *, open_hub: Callable[[Settings], Hub] = Hub.open) -> MCPServer:
    """The MCP server for ``settings``; nothing is opened until a transport enters its lifespan."""
    ready = _Ready()
    read_only = settings.server.read_only
    max_query = settings.retrieval.max_query_chars

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[_State]:
        hub = await anyio.to_thread.run_sync(open_hub, settings)
        ready.hub = hub
        log.info("zhiku: index %s open (%s)", settings.index, "read-only" if read_only else "read-write")
        try:
            yield _State(hub=hub, limiter=anyio.CapacityLimiter(1))
        finally:
            ready.hub = None
            hub.close()

    tools: dict[str, type[BaseModel]] = {}
    server = MCPServer(
        "zhiku",
        title="知库 zhiku",
        version=_version(),
        instructions=mcp_text.INSTRUCTIONS,
        lifespan=lifespan,
        middleware=[_middleware(tools, read_only)],
        log_level="WARNING",
    )

    def tool(name: str, title: str, description: str, annotations: ToolAnnotations) -> Callable[[T], T]:
        def register(fn: T) -> T:
            tools[name] = _arg_model(fn)  # type: ignore[arg-type]
            return server.tool(name=name, title=title, description=description, annotations=annotations)(fn)

        return register

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

    @tool("query_knowledge_hub", "知识库检索 / Search the knowledge hub", mcp_text.QUERY, READ_ONLY)
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
                    "Optional filters: {source: glob over source path, doc_type: 'markdown'|'text'|'pdf'|'docx'|'html'}. 过滤条件。"
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
        state: _State = ctx.request_context.lifespan_context
        try:
            args = QueryArgs.of(query, top_k, collection, filters, max_chars)
            cached = state.hub.cached_query(args)
        except ZhikuError as e:
            return error_result(e.code, str(e), e.retryable)
        if cached is not None:
            return ok_result(cached, await _run(ctx, Hub.image_blocks, cached))
        return await _tool(ctx, "query_knowledge_hub", Hub.query, args, exclusive=True, images=True)

    @tool("list_collections", "列出集合 / List collections", mcp_text.LIST_COLLECTIONS, READ_ONLY)
    async def list_collections(
        ctx: Context,
        include_stats: Annotated[
            bool, Field(description="Include document/chunk/character counts. 是否包含统计。")
        ] = True,
    ) -> Annotated[CallToolResult, CollectionsResult]:
        return await _tool(ctx, "list_collections", Hub.collections, include_stats)

    @tool("get_document_summary", "文档概况 / Document summary", mcp_text.DOCUMENT_SUMMARY, READ_ONLY)
    async def get_document_summary(
        ctx: Context,
        doc_id: DocId,
        collection: Collection = None,
    ) -> Annotated[CallToolResult, DocumentSummary]:
        return await _tool(ctx, "get_document_summary", Hub.summary, doc_id, collection)

    if not read_only:

        @tool(
            "ingest_documents",
            "导入文档 / Ingest documents",
            mcp_text.INGEST,
            ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False),
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
                    functools.partial(
                        ctx.report_progress, done, total or None, message=f"{done}/{total} {name}".strip()
                    )
                )

            return await _tool(
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
            ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=True, openWorldHint=False),
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
            return await _tool(ctx, "delete_document", Hub.delete, doc_id, exclusive=True)

    @server.resource(
        DOC_URI,
        name="document",
        title="文档全文 / Document text",
        mime_type="text/markdown",
        description="A document's text as Markdown, rebuilt from its chunks. 文档全文。",
    )
    async def read_document(doc_id: str, ctx: Context) -> str:
        return await _resource(ctx, Hub.document_markdown, doc_id)

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
        return await _resource(ctx, lambda hub, ident: Hub.chunk_markdown(hub, ident, context), chunk_id)

    for ext, mime in (("png", "image/png"), ("jpg", "image/jpeg")):  # images of cited passages, by content hash
        server.resource(
            f"zhiku://image/{{sha256}}.{ext}",
            name=f"image-{ext}",
            title="图片 / Image",
            mime_type=mime,
            description="An image extracted from a document. 文档中的图片。",
        )(_image_reader(ext))

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

    from starlette.requests import Request
    from starlette.responses import JSONResponse

    @server.custom_route("/healthz", methods=["GET"])
    async def healthz(request: Request) -> JSONResponse:
        hub = ready.hub
        if hub is None:
            return JSONResponse({"status": "starting", "ready": False}, status_code=503)
        return JSONResponse(await anyio.to_thread.run_sync(hub.health))

    return server


# -- running --------------------------------------------------------------------------------------
def http_app(server: MCPServer, settings: Settings) -> Any:
    """The Streamable HTTP ASGI app behind zhiku's security middleware."""
    from mcp.server.transport_security import TransportSecuritySettings

    from zhiku.mcp.http_security import Policy, SecurityMiddleware, sdk_host_patterns, sdk_origin_patterns

    s = settings.server
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=sdk_host_patterns(s, s.allowed_hosts),
        allowed_origins=sdk_origin_patterns(s),
    )
    app = server.streamable_http_app(
        streamable_http_path=s.path, max_request_body_size=s.max_request_bytes, transport_security=security, host=s.host
    )
    return SecurityMiddleware(app, Policy.from_settings(s))


def preflight(settings: Settings) -> None:
    """Fail fast, before any transport starts: bad HTTP exposure, or an index that cannot be opened."""
    from zhiku.mcp.http_security import check_bind
    from zhiku.stores import open_store

    if settings.server.transport == "http":
        check_bind(settings.server)
    open_store(settings, read_only=settings.server.read_only).close()


def run_server(settings: Settings) -> None:
    """Serve until the client disconnects (stdio) or the process is stopped (HTTP)."""
    preflight(settings)
    server = build_server(settings)
    s = settings.server
    if s.transport == "stdio":
        log.info("zhiku: serving %s over stdio", settings.index)
        server.run()
        return
    import uvicorn

    log.info("zhiku: serving %s on http://%s:%d%s", settings.index, s.host, s.port, s.path)
    config = uvicorn.Config(
        http_app(server, settings), host=s.host, port=s.port, log_level="warning", access_log=False, lifespan="on"
    )
    uvicorn.Server(config).run()


def open_client(target: str | list[str], *, env: dict[str, str] | None = None, errlog: Any = None) -> Any:
    """An MCP SDK client (an async context manager) for a URL, or for a command line spoken to over stdio."""
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    if isinstance(target, str):
        return Client(target)
    params = StdioServerParameters(command=target[0], args=target[1:], env=env)
    return Client(stdio_client(params, errlog=errlog or sys.stderr))


# -- generated docs -------------------------------------------------------------------------------
def tool_reference(settings: Settings | None = None) -> str:
    """docs/mcp-tools.md: every tool, resource template and prompt, from the real schemas."""
    from zhiku.mcp.reference import render

    server = build_server(settings or Settings.model_validate({}), open_hub=lambda s: None)  # type: ignore[arg-type,return-value]

    async def collect() -> tuple[list[Any], list[Any], list[Any]]:
        return await server.list_tools(), await server.list_resource_templates(), await server.list_prompts()

    tools, templates, prompts = anyio.run(collect)
    return render(tools, templates, prompts, write_tools=WRITE_TOOLS)


if __name__ == "__main__":
    if sys.argv[1:] == ["--tool-reference"]:
        sys.stdout.write(tool_reference())
    else:
        sys.exit("usage: python -m zhiku.mcp.server --tool-reference   (run the server with `zhiku serve`)")
