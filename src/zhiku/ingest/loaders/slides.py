"""PowerPoint decks (``.pptx``, python-pptx: ``pip install 'zhiku[slides]'``): a page and a section per slide, its
title, text, tables, pictures (with their alt text) and speaker notes."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

from zhiku.errors import LoaderError, MissingDependency
from zhiku.ingest.files import MIB
from zhiku.ingest.loaders.docx import check_zip
from zhiku.ingest.loaders.markup import Configured, markdown_table, not_heading, source_image, usable_image
from zhiku.types import PageSpan, SourceDoc, SourceImage

SLIDES_INSTALL = "pip install 'zhiku[slides]'"
_NV = "{http://schemas.openxmlformats.org/presentationml/2006/main}cNvPr"


class SlidesLoader(Configured):
    doc_type: str = "slides"
    suffixes: tuple[str, ...] = (".pptx",)

    def load(self, path: Path, source: str) -> SourceDoc:
        path = Path(path)
        try:
            import pptx
            from pptx.exc import PackageNotFoundError
        except ImportError:
            raise MissingDependency(f"reading PowerPoint files needs python-pptx: {SLIDES_INSTALL}") from None
        check_zip(path, "a PowerPoint .pptx deck", int(self.settings.max_file_mb * MIB))
        from lxml.etree import XMLSyntaxError  # type: ignore[import-untyped]  # python-pptx parses with lxml

        try:
            deck = pptx.Presentation(str(path))
            slides = list(deck.slides)
        except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError, XMLSyntaxError) as e:
            raise LoaderError(
                f"not a readable .pptx deck (corrupt, truncated, or another ZIP file): {path} ({e})"
            ) from None
        blocks: list[str] = []
        pages: list[PageSpan] = []
        images: list[SourceImage] = []
        at = 0
        for n, slide in enumerate(slides, 1):
            title_shape = slide.shapes.title
            title = " ".join(title_shape.text_frame.text.split()) if title_shape is not None else ""
            parts = [f"# {title or f'slide {n}'}"]
            for shape in _reading_order(slide.shapes):
                if title_shape is not None and shape.shape_id == title_shape.shape_id:
                    continue
                text, picture = _shape(shape, self.settings.images)
                if picture is not None:
                    data, mime, w, h, alt = picture
                    offset = at + sum(len(p) + 2 for p in parts)
                    images.append(source_image(data, mime, w, h, offset=offset, page=n, caption=alt))
                if text:
                    parts.append(text)
            notes = slide.notes_slide.notes_text_frame if slide.has_notes_slide else None
            if notes and (note := " ".join(notes.text.split())):
                parts.append(f"备注：{note}")
            block = "\n\n".join(parts)
            pages.append(PageSpan(n, at, at + len(block)))
            blocks.append(block)
            at += len(block) + 2
        if all(b == f"# slide {n}" for n, b in enumerate(blocks, 1)):
            raise LoaderError(f"no text in the deck's slides: {path}")
        named = (deck.core_properties.title or "").strip()
        title = named or next((b[2:].split("\n")[0] for b in blocks if not b.startswith("# slide ")), path.stem)
        return SourceDoc(source, self.doc_type, title, "\n\n".join(blocks), tuple(pages), "pptx", tuple(images))


def _reading_order(shapes: Any) -> list[Any]:
    """Top to bottom, then left to right; a group's shapes in its place."""
    out = []
    for shape in sorted(shapes, key=lambda s: (s.top or 0, s.left or 0)):
        out += _reading_order(shape.shapes) if shape.shape_type == 6 else [shape]  # MSO_SHAPE_TYPE.GROUP
    return out


def _shape(shape: Any, images: bool) -> tuple[str, tuple[bytes, str, int, int, str] | None]:
    if getattr(shape, "has_table", False):
        return markdown_table([[c.text for c in row.cells] for row in shape.table.rows]), None
    if shape.has_text_frame:
        paragraphs = [(p.level, " ".join(p.text.split())) for p in shape.text_frame.paragraphs]  # p.text: with breaks
        return "\n".join(("  " * level + "- " if level else "") + not_heading(t) for level, t in paragraphs if t), None
    if not hasattr(shape, "image"):
        return "", None
    nv = next(shape._element.iter(_NV), None)
    alt = " ".join(((nv.get("descr") or nv.get("title") or "") if nv is not None else "").split())
    try:
        found = usable_image(shape.image.blob) if images else None
    except (AttributeError, KeyError, ValueError):  # a linked picture, not embedded
        found = None
    return (f"图片：{alt}" if alt else ""), (None if found is None else (*found, alt))
