"""Markdown files (``.md``, ``.markdown``): the text as written less its HTML comments, titled by its first ``# ``
heading."""

from __future__ import annotations

import re
from pathlib import Path

from zhiku.errors import LoaderError
from zhiku.ingest.chunk_sections import outside_fences
from zhiku.ingest.chunking import iter_headings
from zhiku.ingest.loaders.encoding import read_text_file
from zhiku.settings import LoaderSettings
from zhiku.types import SourceDoc


def markdown_title(text: str) -> str | None:
    """The text of the first level-1 ATX heading (``# 标题``) outside code fences, or None."""
    for heading in iter_headings(text):
        if heading.level == 1 and heading.title:
            return heading.title
    return None


_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)


def strip_comments(text: str) -> str:
    """``text`` without its HTML comments outside code fences: a rendered page hides them (notes to the author,
    markers such as ``<!-- INFO END -->``), so they are neither indexed nor quoted. Only closed ones: CommonMark
    would hide everything after a ``<!--`` never closed, and a stray one must not cost the rest of the file."""
    if "<!--" not in text:
        return text
    out, pos = [], 0
    for start, end in outside_fences(text):
        out += [text[pos:start], _COMMENT.sub("", text[start:end])]
        pos = end
    out.append(text[pos:])
    return "".join(out)


class MarkdownLoader:
    """Loads Markdown. Decoding as in :func:`~zhiku.ingest.loaders.encoding.read_text_file`; HTML comments outside
    code fences removed (``strip_comments``); nothing else changes."""

    doc_type: str = "markdown"
    suffixes: tuple[str, ...] = (".md", ".markdown")

    def __init__(self, settings: LoaderSettings | None = None) -> None:
        self.settings = settings

    def load(self, path: Path, source: str) -> SourceDoc:
        text, encoding = read_text_file(path)
        text = strip_comments(text)
        if not text.strip():
            raise LoaderError(f"no text in file (only HTML comments and whitespace): {path}")
        title = markdown_title(text) or Path(path).stem
        return SourceDoc(source=source, doc_type=self.doc_type, title=title, text=text, pages=(), encoding=encoding)
