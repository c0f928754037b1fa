"""CLI commands for the MCP surface (`zhiku serve`, `zhiku bench latency`). Filled in by the MCP work."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the MCP commands to the `zhiku` app."""
