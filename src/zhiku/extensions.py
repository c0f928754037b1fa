"""Extending zhiku's MCP server: a team's own tools, resources and prompts as plain typed Python functions."""

from __future__ import annotations

import inspect
import re
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
TOOL_ATTR = "__zhiku_tool__"
RESOURCE_ATTR = "__zhiku_resource__"
PROMPT_ATTR = "__zhiku_prompt__"

_HEADERS = {
    "when_to_use": ("when to use", "何时使用"),
    "examples": ("example", "examples", "示例"),
    "params": ("args", "arguments", "parameters", "参数"),
    "errors": ("errors", "错误"),
}
_SECTIONS = {header: part for part, headers in _HEADERS.items() for header in headers}
_HEADER = re.compile(r"^\s*(" + "|".join(re.escape(k) for k in _SECTIONS) + r")\s*[:：]\s*(.*)$", re.IGNORECASE)
_PARAM = re.compile(r"^(\w+)\s*(?:\([^)]*\))?\s*[:：]\s*(.*)$")


@dataclass(frozen=True)
class ToolSpec:
    """One tool as the server registers it: the function and the parts of its LLM-facing description."""

    fn: Callable[..., Any]
    name: str
    description: str
    when_to_use: str = ""
    examples: tuple[str, ...] = ()
    errors: str = ""
    params: Mapping[str, str] = field(default_factory=dict)  # parameter docs from the docstring's Args
    title: str | None = None
    read_only: bool = True
    destructive: bool = False
    idempotent: bool = True
    exclusive: bool = True  # sync tools run one at a time with searches and writes (the embedder is not thread-safe)
    cache: bool = False  # results cached per (arguments, index version), like query_knowledge_hub's
    origin: str = "script"  # "built-in", "script", or "plugin <distribution>"

    def compose(self) -> str:
        """The description the assistant reads: description, when to use, examples, errors."""
        parts = [self.description.strip(), f"When to use / 何时使用: {self.when_to_use.strip()}"]
        parts.append("\n".join(f"Example / 示例: {e}" for e in self.examples))
        if self.errors.strip():
            parts.append(f"Errors: {self.errors.strip()}")
        return "\n\n".join(parts)


@dataclass(frozen=True)
class ResourceSpec:
    fn: Callable[..., Any]
    uri: str  # a URI or a template, e.g. law://article/{law}/{number}
    name: str
    description: str
    title: str | None = None
    mime_type: str = "text/markdown"
    origin: str = "script"


@dataclass(frozen=True)
class PromptSpec:
    fn: Callable[..., Any]
    name: str
    description: str
    title: str | None = None
    origin: str = "script"


def parse_docstring(doc: str | None) -> dict[str, Any]:
    """``{"description", "when_to_use", "examples", "errors", "params"}`` from a docstring's sections."""
    sections: defaultdict[str, list[str]] = defaultdict(list)
    current = "description"
    for line in inspect.cleandoc(doc or "").splitlines():
        if m := _HEADER.match(line):
            current, line = _SECTIONS[m.group(1).lower()], m.group(2).strip()
            if not line:
                continue
        sections[current].append(line)
    return {
        "description": "\n".join(sections["description"]).strip(),
        "when_to_use": " ".join(x.strip() for x in sections["when_to_use"] if x.strip()),
        "examples": _examples(sections["examples"]),
        "errors": " ".join(x.strip() for x in sections["errors"] if x.strip()),
        "params": _params(sections["params"]),
    }


def _examples(lines: list[str]) -> tuple[str, ...]:
    """One example per line starting with ``{`` or ``-``, or per paragraph otherwise."""
    out: list[str] = []
    new = True
    for raw in lines:
        line = raw.strip()
        if not line:
            new = True
            continue
        if new or line.startswith(("{", "- ")):
            out.append(line.removeprefix("- "))
            new = False
        else:
            out[-1] += " " + line
    return tuple(out)


def _params(lines: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    last = None
    for raw in lines:
        m = _PARAM.match(raw.strip())
        if m and not raw.startswith((" " * 8, "\t\t")):
            last = m.group(1)
            out[last] = m.group(2).strip()
        elif last and raw.strip():
            out[last] = (out[last] + " " + raw.strip()).strip()
    return out


def tool(
    fn: F | None = None,
    *,
    name: str | None = None,
    title: str | None = None,
    description: str | None = None,
    when_to_use: str | None = None,
    examples: list[str] | tuple[str, ...] | None = None,
    errors: str | None = None,
    read_only: bool = True,
    destructive: bool = False,
    idempotent: bool = True,
    exclusive: bool = True,
    cache: bool = False,
) -> Any:
    """Mark ``fn`` as a tool; options override the docstring's parts. Usable bare (``@tool``) or called."""
    options = {k: v for k, v in locals().items() if k != "fn" and v is not None}
    if "examples" in options:
        options["examples"] = tuple(options["examples"])
    mark = _marker(TOOL_ATTR, options)
    return mark(fn) if fn is not None else mark


def _marker(attr: str, marks: dict[str, Any]) -> Callable[[F], F]:
    """A decorator that stores ``marks`` on the function as ``attr`` and returns it unchanged."""

    def mark(f: F) -> F:
        setattr(f, attr, marks)
        return f

    return mark


def resource(
    uri: str,
    *,
    name: str | None = None,
    title: str | None = None,
    description: str | None = None,
    mime_type: str = "text/markdown",
) -> Callable[[F], F]:
    """Mark ``fn`` as a resource at ``uri`` (a template's ``{params}`` are the function's parameters)."""
    marks = {"uri": uri, "name": name, "title": title, "description": description, "mime_type": mime_type}
    return _marker(RESOURCE_ATTR, marks)


def prompt(*, name: str | None = None, title: str | None = None, description: str | None = None) -> Callable[[F], F]:
    """Mark ``fn`` as a prompt (its parameters are the prompt's arguments)."""
    return _marker(PROMPT_ATTR, {"name": name, "title": title, "description": description})


def tool_spec(obj: Any, *, origin: str = "script") -> ToolSpec:
    """A ``ToolSpec`` for a function (plain or marked with :func:`tool`); a ``ToolSpec`` is returned as is."""
    if isinstance(obj, ToolSpec):
        return obj
    if not callable(obj):
        raise TypeError(f"a tool must be a function, got {type(obj).__name__}: {obj!r}")
    parts = parse_docstring(getattr(obj, "__doc__", None))
    parts.update(getattr(obj, TOOL_ATTR, {}))
    parts.setdefault("name", getattr(obj, "__name__", ""))
    return ToolSpec(fn=obj, origin=origin, **parts)


def resource_spec(obj: Any, *, origin: str = "script") -> ResourceSpec:
    if isinstance(obj, ResourceSpec):
        return obj
    marked = getattr(obj, RESOURCE_ATTR, None)
    if marked is None:
        name = getattr(obj, "__name__", repr(obj))
        raise TypeError(f"resource {name}: mark it with @zhiku.resource('scheme://kind/{{id}}') to give its URI")
    described = {"name": marked["name"] or obj.__name__, "description": marked["description"] or _described(obj)}
    return ResourceSpec(obj, **{**marked, **described}, origin=origin)


def prompt_spec(obj: Any, *, origin: str = "script") -> PromptSpec:
    if isinstance(obj, PromptSpec):
        return obj
    marked = getattr(obj, PROMPT_ATTR, {})
    name, description = marked.get("name") or obj.__name__, marked.get("description") or _described(obj)
    return PromptSpec(obj, name, description, marked.get("title"), origin)


def _described(obj: Any) -> str:
    return str(parse_docstring(obj.__doc__)["description"])
