"""`zhiku plugins`: what is installed in each entry-point group, from which package and where, and what is broken.

A broken plugin is listed with its error and the command still exits 0 (zhiku skips it and carries on);
``--json`` prints exactly one JSON object.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import typer


def plugins(
    as_json: Annotated[bool, typer.Option("--json", help="Print exactly one JSON object on stdout.")] = False,
) -> None:
    """List installed plugins (loaders, embedders, rerankers, transforms, tools) and where they come from."""
    from zhiku.cli.common import _print_json, out
    from zhiku.plugin_check import checked_plugins
    from zhiku.plugins import GROUPS

    found = checked_plugins()
    if as_json:
        _print_json({"groups": list(GROUPS), "plugins": [asdict(p) for p in found]})
        return
    if not found:
        out.print(f"no plugins installed (groups: {', '.join(GROUPS)}; see docs/extending.md)", markup=False)
        return
    for p in found:  # one line each (paths are long: a table would fold them)
        status = "ok" if p.ok else f"BROKEN (skipped): {p.error}"
        out.print(
            f"{p.group}  {p.name} = {p.value}  [{p.distribution} {p.version}, {p.location}]  {status}", markup=False
        )


def register(app: typer.Typer) -> None:
    app.command("plugins")(plugins)
