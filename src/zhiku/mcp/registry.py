"""The one path every tool, resource and prompt is registered through, checked against the conventions every tool
meets (a violation is one line naming the fix); errors become ``isError`` results."""

# No `from __future__ import annotations`: the wrappers' signatures are built from real annotation objects.
import functools
import inspect
import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar, cast, get_type_hints

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, CallToolResult, ImageContent, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.fields import FieldInfo

from zhiku.access import ACCESS
from zhiku.api import KnowledgeBase
from zhiku.errors import ConfigError, InvalidInput, NotFound, ZhikuError
from zhiku.extensions import PromptSpec, ResourceSpec, ToolSpec
from zhiku.mcp.concurrency import CALLER
from zhiku.mcp.hooks import ERROR_META
from zhiku.mcp.hub import Hub, cache_key
from zhiku.mcp.models import ErrorInfo

log = logging.getLogger("zhiku.mcp.server")
INJECTED = (Hub, KnowledgeBase, Context)
T = TypeVar("T")
MAX_DESCRIPTION = 2048
MAX_NAME = 64
SNAKE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$")
URI = re.compile(r"^[a-z][a-z0-9+.-]*://\S+$")


class ToolDefinitionError(ConfigError, code="INVALID_TOOL"): ...


def snake_case(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()).strip("_") or "my_tool"


def _where(kind: str, name: str, origin: str) -> str:
    return f"{kind} {name!r} ({origin})"


def check_name(kind: str, name: str, origin: str) -> None:
    if not SNAKE.match(name) or len(name) > MAX_NAME:
        raise ToolDefinitionError(
            f"{_where(kind, name, origin)}: the name must be snake_case ([a-z0-9_], starting with a letter, at most "
            f"{MAX_NAME} characters), e.g. {snake_case(name)[:MAX_NAME]!r}"
        )


def check_tool(spec: ToolSpec, public: Mapping[str, Any]) -> str:
    """The composed description; ``public`` maps each schema parameter to its annotation."""
    where = _where("tool", spec.name, spec.origin)
    check_name("tool", spec.name, spec.origin)
    if not spec.description.strip():
        raise ToolDefinitionError(f"{where}: no description: start its docstring with what the tool does")
    if not spec.when_to_use.strip():
        raise ToolDefinitionError(
            f"{where}: no when-to-use: add a 'When to use:' line to its docstring (or tool(when_to_use=...))"
        )
    if not spec.examples:
        raise ToolDefinitionError(
            f"{where}: no example: add an 'Example:' line with JSON arguments to its docstring (or tool(examples=[...]))"
        )
    for param in spec.params:
        if param not in public:
            raise ToolDefinitionError(f"{where}: its docstring documents {param!r}, which is not a parameter")
    for param, annotation in public.items():
        if not spec.params.get(param) and not _field_description(annotation):
            raise ToolDefinitionError(
                f"{where}: parameter {param!r} is not documented: add '{param}: ...' under 'Args:' in its docstring "
                f"or annotate it Annotated[..., Field(description=...)]"
            )
    composed = spec.compose()
    if len(composed) > MAX_DESCRIPTION:
        raise ToolDefinitionError(
            f"{where}: the composed description is {len(composed)} characters, over the {MAX_DESCRIPTION:,} limit; "
            "shorten the description, when-to-use or examples"
        )
    return composed


def check_examples(spec: ToolSpec, explain: Callable[[Any], str | None]) -> None:
    for i, example in enumerate(spec.examples, 1):
        try:
            args = json.loads(example)
        except ValueError:
            continue  # a prose example
        why = explain(args) if isinstance(args, dict) else None
        if why:
            raise ToolDefinitionError(f"{_where('tool', spec.name, spec.origin)}: example {i} {example} has {why}")


def check_resource(spec: ResourceSpec) -> None:
    where = _where("resource", spec.name, spec.origin)
    check_name("resource", spec.name, spec.origin)
    if not URI.match(spec.uri):
        raise ToolDefinitionError(f"{where}: URI {spec.uri!r} must look like 'scheme://kind/{{id}}'")
    if spec.uri.startswith("zhiku://"):
        raise ToolDefinitionError(f"{where}: the zhiku:// scheme is zhiku's own; use your team's, e.g. 'law://'")
    if not spec.description.strip():
        raise ToolDefinitionError(f"{where}: no description: give it a docstring or resource(description=...)")


def check_prompt(spec: PromptSpec) -> None:
    check_name("prompt", spec.name, spec.origin)
    if not spec.description.strip():
        where = _where("prompt", spec.name, spec.origin)
        raise ToolDefinitionError(f"{where}: no description: give it a docstring or prompt(description=...)")


def _field_description(annotation: Any) -> str | None:
    for meta in getattr(annotation, "__metadata__", ()):
        if isinstance(meta, FieldInfo) and meta.description:
            return meta.description
    return None


