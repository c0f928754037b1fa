"""The MCP server builder every surface uses; ``--tool-reference`` prints docs/mcp-tools.md from the real schemas."""

from __future__ import annotations

import base64
import inspect
import json
import logging
import sys
import warnings
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

import anyio
import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.types import INVALID_PARAMS, Completion, EmptyResult, SetLevelRequestParams
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse

import zhiku.plugins as zhiku_plugins
from zhiku.access import ACCESS, Access
from zhiku.api import watch_in_background, watch_roots
from zhiku.errors import ZhikuError
from zhiku.extensions import prompt_spec, resource_spec, tool_spec
from zhiku.mcp import text
from zhiku.mcp.builtin import register_builtins
from zhiku.mcp.hooks import ERROR_META, Hooks, around
from zhiku.mcp.http_security import ACCESS_KEY
from zhiku.mcp.hub import Hub
from zhiku.mcp.models import doc_uri
from zhiku.mcp.registry import Registry, State, error_result, explain_arguments
from zhiku.settings import Settings

log = logging.getLogger("zhiku.mcp.server")
RESOURCE_PAGE = 50  # documents per resources/list page
MAX_COMPLETIONS = 100  # values per completion/complete answer, as the spec allows
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
WRITE_TOOLS = ("ingest_documents", "delete_document")
TEXT_ONLY_TOOLS = ("get_document_summary", *WRITE_TOOLS)  # structuredContent still sent, its schema not listed


def build_server(
    settings: Settings,
    *,
    tools: Sequence[Any] = (),
    resources: Sequence[Any] = (),
    prompts: Sequence[Any] = (),
    hooks: Hooks | None = None,
    plugins: bool = True,
    watch: Sequence[Path] = (),
) -> MCPServer:
    """The built-in tools, then the given ones and the plugins'; the index opens when a transport starts."""
    read_only = settings.server.read_only
    watch = watch_roots(watch) if watch else []  # a missing folder fails here, before any transport starts
    running: list[State] = []  # the state while the lifespan holds an open hub

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[State]:
        hub = await anyio.to_thread.run_sync(Hub.open, settings)
        log.info("zhiku: index %s open (%s)", settings.index, "read-only" if read_only else "read-write")
        running.append(State(hub=hub, limiter=anyio.CapacityLimiter(1)))
        stop_watching = watch_in_background(settings, watch, hub.kb.embedder) if watch else None
        try:
            yield running[0]
        finally:
            running.clear()
            if stop_watching is not None:
                await anyio.to_thread.run_sync(stop_watching)
            hub.close()

    models: dict[str, type[BaseModel]] = {}  # tool name -> argument model, filled by the registry
    writes: set[str] = set()  # the tools that change the index
    levels: WeakKeyDictionary[Any, int] = WeakKeyDictionary()  # connection -> the lowest log level it asked for
    try:
        zhiku_version = version("zhiku")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        zhiku_version = "0"
    server = MCPServer(
        "zhiku",
        title="知库 zhiku",
        version=zhiku_version,
        instructions=text.INSTRUCTIONS,
        lifespan=lifespan,
        middleware=[_middleware(models, writes, read_only, hooks or Hooks(), levels)],
        log_level="WARNING",
    )
    current = lambda: running[0] if running else None  # noqa: E731
    registry = Registry(server, models, writes, read_only=read_only, current=current)
    register_builtins(registry)
    for fn in tools:
        registry.add_tool(tool_spec(fn, origin=_origin(fn)))
    for fn in resources:
        registry.add_resource(resource_spec(fn, origin=_origin(fn)))
    for fn in prompts:
        registry.add_prompt(prompt_spec(fn, origin=_origin(fn)))
    for plugin in zhiku_plugins.load("zhiku.tools") if plugins else ():
        for obj in plugin.obj if isinstance(plugin.obj, list | tuple) else [plugin.obj]:
            try:
                registry.add_tool(tool_spec(obj, origin=f"plugin {plugin.info.distribution}"))
            except Exception as e:  # a broken plugin never takes the server down
                zhiku_plugins.report_problem(plugin.info, str(e) if isinstance(e, ZhikuError) else repr(e))

    @server.completion()  # type: ignore[no-untyped-call,untyped-decorator]
    async def complete(ref: Any, argument: Any, context: Any) -> Completion | None:
        ours = ref.name == "answer_with_citations" if ref.type == "ref/prompt" else ref.uri.startswith("zhiku://")
        if not running or not ours:
            return None
        values = await anyio.to_thread.run_sync(running[0].hub.complete, argument.name, argument.value)
        return Completion(values=values[:MAX_COMPLETIONS], total=len(values), has_more=len(values) > MAX_COMPLETIONS)

    async def set_level(ctx: Any, params: SetLevelRequestParams) -> EmptyResult:
        levels[ctx.session._connection] = LOG_LEVELS.index(params.level)  # per client (mcp>=2.3,<3)
        return EmptyResult()

    server._lowlevel_server.add_request_handler("logging/setLevel", SetLevelRequestParams, set_level)

    @server.custom_route("/healthz", methods=["GET"])  # type: ignore[untyped-decorator]
    async def healthz(request: Request) -> JSONResponse:
        if not running:
            return JSONResponse({"status": "starting", "ready": False}, status_code=503)
        health = await anyio.to_thread.run_sync(running[0].hub.health)
        return JSONResponse(health, status_code=200 if health["ready"] else 503)

    return server


