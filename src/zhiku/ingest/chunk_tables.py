"""Markdown tables in the chunker (rule 4 of :mod:`zhiku.ingest.chunking`): finding them, keeping a caption with its
table, and splitting a long table between rows with the header repeated."""

from __future__ import annotations

import re
from collections.abc import Sequence

_TABLE_DELIM_RE = re.compile(r"[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*")
_TABLE_CAPTION_RE = re.compile(r"(?:续?表|Table|Tab\.)[ \t\u3000]*[\dA-Za-z一二三四五六七八九十]")


def _rstrip(text: str, start: int, end: int) -> int:
    while end > start and text[end - 1].isspace():
        end -= 1
    return end


def table_start(text: str, start: int, end: int) -> int | None:
    """Where a Markdown table begins in the paragraph ``text[start:end]``: the offset of its header row, or None.

    A header row is a line starting with ``|`` that is followed by a delimiter row (``|---|:--:|``).
    """
    lines = text[start:end].split("\n")
    pos = start
    for i in range(len(lines) - 1):
        if lines[i].lstrip().startswith("|") and "-" in lines[i + 1] and _TABLE_DELIM_RE.fullmatch(lines[i + 1]):
            return pos
        pos += len(lines[i]) + 1
    return None


def table_units(text: str, paragraphs: Sequence[tuple[int, int]]) -> list[tuple[int, int, int | None]]:
    """Paragraphs as ``(start, end, table_start)``; a caption paragraph is joined to the table after it."""
    units: list[tuple[int, int, int | None]] = []
    for ps, pe in paragraphs:
        table = table_start(text, ps, pe)
        if (
            table == ps
            and units
            and units[-1][2] is None
            and units[-1][1] - units[-1][0] <= 120
            and _TABLE_CAPTION_RE.match(text, units[-1][0])
            and "\n" not in text[units[-1][0] : units[-1][1]]
        ):
            units[-1] = (units[-1][0], pe, table)
        else:
            units.append((ps, pe, table))
    return units


def split_table(text: str, start: int, end: int, table: int, size: int) -> list[tuple[int, int, str]]:
    """Split the unit ``text[start:end]`` holding a table (header row at ``table``) between rows.

    Returns ``(start, end, prefix)`` pieces: the first holds whatever stands before the table (its caption),
    the header and as many rows as fit in ``size``; each later piece has ``prefix`` = the header and delimiter
    rows, which count towards ``size``. A piece holds at least one row, however long.
    """
    header_end = text.find("\n", text.find("\n", table) + 1)
    if header_end == -1 or header_end >= end:
        return [(start, end, "")]
    prefix = text[table:header_end]
    pieces: list[tuple[int, int, str]] = []
    piece_start, piece_end, budget = start, header_end, size
    pos = header_end + 1
    while pos < end:
        nl = text.find("\n", pos, end)
        row_end = end if nl == -1 else nl
        if piece_end - piece_start > len(prefix) and row_end - piece_start > budget:
            pieces.append((piece_start, _rstrip(text, piece_start, piece_end), "" if not pieces else prefix))
            piece_start, budget = pos, size - len(prefix) - 1
        piece_end = row_end
        pos = row_end + 1
    pieces.append((piece_start, _rstrip(text, piece_start, piece_end), "" if not pieces else prefix))
    return pieces