def split_parameters(fn: Callable[..., Any], injected: tuple[type, ...]) -> tuple[dict[str, Any], dict[str, type]]:
    """``({schema parameter: annotation}, {injected parameter: its injected type})`` of ``fn``, in order."""
    try:
        hints = get_type_hints(fn, include_extras=True)
    except Exception as e:
        raise ToolDefinitionError(
            f"{getattr(fn, '__name__', fn)!r}: cannot read its type hints ({e}): import the types they name at "
            "module level"
        ) from None
    public: dict[str, Any] = {}
    inject: dict[str, type] = {}
    for name, p in inspect.signature(fn).parameters.items():
        hint = hints.get(name, p.annotation)
        bare = getattr(hint, "__origin__", hint) if hasattr(hint, "__metadata__") else hint
        kind = next((t for t in injected if isinstance(bare, type) and issubclass(bare, t)), None)
        if kind:
            inject[name] = kind
        else:
            public[name] = hint
    return public, inject


# The agent reads a message naming the item and a fix it can take, never a server path or a CLI command: the
# codes in AGENT_READY are written so; the rest are for an operator, so the agent gets its code's message below.
TELL_USER = "tell the user; the server log has the details"
BY_CODE = {
    "INDEX_MISMATCH": "this knowledge base was built with other models or settings and must be rebuilt by "
    "whoever runs the server; " + TELL_USER,
    "INDEX_LOCKED": "the knowledge base is busy with another write; retry in a few seconds",
    "INDEX_READ_ONLY": "this knowledge base is read-only: it cannot be changed through this server",
    "INDEX_NOT_FOUND": "this server has no knowledge base to read yet; " + TELL_USER,
    "STORE_ERROR": "the knowledge base could not be read or written; " + TELL_USER,
    "EMBEDDING_FAILED": "the embedding model failed on this request; retry once, then " + TELL_USER,
    "BUSY": "the server is busy with other clients' questions; retry in a few seconds",
    "MISSING_DEPENDENCY": "a component this request needs is not installed on the server; " + TELL_USER,
    "INVALID_CONFIG": "the server's settings do not allow this request; " + TELL_USER,
    "MODEL_INTEGRITY": "a model file of the server failed its integrity check; " + TELL_USER,
    "INGEST_FAILED": "the documents could not be ingested; " + TELL_USER,
}
AGENT_READY = {"INVALID_INPUT", "NOT_FOUND", "PATH_NOT_ALLOWED"}


def agent_message(e: ZhikuError) -> str:
    if e.code in AGENT_READY:
        return str(e)
    log.warning("%s: %s", e.code, e)
    return BY_CODE.get(e.code, "the request failed on the server; " + TELL_USER)


@dataclass
class State:
    hub: Hub
    limiter: anyio.CapacityLimiter


def error_result(code: str, message: str, retryable: bool = False) -> CallToolResult:
    # no structuredContent: the TypeScript SDK (the Inspector) validates it against the output schema even on errors
    err = ErrorInfo(code=code, message=message, retryable=retryable)
    return CallToolResult(
        content=[TextContent(type="text", text=err.to_markdown())],
        is_error=True,
        _meta={ERROR_META: err.model_dump(mode="json")},
    )


def ok_result(model: Any, images: Any = ()) -> CallToolResult:
    return CallToolResult(
        content=[
            TextContent(type="text", text=model.to_markdown()),
            *(ImageContent(type="image", data=data, mime_type=mime) for mime, data in images),
        ],
        structured_content=getattr(model, "structured", model.model_dump)(mode="json"),
    )


def explain_arguments(model: type[BaseModel], arguments: Any) -> str | None:
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


