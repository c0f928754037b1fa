"""What the `zhiku` commands share: option types, consoles, error and progress helpers, narrow-terminal tables."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from zhiku.errors import ConfigError, IndexNotFound, ZhikuError
from zhiku.settings import DEFAULT_CONFIG_FILE, Settings

if TYPE_CHECKING:
    from zhiku.api import KnowledgeBase

# markup off: paths, queries and documents print as they are (only the error label is styled); soft_wrap: an error
# stays one line
out = Console(soft_wrap=True, highlight=False, markup=False)
err = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)

IndexOpt = Annotated[
    Optional[Path], typer.Option("--index", help="Index directory (default: settings `index`, .zhiku).")
]
ConfigOpt = Annotated[
    Optional[Path], typer.Option("--config", help="Settings file (default: ./zhiku.yaml if present).")
]
CollectionOpt = Annotated[
    Optional[str], typer.Option("--collection", "-c", help="Collection name (default: settings `collection`).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print exactly one JSON object on stdout.")]
Progressed = Callable[[int, int, str], None]


@contextmanager
def _errors(as_json: bool = False) -> Iterator[None]:
    """A library error is one ``error:`` line on stderr and exit 1; with ``as_json`` also the one JSON object."""
    try:
        yield
    except ZhikuError as e:
        err.print(f"[bold red]error:[/] {escape(str(e))}", markup=True)
        if as_json:
            _print_json({"error": {"code": e.code, "message": str(e), "retryable": e.retryable}})
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        err.print("interrupted")
        raise typer.Exit(130) from None


def _kb(settings: Settings, *, read_only: bool = False) -> KnowledgeBase:
    """With a hint for two ways a newcomer misses an index: a file given, a relative index outside the project."""
    from zhiku.api import KnowledgeBase

    where = settings.index
    if where.is_file():
        raise ConfigError(
            f"--index names the folder that holds the index, not a file: {where} (use --index {where.parent})"
        )
    try:
        return KnowledgeBase(settings, read_only=read_only)
    except IndexNotFound as e:
        if where.is_absolute() or Path(DEFAULT_CONFIG_FILE).is_file():
            raise
        raise IndexNotFound(
            f"{e} ({where} is looked for in {Path.cwd()}, which has no {DEFAULT_CONFIG_FILE}: run zhiku in your "
            "project's folder, or give --index the index's full path)"
        ) from None


PROGRESS_EVERY = 10  # documents between two progress lines when stderr is not a terminal
PROGRESS_SECONDS = 15.0  # …or seconds, whichever comes first


@contextmanager
def _progress(enabled: bool, label: str, lines: bool = False) -> Iterator[Progressed | None]:
    """A live bar on a terminal; elsewhere (logs, CI, pipes) plain lines when ``lines``, else nothing."""
    if enabled and err.is_terminal:
        columns = (BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.description}"))
        with Progress(TextColumn(label), *columns, console=err, transient=True) as bar:
            task = bar.add_task("", total=None)
            yield lambda done, total, name: bar.update(
                task, completed=done, total=total or None, description=name[-40:]
            )
    else:
        yield _line_progress(label) if enabled and lines else None


def _line_progress(label: str) -> Progressed:
    """The first and last document, every embedded-chunks note; else at most every N documents or seconds."""
    from zhiku.api import is_chunk_note

    started = last = time.monotonic()
    shown, noted = -1, ""

    def update(done: int, total: int, name: str) -> None:
        nonlocal last, shown, noted
        now = time.monotonic()
        if (
            is_chunk_note(name)
            or (
                done != shown
                and (done in (0, total) or done - shown >= PROGRESS_EVERY or now - last >= PROGRESS_SECONDS)
            )
            or (name != noted and now - last >= PROGRESS_SECONDS)
        ):
            shown, last, noted = done, now, name
            current = f" · {name}" if name else ""
            err.print(f"{label}: {done}/{total} documents · {now - started:.0f}s{current}")

    return update


def _print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")


def table(
    names: Sequence[str], *, whole: Sequence[str] = (), texts: Sequence[str] = (), title: str | None = None
) -> Table:
    """``whole`` columns (ids) stay on one line, ``texts`` (paths) fold: Rich fits a table by cutting cells."""
    t = Table(title=title)
    for name in names:
        t.add_column(name, no_wrap=name in whole, overflow="fold" if name in texts else "ellipsis")
    return t
