"""Markdown files (``.md``, ``.markdown``): the text as written, titled by its first ``# `` heading."""

from __future__ import annotations

from pathlib import Path

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


class MarkdownLoader:
    """Loads Markdown. Decoding as in :func:`~zhiku.ingest.loaders.encoding.read_text_file`; nothing else changes."""

    doc_type: str = "markdown"
    suffixes: tuple[str, ...] = (".md", ".markdown")

    def __init__(self, settings: LoaderSettings | None = None) -> None:
        self.settings = settings

    def load(self, path: Path, source: str) -> SourceDoc:
        text, encoding = read_text_file(path)
        title = markdown_title(text) or Path(path).stem
        return SourceDoc(source=source, doc_type=self.doc_type, title=title, text=text, pages=(), encoding=encoding)
