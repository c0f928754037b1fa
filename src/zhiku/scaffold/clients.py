"""MCP client configurations for a zhiku project: Claude Desktop, Cursor, VS Code, Cline, Cherry Studio.

Each starts ``zhiku serve`` over stdio with absolute paths (clients start servers from a folder of their own
choosing), so a file works wherever the client reads it. Cursor and VS Code read the project's own file
(``.cursor/mcp.json``, ``.vscode/mcp.json``); the others are pasted into the client (``mcp-clients/README.md``).
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERVER_NAME = "zhiku"


@dataclass(frozen=True)
class ClientConfig:
    client: str
    path: str  # relative to the project folder
    where: str  # where the client reads it, or where to paste it

    def render(self, command: list[str]) -> str:
        return json.dumps(_config(self.client, command), ensure_ascii=False, indent=2) + "\n"


CLIENTS = (
    ClientConfig(
        "claude-desktop",
        "mcp-clients/claude_desktop_config.json",
        "Claude Desktop → Settings → Developer → Edit Config: merge `mcpServers` into claude_desktop_config.json "
        "(macOS ~/Library/Application Support/Claude/, Windows %APPDATA%\\Claude\\), then restart Claude Desktop.",
    ),
    ClientConfig("cursor", ".cursor/mcp.json", "Cursor reads it from this project folder (Settings → MCP lists it)."),
    ClientConfig("vscode", ".vscode/mcp.json", "VS Code (Copilot agent mode) reads it from this project folder."),
    ClientConfig(
        "cline",
        "mcp-clients/cline_mcp_settings.json",
        "Cline → MCP Servers → Installed → Configure MCP Servers: merge `mcpServers` into cline_mcp_settings.json.",
    ),
    ClientConfig(
        "cherry-studio",
        "mcp-clients/cherry-studio.json",
        "Cherry Studio → Settings → MCP Servers → Add → Import from JSON: paste this file.",
    ),
)


def serve_command(config: Path, index: Path) -> list[str]:
    """The absolute command line that serves this project over stdio: the ``zhiku`` script of this install, or
    this Python running ``-m zhiku.cli`` when there is none."""
    script = Path(sys.executable).parent / ("zhiku.exe" if sys.platform == "win32" else "zhiku")
    found = str(script) if script.is_file() else shutil.which("zhiku")
    base = [found] if found else [sys.executable, "-m", "zhiku.cli"]
    return [*base, "serve", "--config", str(config.resolve()), "--index", str(index.resolve())]


def _config(client: str, command: list[str]) -> dict[str, Any]:
    entry: dict[str, Any] = {"command": command[0], "args": command[1:]}
    if client == "vscode":
        return {"servers": {SERVER_NAME: {"type": "stdio", **entry}}}
    if client == "cline":
        entry.update(disabled=False, autoApprove=["query_knowledge_hub", "list_collections", "get_document_summary"])
    if client == "cherry-studio":
        entry = {"name": "知库 zhiku", "type": "stdio", "isActive": True, **entry}
    return {"mcpServers": {SERVER_NAME: entry}}


def command_of(client: str, text: str) -> list[str]:
    """The command line a written client config starts (the inverse of ``render``, for ``zhiku doctor``)."""
    data = json.loads(text)
    entry = data["servers" if client == "vscode" else "mcpServers"][SERVER_NAME]
    return [entry["command"], *entry["args"]]


def readme(command: list[str]) -> str:
    lines = [
        "# MCP client configurations",
        "",
        "Written by `zhiku init` with this machine's absolute paths; `zhiku doctor` checks them. Each one starts:",
        "",
        "```",
        " ".join(command),
        "```",
        "",
    ]
    lines += [f"- `{c.path}` ({c.client}): {c.where}" for c in CLIENTS]
    return "\n".join(lines) + "\n"
