"""The `zhiku` command line: one module per command group, shared helpers in common.py."""

from zhiku.cli.app import main

__all__ = ["main"]
