"""The ingest-root policy of the MCP server: ``ingest_documents`` reads only under ``server.ingest_roots``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from zhiku.errors import InvalidInput
from zhiku.ingest.discover import discover
from zhiku.ingest.loaders import supported_suffixes


class PathNotAllowed(InvalidInput):
    """An ingest path outside ``server.ingest_roots``."""

    code = "PATH_NOT_ALLOWED"


def allowed_paths(paths: Sequence[str], ingest_roots: Sequence[Path]) -> list[Path]:
    """``paths`` resolved (symlinks followed); every file they reach must lie under one of ``ingest_roots``."""
    roots = [Path(r).expanduser().resolve() for r in ingest_roots]
    if not roots:
        raise PathNotAllowed(
            "this server accepts no ingest paths: set server.ingest_roots "
            "(e.g. ZHIKU_SERVER__INGEST_ROOTS='[\"/data/docs\"]') and restart it"
        )
    shown = ", ".join(map(str, roots))
    out = []
    for given in paths:
        if "\x00" in given:
            raise InvalidInput(f"invalid path {given!r}: it contains a NUL byte")
        p = Path(given).expanduser()
        p = (p if p.is_absolute() else roots[0] / p).resolve()
        if not any(p.is_relative_to(r) for r in roots):
            raise PathNotAllowed(f"{given!r} is outside the allowed ingest roots ({shown})")
        out.append(p)
    tasks, _ = discover(out, supported_suffixes())
    for t in tasks:  # a symlink inside a root may point outside it
        if not any(t.path.resolve().is_relative_to(r) for r in roots):
            raise PathNotAllowed(f"{t.path} links to {t.path.resolve()}, outside the allowed ingest roots ({shown})")
    return out
