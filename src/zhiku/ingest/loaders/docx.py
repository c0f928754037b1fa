"""Word documents (``.docx``) as Markdown with python-docx: ``pip install 'zhiku[docx]'``."""

from __future__ import annotations

import re
import zipfile
from itertools import accumulate
from pathlib import Path
from typing import Any

from zhiku.errors import LoaderError, MissingDependency
from zhiku.ingest.files import MIB
from zhiku.ingest.loaders.encoding import read_head, sniff_bytes, wrong_suffix
from zhiku.ingest.loaders.markup import Configured, first_heading, markdown_table, source_image, usable_image
from zhiku.ingest.loaders.pdf_layout import FIGURE_CAPTION_RE
from zhiku.types import SourceDoc, SourceImage

DOCX_INSTALL = "pip install 'zhiku[docx]'"
# XML parses to ~15x its size in memory (32 MiB of paragraphs: 0.5 GB peak RSS)
MAX_XML_BYTES = 32 * MIB
_HEADING_STYLE_RE = re.compile(r"(?:heading|标题)\s*(\d)$", re.IGNORECASE)
_NS = {
    "w": "http://schemas.openxmlformats.org/wordprocessingml/2006/main",
    "a": "http://schemas.openxmlformats.org/drawingml/2006/main",
    "r": "http://schemas.openxmlformats.org/officeDocument/2006/relationships",
    "wp": "http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing",
}
_W = "{%s}" % _NS["w"]


def check_zip(path: Path, what: str, max_unpacked: int = 100 * MIB, max_xml: int = MAX_XML_BYTES) -> None:
    """Refuse an empty file, a non-ZIP or a zip bomb by its declared sizes (zipfile reads no further); ``max_xml``:
    the most XML a DOM parser may take (a streaming one takes ``max_unpacked``)."""
    if not (head := read_head(path)):
        raise LoaderError(f"empty file (0 bytes): {path}")
    if sniff_bytes(head) != "zip/office":
        raise wrong_suffix(head, what, path)
    try:
        with zipfile.ZipFile(path) as z:
            members = z.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise LoaderError(
            f"not a readable {path.suffix} document (corrupt, truncated, or another ZIP file): {path} ({e})"
        ) from None
    total = sum(m.file_size for m in members)
    xml = sum(m.file_size for m in members if m.filename.lower().endswith((".xml", ".rels")))
    if total > max_unpacked:
        raise LoaderError(
            f"{path} unpacks to {total / MIB:.0f} MiB, over loaders.max_file_mb ({max_unpacked / MIB:g} MiB): "
            "a zip bomb, or a document too large to index"
        )
    if xml > max_xml:
        raise LoaderError(
            f"{path} holds {xml / MIB:.0f} MiB of XML, over the {max_xml / MIB:g} MiB zhiku parses: "
            "a zip bomb, or a document too large to index"
        )


class DocxLoader(Configured):
    doc_type: str = "docx"
    suffixes: tuple[str, ...] = (".docx",)

    def load(self, path: Path, source: str) -> SourceDoc:
        path = Path(path)
        try:
            import docx
            from docx.opc.exceptions import PackageNotFoundError
        except ImportError:
            raise MissingDependency(f"reading Word files needs python-docx: {DOCX_INSTALL}") from None
        check_zip(path, "a Word .docx document", int(self.settings.max_file_mb * MIB))
        from lxml.etree import XMLSyntaxError  # type: ignore[import-untyped]  # python-docx parses with lxml

        try:
            document = docx.Document(str(path))
        except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError, XMLSyntaxError) as e:
            raise LoaderError(
                f"not a readable .docx document (corrupt, truncated, or another ZIP file): {path} ({e})"
            ) from None
        blocks: list[str] = []
        images: list[tuple[int, bytes, str, int, int, str]] = []  # block index, data, mime, w, h, alt
        numbering = _numbering_formats(document)
        counters: dict[tuple[str, int], int] = {}
        styles = {s.style_id: s.name or s.style_id for s in document.styles if s.style_id}
        shift = 0  # 1 after the Title: later headings move one level down
        for child in document.element.body.iterchildren():
            if child.tag == _W + "tbl":
                if md := markdown_table(_table_rows(child)):
                    blocks.append(md)
                continue
            if child.tag != _W + "p":
                continue
            if self.settings.images:
                for blip in child.iter("{%s}blip" % _NS["a"]):
                    if (picture := _picture(blip, document)) is not None:
                        images.append((len(blocks), *picture))
            text = "\n".join(" ".join(ln.split()) for ln in _run_text(child).split("\n"))
            if not text.strip():
                continue
            style = str(styles.get(style_id := _val(child, "pPr/pStyle"), style_id))
            level = _heading_level(child, style)
            num = child.find(f"{_W}pPr/{_W}numPr")
            if level is not None:
                shift, level = (1, 1) if level == 0 else (shift, min(level + shift, 6))
                blocks.append("#" * level + " " + text.replace("\n", " "))
            elif num is not None or style.lower().startswith(("list", "列表")):
                ilvl, num_id = int(_val(num, "ilvl", "0")), _val(num, "numId")
                numbered = "number" in style.lower() or "编号" in style
                fmt = numbering.get((num_id, ilvl), "decimal" if numbered else "bullet")
                num_id = num_id or style
                if fmt == "bullet":
                    marker = "-"
                else:
                    counters[(num_id, ilvl)] = counters.get((num_id, ilvl), 0) + 1
                    for key in [k for k in counters if k[0] == num_id and k[1] > ilvl]:
                        del counters[key]
                    marker = f"{counters[(num_id, ilvl)]}."
                item = f"{'  ' * ilvl}{marker} {text}"
                if blocks and re.match(r"\s*(?:-|\d+\.) ", blocks[-1]):  # the list goes on
                    blocks[-1] += "\n" + item
                else:
                    blocks.append(item)
            else:
                blocks.append("\\" + text.lstrip() if text.lstrip().startswith("#") else text)
        text = "\n\n".join(blocks)
        offsets = list(accumulate((len(b) + 2 for b in blocks[:-1]), initial=0))
        out: list[SourceImage] = []
        for block, data, mime, w, h, alt in images:
            at = offsets[block] if block < len(offsets) else len(text)
            out.append(source_image(data, mime, w, h, offset=at, caption=alt or _nearby_caption(blocks, block)))
        title = (document.core_properties.title or "").strip() or first_heading(text, path.stem)
        return SourceDoc(source, self.doc_type, title, text, (), "docx", tuple(out))


