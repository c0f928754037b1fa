"""The server's JSON-RPC middleware: unknown tools are protocol errors, SDK-rejected calls get zhiku's error
shape and codes, and ``resources/list`` pages through the indexed documents."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS
from pydantic import BaseModel

from zhiku.mcp.calls import ERROR_META, State, explain_arguments, wire_error
from zhiku.mcp.hooks import HookRunner
from zhiku.mcp.models import doc_uri

RESOURCE_PAGE = 50
WRITE_TOOLS = ("ingest_documents", "delete_document")


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


def build_middleware(
    tools: dict[str, type[BaseModel]], read_only: bool, hooks: HookRunner | None = None
) -> Callable[..., Any]:
    hooks = hooks or HookRunner()

    async def _tool_call(ctx: Any, call_next: Callable[[Any], Any]) -> Any:
        params = ctx.params or {}
        name = str(params.get("name"))
        result = await call_next(ctx)
        if isinstance(result, dict) and result.get("isError") and ERROR_META not in (result.get("_meta") or {}):
            # rejected by the SDK (its argument validation, or a crash it caught): our error shape and codes
            why = explain_arguments(tools[name], params.get("arguments"))
            error = (
                wire_error("INVALID_INPUT", why)
                if why
                else wire_error("INTERNAL_ERROR", f"{name} failed unexpectedly; the server log has the details")
            )
            result = {
                **result,
                "content": error["content"],
                "_meta": {**(result.get("_meta") or {}), **error["_meta"]},
            }
        return result

    async def middleware(ctx: Any, call_next: Callable[[Any], Any]) -> Any:
        params = ctx.params or {}
        if ctx.method == "tools/call":
            name = params.get("name")
            if not isinstance(name, str) or name not in tools:  # an unknown tool: a protocol error, not isError
                hint = " (this server is read-only)" if read_only and name in WRITE_TOOLS else ""
                raise MCPError(INVALID_PARAMS, f"unknown tool {name!r}{hint}; available: {', '.join(tools)}")
            return await hooks.around(name, params.get("arguments"), lambda: _tool_call(ctx, call_next), ERROR_META)
        if ctx.method == "resources/list":
            result = await call_next(ctx)
            state: State = ctx.lifespan_context
            docs = await anyio.to_thread.run_sync(state.hub.documents)
            start = _offset(params["cursor"]) if params.get("cursor") else 0
            page = docs[start : start + RESOURCE_PAGE]
            result = {
                **result,
                # the SDK's static resources (a team's own) first, then the documents
                "resources": (result.get("resources", []) if start == 0 else [])
                + [
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
