"""Hooks before and after every tool call and on an error result; one that raises is logged and ignored."""

from __future__ import annotations

import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

log = logging.getLogger("zhiku.mcp.hooks")
ERROR_META = "zhiku/error"  # where an error result carries {code, message, retryable}

Hook = Callable[["ToolCall"], Awaitable[None] | None]


@dataclass(frozen=True)
class ToolCall:
    """``duration_s`` and ``result_chars`` are set after the call; ``error_code`` and ``error`` on an error result."""

    name: str
    arguments: Mapping[str, Any]
    duration_s: float | None = None
    result_chars: int | None = None
    error_code: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class Hooks:
    before_call: Sequence[Hook] = ()
    after_call: Sequence[Hook] = ()
    on_error: Sequence[Hook] = ()


async def around(hooks: Hooks, name: str, arguments: Any, call: Callable[[], Awaitable[Any]]) -> tuple[Any, ToolCall]:
    """The call's result, and what the hooks were told of it."""
    event = ToolCall(name=name, arguments=arguments if isinstance(arguments, Mapping) else {})
    await _fire("before_call", hooks.before_call, event)
    started = time.perf_counter()
    try:
        result = await call()
    except Exception as e:
        done = replace(event, duration_s=time.perf_counter() - started, error_code="PROTOCOL_ERROR", error=str(e))
        await _fire("on_error", hooks.on_error, done)
        raise
    body = result if isinstance(result, dict) else {}
    sent = [body.get("content", []), *([body["structuredContent"]] if body.get("structuredContent") else [])]
    size = sum(len(json.dumps(part, ensure_ascii=False)) for part in sent)
    done = replace(event, duration_s=time.perf_counter() - started, result_chars=size)
    if body.get("isError"):
        err = (body.get("_meta") or {}).get(ERROR_META) or {}
        done = replace(done, error_code=err.get("code", "TOOL_ERROR"), error=err.get("message", ""))
        await _fire("on_error", hooks.on_error, done)
    else:
        await _fire("after_call", hooks.after_call, done)
    return result, done


async def _fire(kind: str, hooks: Sequence[Hook], event: ToolCall) -> None:
    for hook in hooks:
        try:
            out = hook(event)
            if inspect.isawaitable(out):
                await out
        except Exception:
            name = getattr(hook, "__qualname__", None) or repr(hook)
            log.exception("%s hook %s raised on tool %s; ignored", kind, name, event.name)
