"""Markdown into chunks: sections at headings; whole units (an article ``第X条``, a FAQ pair, a table with its
caption, a paragraph) packed up to ``size`` characters; a longer unit cut at sentence, clause or row boundaries."""

from __future__ import annotations

import hashlib
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise

from zhiku.reconstruct import SECTION_SEPARATOR
from zhiku.settings import ChunkingSettings
from zhiku.text import ARTICLE_RE, NUMERALS
from zhiku.types import Chunk, ImageRef, PageSpan, SourceDoc, SourceImage

CHUNKER_VERSION = 3  # 3: whole structural units (articles, FAQ pairs, parts), exact article labels
OVERLAP = 50  # characters shared by consecutive pieces of a unit split for length: a cut sentence is whole in one
MIN_CHARS = 50  # a shorter piece is no passage worth citing alone: it joins its neighbour


@dataclass(frozen=True)
class ChunkShape:
    size: int = 200
    overlap: int = OVERLAP
    min_chars: int = MIN_CHARS


Span = tuple[int, int]
_HEADING_RE = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*")
_CLOSING_HASHES_RE = re.compile(r"(?:^|[ \t]+)#+[ \t]*$")
_FENCE_OPEN_RE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_FENCE_CLOSE_RE = re.compile(r" {0,3}(`{3,}|~{3,})[ \t]*")


@dataclass(frozen=True)
class Heading:
    level: int
    title: str
    start: int
    end: int


@dataclass(frozen=True)
class Section:
    path: str
    paragraphs: tuple[tuple[int, int], ...]


def _scan(text: str, markdown: bool) -> Iterator[tuple[int, int, Heading | None, bool]]:
    fence: tuple[str, int] | None = None
    pos, n = 0, len(text)
    while pos <= n:
        nl = n if (nl := text.find("\n", pos)) == -1 else nl
        line = text[pos:nl]
        head = line.lstrip(" ")[:1]
        if fence is not None:
            m = _FENCE_CLOSE_RE.fullmatch(line) if head == fence[0] else None
            if m is not None and len(m.group(1)) >= fence[1] and m.group(1)[0] == fence[0]:
                fence = None
            yield pos, nl, None, True
        elif markdown and head == "#" and (m := _HEADING_RE.fullmatch(line)) is not None:
            title = _CLOSING_HASHES_RE.sub("", m.group(2) or "").strip()
            yield pos, nl, Heading(len(m.group(1)), title, pos, nl), False
        else:
            m = _FENCE_OPEN_RE.fullmatch(line) if markdown and head in ("`", "~") else None
            if m is not None and not (m.group(1)[0] == "`" and "`" in m.group(2)):
                fence = (m.group(1)[0], len(m.group(1)))
            yield pos, nl, None, fence is not None
        pos = nl + 1


