"""``zhiku.serve(...)``: run a team's server script with the built-in tools plus its own, taking `zhiku serve`'s
flags (``--config --index --transport --host --port --read-only``) from the command line. A start-up problem
(a bad setting, a tool breaking the conventions, an index that cannot be opened) is one ``error:`` line on
stderr and exit status 1."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zhiku.errors import ZhikuError
from zhiku.mcp.hooks import Hooks
from zhiku.mcp.server import build_server
from zhiku.mcp.transport import preflight, serve_built
from zhiku.settings import Settings, load_settings


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Serve zhiku's knowledge tools and this script's own over MCP.")
    p.add_argument("--config", type=Path, help="Settings file (default: ./zhiku.yaml if present).")
    p.add_argument("--index", type=Path, help="Index directory (default: settings `index`).")
    p.add_argument("--transport", help="stdio | http (default: settings `server.transport`).")
    p.add_argument("--host", help="HTTP bind address (default 127.0.0.1).")
    p.add_argument("--port", help="HTTP port (default 8765).")
    p.add_argument("--read-only", action="store_true", default=None, help="Hide the tools that change the index.")
    return p.parse_args(argv)


def _logging() -> None:
    """Logs go to stderr only (under stdio, stdout carries the protocol)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("zhiku").setLevel(logging.INFO)


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
    args = _parse(argv)
    _logging()
    try:
        if settings is None:
            server_flags = {
                "transport": args.transport,
                "host": args.host,
                "port": args.port,
                "read_only": args.read_only,
            }
            overrides = {k: v for k, v in server_flags.items() if v is not None}
            settings = load_settings(args.config, index=args.index, server=overrides or None)
        server = build_server(settings, tools=tools, resources=resources, prompts=prompts, hooks=hooks)
        preflight(settings)
    except ZhikuError as e:
        sys.stderr.write("error: " + " ".join(str(e).split()) + "\n")
        raise SystemExit(1) from None
    serve_built(server, settings)
