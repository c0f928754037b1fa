"""Small-to-big: a chunk's article / section context from its document's chunks (no index needed)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from zhiku.errors import InvalidInput
from zhiku.ingest.chunking import ChunkShape, chunk_document
from zhiku.ingest.pipeline import WindowCheck, check_window, index_text
from zhiku.retrieval.context import check_context, enclosing, join_pieces, split_label, whole_articles
from zhiku.types import Chunk, Hit, SourceDoc

ITEMS = "\n\n".join(f"（{n}）第{n}项情形的说明文字，足够长以便分块，再多写一些字。" for n in "一二三四五六")
LAW = f"""# 劳动合同法

## 第四章 解除和终止

第四十条 有下列情形之一的，用人单位可以解除劳动合同：

{ITEMS}

第四十一条 需要裁减人员二十人以上的，用人单位提前三十日向工会说明情况。

## 第五章 特别规定

第四十七条 经济补偿按劳动者在本单位工作的年限支付。
"""


def chunks() -> list[Chunk]:
    doc = SourceDoc(source="劳动合同法.md", doc_type="markdown", title="劳动合同法", text=LAW)
    return chunk_document(doc, collection="c", doc_id="d", settings=ChunkShape(size=120, overlap=0, min_chars=0))


def test_long_article_is_cut_and_its_context_joins_the_pieces() -> None:
    cs = chunks()
    assert [c.section for c in cs] == [
        "劳动合同法 > 第四章 解除和终止 > 第四十条",
        "劳动合同法 > 第四章 解除和终止 > 第四十条",
        "劳动合同法 > 第四章 解除和终止 > 第四十一条",
        "劳动合同法 > 第五章 特别规定 > 第四十七条",
    ]
    ctx = enclosing(cs[1], cs, "article", 10_000)
    assert [c.ordinal for c in ctx.chunks] == [0, 1] and ctx.complete
    assert ctx.text.startswith("# 劳动合同法\n\n## 第四章 解除和终止\n\n第四十条 有下列情形之一的")
    assert ctx.text.endswith("（六）第六项情形的说明文字，足够长以便分块，再多写一些字。")
    section = enclosing(cs[2], cs, "section", 10_000)
    assert [c.ordinal for c in section.chunks] == [0, 1, 2]
    assert enclosing(cs[3], cs, "section", 10_000).chunks == (cs[3],)  # another chapter
    assert [c.ordinal for c in enclosing(cs[2], cs, "article", 10_000).chunks] == [2]


def test_context_keeps_the_nearest_chunks_within_the_budget() -> None:
    cs = chunks()
    ctx = enclosing(cs[2], cs, "section", len(cs[2].text) + len(cs[1].text))
    assert [c.ordinal for c in ctx.chunks] == [1, 2] and not ctx.complete
    tiny = enclosing(cs[1], cs, "article", 1)  # the matched chunk is always there
    # a lone later piece of an article: its article label becomes a heading, so the reader knows where it is
    assert (
        tiny.chunks == (cs[1],) and tiny.text == "# 劳动合同法\n\n## 第四章 解除和终止\n\n### 第四十条\n\n" + cs[1].text
    )
    assert enclosing(cs[1], cs, "chunk", 1).text == cs[1].text


def test_split_label_and_context_names() -> None:
    assert split_label("劳动合同法 > 第五章 > 第四十七条、第四十八条") == (
        "劳动合同法 > 第五章",
        ("第四十七条", "第四十八条"),
    )
    assert split_label("第三条") == ("", ("第三条",))
    assert split_label("手册 > 第二章 加班") == ("手册 > 第二章 加班", ())
    assert check_context("section") == "section"
    with pytest.raises(InvalidInput, match="unknown context 'chapter': use one of chunk, article, section"):
        check_context("chapter")


class _Counting:
    """An embedder that counts one token per character (plus two specials)."""

    max_tokens = 10

    def token_count(self, text: str) -> int:
        return len(text) + 2


def test_index_text_context_and_window_check() -> None:
    assert index_text("劳动合同法", "劳动合同法 > 第四十七条", "正文") == "劳动合同法 > 第四十七条\n正文"
    assert index_text("手册", "加班", "正文", ["图一"]) == "手册 > 加班\n正文\n图片：图一"
    assert check_window(_Counting(), ["短", "九个字九个字九个字", "短"]) == WindowCheck(10, (1,), 11)
    assert check_window(object(), ["短"]) == WindowCheck(None)


def test_a_hit_on_a_piece_of_an_article_returns_the_whole_article() -> None:
    cs = chunks()  # 第四十条 is cut in two (0, 1); 第四十一条 (2) and 第四十七条 (3) are whole
    hits = [Hit(chunk=cs[1], score=3.0), Hit(chunk=cs[3], score=2.0), Hit(chunk=cs[0], score=1.0)]
    calls: list[str] = []

    def doc_chunks(doc_id: str) -> list[Chunk]:
        calls.append(doc_id)
        return cs

    out = whole_articles(hits, doc_chunks)
    assert [(h.chunk.chunk_id, h.score) for h in out] == [(cs[1].chunk_id, 3.0), (cs[3].chunk_id, 2.0)]
    whole = out[0].chunk
    assert (whole.start, whole.end, whole.section) == (cs[0].start, cs[1].end, cs[1].section)
    assert whole.text == LAW[cs[0].start : cs[1].end]
    assert out[1].chunk == cs[3]  # a whole article is returned as it is
    assert calls == ["d"]  # the document's chunks are read once
    assert whole_articles([Hit(chunk=cs[2], score=1.0)], doc_chunks)[0].chunk == cs[2]


def test_join_pieces_takes_overlaps_once() -> None:
    text = "甲乙丙丁。戊己庚辛。壬癸。"
    a = Chunk("a", "d", "c", "s", "text", "", None, 0, 10, 0, text[0:10])
    b = Chunk("b", "d", "c", "s", "text", "", None, 5, 13, 1, text[5:13])
    assert join_pieces([a, b]) == text
    c = Chunk("c", "d", "c", "s", "text", "", None, 10, 13, 2, text[10:13])
    assert join_pieces([replace(a, end=5, text=text[:5]), c]) == "甲乙丙丁。\n\n壬癸。"


def test_whole_articles_stops_reading_the_hits_at_its_limit() -> None:
    cs = chunks()  # 第四十条 is cut in two (0, 1); 第四十一条 (2) and 第四十七条 (3) are whole
    read: list[str] = []

    def hits():
        for c, score in ((cs[1], 4.0), (cs[0], 3.0), (cs[2], 2.0), (cs[3], 1.0)):
            read.append(c.chunk_id)
            yield Hit(chunk=c, score=score)

    out = whole_articles(hits(), lambda doc_id: cs, limit=2)
    # the piece 0 is inside the first hit's whole article: the second hit is 第四十一条, and 第四十七条 is never made
    assert [(h.chunk.chunk_id, h.score) for h in out] == [(cs[1].chunk_id, 4.0), (cs[2].chunk_id, 2.0)]
    assert read == [cs[1].chunk_id, cs[0].chunk_id, cs[2].chunk_id]
    assert whole_articles(hits(), lambda doc_id: cs, limit=0) == []
    one = Hit(chunk=cs[3], score=1.0)
    assert whole_articles([one], lambda doc_id: cs)[0] is one  # a whole article's hit is returned as it is


def test_whole_articles_remembers_each_chunk_objects_article() -> None:
    """With a memo (``runs``; the searcher keeps one per store) a chunk object's whole article is made once: the
    same hits again read no document; another object of the same chunk (a store's read after a write) is made
    anew; the memo is bounded by the characters it holds."""
    from zhiku.retrieval import context

    cs = chunks()
    calls: list[str] = []

    def doc_chunks(doc_id: str) -> list[Chunk]:
        calls.append(doc_id)
        return cs

    runs = context.Runs()
    hits = [Hit(chunk=cs[1], score=3.0), Hit(chunk=cs[3], score=2.0), Hit(chunk=cs[0], score=1.0)]
    first = whole_articles(hits, doc_chunks, runs=runs)
    assert whole_articles(hits, doc_chunks, runs=runs) == first == whole_articles(hits, doc_chunks)
    assert calls == ["d", "d"]  # the memo's call, then the call without it: none for the remembered hits
    assert [h.chunk.chunk_id for h in first] == [cs[1].chunk_id, cs[3].chunk_id]  # (piece 0 inside the first)
    changed = replace(cs[3], text="第四十七条 经济补偿按年限支付。")  # the same chunk id, another object
    again = whole_articles([Hit(chunk=changed, score=1.0)], doc_chunks, runs=runs)
    assert again[0].chunk is changed and len(runs) == 3
    small = context.Runs(budget=2 * context.RUN_WEIGHT + len(first[0].chunk.text) + len(cs[3].text))
    whole_articles(hits, doc_chunks, runs=small)
    assert len(small) == 2  # the whole article (weighed by its joined text) and 第四十七条
    whole_articles([Hit(chunk=cs[2], score=1.0)], doc_chunks, runs=small)
    assert len(small) == 2  # full: the least recently used (the whole article) out first
    assert small.get(id(cs[2])) == (cs[2], cs[2], ()) and small.get(id(cs[1])) is None