def outside_fences(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for start, end, _, in_fence in _scan(text, markdown=True):
        if in_fence:
            continue
        if spans and spans[-1][1] == start:
            spans[-1] = (spans[-1][0], min(end + 1, len(text)))
        else:
            spans.append((start, min(end + 1, len(text))))
    return spans


def iter_headings(text: str) -> Iterator[Heading]:
    for _, _, heading, _ in _scan(text, markdown=True):
        if heading is not None:
            yield heading


def split_sections(text: str, *, markdown: bool = True) -> list[Section]:
    sections: list[Section] = []
    stack: list[tuple[int, str]] = []
    path = ""
    paragraphs: list[tuple[int, int]] = []
    open_ = False  # the last paragraph goes on at the next line with text (a blank line in a fence keeps it open)
    for start, end, heading, in_fence in _scan(text, markdown):
        line = text[start:end]
        if heading is not None:
            if paragraphs:
                sections.append(Section(path, tuple(paragraphs)))
            paragraphs, open_ = [], False
            while stack and stack[-1][0] >= heading.level:
                stack.pop()
            stack.append((heading.level, heading.title))
            path = SECTION_SEPARATOR.join(title for _, title in stack if title)
        elif not line.strip():
            open_ = open_ and in_fence
        elif open_:
            paragraphs[-1] = (paragraphs[-1][0], start + len(line.rstrip()))
        else:
            paragraphs.append((start + len(line) - len(line.lstrip()), start + len(line.rstrip())))
            open_ = True
    if paragraphs:
        sections.append(Section(path, tuple(paragraphs)))
    return sections


_CLOSERS = "”’」』）)\\]》】〉\"'"
_SENTENCE_END_RE = re.compile(rf"(?:[。！？；]+|…+|[.!?]+(?=[{_CLOSERS}]*(?:\s|\Z)))[{_CLOSERS}]*")
_LINE_END_RE = re.compile(r"[^\S\n]*\n")
_CLAUSE_END_RE = re.compile(r"[，、：]|[,;:](?=\s)")
_SPACE_RE = re.compile(r"\s")


def _last_in(positions: Sequence[int], lo: int, hi: int) -> int | None:
    i = bisect_right(positions, hi)
    return positions[i - 1] if i and positions[i - 1] >= lo else None


def _first_in(positions: Sequence[int], lo: int, hi: int) -> int | None:
    i = bisect_left(positions, lo)
    return positions[i] if i < len(positions) and positions[i] < hi else None


def _rstrip_to(text: str, start: int, end: int) -> int:
    return start + len(text[start:end].rstrip()) if end > start else end


def _lstrip_from(text: str, start: int, end: int) -> int:
    while start < end and text[start].isspace():  # not a slice: called on the rest of a long unit
        start += 1
    return start


def _mid_word(text: str, at: int) -> bool:
    """Whether ``at`` falls inside a Latin word or identifier: a piece must not open on a broken word."""
    return at > 0 and all(c.isascii() and (c.isalnum() or c in "._") for c in text[at - 1 : at + 1])


def split_long(text: str, start: int, end: int, *, size: int, overlap: int, min_chars: int) -> list[tuple[int, int]]:
    """Pieces of ``text[start:end]`` cut at a sentence, else clause, else space, sharing up to ``overlap``."""
    sentences = sorted(
        {m.end() for m in _SENTENCE_END_RE.finditer(text, start, end)}
        | {m.start() for m in _LINE_END_RE.finditer(text, start, end)}
    )
    clauses = [m.end() for m in _CLAUSE_END_RE.finditer(text, start, end)]
    pieces: list[tuple[int, int]] = []
    pos = start
    prev_end = -1
    while True:
        if end - pos <= size:
            if pieces and end - prev_end < min_chars:
                pieces[-1] = (pieces[-1][0], end)
            else:
                pieces.append((pos, end))
            return pieces
        limit = pos + size
        floor = max(prev_end, pos)
        lo = max(pos + size // 4, floor + 1)
        cut = (  # positions past floor >= 0: never 0
            _last_in(sentences, lo, limit)
            or _last_in(clauses, lo, limit)
            or max(_last_in(sentences, floor + 1, limit) or 0, _last_in(clauses, floor + 1, limit) or 0)
        )
        if not cut:
            space = max(text.rfind(" ", floor + 1, limit), text.rfind("\t", floor + 1, limit))
            cut = space if space > floor else limit
        cut_end = _rstrip_to(text, pos, cut)
        if cut_end <= floor:  # only whitespace past the previous piece: take through the next character
            cut = _lstrip_from(text, limit, end) + 1
            cut_end = cut
        pieces.append((pos, cut_end))
        prev_end = cut_end
        nxt = cut
        if overlap > 0:
            window = cut - overlap
            b = _first_in(sentences, window, cut)
            if b is None:
                b = _first_in(clauses, window, cut)
            if b is None:
                found = _SPACE_RE.search(text, window, cut)
                # a cut inside a word (no boundary in the piece) starts the next piece mid-word anyway: keep the overlap
                clean = _mid_word(text, window) and not _mid_word(text, cut)
                b = found.start() if found is not None else cut if clean else window
            if b > pos:
                nxt = b
        pos = _lstrip_from(text, nxt, end)


def _pack(text: str, paragraphs: Sequence[Span], settings: ChunkShape) -> list[tuple[int, int, str]]:
    """Units packed up to ``size``; a longer unit stands alone, its parts packed and a long part cut."""
    size = settings.size
    spans: list[Span] = []
    prefixes: dict[int, str] = {}
    open_ = False  # the last span takes the next piece that fits in it
    for unit in group_units(text, paragraphs):
        start, end = unit.parts[0][0], unit.parts[-1][1]
        whole = end - start <= size
        open_ = open_ and whole  # a unit over size stands alone
        for ps, pe, table in [(start, end, None)] if whole else unit.parts:
            if pe - ps > size and table is not None:
                pieces = split_table(text, ps, pe, table, size)
                prefixes.update((s, p) for s, _, p in pieces if p)
                spans += [(s, e) for s, e, _ in pieces]
            elif pe - ps > size:
                spans += split_long(text, ps, pe, size=size, overlap=settings.overlap, min_chars=settings.min_chars)
            elif open_ and pe - spans[-1][0] <= size:
                spans[-1] = (spans[-1][0], pe)
            else:
                spans.append((ps, pe))
            open_ = True
        open_ = open_ and whole
    return [(s, e, prefixes.get(s, "")) for s, e in _merge_tiny(spans, size, settings.min_chars, set(prefixes))]


def _merge_tiny(spans: list[Span], size: int, min_chars: int, keep_start: set[int]) -> list[Span]:
    """Chunks under ``min_chars`` joined to a neighbour; a start in ``keep_start`` (a table's header) stays."""

    def fits(a: Span, b: Span) -> bool:
        return (a[1] - a[0]) + (b[1] - max(b[0], a[1])) <= size + min_chars

    out: list[Span] = []
    for span in spans:
        if out and span[1] - span[0] < min_chars and fits(out[-1], span):
            out[-1] = (out[-1][0], span[1])
        else:
            out.append(span)
    if len(out) >= 2 and out[0][1] - out[0][0] < min_chars and fits(out[0], out[1]) and out[1][0] not in keep_start:
        out[:2] = [(out[0][0], out[1][1])]
    return out


def doc_id_for(collection: str, source: str) -> str:
    return hashlib.sha256(f"{collection}\x00{source}".encode()).hexdigest()[:16]


def chunk_id_for(collection: str, source: str, section: str, text: str, occurrence: int = 0) -> str:
    """``occurrence`` > 0 tells apart the repeats of an identical text in one section of a document."""
    payload = f"{collection}\x00{source}\x00{section}\x00{text}" + (f"\x00{occurrence}" if occurrence else "")
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:24]


def page_of(pages: Sequence[PageSpan], offset: int) -> int | None:
    """The page holding character ``offset`` (a gap belongs to the page before); None without pages."""
    return _page(pages, [p.start for p in pages], offset, offset + 1)


def chunking_identity(settings: ChunkingSettings) -> str:
    """What changes chunk boundaries; an index built otherwise is stale."""
    return (
        f"zhiku-chunker-{CHUNKER_VERSION};size={settings.size_chars};overlap={OVERLAP};min_chars={MIN_CHARS};context=1"
    )


def _page(pages: Sequence[PageSpan], page_starts: Sequence[int], start: int, end: int) -> int | None:
    if not pages:
        return None
    first = max(bisect_right(page_starts, start) - 1, 0)
    best, best_n = pages[first].number, -1
    for i in range(first, len(pages)):
        if i > first and pages[i].start >= end:
            break
        lo = start if i == first else max(start, pages[i].start)
        hi = end if i + 1 == len(pages) else min(end, pages[i + 1].start)
        if hi - lo > best_n:
            best, best_n = pages[i].number, hi - lo
    return best


def chunk_document(
    doc: SourceDoc, *, collection: str, doc_id: str, settings: ChunkingSettings | ChunkShape
) -> list[Chunk]:
    shape = ChunkShape(settings.size_chars) if isinstance(settings, ChunkingSettings) else settings
    text = doc.text
    found = [(m.start(1), m.group(1)) for m in ARTICLE_RE.finditer(text)]
    at, labels = [p for p, _ in found], [label for _, label in found]
    pages = sorted(doc.pages, key=lambda p: p.start)
    page_starts = [p.start for p in pages]
    seen: dict[str, int] = {}
    chunks: list[Chunk] = []
    for sec in split_sections(text, markdown=doc.doc_type != "text"):
        lo, hi = bisect_left(at, sec.paragraphs[0][0]), bisect_left(at, sec.paragraphs[-1][1])  # its articles
        for s, e, prefix in _pack(text, sec.paragraphs, shape):
            i, j = bisect_right(at, s, lo, hi), bisect_left(at, e, lo, hi)  # the articles it continues or holds
            label = article_label(labels[max(i - 1, lo) : j])
            section = SECTION_SEPARATOR.join(x for x in (sec.path, label) if x)
            body = f"{prefix}\n{text[s:e]}" if prefix else text[s:e]
            cid = chunk_id_for(collection, doc.source, section, body)
            seen[cid] = n = seen.get(cid, 0) + 1
            if n > 1:
                cid = chunk_id_for(collection, doc.source, section, body, occurrence=n - 1)
            page = _page(pages, page_starts, s, e)
            chunks.append(
                Chunk(cid, doc_id, collection, doc.source, doc.doc_type, section, page, s, e, len(chunks), body)
            )
    return _link_images(chunks, sorted(doc.images, key=lambda im: im.offset))


def _link_images(chunks: list[Chunk], images: Sequence[SourceImage]) -> list[Chunk]:
    """Each image (sorted by offset) goes with the first chunk that ends after it, else the last."""
    if not images or not chunks:
        return chunks
    ends = [c.end for c in chunks]
    linked: dict[int, dict[str, ImageRef]] = {}
    for im in images:
        k = min(bisect_right(ends, im.offset), len(chunks) - 1)
        linked.setdefault(k, {}).setdefault(im.ref.image_id, im.ref)
    return [replace(c, images=tuple(linked[k].values())) if k in linked else c for k, c in enumerate(chunks)]


# Tables and units: what a chunk holds whole.
_TABLE_DELIM_RE = re.compile(r"[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*")
_TABLE_CAPTION_RE = re.compile(r"(?:续?表|Table|Tab\.)[ \t\u3000]*[\dA-Za-z一二三四五六七八九十]")


def table_start(text: str, start: int, end: int) -> int | None:
    """Where a Markdown table's header row (a ``|`` line before a ``|---|`` row) begins in ``text[start:end]``."""
    pos = start
    for line, below in pairwise(text[start:end].split("\n")):
        if line.lstrip().startswith("|") and "-" in below and _TABLE_DELIM_RE.fullmatch(below):
            return pos
        pos += len(line) + 1
    return None


def split_table(text: str, start: int, end: int, table: int, size: int) -> list[tuple[int, int, str]]:
    """A table unit as ``(start, end, prefix)`` pieces cut between rows, each later one prefixed by the header."""
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
            pieces.append((piece_start, _rstrip_to(text, piece_start, piece_end), "" if not pieces else prefix))
            piece_start, budget = pos, size - len(prefix) - 1
        piece_end = row_end
        pos = row_end + 1
    pieces.append((piece_start, _rstrip_to(text, piece_start, piece_end), "" if not pieces else prefix))
    return pieces


_QUESTION_RE = re.compile(r"[ \t\u3000]*(?:\*\*)?(?:问题?\s*\d*\s*[:：]|[Qq]\s*\d*\s*[:：.．])")
_PART_RE = re.compile(rf"[ \t\u3000]*[{NUMERALS}]+、")
_OPENS_GROUP = ("article", "faq", "part")


@dataclass(frozen=True)
class Unit:
    kind: str
    parts: tuple[tuple[int, int, int | None], ...]  # (start, end, where a table in it starts)


def _kind(text: str, start: int, table: int | None) -> str:
    for kind, pattern in (("article", ARTICLE_RE), ("faq", _QUESTION_RE), ("part", _PART_RE)):
        if pattern.match(text, start) is not None:
            return kind
    return "table" if table == start else "paragraph"


def group_units(text: str, paragraphs: Sequence[tuple[int, int]]) -> list[Unit]:
    """An article, FAQ pair or numbered part takes the paragraphs and tables after it; a one-line caption its table."""
    units: list[Unit] = []
    for ps, pe in paragraphs:
        table = table_start(text, ps, pe)
        cs, ce, ct = units[-1].parts[-1] if units else (0, 0, 0)
        if (
            table == ps
            and ct is None
            and ce - cs <= 120
            and _TABLE_CAPTION_RE.match(text, cs)
            and "\n" not in text[cs:ce]
        ):
            units[-1] = Unit(units[-1].kind, (*units[-1].parts[:-1], (cs, pe, table)))
            continue
        kind = _kind(text, ps, table)
        if kind in ("paragraph", "table") and units and units[-1].kind in _OPENS_GROUP:
            units[-1] = Unit(units[-1].kind, (*units[-1].parts, (ps, pe, table)))
        else:
            units.append(Unit(kind, ((ps, pe, table),)))
    return units


def article_label(labels: Sequence[str]) -> str:
    """``"第三条"``, ``"第三条、第四条"``; ``""`` for none."""
    return "、".join(dict.fromkeys(labels))
