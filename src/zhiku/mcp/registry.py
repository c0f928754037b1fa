"""The one path every tool, resource and prompt is registered through (built-in, script and plugin alike):
conventions checked, the description composed, and a team's plain function adapted to the server: its
``KnowledgeBase`` and ``Context`` parameters injected, sync code run in a worker thread (one at a time with
searches and writes unless ``exclusive=False``), errors turned into ``isError`` results with zhiku's codes,
results cached per index version when ``cache=True``."""

# No `from __future__ import annotations`: the wrappers' signatures are built from real annotation objects.
import functools
import inspect
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Annotated, Any, TypeVar, cast, get_type_hints

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from zhiku.api import KnowledgeBase
from zhiku.cache import Cache
from zhiku.errors import NotFound, ZhikuError
from zhiku.extensions import PromptSpec, ResourceSpec, ToolSpec
from zhiku.mcp.agent_errors import agent_message
from zhiku.mcp.cache import cache_key
from zhiku.mcp.calls import State, arg_model, error_result, explain_arguments
from zhiku.mcp.conventions import (
    ToolDefinitionError,
    check_examples,
    check_prompt,
    check_resource,
    check_tool,
    split_parameters,
)
from zhiku.mcp.text import ToolText

log = logging.getLogger("zhiku.mcp.server")
CTX = "mcp_context"  # the wrapper's own Context parameter
INJECTED = (KnowledgeBase, Context)
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


class Registry:
    """Adds specs to ``server``; ``models`` (tool name → argument model) feeds the middleware's error messages."""

    def __init__(
        self,
        server: MCPServer,
        models: dict[str, type[BaseModel]],
        *,
        read_only: bool,
        cache: Cache[Any],
        current: Callable[[], State | None],
    ) -> None:
        self.server = server
        self.current = current
        self.read_only = read_only
        self.cache = cache
        self.models = models
        self.origins: dict[str, str] = {}

    def add_tool(self, spec: ToolSpec) -> bool:
        """Register ``spec``; False when skipped because the server is read-only and the tool writes."""
        if spec.name in self.origins:
            raise ToolDefinitionError(
                f"tool {spec.name!r} ({spec.origin}): the name is taken by {self.origins[spec.name]}; rename one"
            )
        public, _ = split_parameters(spec.fn, INJECTED)
        if spec.wrapped:
            public = {k: _documented(v, spec.params.get(k)) for k, v in public.items()}
        description = check_tool(spec, public)
        fn = _wrap_tool(spec, public, self.cache) if spec.wrapped else spec.fn
        model = _sdk_checked(spec, lambda: arg_model(fn))
        check_examples(spec, lambda args: explain_arguments(model, args))
        if self.read_only and not spec.read_only:
            return False
        annotations = ToolAnnotations(
            readOnlyHint=spec.read_only,
            destructiveHint=spec.destructive,
            idempotentHint=spec.idempotent,
            openWorldHint=False,
        )
        register = self.server.tool(name=spec.name, title=spec.title, description=description, annotations=annotations)
        _sdk_checked(spec, lambda: register(fn))
        self.models[spec.name] = model
        self.origins[spec.name] = spec.origin
        return True

    def builtin(
        self, name: str, title: str, text: ToolText, *, read_only: bool = True, destructive: bool = False
    ) -> Callable[[F], F]:
        """A decorator registering one of zhiku's own tools (it takes the Context and returns a CallToolResult)."""

        def register(fn: F) -> F:
            parts = {k: getattr(text, k) for k in ("description", "when_to_use", "examples", "errors")}
            spec = ToolSpec(fn, name, title=title, read_only=read_only, destructive=destructive, **parts)
            self.add_tool(replace(spec, origin="built-in", wrapped=False))
            return fn

        return register

    def add_resource(self, spec: ResourceSpec) -> None:
        check_resource(spec)
        public, inject = split_parameters(spec.fn, INJECTED)
        fn = spec.fn if spec.origin == "built-in" else _wrap_resource(spec, public, inject, self.current)
        self.server.resource(
            spec.uri, name=spec.name, title=spec.title, mime_type=spec.mime_type, description=spec.description
        )(fn)

    def add_prompt(self, spec: PromptSpec) -> None:
        check_prompt(spec)
        self.server.prompt(name=spec.name, title=spec.title, description=spec.description)(spec.fn)