def _origin(fn: Any) -> str:
    """``custom_server.py:12``, for error messages."""
    try:
        target = getattr(fn, "fn", fn)
        return f"{Path(inspect.getsourcefile(target) or '?').name}:{inspect.getsourcelines(target)[1]}"
    except (OSError, TypeError):
        return "script"


def _middleware(
    tools: dict[str, type[BaseModel]],
    writes: set[str],
    read_only: bool,
    hooks: Hooks,
    levels: WeakKeyDictionary[Any, int],
) -> Callable[..., Any]:
    """The caller's ``Access``, zhiku's error shape for SDK rejections, paged documents, per-session tool logs."""

    async def log(ctx: Any, level: str, message: str) -> None:
        if LOG_LEVELS.index(level) >= levels.get(ctx.session._connection, len(LOG_LEVELS)):
            with warnings.catch_warnings():  # deprecated in 2026-07-28; older clients still ask for it
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await ctx.session.send_log_message(level, message, logger="zhiku", related_request_id=ctx.request_id)

    async def call_tool(ctx: Any, call_next: Callable[[Any], Any], name: str, arguments: Any) -> Any:
        result = await call_next(ctx)
        if isinstance(result, dict) and result.get("isError") and ERROR_META not in (result.get("_meta") or {}):
            # rejected by the SDK (its argument validation, or a crash it caught)
            why = explain_arguments(tools[name], arguments)
            unexpected = f"{name} failed unexpectedly; the server log has the details"
            error = (
                error_result("INVALID_INPUT", why) if why else error_result("INTERNAL_ERROR", unexpected)
            ).model_dump(mode="json", by_alias=True, exclude_none=True)
            result = {**result, "content": error["content"], "_meta": {**(result.get("_meta") or {}), **error["_meta"]}}
        return result

    async def middleware(ctx: Any, call_next: Callable[[Any], Any]) -> Any:
        access = getattr(ctx.request, "scope", {}).get(ACCESS_KEY) or Access()  # stdio: the local user
        reset = ACCESS.set(access)
        try:
            return await scoped(ctx, call_next, access)
        finally:
            ACCESS.reset(reset)

    async def scoped(ctx: Any, call_next: Callable[[Any], Any], access: Access) -> Any:
        params = ctx.params or {}
        shown = [t for t in tools if access.write or t not in writes]  # a caller without write never sees them
        if ctx.method == "tools/call":
            name, arguments = params.get("name"), params.get("arguments")
            if not isinstance(name, str) or name not in shown:  # a protocol error, not isError
                hint = " (this server is read-only)" if read_only and name in WRITE_TOOLS else ""
                raise MCPError(INVALID_PARAMS, f"unknown tool {name!r}{hint}; available: {', '.join(shown)}")
            result, done = await around(hooks, name, arguments, lambda: call_tool(ctx, call_next, name, arguments))
            failed = f"{name}: {done.error_code}: {done.error}" if done.error_code else None
            await log(ctx, "error" if failed else "info", failed or f"{name}: ok in {done.duration_s:.2f}s")
            return result
        if ctx.method == "tools/list":  # a caller without write never sees the write tools
            result = await call_next(ctx)
            return {**result, "tools": [_lean_tool(t) for t in result["tools"] if t.get("name") in shown]}
        if ctx.method != "resources/list":
            return await call_next(ctx)
        result = await call_next(ctx)
        docs = await anyio.to_thread.run_sync(ctx.lifespan_context.hub.documents)
        start = _offset(params["cursor"]) if params.get("cursor") else 0
        listed = [
            {
                "uri": doc_uri(d.doc_id),
                "name": d.source,
                "title": d.title,
                "mimeType": "text/markdown",
                "description": f"{d.collection} · {d.doc_type} · {d.chunk_count} chunks",
            }
            for d in docs[start : start + RESOURCE_PAGE]
        ]
        # the static resources (a team's own) first, then the documents
        result = {**result, "resources": (result.get("resources", []) if start == 0 else []) + listed}
        if start + RESOURCE_PAGE < len(docs):
            result["nextCursor"] = base64.urlsafe_b64encode(f"docs:{start + RESOURCE_PAGE}".encode()).decode()
        return result

    return middleware


