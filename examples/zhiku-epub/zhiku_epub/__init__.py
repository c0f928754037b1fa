"""zhiku-epub: EPUB e-books for zhiku, as a plugin (the standard library and zhiku's public loader API only)."""

from __future__ import annotations

import posixpath
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path
from typing import Any

from zhiku import KnowledgeBase
from zhiku.errors import LoaderError
from zhiku.ingest.loaders.html import html_markdown
from zhiku.types import SourceDoc

__all__ = ["EpubLoader", "list_books"]

NS = {
    "c": "urn:oasis:names:tc:opendocument:xmlns:container",
    "opf": "http://www.idpf.org/2007/opf",
    "dc": "http://purl.org/dc/elements/1.1/",
}


class EpubLoader:
    """An EPUB's chapters, in reading (spine) order, as one Markdown document titled by its ``dc:title``."""

    doc_type = "epub"
    suffixes = (".epub",)

    def __init__(self, settings: Any = None) -> None:
        self.settings = settings

    def load(self, path: Path, source: str) -> SourceDoc:
        try:
            with zipfile.ZipFile(path) as z:
                rootfile = ET.fromstring(z.read("META-INF/container.xml")).find(".//c:rootfile", NS)
                opf_path = rootfile.get("full-path", "") if rootfile is not None else ""
                opf = ET.fromstring(z.read(opf_path))
                items = {i.get("id"): i.get("href", "") for i in opf.iterfind(".//opf:manifest/opf:item", NS)}
                base = posixpath.dirname(opf_path)
                spine = [items[ref.get("idref")] for ref in opf.iterfind(".//opf:spine/opf:itemref", NS)]
                chapters = [z.read(posixpath.join(base, href)).decode("utf-8") for href in spine]
                title = (opf.findtext(".//dc:title", default="", namespaces=NS) or "").strip()
        except (OSError, zipfile.BadZipFile, KeyError, ET.ParseError, UnicodeDecodeError) as e:
            raise LoaderError(f"not a readable EPUB: {path} ({type(e).__name__}: {e})") from None
        text = "\n\n".join(md for _, md in map(html_markdown, chapters) if md.strip())
        if not text.strip():
            raise LoaderError(f"no text in the EPUB's chapters: {path}")
        return SourceDoc(source=source, doc_type=self.doc_type, title=title or Path(path).stem, text=text)


def list_books(kb: KnowledgeBase) -> list[str]:
    """List the e-books (EPUB) in the knowledge base, as "title (source)".

    When to use: the user asks which books are available, before searching them with query_knowledge_hub.

    Example: {}
    """
    return [f"{d.title} ({d.source})" for d in kb.documents() if d.doc_type == "epub"]
