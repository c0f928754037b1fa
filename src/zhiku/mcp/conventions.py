"""The conventions every tool meets, checked when the server is built; a violation is one line naming the fix."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, get_type_hints

from pydantic.fields import FieldInfo

from zhiku.errors import ConfigError
from zhiku.extensions import PromptSpec, ResourceSpec, ToolSpec

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
