"""PDF files: PDFium (pypdfium2) for text, geometry and images, pdfplumber for ruled tables, RapidOCR for pages
without a usable text layer (``zhiku[ocr]``)."""

from __future__ import annotations

import ctypes
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zhiku.errors import LoaderError, MissingDependency
from zhiku.ingest.loaders.encoding import read_head, wrong_suffix
from zhiku.ingest.loaders.markup import (
    CJK_RE,
    IMAGE_MIN_PX,
    Configured,
    encode_image,
    first_heading,
    image_id,
    markdown_table,
    probe_image,
    source_image,
)
from zhiku.ingest.loaders.pdf_layout import (
    Block,
    Line,
    clean_line,
    figure_caption,
    front_pages,
    is_garbled,
    measure,
    page_markdown,
    running_lines,
    visible_chars,
)
from zhiku.types import PageSpan, SourceDoc, SourceImage

PDF_INSTALL = "pip install 'zhiku[pdf]'"
SCAN_MAX_CHARS = 20  # a page with fewer visible characters and a large image is a scan
SCAN_MIN_COVER = 0.3  # ... where "large" covers this fraction of the page
OCR_DPI = 150  # pages rendered for OCR: body text legible to RapidOCR at a quarter of 300 dpi's pixels
IMAGE_MIN_AREA = 0.01  # a picture smaller than this fraction of its page is decoration (a logo, a bullet)
_ERRORS = {
    3: "it is corrupt or truncated (not a readable PDF structure)",
    2: "the file cannot be read",
    5: "its security handler is not supported",
    6: "a page is broken",
}


Box = tuple[float, float, float, float]  # x0, top, x1, bottom in points from the page's top-left corner

RULE_MAX_THICKNESS = 2.5
RULE_MIN_WIDTH = 30.0
_ALIGN = 4.0  # rules whose ends lie within this many points belong to one table
_TEXT_SETTINGS = dict(
    vertical_strategy="text", horizontal_strategy="text", snap_y_tolerance=5, intersection_y_tolerance=10
)


@dataclass(frozen=True)
class Table:
    bbox: Box
    markdown: str


@dataclass
class _Page:
    number: int
    width: float
    height: float
    lines: list[Line] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    images: list[tuple[Box, bytes, str, int, int]] = field(default_factory=list)  # box, data, mime, w, h
    table_areas: list[Box] = field(default_factory=list)  # ruled grids for pdfplumber
    needs_ocr: bool = False
    ocr: bool = False


def _area(box: Box) -> float:
    return (box[2] - box[0]) * (box[3] - box[1])


def _pdfium() -> Any:
    try:
        import pypdfium2
        import pypdfium2.raw
    except ImportError:
        raise MissingDependency(f"reading PDF files needs pypdfium2 and pdfplumber: {PDF_INSTALL}") from None
    return pypdfium2


