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
    from zhiku.api import KnowledgeBase as KnowledgeBase
    from zhiku.errors import ZhikuError as ZhikuError
    from zhiku.extensions import prompt as prompt
    from zhiku.extensions import resource as resource
    from zhiku.extensions import tool as tool
    from zhiku.mcp.hooks import Hooks as Hooks
    from zhiku.mcp.hooks import ToolCall as ToolCall
    from zhiku.mcp.server import build_server as build_server
    from zhiku.mcp.transport import serve as serve
    from zhiku.settings import Settings as Settings
    from zhiku.settings import load_settings as load_settings

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
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'zhiku' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
