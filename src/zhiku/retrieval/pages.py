"""A question that asks for a page (ElegantBook 第 3 页讲了什么, what is on page 12 of the report) is a lookup: the
passages on that page come first.

Search ranks passages by what they say, and "第 3 页" says where, not what: the passages of page 3 rarely rank
first. When the question asks for pages (第3页, 第三页, 第 3 页, 第3-5页, page 3, p. 3) and the hits hold paged
documents (PDF), the passages on an asked page come first, in document order: of the documents the question names
(``named.names_of``: the file name or the title heading; among the hits, else among the documents the search's
filters keep), else of the first hit's document when it is paged. Those not
among the hits are read from the document (``Catalogue.document_chunks``; they carry no search score: score 0, no
ranks). As many hits as before. A chunk's page is the page holding most of its characters (ingest/chunking.py): a
page all of whose text lies in chunks of its neighbours is found in the chunk that runs into it. A page the
document does not have is said so (``PageLookup.missing``). A question asking for no page is left as it is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

from zhiku.retrieval.filters import passes
from zhiku.retrieval.named import document_names, names_of
from zhiku.stores.base import Catalogue
from zhiku.text import chinese_number
from zhiku.types import Chunk, DocRecord, Filters, Hit

_ONE = r"(?:\d{1,4}|[零一二两三四五六七八九十百千〇]{1,6})"  # a page number, digits or spelled
_NUMBER = f"({_ONE})"  # (captured)
# 第3页, 第 3 页, 第3-5页, 第3至5页, 第3页到第5页, 第3—5页 (one range), 第三页 (頁 too: text.t2s off leaves it);
# page 3, pages 3-5, p. 3, pp. 3–5 (normalised: lower case, half-width); a bare "p3" is not a page (P0–P3 name
# incident levels), nor "page 3.5" (a full stop after the number ends a sentence: "summarise page 12.")
_PAGE = re.compile(
    rf"(?P<list>第\s*{_ONE}(?:\s*(?:[、和及与]|以及)\s*第?\s*{_ONE})+\s*[页頁])"  # 第3和第4页, 第3、4页: each
    rf"|第\s*{_NUMBER}\s*(?:[页頁]\s*)?(?:(?:-|–|—|~|〜|至|到)\s*第?\s*{_NUMBER}\s*)?[页頁]"
    rf"|(?<![a-z])(?:pages?\s*|pp?\.\s*){_NUMBER}(?:\s*(?:-|–|—|to)\s*{_NUMBER})?(?!\d|\.\d)"
)
MAX_PAGES = 20  # pages one question may ask for (a range wider than this is read as its first MAX_PAGES pages)


@cache
def _spelled() -> dict[str, int]:
    """Chinese numerals to numbers (1–9999 as ``chinese_number`` spells them; 两百, 两千 and 〇 for 零 too)."""
    out = {chinese_number(n): n for n in range(1, 10_000)}
    out.update({"两" + k[1:]: n for k, n in list(out.items()) if k.startswith(("二百", "二千"))})
    out.update({k.replace("零", "〇"): n for k, n in list(out.items()) if "零" in k})
    return out


def _number(text: str | None) -> int | None:
    if text is None:
        return None
    return int(text) if text.isdigit() else _spelled().get(text)


def asked_pages(question: str) -> tuple[int, ...]:
    """The pages ``question`` (normalised: lower case, half-width, Simplified) asks for, in order, each once."""
    pages: list[int] = []
    for m in _PAGE.finditer(question):
        if m["list"] is not None:
            pages += [n for n in map(_number, re.findall(_ONE, m["list"])) if n is not None and n >= 1]
            continue
        numbers = [_number(g) for g in m.groups()[1:] if g is not None]
        if not numbers or any(n is None or n < 1 for n in numbers):
            continue
        first, last = numbers[0], numbers[-1]
        assert first is not None and last is not None
        pages += range(first, max(first, last) + 1)[:MAX_PAGES] if last >= first else [first]
    return tuple(dict.fromkeys(pages))[:MAX_PAGES]


@dataclass(frozen=True)
class PageLookup:
    """The hits with the asked pages' passages first, and each asked page no chosen document has
    (``《name》 第 N 页（共 M 页）``)."""

    hits: tuple[Hit, ...]
    missing: tuple[str, ...] = ()
    pages: tuple[int, ...] = ()  # the asked pages whose passages lead ``hits`` (none: nothing was looked up)


def _documents(
    hits: Sequence[Hit], question: str, normalize: Callable[[str], str], elsewhere: Callable[[str], list[str]]
) -> tuple[list[str], bool]:
    """The paged documents asked of, and whether they are among ``hits``: those among ``hits`` the question names
    (none when it names only documents without pages: 员工手册第3页 of a Word handbook is no page of a PDF), else the
    paged documents it names that the search did not find (``elsewhere``: 论文第8页 when every hit is of 模板.pdf),
    else the first hit's when it is paged: a question naming no document asks of the one the search found first
    (劳动合同第一页要写什么 answered by a statute in Markdown is no question about page 1 of a PDF ranked lower)."""
    named = [h for h in hits if any(normalize(n) in question for n in names_of(h))]
    if not named and (others := elsewhere(question)):
        return others, False
    paged = [h for h in (named or hits[:1]) if h.chunk.page is not None]
    return list(dict.fromkeys(h.chunk.doc_id for h in paged)), True


def _on_pages(chunks: Sequence[Chunk], pages: Sequence[int], limit: int) -> tuple[list[Chunk], list[int]]:
    """At most ``limit`` chunks on ``pages``, in document order, the pages taking turns (第3-4页 with room for four
    passages: two of each, not four of page 3); for a page no chunk is on (its text lies in its neighbours'
    chunks), the last chunk starting before it, when a later chunk is past it (the page lies inside the document).
    And the pages served."""
    per_page: list[list[Chunk]] = []
    for page in pages:
        on = [c for c in chunks if c.page == page]
        if not on and any(c.page is not None and c.page > page for c in chunks):
            on = [c for c in chunks if c.page is not None and c.page < page][-1:]
        per_page.append(on)
    taken: dict[str, Chunk] = {}
    for turn in range(max(map(len, per_page), default=0)):
        for on in per_page:
            if turn < len(on) and len(taken) < limit:
                taken.setdefault(on[turn].chunk_id, on[turn])
    served = [page for page, on in zip(pages, per_page, strict=True) if any(c.chunk_id in taken for c in on)]
    return sorted(taken.values(), key=lambda c: c.ordinal), served


def _holding(hits: Sequence[Hit], c: Chunk) -> Hit | None:
    """The hit whose passage holds ``c``: an article or table the small-to-big step made whole from its pieces
    (``context.whole_articles``), so that a piece on the asked page is not shown a second time on its own."""
    return next(
        (h for h in hits if h.chunk.doc_id == c.doc_id and h.chunk.start <= c.start <= c.end <= h.chunk.end), None
    )


def pages_first(
    hits: Sequence[Hit],
    question: str,
    normalize: Callable[[str], str],
    document_chunks: Callable[[str], list[Chunk]],
    document: Callable[[str], DocRecord | None],
    allowed: Callable[[Chunk], bool] | None = None,
    elsewhere: Callable[[str], list[str]] = lambda question: [],
) -> PageLookup:
    """``hits`` with the passages on the pages ``question`` (as asked) asks for first (see the module's text);
    ``allowed``: the chunks a filter keeps (a tags filter), the only ones looked up; ``elsewhere(question)``
    (normalised): the paged documents the search's filters keep whose names the question holds."""
    lower = question.lower()
    if "页" not in question and "頁" not in question and "p" not in lower and "ｐ" not in lower:  # (the hot path)
        return PageLookup(tuple(hits))
    text = normalize(question)
    pages = asked_pages(text)
    docs, searched = _documents(hits, text, normalize, elsewhere) if pages and hits else ([], True)
    if not docs:
        return PageLookup(tuple(hits))
    by_id = {h.chunk.chunk_id: h for h in hits}
    first: list[Hit] = []
    notes: list[tuple[int, str]] = []  # (page, note) for each page past a document's last
    most = 0  # the most pages of a chosen document
    found: list[int] = []
    for doc_id in docs:
        chunks = [c for c in document_chunks(doc_id) if allowed is None or allowed(c)]
        record = document(doc_id)
        if record is None or not chunks or searched and not any(c.chunk_id in by_id for c in chunks):  # (gone)
            continue
        count = record.pages or max((c.page or 0 for c in chunks), default=0)
        title = record.title or chunks[0].source
        most = max(most, count)
        notes += [(p, f"《{title}》第 {p} 页（共 {count} 页）") for p in pages if p > count]
        on, served = _on_pages(chunks, pages, len(hits) - len(first))
        first += [by_id.get(c.chunk_id) or _holding(hits, c) or Hit(chunk=c, score=0.0) for c in on]
        found += served
    # a page one chosen document has is not missing (report 第4页 and manual 第1页: manual has no page 4)
    missing = [note for p, note in notes if p > most]
    first = list({h.chunk.chunk_id: h for h in first}.values())  # (a hit holding several pieces: once)
    if not first:
        return PageLookup(tuple(hits), tuple(missing))
    taken = {h.chunk.chunk_id for h in first}
    ordered = [*first, *(h for h in hits if h.chunk.chunk_id not in taken)]
    return PageLookup(tuple(ordered[: len(hits)]), tuple(missing), tuple(dict.fromkeys(found)))


def lookup_pages(
    catalogue: Catalogue,
    hits: Sequence[Hit],
    question: str,
    normalize: Callable[[str], str],
    allowed: Callable[[Chunk], bool] | None = None,
    filters: Filters = Filters(),
) -> PageLookup:
    """``pages_first`` over ``catalogue``'s documents; a document the question names that the search did not find
    is looked up when it passes the search's ``filters`` (``filters.passes``)."""

    def elsewhere(text: str) -> list[str]:
        docs = [d for d in catalogue.list_documents(filters.collection) if d.pages and passes(d, filters)]
        return [d.doc_id for d in docs if any(normalize(n) in text for n in document_names(d.source, d.title))]

    return pages_first(hits, question, normalize, catalogue.document_chunks, catalogue.get_document, allowed, elsewhere)
