"""The PDF loader's layout rules, as pure functions: positioned ``Line`` boxes (points from the page's top-left
corner) into Markdown."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from itertools import pairwise

from zhiku.ingest.loaders.markup import drop_cjk_spaces, join_lines

EDGE_ZONE = 0.12  # top/bottom fraction of a page where headers and footers live
HEADING_RATIO = 1.08
MAX_HEADING_CHARS = 80

_PAGE_NUMBER_RE = re.compile(
    r"(?:[-–—]\s*)?(?:第\s*)?(?:\d{1,4}|[ivxlcdm]{1,6}|[IVXLCDM]{1,6})(?:\s*页)?"
    r"(?:\s*[/／]\s*(?:共\s*)?\d{1,4}\s*页?)?(?:\s*[-–—])?|(?:page|Page|PAGE)\s*\d{1,4}(?:\s*of\s*\d+)?"
)
_PAGE_OF_RE = re.compile(r"(?:^|\s)[-–—]?\s*(\d{1,4})\s*[/／]\s*(\d{1,4})\s*[-–—]?$")  # "2.4 章标题 –3/11–"
_LIST_RE = re.compile(
    r"\s*(?:[•●○▪■◆◇►✓·\-–*]\s|\[\d{1,3}\]|\(?\d{1,3}[.)）、](?!\d)|[（(][一二三四五六七八九十\d]{1,3}[)）]|"
    r"[a-zA-Z][.)]\s|[①-⑳]|[一二三四五六七八九十]{1,3}、)"
)
CAPTION_RE = re.compile(
    r"\s*(?:图|表|续表|Figure|Fig\.|Table|Tab\.)\s*[\dA-Za-z一二三四五六七八九十]+(?:[-.–]\d+)*(?![\d])"
)
FIGURE_CAPTION_RE = re.compile(r"\s*(?:图|Figure|Fig\.)\s*[\dA-Za-z一二三四五六七八九十]+(?:[-.–]\d+)*(?![\d])")
_SENTENCE_END = "。！？!?；;：:.…」』”"
_DOT_LEADER_RE = re.compile(r"(?:\s*[.·…]){4,}\s*")
_TOC_ENTRY_RE = re.compile(r" … \S{1,8}$")  # a table-of-contents line (after clean_line)
_HEADING_MD_RE = re.compile(r"(#{1,6})(?=\s|$)")


@dataclass(frozen=True)
class Line:
    text: str
    x0: float
    top: float
    x1: float
    bottom: float
    size: float
    mono: bool = False
    ocr: bool = False  # from OCR: never a heading, not counted in the document's measurements

    @property
    def height(self) -> float:
        return self.bottom - self.top


@dataclass(frozen=True)
class Block:
    top: float
    bottom: float
    markdown: str = ""
    image: int | None = None


FRONT_LEVEL = 6  # the deepest Markdown heading: any body heading closes it


@dataclass(frozen=True)
class Layout:
    body_size: float
    heading_levels: dict[float, int]  # rounded font size -> heading level (1 = largest)
    leading_gap: float  # usual gap between two lines of one paragraph
    left: float
    right: float
    page_body: tuple[float, ...] = ()  # per page: its own body size where it clearly has one, else body_size
    front: frozenset[int] = frozenset()  # cover/declaration pages (front_pages): headings at FRONT_LEVEL only

    def body_of(self, page: int) -> float:
        return self.page_body[page] if page < len(self.page_body) else self.body_size


def size_key(size: float) -> float:
    return round(size * 2) / 2


def clean_line(text: str) -> str:
    text = text.replace("\u00ad", "-").replace("\x02", "-").replace("\ufffe", "")
    text = "".join(ch for ch in text if ch == "\t" or unicodedata.category(ch) != "Cc")
    text = _DOT_LEADER_RE.sub(" … ", text)
    return " ".join(text.split())


def edge_key(line: Line, page_height: float) -> tuple[str, str] | None:
    if line.bottom <= page_height * EDGE_ZONE:
        zone = "top"
    elif line.top >= page_height * (1 - EDGE_ZONE):
        zone = "bottom"
    else:
        return None
    return zone, re.sub(r"\d+", "#", line.text.replace(" ", ""))


def running_lines(pages: Sequence[tuple[Sequence[Line], float]]) -> list[set[int]]:
    keys = [[edge_key(line, h) for line in lines] for lines, h in pages]
    counts = Counter(k for page in keys for k in set(page) if k is not None)
    need = max(3, (len(pages) + 1) // 2)
    # "page N of M" lines (–3/11–) change words with the section: counted by (zone, M), kept if their Ns repeat (3/4)
    page_of = [[_page_of(ln, k) for ln, k in zip(p[0], ks, strict=True)] for p, ks in zip(pages, keys, strict=True)]
    seen: dict[tuple[str, str], set[tuple[int, str]]] = {}  # (page, N) of each (zone, M)
    for at, (zone_m, n) in ((at, f) for at, page in enumerate(page_of) for f in page if f is not None):
        seen.setdefault(zone_m, set()).add((at, n))
    running = {k for k, s in seen.items() if min(len({at for at, _ in s}), len({n for _, n in s})) >= 3}
    out: list[set[int]] = []
    for (lines, _), page_keys, page_ofs in zip(pages, keys, page_of, strict=True):
        drop = set()
        for i, (line, key, found) in enumerate(zip(lines, page_keys, page_ofs, strict=True)):
            edge = key is not None and (counts[key] >= need or _PAGE_NUMBER_RE.fullmatch(line.text.strip()))
            if edge or (found is not None and found[0] in running):
                drop.add(i)
        out.append(drop)
    return out


def _page_of(line: Line, key: tuple[str, str] | None) -> tuple[tuple[str, str], str] | None:
    m = _PAGE_OF_RE.search(line.text) if key is not None else None
    return ((key[0], m.group(2)), m.group(1)) if key is not None and m else None


def measure(pages: Sequence[Sequence[Line]], page_width: float, front: frozenset[int] = frozenset()) -> Layout:
    everything = [line for lines in pages for line in lines]
    sizes = _sizes(everything) or _sizes(everything, ocr=True)  # a scanned document: measure its OCR'd lines
    body = sizes.most_common(1)[0][0] if sizes else 10.0

    def is_body(line: Line) -> bool:
        return size_key(line.size) == body and not line.mono

    body_lines = [ln for lines in pages for ln in lines if is_body(ln)]
    lefts, rights = sorted(ln.x0 for ln in body_lines), sorted(ln.x1 for ln in body_lines)
    gaps = sorted(b.top - a.bottom for lines in pages for a, b in pairwise(lines) if is_body(a) and is_body(b))
    gaps = [gap for gap in gaps if 0 <= gap < 2 * body]  # between two lines of one paragraph
    right = rights[len(rights) * 9 // 10] if rights else page_width
    page_body = tuple(_page_body(lines, body) for lines in pages)
    candidates: Counter[float] = Counter()
    for k, (lines, own) in enumerate(zip(pages, page_body, strict=False)):
        for run in _heading_runs(lines, own, right) if k not in front else ():
            if len(run) < 3:
                candidates[size_key(lines[run[0]].size)] += 1
    levels = {s: n for n, s in enumerate(sorted(candidates, reverse=True)[:6], 1)}
    leading, left = gaps[len(gaps) // 2] if gaps else body * 0.5, lefts[len(lefts) // 10] if lefts else 0.0
    return Layout(body, levels, leading, left, right, page_body, front)


def _sizes(lines: Sequence[Line], ocr: bool = False) -> Counter[float]:
    sizes: Counter[float] = Counter()
    for line in lines:
        if ocr or not (line.mono or line.ocr):
            sizes[size_key(line.size)] += len(line.text)
    return sizes


def _page_body(lines: Sequence[Line], body: float) -> float:
    if not (sizes := _sizes(lines)):
        return body
    size, n = sizes.most_common(1)[0]
    return size if size > body and n >= 100 and n * 5 >= sum(sizes.values()) * 3 else body


def _is_heading_line(line: Line, body: float) -> bool:
    text = line.text.strip()
    return (
        line.size >= body * HEADING_RATIO
        and not line.mono
        and not line.ocr
        and 0 < len(text) <= MAX_HEADING_CHARS
        and text[-1] not in "，,。；;"
        and any(ch.isalnum() for ch in text)
    )


def _heading_runs(lines: Sequence[Line], body: float, right: float) -> list[list[int]]:
    """Runs of heading-sized lines of one size (a wrapped title); a full-width line continued in its size is prose."""
    runs: list[list[int]] = []
    for i, line in enumerate(lines):
        if not _is_heading_line(line, body):
            continue
        nxt = lines[i + 1] if i + 1 < len(lines) else None
        if line.x1 >= right - line.size and nxt is not None and size_key(nxt.size) == size_key(line.size):
            continue
        if runs and runs[-1][-1] == i - 1 and size_key(lines[i - 1].size) == size_key(line.size):
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def heading_levels(lines: Sequence[Line], layout: Layout, page: int = 0) -> dict[int, int]:
    if page in layout.front:
        return _front_headings(lines, layout.body_of(page), layout.right)
    runs = [r for r in _heading_runs(lines, layout.body_of(page), layout.right) if len(r) < 3]
    levels = [(run, layout.heading_levels.get(size_key(lines[run[0]].size))) for run in runs]
    return {i: level for run, level in levels if level is not None for i in run}


def _front_headings(lines: Sequence[Line], body: float, right: float) -> dict[int, int]:
    """A front page's runs in its largest type, at the deepest level: never the ancestors of the body's headings."""
    runs = [r for r in _heading_runs(lines, body, right) if len(r) < 3]
    top = max((size_key(lines[r[0]].size) for r in runs), default=None)
    return {i: FRONT_LEVEL for r in runs if size_key(lines[r[0]].size) == top for i in r}


def _breaks(prev: Line, cur: Line, layout: Layout, right: float) -> bool:
    """Whether ``cur`` starts a paragraph after ``prev``; ``right`` is where full lines of its size end."""
    size = max(prev.size, cur.size)
    if abs(cur.top - prev.top) < 0.5 * prev.height and cur.x0 >= prev.x1 - 2:
        return False  # the rest of the same visual line (a raised or lowered glyph split it)
    if abs(prev.size - cur.size) > 0.1 * size:
        return True
    gap = cur.top - prev.bottom
    if gap < -0.5 * prev.height or gap > layout.leading_gap + 0.5 * size:
        return True
    if _LIST_RE.match(cur.text) or CAPTION_RE.match(cur.text) or CAPTION_RE.match(prev.text):
        return True
    if cur.x0 > prev.x0 + 1.2 * size and not _LIST_RE.match(prev.text):
        return True
    if prev.x1 < right - 2 * size or _TOC_ENTRY_RE.search(prev.text):
        return True
    centred = cur.x0 > layout.left + 3 * size and cur.x1 < layout.right - 3 * size
    return centred and abs((cur.x0 + cur.x1) / 2 - (layout.left + layout.right) / 2) < 2 * size


def _escape(paragraph: str) -> str:
    return "\\" + paragraph if _HEADING_MD_RE.match(paragraph) or paragraph.startswith(("```", "~~~")) else paragraph


def page_markdown(items: Sequence[Line | Block], layout: Layout, page: int = 0) -> tuple[str, dict[int, int]]:
    """One page's lines and blocks as Markdown, and the offset there of each image anchor by its ``Block.image``."""
    parts: list[str] = []  # finished blocks of Markdown
    anchors: dict[int, int] = {}
    pending: list[int] = []  # image anchors waiting for the next block
    block: list[Line] = []  # the open block's lines, of one ``kind``: a heading's level, "code" or "para"
    kind: int | str = ""
    lines = [it for it in items if isinstance(it, Line)]
    levels = {id(lines[i]): level for i, level in heading_levels(lines, layout, page).items()}
    by_size: dict[float, list[float]] = {}
    for ln in lines:
        by_size.setdefault(size_key(ln.size), []).append(ln.x1)
    rights = {k: max(v) if len(v) >= 3 else layout.right for k, v in by_size.items()}

    def emit(markdown: str) -> None:
        if not markdown:
            return
        for image in pending:
            anchors[image] = sum(len(p) + 2 for p in parts)
        pending.clear()
        parts.append(markdown)

    for item in items:
        want = "block" if isinstance(item, Block) else "code" if item.mono else levels.get(id(item), "para")
        if block and not (isinstance(item, Line) and want == kind and _goes_on(kind, block[-1], item, layout, rights)):
            emit(_block_markdown(kind, block))
            block = []
        if isinstance(item, Block):
            if item.image is not None:
                pending.append(item.image)
            else:
                emit(item.markdown)
        else:
            kind = want
            block.append(item)
    if block:
        emit(_block_markdown(kind, block))
    markdown = "\n\n".join(parts)
    for image in pending:  # images after the last text of the page
        anchors[image] = len(markdown)
    return markdown, anchors


