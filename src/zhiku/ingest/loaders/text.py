"""Plain-text files (``.txt``, ``.text``): the text as written, titled by the file name."""

from __future__ import annotations

from pathlib import Path

from zhiku.ingest.loaders.encoding import read_text_file
from zhiku.settings import LoaderSettings
from zhiku.types import SourceDoc


class TextLoader:
    """Loads plain text. HTML content in a ``.txt`` file is loaded as text, unchanged."""

    doc_type: str = "text"
    suffixes: tuple[str, ...] = (".txt", ".text")

    def __init__(self, settings: LoaderSettings | None = None) -> None:
        self.settings = settings

    def load(self, path: Path, source: str) -> SourceDoc:
        text, encoding = read_text_file(path)
        return SourceDoc(
            source=source, doc_type=self.doc_type, title=Path(path).stem, text=text, pages=(), encoding=encoding
        )
