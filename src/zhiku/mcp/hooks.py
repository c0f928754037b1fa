"""Hooks around every tool call (built-in, script and plugin tools alike): before the call, after it, and on
an error result.

A hook is a plain function (or ``async def``) taking one :class:`ToolCall`. It runs on the server's event loop,
so keep it quick (hand slow work to a queue or a thread). A hook that raises is logged and ignored: it never
changes the result the client gets.
"""

from __future__ import annotations

import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

log = logging.getLogger("zhiku.mcp.hooks")

Hook = Callable[["ToolCall"], Awaitable[None] | None]


@dataclass(frozen=True)
class ToolCall:
    """One tool call as hooks see it. ``duration_s`` and ``result_chars`` are set after the call; ``error_code``
    and ``error`` on an error result (``INVALID_INPUT``, ``NOT_FOUND``, ``INTERNAL_ERROR``, ...)."""

    name: str
    arguments: Mapping[str, Any]
    duration_s: float | None = None
    result_chars: int | None = None
    error_code: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class Hooks:
    """Callbacks around every tool call; each list runs in order."""

    before_call: Sequence[Hook] = ()
    after_call: Sequence[Hook] = ()
    on_error: Sequence[Hook] = ()

    def __add__(self, other: Hooks) -> Hooks:
        return Hooks(
            before_call=(*self.before_call, *other.before_call),
            after_call=(*self.after_call, *other.after_call),
            on_error=(*self.on_error, *other.on_error),
        )


@dataclass
class HookRunner:
    """Runs ``Hooks`` around one ``tools/call`` (the server's middleware calls it)."""

    hooks: Hooks = field(default_factory=Hooks)

    async def around(self, name: str, arguments: Any, call: Callable[[], Awaitable[Any]], error_meta: str) -> Any:
        args = arguments if isinstance(arguments, Mapping) else {}
        event = ToolCall(name=name, arguments=args)
        await self._fire("before_call", self.hooks.before_call, event)
        started = time.perf_counter()
        try:
            result = await call()
        except Exception as e:
            done = replace(event, duration_s=time.perf_counter() - started, error_code="PROTOCOL_ERROR", error=str(e))
            await self._fire("on_error", self.hooks.on_error, done)
            raise
        done = replace(event, duration_s=time.perf_counter() - started, result_chars=_size(result))
        if isinstance(result, dict) and result.get("isError"):
            err = (result.get("_meta") or {}).get(error_meta) or {}
            done = replace(done, error_code=err.get("code", "TOOL_ERROR"), error=err.get("message", ""))
            await self._fire("on_error", self.hooks.on_error, done)
        else:
            await self._fire("after_call", self.hooks.after_call, done)
        return result

    @staticmethod
    async def _fire(kind: str, hooks: Sequence[Hook], event: ToolCall) -> None:
        for hook in hooks:
            try:
                out = hook(event)
                if inspect.isawaitable(out):
                    await out
            except Exception:
                log.exception("%s hook %s raised on tool %s; ignored", kind, _name(hook), event.name)


def _size(result: Any) -> int:
    """Characters of the result's content as the client receives it (text blocks and structured content)."""
    if not isinstance(result, dict):
        return 0
    return len(json.dumps(result.get("content", []), ensure_ascii=False)) + len(
        json.dumps(result.get("structuredContent"), ensure_ascii=False) if result.get("structuredContent") else ""
    )


def _name(hook: Any) -> str:
    return str(getattr(hook, "__qualname__", None) or repr(hook))
