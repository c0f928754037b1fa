"""File loaders, one module per format, chosen by file-name suffix.

Adding a format: write ``loaders/<format>.py`` with a class that satisfies :class:`Loader` (import heavy
dependencies inside ``load``, raising ``MissingDependency`` with the ``pip install`` line), then add the class
to ``LOADER_CLASSES``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from zhiku.errors import UnsupportedFormat
from zhiku.loaders.base import Loader
from zhiku.loaders.encoding import decode_text, sniff
from zhiku.loaders.markdown import MarkdownLoader
from zhiku.loaders.text import TextLoader
from zhiku.types import SourceDoc

__all__ = [
    "LOADER_CLASSES",
    "Loader",
    "MarkdownLoader",
    "TextLoader",
    "decode_text",
    "default_loaders",
    "load_document",
    "loader_for",
    "sniff",
    "supported_suffixes",
]

# The registry: the loaders zhiku uses by default, in order of precedence for a shared suffix.
LOADER_CLASSES: tuple[type[Loader], ...] = (MarkdownLoader, TextLoader)


def default_loaders() -> tuple[Loader, ...]:
    """A fresh instance of every registered loader."""
    return tuple(cls() for cls in LOADER_CLASSES)


def supported_suffixes(loaders: Sequence[Loader] | None = None) -> tuple[str, ...]:
    """The file-name suffixes ``loaders`` (default: :func:`default_loaders`) can read, lower case, with the dot."""
    out: dict[str, None] = {}
    for loader in default_loaders() if loaders is None else loaders:
        for suffix in loader.suffixes:
            out.setdefault(suffix.lower(), None)
    return tuple(out)


def loader_for(path: Path, loaders: Sequence[Loader] | None = None) -> Loader:
    """The loader for ``path`` by its lower-cased suffix; the first loader claiming a suffix wins.

    Raises ``UnsupportedFormat`` naming the suffix, the file and the supported suffixes.
    """
    loaders = default_loaders() if loaders is None else loaders
    path = Path(path)
    suffix = path.suffix.lower()
    for loader in loaders:
        if suffix and suffix in (s.lower() for s in loader.suffixes):
            return loader
    what = f"'{suffix}'" if suffix else "(no suffix)"
    supported = ", ".join(supported_suffixes(loaders))
    raise UnsupportedFormat(f"unsupported file type {what} for {path.name} (supported: {supported})")


def load_document(path: Path, source: str, loaders: Sequence[Loader] | None = None) -> SourceDoc:
    """Load ``path`` with the loader for its suffix; ``source`` is recorded as ``SourceDoc.source``."""
    return loader_for(path, loaders).load(Path(path), source)