@dataclass
class Registry:
    server: MCPServer
    models: dict[str, type[BaseModel]]
    writes: set[str]  # tools shown only to callers that may write
    read_only: bool
    current: Callable[[], State | None]  # for resources: the SDK passes static ones no Context
    origins: dict[str, str] = field(default_factory=dict)  # tool name -> where it was defined

    def add_tool(self, spec: ToolSpec) -> None:
        if spec.name in self.origins:
            raise ToolDefinitionError(
                f"tool {spec.name!r} ({spec.origin}): the name is taken by {self.origins[spec.name]}; rename one"
            )
        public, inject = split_parameters(spec.fn, INJECTED)
        public = {k: Annotated[v, Field(description=d)] if (d := spec.params.get(k)) else v for k, v in public.items()}
        description = check_tool(spec, public)
        defaults = inspect.signature(spec.fn).parameters
        fields: dict[str, Any] = {
            k: (v, ... if (d := defaults[k].default) is inspect.Parameter.empty else d) for k, v in public.items()
        }
        config = ConfigDict(extra="forbid")
        model = _sdk_checked(spec, lambda: create_model(f"{spec.name}_args", __config__=config, **fields))
        check_examples(spec, lambda args: explain_arguments(model, args))
        if self.read_only and not spec.read_only:
            return
        annotations = ToolAnnotations(
            readOnlyHint=spec.read_only,
            destructiveHint=spec.destructive,
            idempotentHint=spec.idempotent,
            openWorldHint=False,
        )
        register = self.server.tool(name=spec.name, title=spec.title, description=description, annotations=annotations)
        _sdk_checked(spec, lambda: register(self._tool(spec, public, inject)))
        self.models[spec.name] = model
        if not spec.read_only:
            self.writes.add(spec.name)
        self.origins[spec.name] = spec.origin

    def _tool(self, spec: ToolSpec, public: dict[str, Any], inject: dict[str, type]) -> Callable[..., Any]:
        fn = spec.fn

        async def call(mcp_context: Context, **arguments: Any) -> Any:
            state = cast(State, mcp_context.request_context.lifespan_context)
            key, version, cache = None, 0, state.hub.cache  # one cache of tool answers, query_knowledge_hub's too
            if spec.cache and cache.max_weight:
                key, version = cache_key(spec.name, {**arguments, "\0": ACCESS.get()}), state.hub.kb.index_version()
                if (hit := cache.get(key, version)) is not None:
                    return hit
            kwargs = {**arguments, **_injections(inject, state, mcp_context)}
            CALLER.set(id(mcp_context.session))  # the embedding model takes sessions in turn
            try:
                result = await _run(fn, kwargs, state.limiter if spec.exclusive else None)
            except ZhikuError as e:
                log.info("tool %s failed: %s %s", spec.name, e.code, e)
                return error_result(e.code, agent_message(e), e.retryable)
            except Exception:
                log.exception("tool %s (%s) raised an unexpected exception", spec.name, spec.origin)
                return error_result(
                    "INTERNAL_ERROR", f"{spec.name} failed unexpectedly; the server log has the details"
                )
            if key is not None:
                cache.put(key, result, version)
            return result

        return _adapt(call, fn, spec.name, {"mcp_context": Context, **public})

    def add_resource(self, spec: ResourceSpec) -> None:
        if spec.origin != "built-in":
            check_resource(spec)
        public, inject = split_parameters(spec.fn, INJECTED)
        if Context in inject.values():
            raise ToolDefinitionError(f"resource {spec.name!r} ({spec.origin}): resources take no Context parameter")
        fn, current = spec.fn, self.current
        exclusive = spec.origin != "built-in"  # a team's code runs one at a time, as its tools do

        async def read(**params: Any) -> Any:
            state = current()
            if state is None:  # pragma: no cover - only between the transport's start and the lifespan
                raise ResourceError("the server is starting; retry")
            kwargs = {**params, **_injections(inject, state, None)}
            try:
                return await _run(fn, kwargs, state.limiter if exclusive else None)
            except NotFound as e:
                raise ResourceNotFoundError(agent_message(e)) from None
            except InvalidInput as e:  # a malformed URI (zhiku://image/.png): invalid params, as for a missing one
                raise MCPError(INVALID_PARAMS, agent_message(e)) from None
            except ZhikuError as e:
                raise ResourceError(f"{e.code}: {agent_message(e)}") from None

        self.server.resource(
            spec.uri, name=spec.name, title=spec.title, mime_type=spec.mime_type, description=spec.description
        )(_adapt(read, fn, spec.name, public))

    def add_prompt(self, spec: PromptSpec) -> None:
        check_prompt(spec)
        self.server.prompt(name=spec.name, title=spec.title, description=spec.description)(spec.fn)


def _sdk_checked(spec: ToolSpec, step: Callable[[], T]) -> T:
    """What the SDK or pydantic refuses (a parameter named ``_x``, a type with no schema) as one error line."""
    try:
        return step()
    except ToolDefinitionError:
        raise
    except Exception as e:
        why = " ".join(str(e).split())
        raise ToolDefinitionError(
            f"tool {spec.name!r} ({spec.origin}): cannot be served: {type(e).__name__}: {why}"
        ) from None


async def _run(fn: Callable[..., Any], kwargs: dict[str, Any], limiter: anyio.CapacityLimiter | None) -> Any:
    if inspect.iscoroutinefunction(fn):
        return await fn(**kwargs)
    return await anyio.to_thread.run_sync(functools.partial(fn, **kwargs), limiter=limiter)


def _injections(inject: dict[str, type], state: State, ctx: Context | None) -> dict[str, Any]:
    by_type = {Hub: state.hub, KnowledgeBase: state.hub.kb, Context: ctx}
    return {name: by_type[kind] for name, kind in inject.items()}


def _adapt(
    wrapper: Callable[..., Any], fn: Callable[..., Any], name: str, params: dict[str, Any]
) -> Callable[..., Any]:
    """``wrapper`` dressed as ``fn`` with only ``params`` (name → annotation), which the SDK turns into a schema."""
    original, empty = inspect.signature(fn).parameters, inspect.Parameter.empty
    returns = get_type_hints(fn, include_extras=True).get("return", inspect.Signature.empty)
    kw = inspect.Parameter.KEYWORD_ONLY
    signature = [
        inspect.Parameter(k, kw, default=getattr(original.get(k), "default", empty), annotation=v)
        for k, v in params.items()
    ]
    wrapper.__signature__ = inspect.Signature(signature, return_annotation=returns)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {**params, **({} if returns is inspect.Signature.empty else {"return": returns})}
    wrapper.__name__ = wrapper.__qualname__ = name
    wrapper.__doc__ = fn.__doc__
    return wrapper
