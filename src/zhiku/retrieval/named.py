"""A question that names an article (劳动合同法第八十二条) is a lookup: the passages holding that article of the
named law come first.

Laws number their articles alike, so fusion may rank another law's 第八十二条 (or the neighbour of the named
article) above the one asked for. When the question names articles (第…条, spelled: ``article_numbers`` turns
第82条 into 第八十二条) and one or more documents (by the source file's name without extension or date, or by
the title heading of its sections, 中华人民共和国 left off), the hits of a named document whose section holds a
named article move to the front, in their fused order; without a named document, the hits holding a named
article do. Nothing else changes, and a question naming no article is left as it is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from zhiku.retrieval.context import split_label
from zhiku.retrieval.reconstruct import SECTION_SEPARATOR
from zhiku.types import Hit

_ARTICLE = re.compile(r"第[零一二三四五六七八九十百千两〇]+条")
_STEM = re.compile(r"[(（][^()（）]*[)）]$")  # 劳动法(2018-12-29): the date the file name carries
_PREFIX = "中华人民共和国"


def names_of(hit: Hit) -> set[str]:
    """The names a question may call ``hit``'s document by: its file name's stem, its title heading, each without
    the 中华人民共和国 of a national law."""
    stem = re.split(r"[/\\]", hit.chunk.source)[-1].rsplit(".", 1)[0]
    names = {_STEM.sub("", stem).strip(), hit.chunk.section.split(SECTION_SEPARATOR)[0].strip()}
    return {n.removeprefix(_PREFIX) for n in names if len(n.removeprefix(_PREFIX)) >= 2}


def named_articles_first(hits: Sequence[Hit], question: str, normalize: Callable[[str], str] = str) -> list[Hit]:
    """``hits`` with those holding an article the question names (of a document it names, if it names any) first;
    ``question`` with its article numbers spelled (第八十二条)."""
    text = normalize(question)
    asked = set(_ARTICLE.findall(text))
    if not asked:
        return list(hits)
    named = [any(normalize(n) in text for n in names_of(h)) for h in hits]
    holds = [bool(asked & set(split_label(h.chunk.section)[1])) for h in hits]
    first = [n for n, h in enumerate(hits) if holds[n] and (named[n] or not any(named))]
    return [hits[n] for n in first] + [h for n, h in enumerate(hits) if n not in first]
