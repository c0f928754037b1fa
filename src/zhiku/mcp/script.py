"""`zhiku serve` and ``zhiku.serve(...)``; a start-up problem is one ``error:`` line on stderr (clients show it)."""

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
    p = argparse.ArgumentParser(description="Serve zhiku's knowledge tools and this script's own over MCP.")
    p.add_argument("--config", type=Path, help="Settings file (default: ./zhiku.yaml if present).")
    p.add_argument("--index", type=Path, help="Index directory (default: settings `index`).")
    p.add_argument("--transport", help="stdio | http (default: settings `server.transport`).")
    p.add_argument("--host", help="HTTP bind address (default 127.0.0.1).")
    p.add_argument("--port", help="HTTP port (default 8765).")
    p.add_argument("--read-only", action="store_true", default=None, help="Hide the tools that change the index.")
    args = p.parse_args(argv)
    flags = {k: getattr(args, k) for k in ("transport", "host", "port", "read_only")}
    start(args.config, args.index, flags, settings, tools=tools, resources=resources, prompts=prompts, hooks=hooks)


def start(
    config: Path | None, index: Path | None, flags: dict[str, Any], settings: Settings | None = None, **extensions: Any
) -> None:
    log_format = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # on stderr: under stdio, stdout is the protocol
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format=log_format, datefmt="%H:%M:%S", force=True)
    logging.getLogger("zhiku").setLevel(logging.INFO)
    try:
        if settings is None:
            overrides = {k: v for k, v in flags.items() if v is not None}
            settings = load_settings(config, index=index, server=overrides or None)
        server = build_server(settings, **extensions)
        preflight(settings)
        serve_built(server, settings)
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except Exception as e:  # a library error, maybe raised inside the transport's task group
        found = _zhiku_error(e)
        if found is None:
            raise
        sys.stderr.write("error: " + " ".join(str(found).split()) + "\n")
        raise SystemExit(1) from None


def _zhiku_error(exc: BaseException) -> ZhikuError | None:
    if isinstance(exc, ZhikuError):
        return exc
    for member in getattr(exc, "exceptions", ()):
        if (found := _zhiku_error(member)) is not None:
            return found
    return None