class PdfLoader(Configured):
    doc_type: str = "pdf"
    suffixes: tuple[str, ...] = (".pdf",)

    _ocr: Any = None  # the OCR engine, loaded on first use

    def _open(self, pdfium: Any, path: Path) -> Any:
        password = self.settings.pdf_password.get_secret_value() if self.settings.pdf_password else None
        try:
            return pdfium.PdfDocument(str(path), password=password)
        except pdfium.PdfiumError as e:
            code = getattr(e, "err_code", -1)
            if code == 4:
                if password:
                    raise LoaderError(f"encrypted PDF and loaders.pdf_password does not open it: {path}") from None
                raise LoaderError(
                    f"encrypted PDF: set loaders.pdf_password (ZHIKU_LOADERS__PDF_PASSWORD) to its "
                    f"password to index it: {path}"
                ) from None
            raise LoaderError(f"cannot open PDF {path}: {_ERRORS.get(code or 0, str(e))}") from None

    def _ocr_engine(self) -> Any:
        from zhiku.ingest.loaders.ocr import OcrEngine, ocr_available

        if self.settings.ocr == "off" or (self._ocr is None and not ocr_available()):
            return None
        if self._ocr is None:
            self._ocr = OcrEngine()
        return self._ocr

    def load(self, path: Path, source: str) -> SourceDoc:
        path = Path(path)
        pdfium = _pdfium()
        if not (head := read_head(path, 1024)):
            raise LoaderError(f"empty file (0 bytes): {path}")
        if b"%PDF-" not in head:
            raise wrong_suffix(head, "PDF", path)
        pdf = self._open(pdfium, path)
        plumber: Any = None
        try:
            pages = []
            for i in range(len(pdf)):
                page = self._read_page(pdfium, pdf, i)
                if page.table_areas:
                    plumber = plumber or self._plumber(path)
                    page.tables = sorted(
                        page.tables + find_tables(plumber.pages[i], page.table_areas), key=lambda t: t.bbox[1]
                    )
                pages.append(page)
            title = (pdf.get_metadata_dict().get("Title") or "").strip()
        except pdfium.PdfiumError as e:
            raise LoaderError(f"cannot read PDF {path}: {e}") from None
        finally:
            if plumber is not None:
                plumber.close()
            pdf.close()
        return self._assemble(pages, source, path, title)

    def _plumber(self, path: Path) -> Any:
        try:
            import pdfplumber
        except ImportError:
            raise MissingDependency(f"reading tables in PDF files needs pdfplumber: {PDF_INSTALL}") from None
        password = self.settings.pdf_password.get_secret_value() if self.settings.pdf_password else ""
        return pdfplumber.open(path, password=password)

    def _read_page(self, pdfium: Any, pdf: Any, index: int) -> _Page:
        raw = pdfium.raw
        page = pdf[index]
        try:
            width, height = page.get_size()
            out = _Page(index + 1, width, height)
            pictures: list[tuple[Box, Any]] = []
            rules: list[Box] = []
            verticals: list[Box] = []
            for obj in page.get_objects(filter=(raw.FPDF_PAGEOBJ_PATH, raw.FPDF_PAGEOBJ_IMAGE), max_depth=2):
                left, bottom, right, top = obj.get_bounds()
                box = (max(left, 0.0), max(height - top, 0.0), min(right, width), min(height - bottom, height))
                if obj.type == raw.FPDF_PAGEOBJ_IMAGE:
                    pictures.append((box, obj))
                elif box[3] - box[1] <= RULE_MAX_THICKNESS and box[2] - box[0] >= RULE_MIN_WIDTH:
                    rules.append(box)
                elif box[2] - box[0] <= RULE_MAX_THICKNESS and box[3] - box[1] >= 8:
                    verticals.append(box)
            textpage = page.get_textpage()
            try:
                out.lines, ranges, garbled, text = page_lines(raw, textpage, height)
                areas = rule_groups(rules)
                for grid in tabular_areas(
                    areas, out.lines, lambda i: wide_gaps(textpage, ranges[i], out.lines[i].size)
                ):
                    if any(inside(v, grid) for v in verticals):
                        out.table_areas.append(grid)  # a ruled grid: pdfplumber
                        continue
                    cells = [
                        (ln.top, ln.bottom, line_cells(textpage, text, ranges[i], ln.size))
                        for i, ln in enumerate(out.lines)
                        if inside(ln, grid)
                    ]
                    rows = text_table(cells)
                    if valid_rows(rows) and (md := markdown_table(rows)):
                        out.tables.append(Table(grid, md))
            finally:
                textpage.close()
            page_area = width * height or 1.0
            cover = sum(_area(b) for b, _ in pictures) / page_area
            chars = sum(visible_chars(ln.text) for ln in out.lines)
            if garbled or (chars < SCAN_MAX_CHARS and cover >= SCAN_MIN_COVER):
                if (engine := self._ocr_engine()) is not None:
                    image = page.render(scale=OCR_DPI / 72).to_pil()
                    out.lines, out.ocr = engine.page_lines(image, OCR_DPI / 72), True
                    out.table_areas, out.tables = [], []
                    pictures = [(b, o) for b, o in pictures if _area(b) < 0.5 * page_area]
                else:
                    out.needs_ocr = True
                    if garbled:  # garbage is not indexed
                        out.lines, out.tables, out.table_areas = [], [], []
            if self.settings.images:
                out.images = self._images(pictures, page_area)
            return out
        finally:
            page.close()

    def _images(self, pictures: list[tuple[Box, Any]], area: float) -> list[tuple[Box, bytes, str, int, int]]:
        out = []
        for box, obj in pictures:
            w, h = obj.get_px_size()
            if min(w, h) < IMAGE_MIN_PX or _area(box) < IMAGE_MIN_AREA * area:
                continue
            try:
                if obj.get_filters() == ["DCTDecode"]:
                    data = bytes(obj.get_data(decode_simple=True))
                    if (probe := probe_image(data)) is not None:
                        out.append((box, data, *probe))
                        continue
                data, mime, w, h = encode_image(obj.get_bitmap(render=False).to_pil())
            except Exception:  # an image PDFium cannot decode is left out, not the document
                continue
            out.append((box, data, mime, w, h))
        return out

    def _assemble(self, pages: list[_Page], source: str, path: Path, title: str) -> SourceDoc:
        drop = running_lines([(p.lines, p.height) for p in pages])
        for p, dropped in zip(pages, drop, strict=False):
            p.lines = [ln for i, ln in enumerate(p.lines) if i not in dropped]
        lines, width = [p.lines for p in pages], max((p.width for p in pages), default=595.0)
        layout = measure(lines, width)
        front = front_pages(lines, layout.body_size)
        if front:  # heading levels from the body, not the cover's or the declarations' big type
            layout = measure(lines, width, front)
        seen = Counter(image_id(data, mime) for p in pages for data, mime in {(im[1], im[2]) for im in p.images})
        repeated = {k for k, n in seen.items() if n >= 3 and n * 2 >= len(pages)}  # logos on every page
        parts: list[str] = []
        spans: list[PageSpan] = []
        images: list[SourceImage] = []
        offset = 0
        for k, p in enumerate(pages):
            kept = [im for im in p.images if image_id(im[1], im[2]) not in repeated]
            markdown, anchors = page_markdown(place(p.lines, p.tables, kept), layout, k)
            if markdown and parts:
                offset += 2
            for j, (box, data, mime, w, h) in enumerate(kept):
                at, caption = offset + anchors.get(j, len(markdown)), figure_caption(p.lines, box[1], box[3])
                images.append(source_image(data, mime, w, h, offset=at, page=p.number, bbox=box, caption=caption))
            spans.append(PageSpan(p.number, offset, offset + len(markdown)))
            if markdown:
                parts.append(markdown)
                offset += len(markdown)
        text = "\n\n".join(parts)
        if not title or re.search(r"\.(?:dvi|tex|docx?|pdf|wpd)$|^untitled$", title, re.IGNORECASE):
            title = first_heading(text, path.stem)
        needs_ocr, ocr = tuple(p.number for p in pages if p.needs_ocr), tuple(p.number for p in pages if p.ocr)
        return SourceDoc(source, self.doc_type, title, text, tuple(spans), "pdf", tuple(images), needs_ocr, ocr)


