"""Markdown building blocks shared by the document loaders: joining lines, tables, images."""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Sequence
from functools import reduce

from zhiku.settings import LoaderSettings
from zhiku.types import ImageRef, SourceImage

_CJK = (
    r"\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u312f\u3200-\u33ff\u3400-\u4dbf\u4e00-\u9fff"
    r"\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef"
)
CJK_RE = re.compile(f"[{_CJK}]")
# A space between two Chinese characters, except after the numbering of a part ("第一章 总则", "第十九条 劳动…").
_CJK_GAP_RE = re.compile(f"(?<=[{_CJK}])(?<![章节条款项编篇部卷]) (?=[{_CJK}])")

MIME_EXT = {"image/png": "png", "image/jpeg": "jpg"}
IMAGE_MIN_PX = 64  # a narrower or lower picture is decoration (an icon, a rule), not a figure worth keeping


def drop_cjk_spaces(text: str) -> str:
    """``"摘 要"`` -> ``"摘要"``: a space between two Chinese characters is a layout artefact."""
    return _CJK_GAP_RE.sub("", text)


def join_lines(a: str, b: str) -> str:
    if not a or not b:
        return a or b
    if a.endswith("-") and len(a) >= 2 and a[-2].isalpha() and b[0].islower():
        return a[:-1] + b
    if CJK_RE.match(a[-1]) or CJK_RE.match(b[0]):
        return a + b
    return f"{a} {b}"


def not_heading(text: str) -> str:
    """A paragraph opening with ``#`` escaped: text, not a Markdown heading that would start a section."""
    return "\\" + text if text.startswith("#") else text


def first_heading(text: str, default: str) -> str:
    m = re.search(r"^#{1,6} (.+)$", text, re.MULTILINE)
    return m.group(1).strip() if m else default


def cell_text(value: object) -> str:
    if value is None:
        return ""
    text = reduce(join_lines, (" ".join(line.split()) for line in str(value).splitlines()), "")
    return drop_cjk_spaces(text).replace("|", "\\|")


def markdown_table(rows: Sequence[Sequence[object]]) -> str:
    cells = [[cell_text(c) for c in row] for row in rows]
    if not (cells := [row for row in cells if any(row)]):
        return ""
    width = max(len(row) for row in cells)
    cells = [row + [""] * (width - len(row)) for row in cells]
    keep = [j for j in range(width) if any(row[j] for row in cells)]
    cells = [[row[j] for j in keep] for row in cells]
    lines = ["| " + " | ".join(cells[0]) + " |", "| " + " | ".join("---" for _ in keep) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in cells[1:]]
    return "\n".join(lines)


def image_id(data: bytes, mime_type: str) -> str:
    return f"{hashlib.sha256(data).hexdigest()}.{MIME_EXT[mime_type]}"


def encode_image(image: object) -> tuple[bytes, str, int, int]:
    img = image  # PIL.Image.Image
    if img.mode not in ("1", "L", "LA", "P", "RGB", "RGBA"):  # type: ignore[attr-defined]
        img = img.convert("RGBA" if "A" in img.mode else "RGB")  # type: ignore[attr-defined]
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=False)  # type: ignore[attr-defined]
    return buf.getvalue(), "image/png", img.width, img.height  # type: ignore[attr-defined]


def probe_image(data: bytes) -> tuple[str, int, int] | None:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            fmt = {"PNG": "image/png", "JPEG": "image/jpeg"}.get(img.format or "")
            if fmt is None or (fmt == "image/jpeg" and img.mode not in ("L", "RGB")):
                return None
            return fmt, img.width, img.height
    except (UnidentifiedImageError, OSError, ValueError):
        return None


def usable_image(data: bytes) -> tuple[bytes, str, int, int] | None:
    """PNG or JPEG as it is, another raster format as PNG; None for a vector format (EMF/WMF) or a decoration."""
    probe = probe_image(data)
    if probe is None:
        from PIL import Image

        try:
            with Image.open(io.BytesIO(data)) as img:
                img.load()
                data, mime, w, h = encode_image(img)
        except Exception:
            return None
    else:
        mime, w, h = probe
    return None if min(w, h) < IMAGE_MIN_PX else (data, mime, w, h)


def source_image(
    data: bytes,
    mime_type: str,
    width: int,
    height: int,
    *,
    offset: int,
    page: int | None = None,
    bbox: tuple[float, float, float, float] | None = None,
    caption: str = "",
) -> SourceImage:
    box = None if bbox is None else tuple(round(v, 1) for v in bbox)
    ref = ImageRef(image_id(data, mime_type), mime_type, page, box, width, height, caption)  # type: ignore[arg-type]
    return SourceImage(ref, offset, data)


class Configured:
    """A loader's constructor: the ``loaders`` settings section (defaults when None)."""

    def __init__(self, settings: LoaderSettings | None = None) -> None:
        self.settings = settings or LoaderSettings()