def _goes_on(kind: int | str, prev: Line, line: Line, layout: Layout, rights: dict[float, float]) -> bool:
    """Whether ``line`` continues the block of ``kind`` that ends with ``prev``."""
    if kind == "code":
        return True
    if kind == "para":
        return not _breaks(prev, line, layout, rights[size_key(prev.size)])
    return line.top - prev.bottom < line.size  # a heading wrapped onto a second line


def _block_markdown(kind: int | str, lines: Sequence[Line]) -> str:
    if kind == "code":
        body = "\n".join(ln.text for ln in lines).replace("```", "ˋˋˋ")
        return f"```\n{body}\n```"
    if kind == "para":
        return _escape(drop_cjk_spaces(reduce(join_lines, (ln.text for ln in lines), "")))
    return "#" * int(kind) + " " + drop_cjk_spaces(" ".join(ln.text for ln in lines)).replace("#", "\\#")


def figure_caption(lines: Sequence[Line], top: float, bottom: float) -> str:
    """The nearest "图 N …" line below an image (else above), within 80 pt."""

    def distance(ln: Line) -> float:
        return ln.top - bottom if ln.top >= bottom - 2 else (top - ln.bottom) * 1.5 if ln.bottom <= top + 2 else 0.0

    near = [ln for ln in lines if FIGURE_CAPTION_RE.match(ln.text) and 0 <= distance(ln) <= 80]
    return drop_cjk_spaces(min(near, key=distance).text) if near else ""


