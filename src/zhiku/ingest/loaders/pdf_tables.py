"""Tables on PDF pages, as Markdown.

Candidates are the areas spanned by two or more horizontal rules of the same width, found cheaply on PDFium's
page objects, whose text looks tabular (:func:`tabular_areas`). Two kinds are read:

- **three-line tables** (booktabs: top, middle and bottom rules, no vertical lines), the usual style in Chinese
  papers and reports: rows are the text lines between the rules and columns the gaps in the text
  (:func:`text_table`), from PDFium's character boxes: fast, no second parser;
- **ruled grids** (vertical rules inside the area): pdfplumber's (MIT) line strategy, cells bounded by the
  drawn lines.

A candidate is kept only when it has at least two columns and at least two rows with two or more filled cells,
so that a framed code listing or a form's underlines are not taken for tables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from zhiku.ingest.loaders.markup import markdown_table

Box = tuple[float, float, float, float]  # x0, top, x1, bottom in points from the page's top-left corner

RULE_MAX_THICKNESS = 2.5
RULE_MIN_WIDTH = 30.0
_ALIGN = 4.0  # rules whose ends lie within this many points belong to one table
_TEXT_SETTINGS = {
    "vertical_strategy": "text",
    "horizontal_strategy": "text",
    "snap_y_tolerance": 5,
    "intersection_y_tolerance": 10,
}


@dataclass(frozen=True)
class Table:
    bbox: Box
    markdown: str


def is_rule(box: Box) -> bool:
    """A thin, wide drawing: a horizontal rule."""
    x0, top, x1, bottom = box
    return bottom - top <= RULE_MAX_THICKNESS and x1 - x0 >= RULE_MIN_WIDTH


def rule_groups(rules: Sequence[Box]) -> list[Box]:
    """Areas spanned by two or more horizontal rules of the same extent (at least 12 pt apart overall)."""
    groups: list[list[Box]] = []
    for rule in sorted(rules, key=lambda r: (r[1], r[0])):
        for group in groups:
            if abs(group[0][0] - rule[0]) < _ALIGN and abs(group[0][2] - rule[2]) < _ALIGN:
                group.append(rule)
                break
        else:
            groups.append([rule])
    areas = []
    for group in groups:
        top, bottom = group[0][1], group[-1][3]
        if len(group) >= 2 and bottom - top >= 12:
            areas.append((min(r[0] for r in group), top, max(r[2] for r in group), bottom))
    return areas


def tabular_areas(areas: Sequence[Box], lines: Sequence[Any], wide_gaps: Callable[[int], int]) -> list[Box]:
    """The rule areas whose text could be a table: two or more lines, all within the rules' width (a form's
    underlines have their labels beside them), mostly not monospaced (a framed code listing), and at least half
    of them with a wide gap between two characters (cells side by side; prose between two framed blocks has none).

    ``lines`` are the page's ``pdf_layout.Line`` objects; ``wide_gaps(i)`` counts the wide gaps in ``lines[i]``.
    """
    out = []
    for box in areas:
        inside = [
            i
            for i, ln in enumerate(lines)
            if box[0] <= (ln.x0 + ln.x1) / 2 <= box[2] and box[1] <= (ln.top + ln.bottom) / 2 <= box[3]
        ]
        if len(inside) < 2 or sum(1 for i in inside if lines[i].mono) * 2 > len(inside):
            continue
        if any(lines[i].x0 < box[0] - 5 or lines[i].x1 > box[2] + 5 for i in inside):
            continue  # text running past the rules: underlines of a form, not a table
        if sum(1 for i in inside if wide_gaps(i) > 0) * 2 >= len(inside):
            out.append(box)
    return out


def text_table(rows_of_cells: Sequence[tuple[float, float, list[tuple[float, float, str]]]]) -> list[list[str]]:
    """A table from text alone (a three-line table has no vertical rules): ``rows_of_cells`` are the lines in
    the table's area as ``(top, bottom, cells)``, each cell ``(x0, x1, text)`` (characters closer than an em).

    Lines on the same visual row are merged; columns are the gaps in the union of all cells' horizontal extents
    (a projection profile); cells sharing a column in a row are joined with a space.
    """
    rows: list[tuple[float, float, list[tuple[float, float, str]]]] = []
    for top, bottom, cells in sorted(rows_of_cells, key=lambda r: r[0]):
        if rows and top + (bottom - top) / 2 <= rows[-1][1]:
            rows[-1] = (rows[-1][0], max(rows[-1][1], bottom), rows[-1][2] + cells)
        else:
            rows.append((top, bottom, list(cells)))
    spans: list[list[float]] = []
    for x0, x1, _ in sorted((c for _, _, cells in rows for c in cells), key=lambda c: c[0]):
        if spans and x0 <= spans[-1][1] + 1:
            spans[-1][1] = max(spans[-1][1], x1)
        else:
            spans.append([x0, x1])
    out = []
    for _, _, cells in rows:
        row = [""] * len(spans)
        ends = [0.0] * len(spans)
        for x0, x1, text in sorted(cells, key=lambda c: c[0]):
            col = next(k for k, (a, b) in enumerate(spans) if a - 1 <= x0 <= b + 1)
            row[col] = f"{row[col]}{'' if x0 - ends[col] < 1 else ' '}{text}".strip()  # "R" + raised "2": R2
            ends[col] = x1
        out.append(row)
    return out


def valid_rows(rows: Sequence[Sequence[Any]]) -> bool:
    filled = [sum(1 for c in row if c not in (None, "")) for row in rows]
    return max((len(r) for r in rows), default=0) >= 2 and sum(1 for n in filled if n >= 2) >= 2


def _overlaps(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def find_tables(page: Any, areas: Sequence[Box]) -> list[Table]:
    """The tables of a pdfplumber ``page`` in the given :func:`tabular_areas`, top to bottom."""
    if not areas:
        return []
    tables: list[Table] = []
    for found in page.find_tables():
        if not any(_overlaps(tuple(found.bbox), area) for area in areas):
            continue
        rows = found.extract()
        if valid_rows(rows):
            md = markdown_table(rows)
            if md:
                tables.append(Table(tuple(found.bbox), md))
    width, height = float(page.width), float(page.height)
    for x0, top, x1, bottom in areas:
        box = (max(x0 - 2, 0.0), max(top - 2, 0.0), min(x1 + 2, width), min(bottom + 2, height))
        if any(_overlaps(box, t.bbox) for t in tables):
            continue
        rows = page.crop(box).extract_table(_TEXT_SETTINGS) or []
        rows = [row for row in rows if any(c not in (None, "") for c in row)]
        if valid_rows(rows):
            md = markdown_table(rows)
            if md:
                tables.append(Table(box, md))
    return sorted(tables, key=lambda t: t.bbox[1])
