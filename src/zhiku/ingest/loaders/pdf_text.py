"""PDFium text extraction for the PDF loader: a page's lines with their fonts and geometry, table cells from
character positions, and the placement of tables and images among the lines in reading order."""

from __future__ import annotations

import ctypes
import re
from typing import Any

from zhiku.ingest.loaders.markup import CJK_RE
from zhiku.ingest.loaders.pdf_layout import Block, Line, clean_line, is_garbled
from zhiku.ingest.loaders.pdf_tables import Box, Table

MONO_FONT_RE = re.compile(r"mono|courier|consol|menlo|typewriter|code|^(?:cm|lm|sf|ec)tt|tt\d{3,4}$", re.IGNORECASE)


def page_lines(raw: Any, textpage: Any, height: float) -> tuple[list[Line], list[list[int]], bool, str]:
    """The text lines of a page (PDFium's reading order), the character indexes of each line's visible
    characters, whether the page's text looks garbled, and the page's text (indexed like the characters)."""
    n = textpage.count_chars()
    if n <= 0:
        return [], [], False, ""
    text = textpage.get_text_range(0, n)
    if len(text) != n:  # characters outside the BMP: read them one by one
        text = "".join(chr(raw.FPDFText_GetUnicode(textpage.raw, i) or 0xFFFD) for i in range(n))
    sample = range(0, n, max(1, n // 200))
    errors = sum(1 for i in sample if raw.FPDFText_HasUnicodeMapError(textpage.raw, i) == 1)
    garbled = is_garbled(text) or errors * 10 >= len(sample) * 3
    buf = ctypes.create_string_buffer(128)
    matrix = raw.FS_MATRIX()
    lines: list[Line] = []
    ranges: list[list[int]] = []
    start = 0
    for m in re.finditer(r"\r\n|\r|\n|$", text):
        a, b = start, m.start()
        start = m.end()
        seg = text[a:b]
        idx = [a + j for j, ch in enumerate(seg) if not ch.isspace()]
        if not idx:
            if m.end() == len(text):
                break
            continue
        probe = sorted({idx[0], idx[len(idx) // 2], idx[-1]})
        boxes = [textpage.get_charbox(i) for i in probe]
        x0 = min(bx[0] for bx in boxes)
        x1 = max(bx[2] for bx in boxes)
        top = height - max(bx[3] for bx in boxes)
        bottom = height - min(bx[1] for bx in boxes)
        size = sorted(font_size(raw, textpage, i, matrix) for i in probe)[len(probe) // 2]
        fonts = []
        for i in (idx[0], idx[-1]):
            raw.FPDFText_GetFontInfo(textpage.raw, i, buf, len(buf), None)
            fonts.append(buf.value.decode("latin-1").split("+")[-1])
        cleaned = clean_line(seg.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace"))
        if cleaned:
            mono = all(MONO_FONT_RE.search(f) for f in fonts)
            lines.append(
                Line(
                    cleaned
                    if not mono
                    else seg.strip().encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace"),
                    x0,
                    top,
                    x1,
                    bottom,
                    size,
                    mono,
                )
            )
            ranges.append(idx)
        if m.end() == len(text):
            break
    return lines, ranges, garbled, text


def inside(box: Any, area: Box) -> bool:
    """Whether the centre of ``box`` (a ``Box`` or a ``Line``) lies in ``area``."""
    x0, top, x1, bottom = (box.x0, box.top, box.x1, box.bottom) if isinstance(box, Line) else box
    return area[0] - 3 <= (x0 + x1) / 2 <= area[2] + 3 and area[1] - 3 <= (top + bottom) / 2 <= area[3] + 3


def cells(textpage: Any, text: str, chars: list[int], size: float) -> list[tuple[float, float, str]]:
    """A line's characters grouped into cells ``(x0, x1, text)`` by their advance boxes: a gap wider than 0.6
    em starts a new cell; a gap of a sixth of an em between two non-Chinese characters is a space."""
    cells: list[tuple[float, float, str]] = []
    x0 = x1 = base = 0.0
    buf = ""

    def close() -> None:
        cells.append((x0, x1, buf.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")))

    for i in chars:
        left, bottom, right, _ = textpage.get_charbox(i, loose=True)
        ch = text[i]
        if buf and left - x1 > 0.6 * size:
            close()
            buf = ""
        if not buf:
            x0 = left
        elif (
            left - x1 > size / 6
            and abs(bottom - base) < 0.2 * size  # not a superscript (R²)
            and not (CJK_RE.match(buf[-1]) or CJK_RE.match(ch))
        ):
            buf += " "
        base = bottom
        buf += ch
        x1 = right if len(buf) == 1 else max(x1, right)
    if buf:
        close()
    return cells


def wide_gaps(textpage: Any, chars: list[int], size: float) -> int:
    """How many gaps wider than 1.5 ems lie between consecutive characters of a line (table cells)."""
    gaps = 0
    prev_right = None
    for i in chars:
        left, _, right, _ = textpage.get_charbox(i)
        if prev_right is not None and left - prev_right > 1.5 * size:
            gaps += 1
        prev_right = right
    return gaps


def font_size(raw: Any, textpage: Any, index: int, matrix: Any) -> float:
    """The size a character is drawn at: its font size scaled by its transformation matrix."""
    size = float(raw.FPDFText_GetFontSize(textpage.raw, index))
    if raw.FPDFText_GetMatrix(textpage.raw, index, matrix):
        scale = abs(matrix.a * matrix.d - matrix.b * matrix.c) ** 0.5
        if scale > 0:
            size *= scale
    return size


def place(lines: list[Line], tables: list[Table], images: list[tuple[Box, bytes, str, int, int]]) -> list[Line | Block]:
    """A page's lines with its tables (replacing the lines inside them) and image anchors, in reading order."""
    items: list[Line | Block] = []
    placed: set[int] = set()
    for line in lines:
        cx, cy = (line.x0 + line.x1) / 2, (line.top + line.bottom) / 2
        inside = next(
            (k for k, t in enumerate(tables) if t.bbox[0] <= cx <= t.bbox[2] and t.bbox[1] <= cy <= t.bbox[3]), None
        )
        if inside is None:
            items.append(line)
        elif inside not in placed:
            placed.add(inside)
            items.append(Block(tables[inside].bbox[1], tables[inside].bbox[3], markdown=tables[inside].markdown))
    for k, t in enumerate(tables):
        if k not in placed:
            insert_by_y(items, Block(t.bbox[1], t.bbox[3], markdown=t.markdown), t.bbox[1])
    for k, (box, *_rest) in enumerate(images):
        insert_by_y(items, Block(box[1], box[3], image=k), (box[1] + box[3]) / 2)
    return items


def insert_by_y(items: list[Line | Block], block: Block, y: float) -> None:
    """Insert ``block`` before the first line below ``y``, else at the end."""
    for j, item in enumerate(items):
        if isinstance(item, Line) and item.top >= y:
            items.insert(j, block)
            return
    items.append(block)
