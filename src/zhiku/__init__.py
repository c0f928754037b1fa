"""知库 zhiku: a Chinese-first RAG knowledge server. The public Python API, imported on first use so that
``import zhiku`` stays cheap (no models, no MCP SDK):

- ``KnowledgeBase``, ``Settings``, ``load_settings``: the library (ingest, search, answer) over one index;
- ``serve``, ``build_server``: an MCP server with the built-in knowledge tools plus a team's own;
- ``tool``, ``resource``, ``prompt``: optional decorators for those functions; ``Hooks``, ``ToolCall``: callbacks
  around every tool call;
- ``ZhikuError`` and its subclasses in ``zhiku.errors``.

See docs/extending.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers and IDEs; at run time these load lazily (``__getattr__``)
    from zhiku.api import KnowledgeBase
    from zhiku.errors import ZhikuError
    from zhiku.extensions import prompt, resource, tool
    from zhiku.mcp.hooks import Hooks, ToolCall
    from zhiku.mcp.server import build_server
    from zhiku.mcp.transport import serve
    from zhiku.settings import Settings, load_settings

_EXPORTS = {
    "KnowledgeBase": "zhiku.api",
    "Settings": "zhiku.settings",
    "load_settings": "zhiku.settings",
    "ZhikuError": "zhiku.errors",
    "tool": "zhiku.extensions",
    "resource": "zhiku.extensions",
    "prompt": "zhiku.extensions",
    "Hooks": "zhiku.mcp.hooks",
    "ToolCall": "zhiku.mcp.hooks",
    "serve": "zhiku.mcp.transport",
    "build_server": "zhiku.mcp.server",
}
__all__ = [
    "Hooks",
    "KnowledgeBase",
    "Settings",
    "ToolCall",
    "ZhikuError",
    "build_server",
    "load_settings",
    "prompt",
    "resource",
    "serve",
    "tool",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'zhiku' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
