"""A question that names an article (劳动合同法第八十二条) is a lookup: the passages holding that article of the
named law come first.

Laws number their articles alike, so fusion may rank another law's 第八十二条 (or the neighbour of the named
article) above the one asked for. When the question names articles (第…条, spelled: ``article_numbers`` turns
第82条 into 第八十二条) and one or more documents (by the source file's name without extension or date, or by
the title heading of its sections, 中华人民共和国 left off), the hits holding a named article of the document named
for it (the name just before the article, else any named) move to the front, in their fused order; without a
named document, the hits holding a named article do. Nothing else changes, and a question naming no article is left as it is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from zhiku.retrieval.context import split_label
from zhiku.retrieval.reconstruct import SECTION_SEPARATOR
from zhiku.text import article_numbers
from zhiku.types import Hit

_ARTICLE = re.compile(r"第[零一二三四五六七八九十百千两〇]+条")
_STEM = re.compile(r"[(（][^()（）]*[)）]$")  # 劳动法(2018-12-29): the date the file name carries
_PREFIX = "中华人民共和国"


def names_of(hit: Hit) -> set[str]:
    """The names a question may call ``hit``'s document by: its file name's stem, its title heading, each without
    the 中华人民共和国 of a national law."""
    return document_names(hit.chunk.source, hit.chunk.section.split(SECTION_SEPARATOR)[0])


def document_names(source: str, title: str) -> set[str]:
    """The names a question may call a document by, from its source path and its title (``names_of``)."""
    stem = re.split(r"[/\\]", source)[-1].rsplit(".", 1)[0]
    names = {_STEM.sub("", stem).strip(), title.strip()}
    return {n.removeprefix(_PREFIX) for n in names if len(n.removeprefix(_PREFIX)) >= 2}


def _owners(text: str, names: set[str]) -> list[tuple[str, set[str]]]:
    """Each article the question names, with the documents it is asked of: the name just before it (劳动法第四十四条和
    劳动合同法第八十二条: 第四十四条 of 劳动法, 第八十二条 of 劳动合同法), else every name in the question, else none. A name
    inside a longer one the question names (保险法 in 社会保险法, 合同法 in 劳动合同法) is not named there."""
    spans = [(m.start(), m.end(), n) for n in names for m in re.finditer(re.escape(n), text)]
    named = [(a, b, n) for a, b, n in spans if not any(x <= a and b <= y and y - x > b - a for x, y, _ in spans)]
    anywhere = {n for _, _, n in named}
    out, start = [], 0
    for m in _ARTICLE.finditer(text):
        nearest = max(((b, a, n) for a, b, n in named if start <= a and b <= m.start()), default=None)
        out.append((m.group(0), {nearest[2]} if nearest else anywhere))
        start = m.end()
    return out


def _asked(question: str, normalize: Callable[[str], str]) -> str | None:
    """The question normalised with its article numbers spelled (第82条 → 第八十二条), or None when it names no
    article (a question without 第, the hot path, is not even normalised)."""
    if "第" not in question:
        return None
    text = article_numbers(normalize(question))
    return text if _ARTICLE.search(text) else None


def _labels(hit: Hit) -> set[str]:
    """The articles ``hit``'s section names, spelled (a document numbering them 第7条 holds 第七条)."""
    return {article_numbers(label) for label in split_label(hit.chunk.section)[1]}


def _held(hits: Sequence[Hit], text: str, normalize: Callable[[str], str]) -> list[tuple[str, set[str], set[int]]]:
    """Each article the question ``text`` (``_asked``) names, the documents it is asked of (``_owners``) and the
    indexes of the ``hits`` holding it (of one of those documents, when it names any)."""
    names = [{normalize(n) for n in names_of(h)} for h in hits]
    labels = [_labels(h) for h in hits]
    return [
        (article, owners, {n for n in range(len(hits)) if article in labels[n] and (not owners or owners & names[n])})
        for article, owners in _owners(text, set().union(*names))
    ]


def named_articles_first(hits: Sequence[Hit], question: str, normalize: Callable[[str], str] = str) -> list[Hit]:
    """``hits`` with those holding an article the question names (of the document it names for that article, if
    any) first; ``question`` as asked (normalised here, its article numbers spelled: 第82条 is 第八十二条)."""
    text = _asked(question, normalize)
    if text is None:
        return list(hits)
    held = set().union(*(holders for _, _, holders in _held(hits, text, normalize)))
    return [h for n, h in enumerate(hits) if n in held] + [h for n, h in enumerate(hits) if n not in held]


def named_articles_kept(
    shown: Sequence[Hit], candidates: Sequence[Hit], question: str, normalize: Callable[[str], str] = str
) -> list[Hit]:
    """``shown`` (what a reranker or a fusion of rewritten queries kept of ``candidates``) with the named articles
    first (``named_articles_first``), those it cut back in: the reranker scores both laws' 第八十二条 alike, not which
    one the question asked for. As many hits as ``shown``."""
    kept = {h.chunk.chunk_id for h in shown}
    cut = [h for h in candidates if h.chunk.chunk_id not in kept]  # (after the named ones: only those come back)
    return named_articles_first([*shown, *cut], question, normalize)[: len(shown)]


def articles_not_found(hits: Sequence[Hit], question: str, normalize: Callable[[str], str] = str) -> list[str]:
    """The articles the question names (``名称 第…条`` when it names their document) that no hit holds: 劳动合同法
    has no 第二百条, and five unrelated passages said nothing of it. ``question`` as asked (``named_articles_first``)."""
    text = _asked(question, normalize)
    if text is None:
        return []
    missing = [
        f"{'、'.join(sorted(owners))} {article}" if owners else article
        for article, owners, holders in _held(hits, text, normalize)
        if not holders
    ]
    return list(dict.fromkeys(missing))
