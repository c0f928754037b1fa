"""Which folders ``ingest_documents`` may read; messages name the path and a fix an agent can take."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from zhiku.api import files_to_ingest
from zhiku.errors import InvalidInput
from zhiku.settings import Settings

SEE_ROOTS = "list_collections shows the roots: pass paths under one of them"


class PathNotAllowed(InvalidInput, code="PATH_NOT_ALLOWED"): ...


def ingest_roots(settings: Settings) -> list[Path]:
    return [Path(r).expanduser().resolve() for r in settings.server.ingest_roots]


def shown_roots(settings: Settings) -> list[str] | None:
    """What list_collections shows: None when the server has no ingest tool."""
    return None if settings.server.read_only else [str(r) for r in ingest_roots(settings)]


def allowed_paths(settings: Settings, paths: Sequence[str]) -> tuple[list[Path], dict[Path, str]]:
    """``paths`` resolved under the roots, and the files in them that link outside every root, with the reason."""
    roots = ingest_roots(settings)
    if not roots:
        raise PathNotAllowed(
            "this server accepts no ingest paths (its ingest roots are empty); ask the user to add the folder "
            "to the server's ingest roots, or to ingest the files themselves"
        )
    out = []
    for given in paths:
        if "\x00" in given:
            raise InvalidInput(f"invalid path {given!r}: it contains a NUL byte")
        p = Path(given).expanduser()
        p = (p if p.is_absolute() else roots[0] / p).resolve()
        if not any(p.is_relative_to(r) for r in roots):
            raise PathNotAllowed(f"{given!r} is outside the allowed ingest roots; {SEE_ROOTS}")
        out.append(p)
    outside = "links outside the allowed ingest roots: skipped"
    return out, {f: outside for f in files_to_ingest(out) if not any(f.resolve().is_relative_to(r) for r in roots)}
