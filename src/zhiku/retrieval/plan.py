"""The question read once into a ``QueryPlan``: every later stage reads the plan, not the question."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from zhiku.errors import InvalidInput
from zhiku.observability.tracing import span
from zhiku.retrieval.bridge import ENGLISH, english_share, names
from zhiku.retrieval.clauses import MAX_CLAUSES
from zhiku.retrieval.fusion import weights_of
from zhiku.retrieval.query import MAX_EMBED_CHARS, MAX_QUERY_CHARS, check_mode
from zhiku.settings import RetrievalSettings
from zhiku.text import TextProcessor, article_numbers, chinese_number, query_clauses
from zhiku.types import Filters, SearchMode

ARTICLE = re.compile(r"第[零一二三四五六七八九十百千两〇]+条")  # an article named in a question (spelled)
CUT_NOTE = (
    "问题较长：前 {0} 个字符按语义检索，全文按关键词检索 / "
    "A long question: its first {0} characters were searched by meaning, all of it by keywords."
)
MAX_PAGES = 20  # pages one question may ask for (a range wider than this is read as its first MAX_PAGES pages)
_ONE = r"(?:\d{1,4}|[零一二两三四五六七八九十百千〇]{1,6})"  # a page number, digits or spelled
_NUMBER = f"({_ONE})"  # (captured)
# 第3页, 第 3 页, 第3-5页, 第3至5页, 第3页到第5页, 第3—5页 (one range), 第三页;
# page 3, pages 3-5, p. 3, pp. 3–5 (normalised: lower case, half-width); a bare "p3" is not a page (P0–P3 name
# incident levels), nor "page 3.5" (a full stop after the number ends a sentence: "summarise page 12.")
_PAGE = re.compile(
    rf"(?P<list>第\s*{_ONE}(?:\s*(?:[、和及与]|以及)\s*第?\s*{_ONE})+\s*[页頁])"  # 第3和第4页, 第3、4页: each
    rf"|第\s*{_NUMBER}\s*(?:[页頁]\s*)?(?:(?:-|–|—|~|〜|至|到)\s*第?\s*{_NUMBER}\s*)?[页頁]"
    rf"|(?<![a-z])(?:pages?\s*|pp?\.\s*){_NUMBER}(?:\s*(?:-|–|—|to)\s*{_NUMBER})?(?!\d|\.\d)"
)


@dataclass(frozen=True)
class QueryPlan:
    text: str  # as the user wrote it (stripped)
    terms: tuple[str, ...]  # BM25 terms after normalisation, segmentation and stopword removal
    pairs: tuple[str, ...] = ()  # the character pairs BM25 matches beside the terms (``TextProcessor.query_pairs``)
    mode: SearchMode = "hybrid"
    normalized: str = ""  # NFKC, Traditional → Simplified, lower case
    forms: tuple[str, ...] = ()  # what the dense channel embeds: as written, and Simplified with 第47条 → 第四十七条
    clauses: tuple[str, ...] = ()  # what the clause channel embeds beside the whole question
    articles: str | None = None  # ``normalized`` with article numbers spelled, when it names an article (第八十二条)
    pages: tuple[int, ...] = ()  # the pages it asks for (第3页, p. 3), in order
    filters: Filters = Filters()
    tags: tuple[str, ...] = ()  # only chunks (or documents) carrying every tag
    note: str | None = None  # said with the answer: only the question's start was embedded (``MAX_EMBED_CHARS``)
    english: float = 0.0  # the share of its words in Latin letters (``bridge.english_share``)
    # set by the search, from the index: an English question's phrases over Chinese text (not in dense mode), the
    # Chinese senses of each, a sense as its headword then its terms (``bridge.chinese_senses``); a Chinese
    # question's over English text: the glosses of its terms (``bridge.english_senses``)
    bridge: tuple[tuple[tuple[str, ...], ...], ...] = ()
    names: tuple[str, ...] = ()  # the character pairs its pinyin names may stand for (``bridge.names``)

    # the language its index is written in (``Searcher.index_language``): "zh", "en" or "" (neither more than the
    # other); a plan not yet searched takes its text to be Chinese
    index_language: str = "zh"
    index_chunks: int = 0  # about how many chunks it has (``Searcher._text_counts``): the scale of BM25's scores

    @property
    def cross_lingual(self) -> bool:
        """Asked in English (or mostly) of Chinese text, or in Chinese of English text: its own fusion weights and
        confidence threshold."""
        return self.index_language == ("zh" if self.english >= ENGLISH else "en")


def read_question(
    question: str,
    text: TextProcessor,
    settings: RetrievalSettings,
    *,
    mode: str | None = None,
    filters: Filters = Filters(),
    tags: tuple[str, ...] = (),
) -> QueryPlan:
    """The plan of ``question`` (``InvalidInput`` for an empty, too long or wordless one, or an unknown mode)."""
    mode_ = check_mode(settings.mode if mode is None else mode)
    if not isinstance(question, str) or not question.strip():
        raise InvalidInput("the query is empty: ask a question, e.g. 试用期最长多久")
    question = question.strip()
    if len(question) > MAX_QUERY_CHARS:
        raise InvalidInput(f"the query has {len(question)} characters; the limit is {MAX_QUERY_CHARS}")
    if not any(ch.isalnum() for ch in question):  # "？？？", "……": nothing to search for, every passage as near
        shown = question if len(question) <= 20 else question[:20] + "…"
        raise InvalidInput(
            f"the query {shown!r} has no words, only punctuation or symbols: ask a question, e.g. 试用期最长多久"
        )
    with span("parse") as sp:
        terms = tuple(text.query_tokens(question))
        sp.set(counts={"terms": len(terms)}, terms=list(terms))
    normalized = text.normalize(question)  # (kept by the text processor since ``query_tokens``)
    forms: tuple[str, ...] = ()
    head = question[:MAX_EMBED_CHARS]  # the embedded part: its cost grows with its length; BM25 reads it all
    if mode_ != "bm25":  # a passage's vector is of its text as written: a second form finds Simplified passages
        second = article_numbers(text.simplified(head))  # (第47條: 条 once Simplified)
        forms = (head,) if second == head else (head, second)
    clauses: tuple[str, ...] = ()
    if mode_ == "hybrid" and settings.fusion != "rrf" and weights_of(settings.fusion)[2] > 0:
        clauses = tuple(query_clauses(head, max_clauses=MAX_CLAUSES))
    articles = article_numbers(normalized) if "第" in question else None
    english = english_share(normalized)
    named = names(question) if english >= ENGLISH and mode_ != "dense" else ()  # BM25 meets Chinese in Chinese
    lower = question.lower()
    paged = "页" in question or "頁" in question or "p" in lower or "ｐ" in lower
    return QueryPlan(
        text=question,
        terms=terms,
        pairs=tuple(text.query_pairs(question, terms)) if mode_ != "dense" else (),
        mode=mode_,
        normalized=normalized,
        forms=forms,
        clauses=clauses,
        articles=articles if articles is not None and ARTICLE.search(articles) else None,
        pages=asked_pages(normalized) if paged else (),
        filters=filters,
        tags=tags,
        note=CUT_NOTE.format(MAX_EMBED_CHARS) if forms and head != question else None,
        english=english,
        names=named,
    )


@cache
def _spelled() -> dict[str, int]:
    """Chinese numerals 1–9999 to numbers (两百, 两千 and 〇 for 零 too)."""
    out = {chinese_number(n): n for n in range(1, 10_000)}
    out.update({"两" + k[1:]: n for k, n in list(out.items()) if k.startswith(("二百", "二千"))})
    out.update({k.replace("零", "〇"): n for k, n in list(out.items()) if "零" in k})
    return out


def _number(text: str) -> int | None:
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