def _val(el: Any, path: str, default: str = "") -> str:
    found = None if el is None else el.find("/".join(_W + step for step in path.split("/")))
    return default if found is None else str(found.get(_W + "val", default))


def _run_text(p: Any) -> str:
    breaks = {_W + "tab": " ", _W + "br": "\n", _W + "cr": "\n"}
    return "".join(el.text or "" if el.tag == _W + "t" else breaks[el.tag] for el in p.iter(_W + "t", *breaks))


def _heading_level(p: Any, style: str) -> int | None:
    """1-6 for a heading, 0 for the document title, None for body text."""
    if style.lower() == "title" or style == "标题":
        return 0
    if (m := _HEADING_STYLE_RE.search(style)) and 1 <= int(m.group(1)) <= 6:
        return int(m.group(1))
    level = int(_val(p, "pPr/outlineLvl", "9")) + 1
    return level if level <= 6 else None


def _numbering_formats(document: Any) -> dict[tuple[str, int], str]:
    try:
        root = document.part.numbering_part.element
    except (KeyError, NotImplementedError, AttributeError):
        return {}
    abstract: dict[str, dict[int, str]] = {}
    for a in root.findall(f"{_W}abstractNum"):
        levels = {int(lvl.get(_W + "ilvl", "0")): _val(lvl, "numFmt", "bullet") for lvl in a.findall(f"{_W}lvl")}
        abstract[a.get(_W + "abstractNumId", "")] = levels
    out: dict[tuple[str, int], str] = {}
    for num in root.findall(f"{_W}num"):
        if (ref := num.find(f"{_W}abstractNumId")) is not None:
            for level, fmt in abstract.get(ref.get(_W + "val", ""), {}).items():
                out[(num.get(_W + "numId", ""), level)] = fmt
    return out


def _table_rows(tbl: Any) -> list[list[str]]:
    return [[_cell_text(tc) for tc in tr.findall(f"{_W}tc")] for tr in tbl.findall(f"{_W}tr")]


def _cell_text(tc: Any) -> str:
    paragraphs = ("".join(t.text or "" for t in p.iter(_W + "t")) for p in tc.iter(_W + "p"))
    return "\n".join(x for x in paragraphs if x.strip())


def _picture(blip: Any, document: Any) -> tuple[bytes, str, int, int, str] | None:
    rid = blip.get("{%s}embed" % _NS["r"])
    part = document.part.related_parts.get(rid) if rid else None
    if part is None or not hasattr(part, "blob"):
        return None
    if (found := usable_image(part.blob)) is None:
        return None
    node = next(blip.iterancestors("{%s}inline" % _NS["wp"], "{%s}anchor" % _NS["wp"]), None)
    pr = node.find("{%s}docPr" % _NS["wp"]) if node is not None else None
    alt = (pr.get("descr") or pr.get("title") or "") if pr is not None else ""
    return (*found, " ".join(alt.split()))


def _nearby_caption(blocks: list[str], index: int) -> str:
    for j in (index, index + 1, index - 1):
        if 0 <= j < len(blocks) and FIGURE_CAPTION_RE.match(blocks[j]):
            return blocks[j].strip()
    return ""