# -- PDFium text: a page's lines with their fonts and geometry, and tables and images placed among them.
MONO_FONT_RE = re.compile(r"mono|courier|consol|menlo|typewriter|code|^(?:cm|lm|sf|ec)tt|tt\d{3,4}$", re.IGNORECASE)


def page_lines(raw: Any, textpage: Any, height: float) -> tuple[list[Line], list[list[int]], bool, str]:
    """A page's lines, each line's visible character indexes, whether it looks garbled, and its text."""
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
    for m in re.finditer(r"[^\r\n]+", text):  # the text between line breaks (\r\n, \r or \n)
        seg = m.group()
        idx = [m.start() + j for j, ch in enumerate(seg) if not ch.isspace()]
        if not idx:
            continue
        probe = sorted({idx[0], idx[len(idx) // 2], idx[-1]})
        lefts, bottoms, rights, tops = zip(*(textpage.get_charbox(i) for i in probe), strict=True)
        x0, top, x1, bottom = min(lefts), height - max(tops), max(rights), height - min(bottoms)
        size = sorted(font_size(raw, textpage, i, matrix) for i in probe)[len(probe) // 2]
        fonts = [_font_name(raw, textpage, i, buf) for i in (idx[0], idx[-1])]
        if cleaned := clean_line(_unpaired(seg)):
            mono = all(MONO_FONT_RE.search(f) for f in fonts)
            lines.append(Line(_unpaired(seg.strip()) if mono else cleaned, x0, top, x1, bottom, size, mono))
            ranges.append(idx)
    return lines, ranges, garbled, text


def _unpaired(text: str) -> str:  # a lone surrogate (a broken character) as U+FFFD
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _font_name(raw: Any, textpage: Any, index: int, buf: Any) -> str:
    raw.FPDFText_GetFontInfo(textpage.raw, index, buf, len(buf), None)
    return str(buf.value.decode("latin-1").split("+")[-1])


def inside(box: Any, area: Box, pad: float = 3) -> bool:
    """Whether the centre of a box (or a ``Line``) lies in ``area`` widened by ``pad`` points."""
    x0, top, x1, bottom = (box.x0, box.top, box.x1, box.bottom) if isinstance(box, Line) else box
    return area[0] - pad <= (x0 + x1) / 2 <= area[2] + pad and area[1] - pad <= (top + bottom) / 2 <= area[3] + pad


def line_cells(textpage: Any, text: str, chars: list[int], size: float) -> list[tuple[float, float, str]]:
    """A line's characters as ``(x0, x1, text)`` cells: a gap over 0.6 em starts a cell."""
    cells: list[tuple[float, float, str]] = []
    x0 = x1 = base = 0.0
    buf = ""
    for i in chars:
        left, bottom, right, _ = textpage.get_charbox(i, loose=True)
        ch = text[i]
        if buf and left - x1 > 0.6 * size:
            cells.append((x0, x1, _unpaired(buf)))
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
        cells.append((x0, x1, _unpaired(buf)))
    return cells


def wide_gaps(textpage: Any, chars: list[int], size: float) -> int:
    boxes = [textpage.get_charbox(i) for i in chars]
    return sum(1 for prev, box in zip(boxes, boxes[1:], strict=False) if box[0] - prev[2] > 1.5 * size)


def font_size(raw: Any, textpage: Any, index: int, matrix: Any) -> float:
    size = float(raw.FPDFText_GetFontSize(textpage.raw, index))
    if raw.FPDFText_GetMatrix(textpage.raw, index, matrix):
        scale = abs(matrix.a * matrix.d - matrix.b * matrix.c) ** 0.5
        if scale > 0:
            size *= scale
    return size


def place(lines: list[Line], tables: list[Table], images: list[tuple[Box, bytes, str, int, int]]) -> list[Line | Block]:
    """A page's lines with its tables (in place of the lines inside them) and image anchors, in reading order."""
    items: list[Line | Block] = []
    placed: set[int] = set()
    for line in lines:
        k = next((k for k, t in enumerate(tables) if inside(line, t.bbox, 0)), None)
        if k is None:
            items.append(line)
        elif k not in placed:
            placed.add(k)
            items.append(Block(tables[k].bbox[1], tables[k].bbox[3], markdown=tables[k].markdown))
    for k, t in enumerate(tables):
        if k not in placed:
            insert_by_y(items, Block(t.bbox[1], t.bbox[3], markdown=t.markdown), t.bbox[1])
    for k, (box, *_rest) in enumerate(images):
        insert_by_y(items, Block(box[1], box[3], image=k), (box[1] + box[3]) / 2)
    return items


def insert_by_y(items: list[Line | Block], block: Block, y: float) -> None:
    items.insert(next((j for j, it in enumerate(items) if isinstance(it, Line) and it.top >= y), len(items)), block)


# -- tables between horizontal rules: a three-line table (booktabs, usual in Chinese papers) read from the text's
# gaps, a ruled grid by pdfplumber; two columns and two rows with two filled cells (not a framed listing or a form).
def rule_groups(rules: Sequence[Box]) -> list[Box]:
    groups: list[list[Box]] = []
    for rule in sorted(rules, key=lambda r: (r[1], r[0])):
        for group in groups:
            if abs(group[0][0] - rule[0]) < _ALIGN and abs(group[0][2] - rule[2]) < _ALIGN:
                group.append(rule)
                break
        else:
            groups.append([rule])
    return [
        (min(r[0] for r in group), group[0][1], max(r[2] for r in group), group[-1][3])
        for group in groups
        if len(group) >= 2 and group[-1][3] - group[0][1] >= 12
    ]


def tabular_areas(areas: Sequence[Box], lines: Sequence[Any], wide_gaps: Callable[[int], int]) -> list[Box]:
    """The rule areas whose text could be a table: two or more lines within the rules' width (a form's underlines have
    their labels beside them), mostly not monospaced, half with a wide gap between two characters (cells)."""
    out = []
    for box in areas:
        held = [i for i, ln in enumerate(lines) if inside(ln, box, 0)]
        if len(held) < 2 or sum(1 for i in held if lines[i].mono) * 2 > len(held):
            continue
        if any(lines[i].x0 < box[0] - 5 or lines[i].x1 > box[2] + 5 for i in held):
            continue  # text running past the rules: underlines of a form, not a table
        if sum(1 for i in held if wide_gaps(i) > 0) * 2 >= len(held):
            out.append(box)
    return out


def text_table(rows_of_cells: Sequence[tuple[float, float, list[tuple[float, float, str]]]]) -> list[list[str]]:
    """A table from the lines in its area: columns are the gaps in the union of the cells' extents."""
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
    tables: list[Table] = []
    for found in page.find_tables():
        if not any(_overlaps(tuple(found.bbox), area) for area in areas):
            continue
        rows = found.extract()
        if valid_rows(rows) and (md := markdown_table(rows)):
            tables.append(Table(tuple(found.bbox), md))
    width, height = float(page.width), float(page.height)
    for x0, top, x1, bottom in areas:
        box = (max(x0 - 2, 0.0), max(top - 2, 0.0), min(x1 + 2, width), min(bottom + 2, height))
        if any(_overlaps(box, t.bbox) for t in tables):
            continue
        rows = page.crop(box).extract_table(_TEXT_SETTINGS) or []
        rows = [row for row in rows if any(c not in (None, "") for c in row)]
        if valid_rows(rows) and (md := markdown_table(rows)):
            tables.append(Table(box, md))
    return sorted(tables, key=lambda t: t.bbox[1])
