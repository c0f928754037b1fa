"""Plain-text and Markdown files; Markdown less its YAML front matter and HTML comments."""

from __future__ import annotations

import re
from bisect import bisect_right
from pathlib import Path

import yaml

from zhiku.errors import LoaderError
from zhiku.ingest.chunking import iter_headings, outside_fences
from zhiku.ingest.loaders.encoding import read_text_file
from zhiku.settings import LoaderSettings
from zhiku.types import SourceDoc


def markdown_title(text: str) -> str | None:
    for heading in iter_headings(text):
        if heading.level == 1 and heading.title:
            return heading.title
    return None


# YAML front matter (Jekyll, Hugo, Obsidian): ``---``, YAML, then ``---`` or ``...``, within FRONT_MAX characters
_FRONT = re.compile(r"\A\ufeff?---[ \t]*\r?\n(.*?)^(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL | re.MULTILINE)
FRONT_MAX = 10_000


def front_matter(text: str) -> tuple[dict[str, object], str]:
    """``(fields, text without them)``: the YAML front matter a Markdown file opens with, when it is a mapping
    (``title: 部署指南``); otherwise ``({}, text)`` unchanged (a file that opens with a ``---`` rule keeps it)."""
    found = _FRONT.match(text[:FRONT_MAX])
    if found is None:
        return {}, text
    try:
        fields = yaml.safe_load(found.group(1))
    except yaml.YAMLError:
        return {}, text
    if not isinstance(fields, dict) or not fields:
        return {}, text
    return {str(k): v for k, v in fields.items()}, text[found.end() :]


_OPENS = re.compile(r"`+|<!--")  # an inline code span's backticks or a comment's start, whichever comes first
_TICKS = re.compile(r"`+")
_BLANK_LINE = re.compile(r"\n[ \t]*\r?\n")  # a code span never runs past its paragraph


def strip_comments(text: str) -> str:
    """``text`` without its HTML comments outside code fences: a rendered page hides them (notes to the author,
    markers such as ``<!-- INFO END -->``), so they are neither indexed nor quoted. Only closed ones: CommonMark
    would hide everything after a ``<!--`` never closed, and a stray one must not cost the rest of the file. A
    ``<!--`` inside inline code (`` `<!-- more -->` ``) is code, shown as written."""
    if "<!--" not in text:
        return text
    out, pos = [], 0
    for start, end in outside_fences(text):
        out += [text[pos:start], _uncommented(text[start:end])]
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _uncommented(text: str) -> str:
    """``text`` (no code fence in it) less its closed comments, in one pass: the first ``<!--`` never closed ends
    it (no later one can be closed either), so a file of stray ``<!--`` costs linear time, not quadratic."""
    if "<!--" not in text:
        return text
    spans = _CodeSpans(text)
    out, pos, i = [], 0, 0
    while (m := _OPENS.search(text, i)) is not None:
        if m.group()[0] == "`":
            i = spans.end(m.start(), m.end())
            continue
        close = text.find("-->", m.end())
        if close == -1:
            break
        out.append(text[pos : m.start()])
        pos = i = close + 3
    out.append(text[pos:])
    return "".join(out)


class _CodeSpans:
    """Where inline code spans end: a run of backticks closes at the next run of as many in its paragraph."""

    def __init__(self, text: str) -> None:
        self.runs: dict[int, list[int]] = {}  # run length -> where the runs of that length start
        for m in _TICKS.finditer(text):
            self.runs.setdefault(m.end() - m.start(), []).append(m.start())
        self.blank = [m.start() for m in _BLANK_LINE.finditer(text)]
        self.size = len(text)

    def end(self, start: int, end: int) -> int:
        """After the code span that the run ``start:end`` opens; ``end`` when no run closes it (literal backticks)."""
        runs, n = self.runs[end - start], bisect_right(self.blank, start)
        after = bisect_right(runs, start)
        limit = self.blank[n] if n < len(self.blank) else self.size
        return runs[after] + end - start if after < len(runs) and runs[after] < limit else end


class TextLoader:
    """HTML content in a ``.txt`` file is loaded as text, unchanged."""

    doc_type: str = "text"
    suffixes: tuple[str, ...] = (".txt", ".text")

    def __init__(self, settings: LoaderSettings | None = None) -> None:
        self.settings = settings

    def load(self, path: Path, source: str) -> SourceDoc:
        text, encoding = read_text_file(path)
        return SourceDoc(
            source=source, doc_type=self.doc_type, title=Path(path).stem, text=text, pages=(), encoding=encoding
        )


class MarkdownLoader(TextLoader):
    doc_type: str = "markdown"
    suffixes: tuple[str, ...] = (".md", ".markdown")

    def load(self, path: Path, source: str) -> SourceDoc:
        text, encoding = read_text_file(path)
        fields, text = front_matter(text)
        text = strip_comments(text)
        if not text.strip():
            raise LoaderError(f"no text in file (only HTML comments, front matter and whitespace): {path}")
        named = fields.get("title")
        title = (str(named).strip() if isinstance(named, (str, int, float)) else "") or markdown_title(text)
        title = title or Path(path).stem
        return SourceDoc(source=source, doc_type=self.doc_type, title=title, text=text, pages=(), encoding=encoding)
