"""Running one MCP call against the hub: worker threads, typed results, and errors as ``isError`` results
carrying a stable code (``ZhikuError.code``; ``INTERNAL_ERROR`` for anything unexpected, whose traceback goes
to the log, never to the client) in their text and in ``_meta["zhiku/error"]``."""

# No `from __future__ import annotations`: `arg_model` reads real annotation objects.
import functools
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast, get_type_hints

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, CallToolResult, ImageContent, TextContent
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from zhiku.errors import InvalidInput, NotFound, ZhikuError
from zhiku.mcp.agent_errors import agent_message
from zhiku.mcp.hub import Hub
from zhiku.mcp.models import ErrorInfo

log = logging.getLogger("zhiku.mcp.server")
T = TypeVar("T")
ERROR_META = "zhiku/error"


@dataclass
class State:
    hub: Hub
    limiter: anyio.CapacityLimiter


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
        structured_content=getattr(model, "structured", model.model_dump)(mode="json"),
    )


async def run_in_worker(ctx: Context, fn: Callable[..., T], *args: Any, exclusive: bool = False) -> T:
    """``fn(hub, *args)`` in a worker thread; ``exclusive`` work (the embedder, writes) runs one at a time."""
    state = cast(State, ctx.request_context.lifespan_context)
    return await anyio.to_thread.run_sync(
        functools.partial(fn, state.hub, *args), limiter=state.limiter if exclusive else None
    )


async def hub_tool(
    ctx: Context, name: str, fn: Callable[..., Any], *args: Any, exclusive: bool = False, images: bool = False
) -> CallToolResult:
    try:
        result = await run_in_worker(ctx, fn, *args, exclusive=exclusive)
        return ok_result(result, await run_in_worker(ctx, Hub.image_blocks, result) if images else ())
    except ZhikuError as e:
        log.info("tool %s failed: %s %s", name, e.code, e)
        return error_result(e.code, agent_message(e), e.retryable)
    except Exception:
        log.exception("tool %s raised an unexpected exception", name)
        return error_result("INTERNAL_ERROR", f"{name} failed unexpectedly; the server log has the details")


async def hub_resource(ctx: Context, fn: Callable[..., str], ident: str) -> str:
    try:
        return await run_in_worker(ctx, fn, ident)
    except NotFound as e:
        raise ResourceNotFoundError(agent_message(e)) from None
    except InvalidInput as e:  # a malformed URI (zhiku://image/.png): invalid params, as for a missing one
        raise MCPError(INVALID_PARAMS, agent_message(e)) from None
    except ZhikuError as e:
        raise ResourceError(f"{e.code}: {agent_message(e)}") from None


def image_reader(ext: str) -> Callable[..., Any]:
    async def read_image(sha256: str, ctx: Context) -> bytes:
        return await hub_resource(ctx, Hub.image_bytes, f"{sha256}.{ext}")  # type: ignore[arg-type,return-value]

    return read_image


# -- argument errors with codes -------------------------------------------------------------------
def arg_model(fn: Callable[..., Any]) -> type[BaseModel]:
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


def wire_error(code: str, message: str) -> dict[str, Any]:
    return error_result(code, message).model_dump(mode="json", by_alias=True, exclude_none=True)
