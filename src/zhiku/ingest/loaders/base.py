"""The ``Loader`` protocol: one module per file format."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from zhiku.types import SourceDoc


@runtime_checkable
class Loader(Protocol):
    doc_type: str
    suffixes: tuple[str, ...]  # lower case, with the dot: (".md", ".markdown")

    def load(self, path: Path, source: str) -> SourceDoc:
        """Read ``path`` into a SourceDoc whose ``source`` is ``source``.

        Raises ``LoaderError`` with a one-line reason (e.g. "not valid UTF-8/GB18030 text", "empty file").
        """
        ...
