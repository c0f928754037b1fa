"""`zhiku serve` and ``zhiku.serve(...)``: a built server over stdio or Streamable HTTP (behind ``http_security``);
a start-up problem is one ``error:`` line on stderr (clients show it)."""

from __future__ import annotations

import argparse
import functools
import logging
import math
import sys
from collections import deque
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.types import JSONRPCMessage

from zhiku.errors import ZhikuError
from zhiku.mcp.hooks import Hooks
from zhiku.mcp.http_security import MAX_REQUEST_BYTES, Rejection, check_message, limit_hit, too_large
from zhiku.mcp.server import build_server
from zhiku.settings import Settings, load_settings

log = logging.getLogger("zhiku.mcp.server")
SSE_RETRY_MS = 1000  # how soon a client whose SSE stream dropped reconnects (the `retry` field)
SSE_EVENTS_KEPT = 256  # events a session keeps for a client that resumes a dropped stream
SKIP_PIECE = 64 * 1024  # bytes read at a time past the end of an oversized stdio line


def http_app(server: MCPServer, settings: Settings) -> Any:
    from mcp.server.transport_security import TransportSecuritySettings

    from zhiku.mcp.http_security import PATH, build_http_app

    s = settings.server
    app = server.streamable_http_app(
        streamable_http_path=PATH,
        max_request_body_size=MAX_REQUEST_BYTES,
        session_idle_timeout=s.session_idle_s,
        max_sessions=None,  # admit_sessions' cap instead
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),  # ours is stricter
        host=s.host,
        retry_interval=SSE_RETRY_MS,
    )
    admit_sessions(server.session_manager, s.max_sessions)
    logging.getLogger("mcp.server.streamable_http_manager").setLevel(logging.ERROR)  # a warning per request
    return build_http_app(app, s, settings.index)


def admit_sessions(manager: Any, cap: int) -> None:
    """At ``cap`` open sessions a new one closes the session idle longest (instead of the SDK's 503); each admitted
    session gets its own event log (stream ids repeat across sessions), for Last-Event-ID resumption."""
    admit = manager._admit_session  # mcp>=2.3,<3; the SDK's own cap is off (max_sessions=None)

    def admit_session(requestor: Any) -> Any:
        scopes = [t.idle_scope for t in manager._server_instances.values()]
        alive = [s for s in scopes if s is None or not s.cancel_called]
        if len(alive) >= cap:
            idle = [s for s in alive if s is not None and s.deadline != math.inf]
            if not idle:
                limit_hit("sessions", f"{cap} sessions open, none idle (server.max_sessions): new session refused")
                return None
            min(idle, key=lambda s: s.deadline).cancel()
            limit_hit("sessions", f"{cap} sessions open (server.max_sessions): closed the one idle longest")
        transport = admit(requestor)
        if transport is not None:
            transport._event_store = SessionEvents()
        return transport

    manager._admit_session = admit_session


class SessionEvents(EventStore):
    """A session's last ``SSE_EVENTS_KEPT`` events: (id, stream id, message; None for a priming event)."""

    def __init__(self) -> None:
        self.events: deque[tuple[int, str, JSONRPCMessage | None]] = deque(maxlen=SSE_EVENTS_KEPT)

    async def store_event(self, stream_id: str, message: JSONRPCMessage | None) -> str:
        self.events.append((self.events[-1][0] + 1 if self.events else 1, stream_id, message))
        return str(self.events[-1][0])

    async def replay_events_after(self, last_event_id: str, send_callback: EventCallback) -> str | None:
        stream = next((s for i, s, _ in self.events if str(i) == last_event_id), None)
        for i, s, message in list(self.events):
            if s == stream and message is not None and i > int(last_event_id):
                await send_callback(EventMessage(message, str(i)))
        return stream


def preflight(settings: Settings) -> None:
    """Fail before any transport starts; warn of an empty index (a typo in a client's ``--index``)."""
    from zhiku.api import KnowledgeBase
    from zhiku.mcp.http_security import check_bind, check_port_free

    if settings.server.transport == "http":
        check_bind(settings.server, settings.index)
        fix = "another `zhiku serve`? pass --port N (or set server.port), or stop what holds it"
        check_port_free(settings.server.host, settings.server.port, what="HTTP", fix=fix)
    with KnowledgeBase(settings, read_only=settings.server.read_only) as kb:  # read-only: IndexNotFound if missing
        empty = not any(c.documents for c in kb.collections())
    if empty:
        where = settings.index.resolve()
        log.warning(
            f"the index at {where} holds no documents: every query will find nothing. If the path is a typo, fix "
            f"--index in the client's configuration; else add documents with `zhiku ingest PATH --index {where}` or "
            "the ingest_documents tool"
        )


