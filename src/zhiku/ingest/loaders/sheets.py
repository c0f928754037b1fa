"""Spreadsheets: a page per sheet, its rows a Markdown table led by their row numbers (the chunker repeats the
header on every piece); a question/answer sheet becomes one ``问：… 答：…`` unit per row. Workbooks through
python-calamine (``zhiku[sheets]``: 13x openpyxl's read-only speed at the same memory), CSV/TSV through ``csv``."""

from __future__ import annotations

import csv
import datetime as dt
import io
import itertools
import logging
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

from zhiku.errors import LoaderError, MissingDependency
from zhiku.ingest.files import MIB
from zhiku.ingest.loaders.docx import check_zip
from zhiku.ingest.loaders.encoding import SNIFF_BYTES, decode_text, read_head, sniff_bytes, wrong_suffix
from zhiku.ingest.loaders.markup import Configured, cell_text, drop_cjk_spaces, not_heading
from zhiku.types import PageSpan, SourceDoc

SHEETS_INSTALL = "pip install 'zhiku[sheets]'"
MAX_ROWS = 200_000  # per file: past it a file is a data set, not documents (~100k chunks to embed)
ROW = "行"  # the row-number column, and the row line of a question/answer pair (the citation reads them)
_QUESTION = {"问题", "问", "提问", "常见问题", "question", "questions", "q", "faq"}
_ANSWER = {"答案", "答", "回答", "解答", "答复", "answer", "answers", "a", "reply"}
log = logging.getLogger("zhiku.ingest")

Row = tuple[int, list[str]]  # 1-based row number, cell texts
Sheet = tuple[int, str, Iterable[Row]]  # 1-based sheet number, name, rows


def _value(v: object) -> str:
    if isinstance(v, str):
        return v.strip()
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() and abs(v) < 1e15 else repr(round(v, 10))
    if isinstance(v, dt.datetime):
        return v.date().isoformat() if v.time() == dt.time() else v.isoformat(" ")
    if isinstance(v, (dt.date, dt.time)):
        return v.isoformat()
    return "" if v is None else str(v).strip()


def _line(cells: Sequence[str]) -> str:
    text = " | ".join(cell_text(c) if "|" in c or "  " in c or not c.isprintable() else c for c in cells)
    return drop_cjk_spaces(f"| {text} |")  # once a row: cell_text's regex on each cell is most of a sheet's time


def sheet_markdown(name: str, rows: Iterable[Row]) -> str:
    """``# name``, the title rows above the header (one value each), then the table or the question/answer pairs."""
    it = iter(rows)
    out, header = [f"# {' '.join(name.split())}"], next(it, None)
    while header is not None and len(title := {c for c in header[1] if c}) == 1 and (after := next(it, None)):
        if len({c for c in after[1] if c}) < 2:  # a one-column sheet: its first row is the header
            it = itertools.chain([after], it)
            break
        out.append(not_heading(" ".join(title.pop().split())))
        header = after
    if header is None:
        return out[0]
    names = header[1]
    keys = [re.sub(r"\s", "", c).lower() for c in names]
    q = next((i for i, k in enumerate(keys) if k in _QUESTION), -1)
    a = next((i for i, k in enumerate(keys) if k in _ANSWER), -1)
    faq = q >= 0 and a >= 0
    lines = [] if faq else [_line([ROW, *names]), "|" + " --- |" * (len(names) + 1)]
    if (first := next(it, None)) is None:  # a header without rows: a line of text
        return "\n\n".join([*out, not_heading(" ".join(" ".join(names).split()))])
    for number, cells in itertools.chain([first], it):
        cells += [""] * (len(names) - len(cells))
        if not faq:
            lines.append(_line([str(number), *cells]))
        elif cells[q] or cells[a]:
            rest = [(h, c) for i, (h, c) in enumerate(zip(names, cells, strict=False)) if c and i not in (q, a)]
            pairs = [("问", cells[q]), ("答", cells[a]), *rest]
            out.append("\n".join([*(f"{h}：{' '.join(c.split())}" for h, c in pairs), f"{ROW}：{number}"]))
    return "\n\n".join([*out, "\n".join(lines)] if lines else out)


