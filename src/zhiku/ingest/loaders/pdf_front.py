"""Front matter of a PDF that must not shape its heading tree: a cover page and declaration pages (originality,
copyright, authorisation statements) at the start of a thesis or book.

Their big type (the cover's title, 原创性声明) would otherwise take the top heading levels and every chapter
would nest under them in every citation (``本科生毕业设计（论文） > 关于使用授权的声明 > … > 第 1 章``). Heading levels are measured on the
other pages; a front page's own headings (its largest type) come out at the deepest level, so they title their
page and any body heading closes them (``pdf_layout.heading_levels``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from zhiku.ingest.loaders.pdf_layout import Line, visible_chars

COVER_MAX_CHARS = 250  # a first page with less text than this, in type larger than the body's, is a cover
DECLARATION_RE = re.compile(
    r"原创性声明|独创性声明|版权声明|授权(?:使用)?(?:的)?声明|使用授权|学位论文.{0,12}声明|"
    r"declaration of (?:originality|authorship)|statement of originality|copyright (?:statement|declaration)",
    re.IGNORECASE,
)
MAX_FRONT_SHARE = 3  # front matter lies within the first third of the pages


def front_pages(pages: Sequence[Sequence[Line]], body_size: float) -> frozenset[int]:
    """The 0-based pages that open the document as front matter: a cover (first page only), then declaration
    pages; the run stops at the first page that is neither."""
    limit = max(1, len(pages) // MAX_FRONT_SHARE)
    out: set[int] = set()
    for i, lines in enumerate(pages[:limit]):
        text = "".join(ln.text for ln in lines).replace(" ", "")
        cover = i == 0 and _is_cover(lines, body_size)
        if not (cover or DECLARATION_RE.search(text)):
            break
        out.add(i)
    return frozenset(out)


def _is_cover(lines: Sequence[Line], body_size: float) -> bool:
    chars = sum(visible_chars(ln.text) for ln in lines)
    return 0 < chars < COVER_MAX_CHARS and any(ln.size > body_size * 1.3 and not ln.mono for ln in lines)
