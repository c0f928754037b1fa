"""Sections and paragraphs of a document (rules 1 and 2 of :mod:`zhiku.ingest.chunking`): ATX headings outside
code fences open a section; blank lines outside fences cut paragraphs."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

SECTION_SEPARATOR = " > "

_HEADING_RE = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*")
_CLOSING_HASHES_RE = re.compile(r"(?:^|[ \t]+)#+[ \t]*$")
_FENCE_OPEN_RE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_FENCE_CLOSE_RE = re.compile(r" {0,3}(`{3,}|~{3,})[ \t]*")


@dataclass(frozen=True)
class Heading:
    """An ATX heading line ``text[start:end]`` (without its newline)."""

    level: int
    title: str
    start: int
    end: int


@dataclass(frozen=True)
class Section:
    """The body of one section: ``paragraphs`` are ``(start, end)`` spans, stripped, in order."""

    path: str
    paragraphs: tuple[tuple[int, int], ...]

    @property
    def start(self) -> int:
        return self.paragraphs[0][0]

    @property
    def end(self) -> int:
        return self.paragraphs[-1][1]


# --------------------------------------------------------------------------------------------- sections


def _parse_heading(line: str) -> tuple[int, str] | None:
    m = _HEADING_RE.fullmatch(line)
    if m is None:
        return None
    title = _CLOSING_HASHES_RE.sub("", m.group(2) or "").strip()
    return len(m.group(1)), title


def _scan(text: str, markdown: bool) -> Iterator[tuple[int, int, Heading | None, bool]]:
    """Yield ``(start, end, heading, in_fence)`` for every line of ``text`` (end excludes the newline)."""
    fence: tuple[str, int] | None = None
    pos = 0
    n = len(text)
    while pos <= n:
        nl = text.find("\n", pos)
        if nl == -1:
            nl = n
        line = text[pos:nl]
        head = line.lstrip(" ")[:1]
        if fence is not None:
            m = _FENCE_CLOSE_RE.fullmatch(line) if head == fence[0] else None
            if m is not None and len(m.group(1)) >= fence[1] and m.group(1)[0] == fence[0]:
                fence = None
            yield pos, nl, None, True
        elif markdown and head == "#" and (parsed := _parse_heading(line)) is not None:
            yield pos, nl, Heading(parsed[0], parsed[1], pos, nl), False
        else:
            if markdown and head in ("`", "~"):
                m = _FENCE_OPEN_RE.fullmatch(line)
                if m is not None and not (m.group(1)[0] == "`" and "`" in m.group(2)):
                    fence = (m.group(1)[0], len(m.group(1)))
                    yield pos, nl, None, True
                    pos = nl + 1
                    continue
            yield pos, nl, None, False
        pos = nl + 1


def outside_fences(text: str) -> list[tuple[int, int]]:
    """The spans of Markdown ``text`` outside code fences (whole lines, newlines included), in order."""
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
    """The ATX headings of Markdown ``text`` in order, skipping ``#`` lines inside code fences."""
    for _, _, heading, _ in _scan(text, markdown=True):
        if heading is not None:
            yield heading


def split_sections(text: str, *, markdown: bool = True) -> list[Section]:
    """Cut ``text`` into sections (by heading) and paragraphs (by blank line).

    Sections without body text are left out. With ``markdown=False`` there are no headings or fences.
    """
    sections: list[Section] = []
    stack: list[tuple[int, str]] = []
    path = ""
    paragraphs: list[tuple[int, int]] = []
    p_start = -1
    p_end = -1

    def close_paragraph() -> None:
        nonlocal p_start
        if p_start >= 0:
            paragraphs.append((p_start, p_end))
            p_start = -1

    for start, end, heading, in_fence in _scan(text, markdown):
        if heading is not None:
            close_paragraph()
            if paragraphs:
                sections.append(Section(path, tuple(paragraphs)))
                paragraphs = []
            while stack and stack[-1][0] >= heading.level:
                stack.pop()
            stack.append((heading.level, heading.title))
            path = SECTION_SEPARATOR.join(title for _, title in stack if title)
            continue
        line = text[start:end]
        stripped = line.strip()
        if not stripped:
            if not in_fence:
                close_paragraph()
            continue
        if p_start < 0:
            p_start = start + (len(line) - len(line.lstrip()))
        p_end = start + len(line.rstrip())
    close_paragraph()
    if paragraphs:
        sections.append(Section(path, tuple(paragraphs)))
    return sections
