"""Plain-text and Markdown files; Markdown less its YAML front matter and HTML comments."""

from __future__ import annotations

import re
from bisect import bisect_right
from contextlib import suppress
from pathlib import Path

import yaml

from zhiku.errors import LoaderError
from zhiku.ingest.chunking import iter_headings, outside_fences
from zhiku.ingest.loaders.encoding import read_text_file
from zhiku.ingest.loaders.markup import Configured
from zhiku.types import SourceDoc


def markdown_title(text: str) -> str | None:
    return next((h.title for h in iter_headings(text) if h.level == 1 and h.title), None)


# YAML front matter (Jekyll, Hugo, Obsidian): ``---``, YAML, then ``---`` or ``...``, within FRONT_MAX characters
_FRONT = re.compile(r"\A\ufeff?---[ \t]*\r?\n(.*?)^(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL | re.MULTILINE)
FRONT_MAX = 10_000


def front_matter(text: str) -> tuple[dict[str, object], str]:
    """The front matter when it is a mapping (``title: 部署指南``); a file opening with a ``---`` rule keeps it."""
    found = _FRONT.match(text[:FRONT_MAX])
    with suppress(yaml.YAMLError):
        if found is not None and isinstance(fields := yaml.safe_load(found.group(1)), dict) and fields:
            return {str(k): v for k, v in fields.items()}, text[found.end() :]
    return {}, text


_OPENS = re.compile(r"`+|<!--")  # an inline code span's backticks or a comment's start, whichever comes first
_TICKS = re.compile(r"`+")
_BLANK_LINE = re.compile(r"\n[ \t]*\r?\n")  # a code span never runs past its paragraph


def strip_comments(text: str) -> str:
    """Closed HTML comments outside code and code spans, hidden by a rendered page, are neither indexed nor quoted; a
    ``<!--`` never closed stays (a stray one must not cost the rest of the file)."""
    if "<!--" not in text:
        return text
    out, pos = [], 0
    for start, end in outside_fences(text):
        out += [text[pos:start], _uncommented(text[start:end])]
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _uncommented(text: str) -> str:
    """One pass: the first ``<!--`` never closed ends it (no later one can close), so stray ones cost linear time."""
    if "<!--" not in text:
        return text
    runs: dict[int, list[int]] = {}  # backtick run length -> where the runs of that length start
    for run in _TICKS.finditer(text):
        runs.setdefault(len(run.group()), []).append(run.start())
    blank = [b.start() for b in _BLANK_LINE.finditer(text)]
    out, pos, i = [], 0, 0
    while (m := _OPENS.search(text, i)) is not None:
        if m.group()[0] == "`":  # a code span ends at the next run of as many backticks in its paragraph, if any
            same = runs[len(m.group())]
            after, n = bisect_right(same, m.start()), bisect_right(blank, m.start())
            limit = blank[n] if n < len(blank) else len(text)
            i = same[after] + len(m.group()) if after < len(same) and same[after] < limit else m.end()
            continue
        close = text.find("-->", m.end())
        if close == -1:
            break
        out.append(text[pos : m.start()])
        pos = i = close + 3
    out.append(text[pos:])
    return "".join(out)


class TextLoader(Configured):
    """HTML content in a ``.txt`` file is loaded as text, unchanged."""

    doc_type: str = "text"
    suffixes: tuple[str, ...] = (".txt", ".text")

    def load(self, path: Path, source: str) -> SourceDoc:
        text, encoding = read_text_file(path)
        return SourceDoc(source, self.doc_type, Path(path).stem, text, (), encoding)


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
        named = str(named).strip() if isinstance(named, (str, int, float)) else ""
        title = named or markdown_title(text) or Path(path).stem
        tags = fields.get("tags")
        tags = tags.replace("，", ",").split(",") if isinstance(tags, str) else tags if isinstance(tags, list) else []
        tags = tuple(dict.fromkeys(t for t in (str(x).strip().lstrip("#") for x in tags if x is not None) if t))
        return SourceDoc(source, self.doc_type, title, text, (), encoding, tags=tags)