def _sdk_checked(spec: ToolSpec, step: Callable[[], T]) -> T:
    """``step()``, with what the SDK or pydantic refuses (a parameter named ``_x``, a type with no schema) as one
    ``ToolDefinitionError`` line."""
    try:
        return step()
    except ToolDefinitionError:
        raise
    except Exception as e:
        why = " ".join(str(e).split())
        where = f"tool {spec.name!r} ({spec.origin})"
        raise ToolDefinitionError(f"{where}: cannot be served: {type(e).__name__}: {why}") from None


def _documented(annotation: Any, doc: str | None) -> Any:
    """``annotation`` with the docstring's description of the parameter, as the SDK puts it in the schema."""
    return Annotated[annotation, Field(description=doc)] if doc else annotation


def _signature(public: dict[str, Any], fn: Callable[..., Any], returns: Any, ctx: bool) -> inspect.Signature:
    original = inspect.signature(fn).parameters
    params = [inspect.Parameter(CTX, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Context)] if ctx else []
    for name, annotation in public.items():
        default = original[name].default
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation))
    return inspect.Signature(params, return_annotation=returns)


def _adapt(
    wrapper: Callable[..., Any], spec_fn: Callable[..., Any], name: str, public: dict[str, Any], ctx: bool = True
) -> None:
    returns = get_type_hints(spec_fn, include_extras=True).get("return", inspect.Signature.empty)
    wrapper.__signature__ = _signature(public, spec_fn, returns, ctx)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {**({CTX: Context} if ctx else {}), **public}
    if returns is not inspect.Signature.empty:
        wrapper.__annotations__["return"] = returns
    wrapper.__name__ = name
    wrapper.__qualname__ = name
    wrapper.__doc__ = spec_fn.__doc__


def _injections(inject: dict[str, str], ctx: Context) -> dict[str, Any]:
    state = cast(State, ctx.request_context.lifespan_context)
    return {name: state.hub.kb if kind == KnowledgeBase.__name__ else ctx for name, kind in inject.items()}


def _wrap_tool(spec: ToolSpec, public: dict[str, Any], cache: Cache[Any]) -> Callable[..., Any]:
    fn, is_async = spec.fn, inspect.iscoroutinefunction(spec.fn)
    _, inject = split_parameters(fn, INJECTED)

    async def call(mcp_context: Context, **arguments: Any) -> Any:
        state = cast(State, mcp_context.request_context.lifespan_context)
        key, version = None, 0
        if spec.cache and cache.max_weight:
            key, version = cache_key(spec.name, arguments), state.hub.index_version()
            hit = cache.get(key, version)
            if hit is not None:
                return hit
        kwargs = {**arguments, **_injections(inject, mcp_context)}
        try:
            if is_async:
                result = await fn(**kwargs)
            else:
                limiter = state.limiter if spec.exclusive else None
                result = await anyio.to_thread.run_sync(functools.partial(fn, **kwargs), limiter=limiter)
        except ZhikuError as e:
            log.info("tool %s failed: %s %s", spec.name, e.code, e)
            return error_result(e.code, agent_message(e), e.retryable)
        except Exception:
            log.exception("tool %s (%s) raised an unexpected exception", spec.name, spec.origin)
            return error_result("INTERNAL_ERROR", f"{spec.name} failed unexpectedly; the server log has the details")
        if key is not None:
            cache.put(key, result, version)
        return result

    _adapt(call, fn, spec.name, public)
    return call


def _wrap_resource(
    spec: ResourceSpec, public: dict[str, Any], inject: dict[str, str], current: Callable[[], State | None]
) -> Callable[..., Any]:
    """Resources get the open ``KnowledgeBase`` from the running server (the SDK gives static ones no Context)."""
    fn, is_async = spec.fn, inspect.iscoroutinefunction(spec.fn)
    if "Context" in inject.values():
        raise ToolDefinitionError(f"resource {spec.name!r} ({spec.origin}): resources take no Context parameter")

    async def read(**params: Any) -> Any:
        state = current()
        if state is None:  # pragma: no cover - only between the transport's start and the lifespan
            raise ResourceError("the server is starting; retry")
        kwargs = {**params, **{name: state.hub.kb for name in inject}}
        try:
            if is_async:
                return await fn(**kwargs)
            return await anyio.to_thread.run_sync(functools.partial(fn, **kwargs), limiter=state.limiter)
        except NotFound as e:
            raise ResourceNotFoundError(agent_message(e)) from None
        except ZhikuError as e:
            raise ResourceError(f"{e.code}: {agent_message(e)}") from None

    _adapt(read, fn, spec.name, public, ctx=False)
    return read
