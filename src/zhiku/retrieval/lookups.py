"""A question naming an article (劳动合同法第八十二条) or a page (论文第8页讲了什么) gets the passages holding it first."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain, zip_longest

from zhiku.reconstruct import SECTION_SEPARATOR
from zhiku.retrieval.context import split_label
from zhiku.retrieval.filters import passes
from zhiku.retrieval.plan import ARTICLE, QueryPlan
from zhiku.stores.base import Catalogue
from zhiku.text import article_numbers
from zhiku.types import Chunk, DocRecord, Hit

Normalize = Callable[[str], str]
_STEM = re.compile(r"[(（][^()（）]*[)）]$")  # 劳动法(2018-12-29): the date the file name carries
_PREFIX = "中华人民共和国"


@dataclass(frozen=True)
class Lookup:
    """The hits with what the question looked up first, what it asked for that no passage holds."""

    hits: tuple[Hit, ...]
    missing: tuple[str, ...] = ()
    pages: tuple[int, ...] = ()


def lookup(
    plan: QueryPlan,
    shown: Sequence[Hit],
    candidates: Sequence[Hit],
    normalize: Normalize,
    catalogue: Catalogue | None,
    allowed: Callable[[Chunk], bool] | None = None,
) -> Lookup:
    """``shown`` (what the search, its reranker and filters kept of ``candidates``) with the named articles first."""
    hits = named_articles_kept(shown, candidates, plan, normalize) if plan.articles else list(shown)
    found = Lookup(tuple(hits))
    if plan.pages and catalogue is not None:

        def elsewhere(text: str) -> list[str]:  # the paged documents the filters keep that the question names
            f = plan.filters
            docs = [
                d
                for d in catalogue.list_documents(f.collection if isinstance(f.collection, str) else None)
                if d.pages and passes(d, f)
            ]
            return [d.doc_id for d in docs if any(normalize(n) in text for n in document_names(d.source, d.title))]

        found = pages_first(
            hits, plan, normalize, catalogue.document_chunks, catalogue.get_document, allowed, elsewhere
        )
    missing = articles_not_found(found.hits, plan, normalize) if plan.articles else []
    return Lookup(found.hits, (*missing, *found.missing), found.pages)


def names_of(hit: Hit) -> set[str]:
    """The names a question may call ``hit``'s document by: its file name's stem, its title heading."""
    return document_names(hit.chunk.source, hit.chunk.section.split(SECTION_SEPARATOR)[0])


def document_names(source: str, title: str) -> set[str]:
    """The names a question may call a document by, from its source path and its title (``names_of``)."""
    stem = re.split(r"[/\\]", source)[-1].rsplit(".", 1)[0]
    names = {_STEM.sub("", stem).strip(), title.strip()}
    return {n.removeprefix(_PREFIX) for n in names if len(n.removeprefix(_PREFIX)) >= 2}


def _owners(text: str, names: set[str]) -> list[tuple[str, set[str]]]:
    """Each article the question names, with the documents it is asked of: the name just before it."""
    spans = [(m.start(), m.end(), n) for n in names for m in re.finditer(re.escape(n), text)]
    named = [(a, b, n) for a, b, n in spans if not any(x <= a and b <= y and y - x > b - a for x, y, _ in spans)]
    anywhere = {n for _, _, n in named}
    out, start = [], 0
    for m in ARTICLE.finditer(text):
        nearest = max(((b, a, n) for a, b, n in named if start <= a and b <= m.start()), default=None)
        out.append((m.group(0), {nearest[2]} if nearest else anywhere))
        start = m.end()
    return out


def _held(hits: Sequence[Hit], text: str, normalize: Normalize) -> list[tuple[str, set[str], set[int]]]:
    """Each article the question ``text`` (``QueryPlan.articles``) names, the documents it is asked of."""
    names = [{normalize(n) for n in names_of(h)} for h in hits]
    labels = [{article_numbers(label) for label in split_label(h.chunk.section)[1]} for h in hits]
    return [
        (article, owners, {n for n in range(len(hits)) if article in labels[n] and (not owners or owners & names[n])})
        for article, owners in _owners(text, set().union(*names))
    ]


def named_articles_first(hits: Sequence[Hit], plan: QueryPlan, normalize: Normalize) -> list[Hit]:
    """``hits`` with those holding an article the question names (of the document it names for that article, if
    any) first."""
    if plan.articles is None:
        return list(hits)
    held = set().union(*(holders for _, _, holders in _held(hits, plan.articles, normalize)))
    return [h for n, h in enumerate(hits) if n in held] + [h for n, h in enumerate(hits) if n not in held]


def named_articles_kept(
    shown: Sequence[Hit], candidates: Sequence[Hit], plan: QueryPlan, normalize: Normalize
) -> list[Hit]:
    """``shown`` (what a reranker or a fusion of rewritten queries kept of ``candidates``) with the named articles
    first (``named_articles_first``), those it cut back in. As many hits as ``shown``."""
    kept = {h.chunk.chunk_id for h in shown}
    cut = [h for h in candidates if h.chunk.chunk_id not in kept]  # (after the named ones: only those come back)
    return named_articles_first([*shown, *cut], plan, normalize)[: len(shown)]


def articles_not_found(hits: Sequence[Hit], plan: QueryPlan, normalize: Normalize) -> list[str]:
    """The articles the question names (``名称 第…条`` when it names their document) that no hit holds."""
    if plan.articles is None:
        return []
    missing = [
        f"{'、'.join(sorted(owners))} {article}" if owners else article
        for article, owners, holders in _held(hits, plan.articles, normalize)
        if not holders
    ]
    return list(dict.fromkeys(missing))


def _documents(
    hits: Sequence[Hit], question: str, normalize: Normalize, elsewhere: Callable[[str], list[str]]
) -> tuple[list[str], bool]:
    """The paged documents asked of, and whether they are among ``hits``: those among ``hits`` the question names."""
    named = [h for h in hits if any(normalize(n) in question for n in names_of(h))]
    if not named and (others := elsewhere(question)):
        return others, False
    paged = [h for h in (named or hits[:1]) if h.chunk.page is not None]
    return list(dict.fromkeys(h.chunk.doc_id for h in paged)), True


def _on_pages(chunks: Sequence[Chunk], pages: Sequence[int], limit: int) -> tuple[list[Chunk], list[int]]:
    """At most ``limit`` chunks on ``pages``, in document order, the pages taking turns."""
    per_page: list[list[Chunk]] = []
    for page in pages:
        on = [c for c in chunks if c.page == page]
        if not on and any(c.page is not None and c.page > page for c in chunks):
            on = [c for c in chunks if c.page is not None and c.page < page][-1:]
        per_page.append(on)
    taken: dict[str, Chunk] = {}
    for c in chain.from_iterable(zip_longest(*per_page)):
        if c is not None and len(taken) < limit:
            taken.setdefault(c.chunk_id, c)
    served = [page for page, on in zip(pages, per_page, strict=True) if any(c.chunk_id in taken for c in on)]
    return sorted(taken.values(), key=lambda c: c.ordinal), served


def _holding(hits: Sequence[Hit], c: Chunk) -> Hit | None:
    """The hit whose passage holds ``c``: an article or table the small-to-big step made whole from its pieces."""
    return next(
        (h for h in hits if h.chunk.doc_id == c.doc_id and h.chunk.start <= c.start <= c.end <= h.chunk.end), None
    )


def pages_first(
    hits: Sequence[Hit],
    plan: QueryPlan,
    normalize: Normalize,
    document_chunks: Callable[[str], list[Chunk]],
    document: Callable[[str], DocRecord | None],
    allowed: Callable[[Chunk], bool] | None = None,
    elsewhere: Callable[[str], list[str]] = lambda question: [],
) -> Lookup:
    """``hits`` with the passages on the pages the question asks for first."""
    pages = plan.pages
    docs, searched = _documents(hits, plan.normalized, normalize, elsewhere) if pages and hits else ([], True)
    if not docs:
        return Lookup(tuple(hits))
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
        return Lookup(tuple(hits), tuple(missing))
    taken = {h.chunk.chunk_id for h in first}
    ordered = [*first, *(h for h in hits if h.chunk.chunk_id not in taken)]
    return Lookup(tuple(ordered[: len(hits)]), tuple(missing), tuple(dict.fromkeys(found)))
