"""EPUB e-books (standard library): the chapters in reading (spine) order through the HTML loader, each a section
titled as the book's table of contents names it."""

from __future__ import annotations

import posixpath
import re
import xml.etree.ElementTree as ET
import zipfile
from html import unescape
from pathlib import Path
from urllib.parse import unquote

from zhiku.errors import LoaderError
from zhiku.ingest.files import MIB
from zhiku.ingest.loaders.docx import check_zip
from zhiku.ingest.loaders.html import decode_html, html_markdown
from zhiku.ingest.loaders.markup import Configured
from zhiku.types import SourceDoc

_NS = {
    "c": "urn:oasis:names:tc:opendocument:xmlns:container",
    "opf": "http://www.idpf.org/2007/opf",
    "dc": "http://purl.org/dc/elements/1.1/",
    "ncx": "http://www.daisy.org/z3986/2005/ncx/",
    "enc": "http://www.w3.org/2001/04/xmlenc#",
}
_LINK_RE = re.compile(r"<a\b[^>]*?\bhref\s*=\s*[\"']([^\"'#]+)[^>]*>")  # matched at the last "<a" before a "</a>"
_TAG_RE = re.compile(r"<[^>]+>")


def _join(base: str, href: str) -> str:
    return posixpath.normpath(posixpath.join(posixpath.dirname(base), unquote(href)))


def _toc(z: zipfile.ZipFile, nav: str | None, ncx: str | None) -> dict[str, str]:
    """Chapter file -> its title in the table of contents (EPUB 3 nav, else EPUB 2 NCX); the first entry wins."""
    out: dict[str, str] = {}
    if nav:
        for piece in z.read(nav).decode("utf-8", "replace").split("</a>")[:-1]:  # linear on unclosed links
            if m := _LINK_RE.match(piece, max(piece.rfind("<a"), 0)):
                out.setdefault(_join(nav, m.group(1)), " ".join(unescape(_TAG_RE.sub("", piece[m.end() :])).split()))
    elif ncx:
        for point in ET.fromstring(z.read(ncx)).iterfind(".//ncx:navPoint", _NS):
            src = point.find("ncx:content", _NS)
            label = point.findtext("ncx:navLabel/ncx:text", "", _NS)
            if src is not None and src.get("src"):
                out.setdefault(_join(ncx, src.get("src", "").split("#")[0]), " ".join(label.split()))
    return {k: v for k, v in out.items() if v}


class EpubLoader(Configured):
    doc_type: str = "epub"
    suffixes: tuple[str, ...] = (".epub",)

    def load(self, path: Path, source: str) -> SourceDoc:
        path = Path(path)
        check_zip(path, "an EPUB e-book", int(self.settings.max_file_mb * MIB))
        try:
            with zipfile.ZipFile(path) as z:
                rootfile = ET.fromstring(z.read("META-INF/container.xml")).find(".//c:rootfile", _NS)
                opf_path = rootfile.get("full-path", "") if rootfile is not None else ""
                opf = ET.fromstring(z.read(opf_path))
                items = {i.get("id"): i for i in opf.iterfind(".//opf:manifest/opf:item", _NS)}
                href = {k: _join(opf_path, i.get("href", "")) for k, i in items.items()}
                spine = [href[r.get("idref")] for r in opf.iterfind(".//opf:spine/opf:itemref", _NS)]
                if "META-INF/encryption.xml" in z.namelist():
                    locked = ET.fromstring(z.read("META-INF/encryption.xml")).iterfind(".//enc:CipherReference", _NS)
                    if set(spine) & {unquote(c.get("URI", "")) for c in locked}:
                        raise LoaderError(f"the EPUB's chapters are encrypted (DRM): {path}")
                nav = next((href[k] for k, i in items.items() if "nav" in (i.get("properties") or "").split()), None)
                toc_id = next((s.get("toc") for s in opf.iterfind(".//opf:spine", _NS)), None)
                toc = _toc(z, nav, href.get(toc_id) if toc_id else None)
                chapters = [(name, decode_html(data, path)) for name in spine if (data := z.read(name))]
                book = (opf.findtext(".//dc:title", default="", namespaces=_NS) or "").strip()
        except (OSError, zipfile.BadZipFile, KeyError, ET.ParseError) as e:
            raise LoaderError(f"not a readable EPUB e-book: {path} ({type(e).__name__}: {e})") from None
        blocks = []
        for name, html in chapters:
            title, md = html_markdown(html)
            if md.strip() and not md.startswith("# "):  # the chapter's own top heading, else its name in the toc
                md = f"# {toc.get(name) or title or posixpath.splitext(posixpath.basename(name))[0]}\n\n{md}"
            if md.strip():
                blocks.append(md)
        if not blocks:
            raise LoaderError(f"no text in the EPUB's chapters: {path}")
        return SourceDoc(source, self.doc_type, book or path.stem, "\n\n".join(blocks), encoding="epub")
