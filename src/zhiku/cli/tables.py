"""Tables whose ids and paths survive a narrow terminal: Rich fits a table to the terminal (80 columns when piped)
by cutting cells with '…', and a cut trace id or path is useless. Ids keep their whole width on one line; paths and
messages fold onto more lines; other columns shrink as before."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table


def table(
    names: Sequence[str], *, whole: Sequence[str] = (), texts: Sequence[str] = (), title: str | None = None
) -> Table:
    """A table with columns ``names``: those in ``whole`` (ids, numbers) on one line, those in ``texts`` folded."""
    out = Table(title=title)
    for name in names:
        if name in whole:
            out.add_column(name, no_wrap=True)
        elif name in texts:
            out.add_column(name, overflow="fold")
        else:
            out.add_column(name)
    return out