def _lean_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """What every session pays for: no schema titles, a bare output schema of the required fields (or none)."""
    tool = {**tool, "inputSchema": _untitled(tool["inputSchema"])}
    schema = tool.pop("outputSchema", None)
    if schema is not None and tool["name"] not in TEXT_ONLY_TOOLS:
        tool["outputSchema"] = _bare(schema, schema.get("$defs", {}))
    return tool


def _untitled(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _untitled(v) for k, v in schema.items() if not (k == "title" and isinstance(v, str))}
    return [_untitled(v) for v in schema] if isinstance(schema, list) else schema


def _bare(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its required properties only, types and enums only, references inlined."""
    if "$ref" in schema:
        return _bare(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    if "anyOf" in schema:  # not a list of types: some clients' schema dialects reject one
        return {"anyOf": [_bare(a, defs) for a in schema["anyOf"]]}
    out: dict[str, Any] = {k: schema[k] for k in ("type", "enum") if k in schema}
    if "items" in schema:
        out["items"] = _bare(schema["items"], defs)
    if "properties" in schema:
        required = schema.get("required", [])
        out["properties"] = {k: _bare(v, defs) for k, v in schema["properties"].items() if k in required}
        out["required"] = required
    return out


def _offset(cursor: Any) -> int:
    try:
        kind, _, n = base64.urlsafe_b64decode(str(cursor).encode()).decode().partition(":")
        if kind == "docs" and n.isdigit():
            return int(n)
    except (ValueError, UnicodeDecodeError):
        pass
    raise MCPError(INVALID_PARAMS, f"invalid resources/list cursor {cursor!r}: pass back a nextCursor unchanged")


_BOUNDS = {"minLength": "min length", "maxLength": "max length", "minimum": "≥", "maximum": "≤"}
_BOUNDS |= {"minItems": "min items", "maxItems": "max items", "pattern": "pattern"}
_HINTS = {"read-only": "read_only_hint", "destructive": "destructive_hint", "idempotent": "idempotent_hint"}


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " \\| ".join(_type(s) for s in schema["anyOf"])
    t = schema.get("type", "any")
    if t == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if "enum" in schema:
        return " \\| ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"], ensure_ascii=False)
    return str(t)


def _bounds(schema: dict[str, Any]) -> str:
    subs = [schema, *schema.get("anyOf", []), schema.get("items", {})]
    found = (f"{label} `{s[key]}`" for s in subs for key, label in _BOUNDS.items() if key in s)
    return ", ".join(dict.fromkeys(found))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _fields(schema: dict[str, Any], with_default: bool = True) -> list[str]:
    defs, required = schema.get("$defs", {}), set(schema.get("required", []))
    cols = ["name", "type", *(["required", "default", "bounds"] if with_default else []), "description"]
    rows = ["| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    for name, prop in schema.get("properties", {}).items():
        cells = [f"`{name}`", _type(prop)]
        if with_default:
            default = "" if name in required else f"`{json.dumps(prop.get('default'), ensure_ascii=False)}`"
            cells += ["yes" if name in required else "no", default, _cell(_bounds(prop))]
        rows.append("| " + " | ".join([*cells, _cell(prop.get("description", ""))]) + " |")
    for def_name, sub in defs.items():
        rows += ["", f"`{def_name}`:", "", *_fields(sub, with_default)]
    return rows


def tool_reference(settings: Settings | None = None) -> str:
    server = build_server(settings or Settings.model_validate({}), plugins=False)

    async def collect() -> tuple[list[Any], list[Any], list[Any]]:
        return await server.list_tools(), await server.list_resource_templates(), await server.list_prompts()

    tools, templates, prompts = anyio.run(collect)
    structured = [t.name for t in tools if t.output_schema and t.name not in TEXT_ONLY_TOOLS]
    lines = [
        "# MCP tool reference",
        "",
        "<!-- generated by `python -m zhiku.mcp.server --tool-reference > docs/mcp-tools.md`; do not edit by hand -->",
        "",
        "Every tool returns a Markdown text block and `structuredContent` as documented under Output. `tools/list`",
        "keeps every session's cost low: no schema titles, and a bare `outputSchema` (the required fields' types)",
        f"only for {' and '.join(f'`{t}`' for t in structured)}. A failed call is a result with `isError: true`,",
        'a text block `错误 / Error CODE: message (…)` and `_meta["zhiku/error"] = {code, message, retryable}` (and no',
        "`structuredContent`).",
        "",
    ]
    for t in tools:
        hints = ", ".join(name for name, attr in _HINTS.items() if getattr(t.annotations, attr, None)) or "none"
        lines += [f"## `{t.name}` — {t.title}", ""]
        if t.name in WRITE_TOOLS:
            lines += ["_Hidden when the server runs read-only (`--read-only`)._", ""]
        lines += [f"Hints: {hints}.", "", t.description or "", "", "### Input", "", *_fields(t.input_schema), ""]
        if t.output_schema:
            lines += ["### Output", "", *_fields(t.output_schema, with_default=False), ""]
    lines += ["## Resource templates", "", "| URI template | MIME type | description |", "| --- | --- | --- |"]
    lines += [f"| `{r.uri_template}` | {r.mime_type} | {_cell(r.description or '')} |" for r in templates]
    lines += [
        "",
        "`resources/list` pages through the documents (`zhiku://doc/{doc_id}`), 50 per page, with",
        "`nextCursor`. Reading an unknown id is the JSON-RPC error -32602.",
        "",
        "## Prompts",
        "",
    ]
    for p in prompts:
        args = ", ".join(f"`{a.name}`{'' if a.required else ' (optional)'}" for a in p.arguments or [])
        lines.append(f"- `{p.name}` ({args}) — {p.description}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["--tool-reference"]:
        sys.stdout.write(tool_reference())
    else:
        sys.exit("usage: python -m zhiku.mcp.server --tool-reference   (run the server with `zhiku serve`)")