def serve_built(server: MCPServer, settings: Settings) -> None:
    s = settings.server
    if s.transport == "stdio":
        log.info("zhiku: serving %s over stdio", settings.index)
        if sys.stdin.isatty():  # a person ran it, as `zhiku init` lists it: it seems to hang otherwise
            log.warning(
                "waiting for an MCP client on stdin: MCP clients start this command themselves (see "
                "mcp-clients/README.md of a `zhiku init` project); to try it by hand, `zhiku serve --transport http` "
                "and the MCP Inspector. Ctrl-C stops it"
            )
        anyio.run(serve_stdio, server)
        return
    import uvicorn

    from zhiku.mcp.http_security import PATH, http_protocol

    log.info("zhiku: serving %s on http://%s:%d%s", settings.index, s.host, s.port, PATH)
    config = uvicorn.Config(
        http_app(server, settings),
        host=s.host,
        port=s.port,
        http=http_protocol(),
        log_level="warning",
        access_log=False,
        lifespan="on",
    )
    uvicorn.Server(config).run()


def _skip_line() -> None:
    """Read stdin past the end of the current line, in one worker call and small pieces: the rest of a 200 MB line
    read a MiB per worker call grew the server's peak memory by 44–90 MB from run to run (3 of 10 runs under 50),
    in 64 KiB pieces by 15–46 MB (10 of 10)."""
    while (piece := sys.stdin.buffer.readline(SKIP_PIECE)) and not piece.endswith(b"\n"):
        pass


async def serve_stdio(server: MCPServer) -> None:
    """Every stdin line checked first; a rejection is answered through the SDK's writer (replies never interleave)."""
    from mcp.server.stdio import stdio_server
    from mcp.shared.message import SessionMessage
    from mcp.types import jsonrpc_message_adapter

    rejected_send, rejected = anyio.create_memory_object_stream[dict[str, Any]](100)
    read = functools.partial(anyio.to_thread.run_sync, sys.stdin.buffer.readline)

    async def lines() -> AsyncIterator[str]:  # what stdio_server(stdin=...) reads: the well-formed lines
        while line := await read(MAX_REQUEST_BYTES + 1):
            if len(line) > MAX_REQUEST_BYTES and not line.endswith(b"\n"):
                rejection: Rejection | None = too_large(line[:256])
                limit_hit("stdio_line", f"a stdio message over {MAX_REQUEST_BYTES:,} bytes: refused")
                await anyio.to_thread.run_sync(_skip_line)
            elif not line.strip():
                continue
            else:
                rejection = check_message(text := line.decode("utf-8", "replace"))
            if rejection is None:
                yield text
            else:
                await rejected_send.send(rejection.response())

    lowlevel = server._lowlevel_server  # what MCPServer.run_stdio_async runs (mcp>=2.3,<3)
    async with stdio_server(stdin=lines()) as (read_stream, write_stream):  # type: ignore[arg-type]

        async def answer_rejections() -> None:
            async with rejected:
                async for response in rejected:
                    await write_stream.send(SessionMessage(jsonrpc_message_adapter.validate_python(response)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(answer_rejections)
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
            tg.cancel_scope.cancel()


def serve(
    *,
    tools: Sequence[Any] = (),
    resources: Sequence[Any] = (),
    prompts: Sequence[Any] = (),
    hooks: Hooks | None = None,
    settings: Settings | None = None,
    argv: Sequence[str] | None = None,
) -> None:
    """Serve until the client disconnects (stdio) or the process is stopped (HTTP)."""
    p = argparse.ArgumentParser(description="Serve zhiku's knowledge tools and this script's own over MCP.")
    p.add_argument("--config", type=Path, help="Settings file (default: ./zhiku.yaml if present).")
    p.add_argument("--index", type=Path, help="Index directory (default: settings `index`).")
    p.add_argument("--transport", help="stdio | http (default: settings `server.transport`).")
    p.add_argument("--host", help="HTTP bind address (default 127.0.0.1).")
    p.add_argument("--port", help="HTTP port (default 8765).")
    p.add_argument("--read-only", action="store_true", default=None, help="Hide the tools that change the index.")
    args = p.parse_args(argv)
    flags = {k: getattr(args, k) for k in ("transport", "host", "port", "read_only")}
    start(args.config, args.index, flags, settings, tools=tools, resources=resources, prompts=prompts, hooks=hooks)


def start(
    config: Path | None, index: Path | None, flags: dict[str, Any], settings: Settings | None = None, **extensions: Any
) -> None:
    log_format = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # on stderr: under stdio, stdout is the protocol
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format=log_format, datefmt="%H:%M:%S", force=True)
    logging.getLogger("zhiku").setLevel(logging.INFO)
    try:
        if settings is None:
            overrides = {k: v for k, v in flags.items() if v is not None}
            settings = load_settings(config, index=index, server=overrides or None)
        server = build_server(settings, **extensions)
        preflight(settings)
        serve_built(server, settings)
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except Exception as e:  # a library error, maybe raised inside the transport's task group
        found = _zhiku_error(e)
        if found is None:
            raise
        sys.stderr.write("error: " + " ".join(str(found).split()) + "\n")
        raise SystemExit(1) from None


def _zhiku_error(exc: BaseException) -> ZhikuError | None:
    if isinstance(exc, ZhikuError):
        return exc
    for member in getattr(exc, "exceptions", ()):
        if (found := _zhiku_error(member)) is not None:
            return found
    return None