def is_garbled(text: str) -> bool:
    """At least 30 % replacement, private-use, control or unassigned characters or ``(cid:123)`` glyph codes."""
    cids = re.findall(r"\(cid:\d+\)", text)
    text = re.sub(r"\(cid:\d+\)", "", text)
    chars = [ch for ch in text if not ch.isspace()]
    total = len(chars) + len(cids)
    if total < 5:
        return False
    bad = len(cids) + sum(1 for ch in chars if ch == "\ufffd" or unicodedata.category(ch) in ("Co", "Cn", "Cc", "Cs"))
    return bad * 10 >= total * 3


def visible_chars(text: str) -> int:
    return sum(1 for ch in text if not ch.isspace())


# Front matter (a cover, declaration pages) must not shape the heading tree: its big type would take the top levels
# and every chapter would nest under it in every citation.
COVER_MAX_CHARS = 250  # a first page with less text than this, in type larger than the body's, is a cover
DECLARATION_RE = re.compile(
    r"原创性声明|独创性声明|版权声明|授权(?:使用)?(?:的)?声明|使用授权|学位论文.{0,12}声明|"
    r"declaration of (?:originality|authorship)|statement of originality|copyright (?:statement|declaration)",
    re.IGNORECASE,
)
MAX_FRONT_SHARE = 3  # front matter lies within the first third of the pages


def front_pages(pages: Sequence[Sequence[Line]], body_size: float) -> frozenset[int]:
    """The 0-based pages of front matter: a cover (first page only), then declaration pages."""
    limit = max(1, len(pages) // MAX_FRONT_SHARE)
    out: set[int] = set()
    for i, lines in enumerate(pages[:limit]):
        text = "".join(ln.text for ln in lines).replace(" ", "")
        big = any(ln.size > body_size * 1.3 and not ln.mono for ln in lines)
        cover = i == 0 and 0 < sum(visible_chars(ln.text) for ln in lines) < COVER_MAX_CHARS and big
        if not (cover or DECLARATION_RE.search(text)):
            break
        out.add(i)
    return frozenset(out)
