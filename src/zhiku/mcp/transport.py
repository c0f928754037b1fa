"""Transports: the Streamable HTTP app behind zhiku's security middleware, serving a built server over stdio or
HTTP, and an SDK client for either (``open_client``)."""

from __future__ import annotations

import logging
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer

from zhiku.mcp.stdio import serve_stdio
from zhiku.settings import Settings

log = logging.getLogger("zhiku.mcp.server")


def http_app(server: MCPServer, settings: Settings) -> Any:
    """The Streamable HTTP ASGI app behind zhiku's security checks (``zhiku.mcp.http_security``)."""
    from mcp.server.transport_security import TransportSecuritySettings

    from zhiku.mcp.http_security import MAX_REQUEST_BYTES, PATH, build_http_app, sdk_host_patterns, sdk_origin_patterns

    s = settings.server
    security = TransportSecuritySettings(allowed_hosts=sdk_host_patterns(s), allowed_origins=sdk_origin_patterns(s))
    app = server.streamable_http_app(
        streamable_http_path=PATH, max_request_body_size=MAX_REQUEST_BYTES, transport_security=security, host=s.host
    )
    return build_http_app(app, s)


def preflight(settings: Settings) -> None:
    """Fail fast, before any transport starts: bad HTTP exposure, or an index that cannot be opened. An index
    without documents (read-write: created now when missing) is served with a warning: a typo in a client's
    ``--index`` must not pass unnoticed."""
    from zhiku.api import KnowledgeBase
    from zhiku.mcp.http_security import check_bind, check_port_free

    if settings.server.transport == "http":
        check_bind(settings.server)
        check_port_free(
            settings.server.host,
            settings.server.port,
            what="HTTP",
            fix="another `zhiku serve`? pass --port N (or set server.port), or stop what holds it",
        )
    with KnowledgeBase(settings, read_only=settings.server.read_only) as kb:  # read-only: IndexNotFound if missing
        empty = not any(c.documents for c in kb.collections())
    if empty:
        where = settings.index.resolve()
        log.warning(
            "the index at %s holds no documents: every query will find nothing. If the path is a typo, fix "
            "--index in the client's configuration; else add documents with `zhiku ingest PATH --index %s` or "
            "the ingest_documents tool",
            where,
            where,
        )


def serve_built(server: MCPServer, settings: Settings) -> None:
    """Serve ``server`` until the client disconnects (stdio) or the process is stopped (HTTP)."""
    s = settings.server
    if s.transport == "stdio":
        log.info("zhiku: serving %s over stdio", settings.index)
        if sys.stdin.isatty():  # a person ran it, as `zhiku init` lists it: it seems to hang otherwise
            log.warning(
                "waiting for an MCP client on stdin: MCP clients start this command themselves (see "
                "mcp-clients/README.md of a `zhiku init` project); to try it by hand, `zhiku serve --transport http` "
                "and the MCP Inspector. Ctrl-C stops it"
            )
        anyio.run(serve_stdio, server)  # every input line checked first (zhiku.mcp.jsonrpc)
        return
    import uvicorn

    from zhiku.mcp.http_security import PATH

    log.info("zhiku: serving %s on http://%s:%d%s", settings.index, s.host, s.port, PATH)
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
