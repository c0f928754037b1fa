"""`zhiku tokens add | list | revoke`: named bearer tokens for `zhiku serve --transport http` (``zhiku.access``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from zhiku.cli.common import ConfigOpt, IndexOpt, JsonOpt, _errors, _print_json, out
from zhiku.settings import load_settings

tokens_app = typer.Typer(
    help="Named bearer tokens for `zhiku serve --transport http`, each scoped to collections (docs/mcp.md#tokens).",
    no_args_is_help=True,
)


def _index(config: Path | None, index: Path | None) -> Path:
    return load_settings(config, index=index).index


def _line(t: dict[str, Any]) -> str:
    until = time.strftime("%Y-%m-%d", time.localtime(t["expires"])) if t["expires"] else "never"
    return (
        f"{t['name']}: collections {', '.join(t['collections'] or ['(all)'])}; "
        f"{'read-write' if t['write'] else 'read-only'}; expires {until}{' (EXPIRED)' if t['expired'] else ''}"
    )


@tokens_app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="Who uses it (shown in traces), e.g. hr-assistant.")],
    collections: Annotated[
        Optional[str], typer.Option("--collections", help="Comma-separated collections it sees (default: all).")
    ] = None,
    write: Annotated[bool, typer.Option("--write", help="Also the tools that change the index.")] = False,
    expires: Annotated[Optional[str], typer.Option("--expires", help="Lifetime, e.g. 90d, 12h, 30m.")] = None,
    as_json: JsonOpt = False,
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Create a token; it is printed this once (the index keeps only its SHA-256)."""
    from zhiku.access import add_token, parse_duration

    with _errors(as_json):
        names = None if collections is None else [c.strip() for c in collections.split(",") if c.strip()]
        seconds = parse_duration(expires) if expires else None
        t = add_token(_index(config, index), name, names, write=write, expires_s=seconds)
    if as_json:
        _print_json(t)
        return
    out.print(f"{_line(t)}\ntoken (shown once; send it as `Authorization: Bearer <token>`):\n{t['token']}")


@tokens_app.command("list")
def list_(as_json: JsonOpt = False, index: IndexOpt = None, config: ConfigOpt = None) -> None:
    """The tokens (never their secrets)."""
    from zhiku.access import list_tokens

    with _errors(as_json):
        found = list_tokens(_index(config, index))
    if as_json:
        _print_json({"tokens": found})
        return
    for item in found:
        out.print(_line(item))
    if not found:
        out.print("no tokens: `zhiku tokens add NAME --collections …` makes one")


@tokens_app.command("revoke")
def revoke(
    name: Annotated[str, typer.Argument(help="The token's name.")],
    as_json: JsonOpt = False,
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Delete a token; a running server refuses it from its next request."""
    from zhiku.access import revoke_token

    with _errors(as_json):
        t = revoke_token(_index(config, index), name)
    if as_json:
        _print_json(t)
        return
    out.print(f"revoked {t['name']}")


def register(app: typer.Typer) -> None:
    app.add_typer(tokens_app, name="tokens")
