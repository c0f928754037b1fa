"""Serving MCP over stdio with every input line checked first (:mod:`zhiku.mcp.jsonrpc`).

The SDK's ``stdio_server`` reads lines and drops the ones it cannot parse without a reply; here its input is
the process's stdin filtered by :func:`~zhiku.mcp.jsonrpc.filter_lines`, and each rejected line is answered
through the SDK's own writer (one JSON-RPC error per line, ``id`` null when the line had none), so nothing
but protocol reaches stdout and replies never interleave.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from io import TextIOWrapper
from typing import Any

import anyio

from zhiku.mcp.jsonrpc import filter_lines


class _Lines:
    """An async iterable of stdin lines, as ``stdio_server(stdin=...)`` consumes them."""

    def __init__(self, reject_send: Any) -> None:
        self._stdin = anyio.wrap_file(TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace"))
        self._reject_send = reject_send

    def __aiter__(self) -> AsyncIterator[str]:
        return filter_lines(self._stdin, self._reject)

    async def _reject(self, response: dict[str, Any]) -> None:
        await self._reject_send.send(response)


async def serve_stdio(server: Any) -> None:
    """Run ``server`` (an ``MCPServer``) over stdin/stdout until stdin closes."""
    from mcp.server.stdio import stdio_server
    from mcp.shared.message import SessionMessage
    from mcp.types import jsonrpc_message_adapter

    reject_send, reject_recv = anyio.create_memory_object_stream[dict[str, Any]](100)
    lowlevel = server._lowlevel_server  # what MCPServer.run_stdio_async runs (mcp>=2.3,<3)
    async with stdio_server(stdin=_Lines(reject_send)) as (read_stream, write_stream):  # type: ignore[arg-type]

        async def answer_rejections() -> None:
            async with reject_recv:
                async for response in reject_recv:
                    await write_stream.send(SessionMessage(jsonrpc_message_adapter.validate_python(response)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(answer_rejections)
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
            tg.cancel_scope.cancel()
