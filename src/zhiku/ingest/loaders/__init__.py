"""File loaders by suffix. A new format: a class satisfying :class:`Loader` in ``LOADER_CLASSES``, or a
``zhiku.loaders`` entry point naming one."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from zhiku.errors import UnsupportedFormat
from zhiku.ingest.loaders.docx import DocxLoader
from zhiku.ingest.loaders.epub import EpubLoader
from zhiku.ingest.loaders.html import HtmlLoader
from zhiku.ingest.loaders.images import ImageLoader
from zhiku.ingest.loaders.legacy import LegacyWordLoader
from zhiku.ingest.loaders.pdf import PdfLoader
from zhiku.ingest.loaders.sheets import SheetLoader
from zhiku.ingest.loaders.slides import SlidesLoader
from zhiku.ingest.loaders.text import MarkdownLoader, TextLoader
from zhiku.settings import LoaderSettings
from zhiku.types import SourceDoc

if TYPE_CHECKING:
    from zhiku.plugins import PluginInfo


@runtime_checkable
class Loader(Protocol):
    doc_type: str
    suffixes: tuple[str, ...]  # lower case, with the dot: (".md", ".markdown")

    def load(self, path: Path, source: str) -> SourceDoc: ...  # LoaderError with a one-line reason


# in order of precedence for a shared suffix
LOADER_CLASSES: tuple[type[Loader], ...] = (
    MarkdownLoader,
    TextLoader,
    PdfLoader,
    DocxLoader,
    HtmlLoader,
    EpubLoader,
    SheetLoader,
    SlidesLoader,
    ImageLoader,
    LegacyWordLoader,
)


def default_loaders(settings: LoaderSettings | None = None) -> tuple[Loader, ...]:
    """Every built-in loader, then the ``zhiku.loaders`` plugins' (a built-in loader keeps a suffix both claim)."""
    builtin = tuple(cls(settings) for cls in LOADER_CLASSES)  # type: ignore[call-arg]
    return builtin + plugin_loaders(settings)


def plugin_loaders(settings: LoaderSettings | None = None) -> tuple[Loader, ...]:
    """The ``zhiku.loaders`` plugins' loaders; one that cannot be built or is not a Loader is reported and skipped."""
    from zhiku.plugins import load, report_problem

    out: list[tuple[PluginInfo, Loader]] = []
    for plugin in load("zhiku.loaders"):
        try:
            loader = plugin.obj(settings)
        except Exception as e:
            report_problem(plugin.info, f"its loader could not be built: {type(e).__name__}: {e}")
            continue
        if not (isinstance(loader, Loader) and loader.suffixes):
            report_problem(plugin.info, "not a Loader (needs doc_type, suffixes and load(path, source))")
        elif undotted := [s for s in loader.suffixes if not (isinstance(s, str) and s.startswith(".") and len(s) > 1)]:
            fix = ", ".join(repr("." + str(s).lstrip(".")) for s in undotted)
            report_problem(plugin.info, f"suffixes {undotted!r} match no file name: write them with the dot ({fix})")
        elif compound := [s for s in loader.suffixes if Path("x" + s).suffix != s]:  # ".tar.gz": files end in ".gz"
            fix = ", ".join(repr(Path("x" + s).suffix) for s in compound)
            report_problem(
                plugin.info,
                f"suffixes {compound!r} match no file name: a file's suffix is its last dot and what follows "
                f"(declare {fix} and check the rest of the name in load())",
            )
        else:
            out.append((plugin.info, loader))
    return _one_plugin_per_suffix(out)


def _one_plugin_per_suffix(built: list[tuple[PluginInfo, Loader]]) -> tuple[Loader, ...]:
    """Two plugins claiming one suffix are both refused, each naming the other: taking one would be a silent guess."""
    from zhiku.plugins import report_problem

    out: list[Loader] = []
    for info, loader in built:
        mine = {s.lower() for s in loader.suffixes}
        others = {
            f"the loader {o.name!r} of {o.distribution} ({s})"
            for o, rival in built
            if o is not info
            for s in mine & {x.lower() for x in rival.suffixes}
        }
        if others:
            report_problem(info, f"{', '.join(sorted(others))} reads the same files: uninstall one of the packages")
        else:
            out.append(loader)
    return tuple(out)


def supported_suffixes(loaders: Sequence[Loader] | None = None) -> tuple[str, ...]:
    loaders = default_loaders() if loaders is None else loaders
    return tuple(dict.fromkeys(suffix.lower() for loader in loaders for suffix in loader.suffixes))


def loader_for(path: Path, loaders: Sequence[Loader] | None = None) -> Loader:
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
    return loader_for(path, loaders).load(Path(path), source)