def _workbook(path: Path, max_bytes: int) -> Iterator[Sheet]:
    try:
        import python_calamine as pc
    except ImportError:
        raise MissingDependency(f"reading {path.suffix} workbooks needs python-calamine: {SHEETS_INSTALL}") from None
    head = read_head(path)
    if path.suffix.lower() == ".xls":
        if sniff_bytes(head) != "ole":
            raise wrong_suffix(head, "an Excel .xls workbook", path)
    elif sniff_bytes(head) == "ole":  # Excel saves a workbook with a password as an encrypted OLE file
        raise LoaderError(f"password-protected workbook: remove the password and ingest it again: {path}")
    else:
        check_zip(path, f"a {path.suffix} workbook", max_bytes, max_xml=max_bytes)
    try:
        book = pc.CalamineWorkbook.from_path(str(path))
        shown = pc.SheetVisibleEnum.Visible
        if hidden := [m.name for m in book.sheets_metadata if m.visible != shown]:
            log.warning("%s: hidden sheets not indexed: %s", path.name, ", ".join(hidden))
        for index, meta in enumerate(book.sheets_metadata, 1):
            if meta.visible == shown and meta.typ == pc.SheetTypeEnum.WorkSheet:
                sheet = book.get_sheet_by_index(index - 1)
                yield index, meta.name, _filled(sheet.iter_rows(), sheet.start, sheet.merged_cell_ranges or ())
    except pc.PasswordError:
        raise LoaderError(f"password-protected workbook: remove the password and ingest it again: {path}") from None
    except (pc.CalamineError, pc.XmlError, pc.ZipError, ValueError) as e:
        raise LoaderError(f"not a readable {path.suffix} workbook (corrupt or truncated): {path} ({e})") from None


def _filled(rows: Iterable[Sequence[object]], start: tuple[int, int] | None, merged: Sequence[Any]) -> Iterator[Row]:
    """Rows with a merged range's value in each of its cells (a category spanning rows names every one of them)."""
    col0 = start[1] if start else 0
    spans = [(r0, c0 - col0, r1, c1 - col0) for (r0, c0), (r1, c1) in merged]
    fills: dict[tuple[int, int], str] = {}
    for r, row in enumerate(rows):
        cells = [_value(v) for v in row]
        for r0, c0, r1, c1 in spans:
            if r0 == r and 0 <= c0 < len(cells):
                fills.update(((rr, cc), cells[c0]) for rr in range(r0, r1 + 1) for cc in range(c0, c1 + 1))
        if fills:  # all of this row's popped: the dict holds the rows below only
            cells = [c or f for c, f in zip(cells, [fills.pop((r, i), "") for i in range(len(cells))], strict=True)]
        yield r + 1, cells


def _delimited(path: Path) -> Iterator[Row]:
    data = read_head(path, None)
    if sniff_bytes(data[:SNIFF_BYTES]) is not None:
        raise wrong_suffix(data, f"a {path.suffix} table", path)
    text, _ = decode_text(data, path)
    del data
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    if delimiter == ",":
        with suppress(csv.Error):
            delimiter = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|").delimiter
    try:
        for number, row in enumerate(csv.reader(io.StringIO(text), delimiter=delimiter), 1):
            yield number, [c.strip() for c in row]
    except csv.Error as e:
        raise LoaderError(f"not a readable {path.suffix} table: {path} ({e})") from None


def _counted(sheets: Iterable[Sheet], path: Path) -> Iterator[Sheet]:
    """The non-empty rows of each sheet, counted across the file against ``MAX_ROWS``."""
    n = 0

    def rows(found: Iterable[Row]) -> Iterator[Row]:
        nonlocal n
        for number, cells in found:
            while cells and not cells[-1]:
                cells.pop()
            if cells:
                n += 1
                if n > MAX_ROWS:
                    raise LoaderError(
                        f"{path} has over {MAX_ROWS:,} rows: a data set rather than documents; split it, or index "
                        "an export of the rows people ask about"
                    )
                yield number, cells

    for number, name, found in sheets:
        yield number, name, rows(found)


class SheetLoader(Configured):
    doc_type: str = "sheet"
    suffixes: tuple[str, ...] = (".xlsx", ".xlsm", ".xls", ".ods", ".csv", ".tsv")

    def load(self, path: Path, source: str) -> SourceDoc:
        path = Path(path)
        if path.suffix.lower() in (".csv", ".tsv"):
            sheets: Iterable[Sheet] = [(1, path.stem, _delimited(path))]
        else:
            sheets = _workbook(path, int(self.settings.max_file_mb * MIB))
        blocks: list[str] = []
        pages: list[PageSpan] = []
        at = 0
        for number, name, rows in _counted(sheets, path):
            md = sheet_markdown(name, rows)
            if "\n" in md:
                pages.append(PageSpan(number, at, at + len(md)))
                blocks.append(md)
                at += len(md) + 2
        if not blocks:
            raise LoaderError(f"no cells with text in {path}")
        return SourceDoc(source, self.doc_type, path.stem, "\n\n".join(blocks), tuple(pages), path.suffix.lower()[1:])
