"""`zhiku serve`: the MCP server. The SDK is imported inside the command, so `zhiku --help` never pays for it."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from zhiku.cli.common import ConfigOpt, IndexOpt


def serve(
    transport: Annotated[
        Optional[str],
        typer.Option("--transport", help="stdio | http (default: settings `server.transport`; env ZHIKU_TRANSPORT)."),
    ] = None,
    host: Annotated[
        Optional[str],
        typer.Option(
            "--host", help="HTTP bind address (default 127.0.0.1; env ZHIKU_HOST). Non-loopback needs a token."
        ),
    ] = None,
    port: Annotated[Optional[str], typer.Option("--port", help="HTTP port (default 8765; env ZHIKU_PORT).")] = None,
    read_only: Annotated[
        Optional[bool],
        typer.Option("--read-only", help="Hide the tools that change the index (ingest, delete).", show_default=False),
    ] = None,
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Serve the index to AI assistants over MCP (stdio, or Streamable HTTP at http://HOST:PORT/mcp)."""
    from zhiku.mcp.script import start

    start(config, index, {"transport": transport, "host": host, "port": port, "read_only": read_only})


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
