"""The MCP server: ``build_server(settings) -> MCPServer``, the builder every surface uses.

A lifespan opens the index and loads the models once (``Hub.open``); tools run the library in worker
threads. Reads (searches, catalogue, resources) run concurrently; ingests and deletes one at a time, without
holding up reads (``concurrency.py``); result-cache hits are answered on the event loop. Every tool failure is an
``isError`` result carrying a stable code (``calls.py``). Under stdio nothing but protocol reaches stdout.

The parts: ``calls.py`` (running a call, results and errors), ``middleware.py`` (JSON-RPC edges),
``builtin.py`` (the knowledge tools, resources and prompt), ``transport.py`` (stdio, HTTP, the client).

``python -m zhiku.mcp.server --tool-reference`` prints the tool reference (docs/mcp-tools.md) from the real schemas.
"""

from __future__ import annotations

import inspect
import logging
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel

import zhiku.plugins as zhiku_plugins
from zhiku.cache import Cache
from zhiku.errors import ZhikuError
from zhiku.extensions import prompt_spec, resource_spec, tool_spec
from zhiku.mcp import text as mcp_text
from zhiku.mcp.builtin import register_builtins
from zhiku.mcp.calls import State, error_result, explain_arguments, ok_result
from zhiku.mcp.hooks import HookRunner, Hooks
from zhiku.mcp.hub import Hub
from zhiku.mcp.middleware import WRITE_TOOLS, build_middleware
from zhiku.mcp.registry import Registry
from zhiku.mcp.transport import http_app, open_client, preflight, serve_built
from zhiku.settings import Settings

__all__ = [
    "build_server",
    "error_result",
    "explain_arguments",
    "http_app",
    "ok_result",
    "open_client",
    "preflight",
    "run_server",
    "tool_reference",
]

log = logging.getLogger("zhiku.mcp.server")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("zhiku")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0"


class _Ready:
    """What /healthz reports: set while the lifespan holds an open hub."""

    hub: Hub | None = None
    state: State | None = None


def build_server(
    settings: Settings,
    *,
    tools: Sequence[Any] = (),
    resources: Sequence[Any] = (),
    prompts: Sequence[Any] = (),
    hooks: Hooks | None = None,
    plugins: bool = True,
    open_hub: Callable[[Settings], Hub] = Hub.open,
) -> MCPServer:
    """The MCP server for ``settings``: the built-in knowledge tools, then ``tools`` (plain typed functions, see
    ``zhiku.extensions``), ``resources`` and ``prompts``, then the ``zhiku.tools`` plugins (unless ``plugins=False``);
    ``hooks`` run around every tool call. A tool breaking the conventions raises ``ToolDefinitionError`` here (a
    plugin's is logged and skipped). Nothing is opened until a transport enters the lifespan."""
    ready = _Ready()
    read_only = settings.server.read_only

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[State]:
        hub = await anyio.to_thread.run_sync(open_hub, settings)
        ready.hub = hub
        log.info("zhiku: index %s open (%s)", settings.index, "read-only" if read_only else "read-write")
        ready.state = State(hub=hub, limiter=anyio.CapacityLimiter(1))
        try:
            yield ready.state
        finally:
            ready.hub = ready.state = None
            hub.close()

    models: dict[str, type[BaseModel]] = {}  # tool name -> argument model, filled by the registry
    server = MCPServer(
        "zhiku",
        title="知库 zhiku",
        version=_version(),
        instructions=mcp_text.INSTRUCTIONS,
        lifespan=lifespan,
        middleware=[build_middleware(models, read_only, HookRunner(hooks or Hooks()))],
        log_level="WARNING",
    )
    cache: Cache[Any] = Cache(settings.server.cache_size)
    registry = Registry(server, models, read_only=read_only, cache=cache, current=lambda: ready.state)

    register_builtins(server, registry.builtin, settings)
    for fn in tools:
        registry.add_tool(tool_spec(fn, origin=_origin(fn)))
    for fn in resources:
        registry.add_resource(resource_spec(fn, origin=_origin(fn)))
    for fn in prompts:
        registry.add_prompt(prompt_spec(fn, origin=_origin(fn)))
    if plugins:
        _add_plugin_tools(registry)
    _add_healthz(server, ready)
    return server


def _origin(fn: Any) -> str:
    """Where a script's function is defined, for error messages: ``custom_server.py:12``."""
    try:
        target = getattr(fn, "fn", fn)
        return f"{Path(inspect.getsourcefile(target) or '?').name}:{inspect.getsourcelines(target)[1]}"
    except (OSError, TypeError):
        return "script"


def _add_plugin_tools(registry: Registry) -> None:
    """``zhiku.tools`` entry points: a tool breaking the conventions is reported and skipped."""
    for plugin in zhiku_plugins.load("zhiku.tools"):
        objs = plugin.obj if isinstance(plugin.obj, list | tuple) else [plugin.obj]
        for obj in objs:
            try:
                registry.add_tool(tool_spec(obj, origin=f"plugin {plugin.info.distribution}"))
            except Exception as e:  # a broken plugin never takes the server down
                zhiku_plugins.report_problem(plugin.info, str(e) if isinstance(e, ZhikuError) else repr(e))


def _add_healthz(server: MCPServer, ready: _Ready) -> None:
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    @server.custom_route("/healthz", methods=["GET"])  # type: ignore[untyped-decorator]
    async def healthz(request: Request) -> JSONResponse:
        hub = ready.hub
        if hub is None:
            return JSONResponse({"status": "starting", "ready": False}, status_code=503)
        return JSONResponse(await anyio.to_thread.run_sync(hub.health))


def run_server(settings: Settings, **extensions: Any) -> None:
    """Serve until the client disconnects (stdio) or the process is stopped (HTTP); ``extensions`` are
    ``build_server``'s ``tools``, ``resources``, ``prompts`` and ``hooks``."""
    preflight(settings)
    serve_built(build_server(settings, **extensions), settings)


# -- generated docs -------------------------------------------------------------------------------
def tool_reference(settings: Settings | None = None) -> str:
    """docs/mcp-tools.md: every tool, resource template and prompt, from the real schemas."""
    from zhiku.mcp.reference import render

    server = build_server(settings or Settings.model_validate({}), plugins=False, open_hub=lambda s: None)  # type: ignore[arg-type,return-value]

    async def collect() -> tuple[list[Any], list[Any], list[Any]]:
        return await server.list_tools(), await server.list_resource_templates(), await server.list_prompts()

    tools, templates, prompts = anyio.run(collect)
    return render(tools, templates, prompts, write_tools=WRITE_TOOLS)


if __name__ == "__main__":
    if sys.argv[1:] == ["--tool-reference"]:
        sys.stdout.write(tool_reference())
    else:
        sys.exit("usage: python -m zhiku.mcp.server --tool-reference   (run the server with `zhiku serve`)")
