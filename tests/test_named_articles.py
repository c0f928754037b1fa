"""A question naming an article of a law (劳动合同法第八十二条) gets that law's article first, not another's."""

from __future__ import annotations

from collections.abc import Sequence

from zhiku.retrieval.lookups import articles_not_found, lookup, named_articles_first, names_of
from zhiku.retrieval.plan import read_question
from zhiku.retrieval.rerank import apply_scores
from zhiku.settings import RetrievalSettings
from zhiku.text import TextProcessor
from zhiku.types import Chunk, Hit

TEXT = TextProcessor()

CONTRACT, LABOUR = "劳动合同法(2012-12-28).md", "劳动法(2018-12-29).md"


def hit(source: str, section: str, n: int) -> Hit:
    chunk = Chunk(f"c{n}", source, "laws", source, "markdown", section, None, 0, 10, n, "……")
    return Hit(chunk=chunk, score=10.0 - n)


FUSED = [  # 劳动合同法第八十二条, in fused order: the other law's 第八十二条 first
    hit(LABOUR, "中华人民共和国劳动法 > 第十二章 法律责任 > 第八十二条、第八十三条", 0),
    hit(CONTRACT, "中华人民共和国劳动合同法 > 第七章 法律责任 > 第八十三条", 1),
    hit(CONTRACT, "中华人民共和国劳动合同法 > 第七章 法律责任 > 第八十二条", 2),
    hit("规章/员工手册.md", "员工手册 > 第三章", 3),
]


def order(hits: list[Hit]) -> list[str]:
    return [h.chunk.chunk_id for h in hits]


def first(hits: list[Hit], question: str) -> list[Hit]:
    """``hits`` with the articles ``question`` names first."""
    return named_articles_first(hits, read_question(question, TEXT, RetrievalSettings()), TEXT.normalize)


def not_found(hits: list[Hit], question: str) -> list[str]:
    return articles_not_found(hits, read_question(question, TEXT, RetrievalSettings()), TEXT.normalize)


def test_the_named_laws_article_comes_first() -> None:
    assert order(first(FUSED, "劳动合同法第八十二条")) == ["c2", "c0", "c1", "c3"]
    assert order(first(FUSED, "劳动法第八十二条是什么")) == ["c0", "c1", "c2", "c3"]
    # the full title, or Traditional characters (normalised), name the law as well
    assert order(first(FUSED, "中华人民共和国劳动合同法第八十二条"))[0] == "c2"
    assert order(first(FUSED, "勞動合同法第八十二條"))[0] == "c2"


def test_two_laws_and_two_articles_pair_each_article_with_the_law_named_before_it() -> None:
    hits = [
        hit(LABOUR, "中华人民共和国劳动法 > 第十二章 法律责任 > 第八十二条、第八十三条", 0),
        hit(CONTRACT, "中华人民共和国劳动合同法 > 第四章 > 第四十四条", 1),
        hit(CONTRACT, "中华人民共和国劳动合同法 > 第七章 法律责任 > 第八十二条", 2),
        hit(LABOUR, "中华人民共和国劳动法 > 第四章 > 第四十四条", 3),
    ]
    # was: 劳动法's 第八十二条 and 劳动合同法's 第四十四条 counted as asked, 劳动法 第四十四条 left fourth
    assert order(first(hits, "劳动法第四十四条和劳动合同法第八十二条")) == [
        "c2",
        "c3",
        "c0",
        "c1",
    ]
    # a law named after the article (or once for several) is the law of each of them
    assert order(first(hits, "第八十二条，劳动合同法")) == ["c2", "c0", "c1", "c3"]
    assert order(first(hits, "劳动合同法第四十四条、第八十二条")) == ["c1", "c2", "c0", "c3"]


def test_without_a_named_law_every_hit_holding_the_article_comes_first() -> None:
    assert order(first(FUSED, "第八十三条")) == ["c0", "c1", "c2", "c3"]
    assert order(first(FUSED[::-1], "第八十二条")) == ["c2", "c0", "c3", "c1"]


def test_a_question_naming_no_article_or_an_absent_one_is_left_as_it_is() -> None:
    for question in ("劳动合同法规定的经济补偿", "劳动合同法第二百条", "第0条", "第3章"):
        assert order(first(FUSED, question)) == ["c0", "c1", "c2", "c3"]


def test_an_article_in_digits_is_the_spelled_one_in_the_question_and_in_the_labels() -> None:
    assert order(first(FUSED, "劳动合同法第82条")) == ["c2", "c0", "c1", "c3"]
    assert order(first(FUSED, "勞動合同法第82條")) == ["c2", "c0", "c1", "c3"]
    # a document numbering its articles in digits (第7条) holds the 第七条 a question names, in digits or not
    handbook = [hit("员工手册.md", "员工手册 > 第二章 > 第6条", 0), hit("员工手册.md", "员工手册 > 第二章 > 第7条", 1)]
    for question in ("员工手册第7条", "员工手册第七条"):
        assert order(first(handbook, question)) == ["c1", "c0"], question
        assert not_found(handbook, question) == [], question
    assert not_found(handbook, "员工手册第8条") == ["员工手册 第八条"]


def test_a_law_named_inside_another_ones_name_is_not_named_there() -> None:
    hits = [  # 保险法 is in 社会保险法's name: 社会保险法第十条 named 保险法 (its occurrence ends nearest the article)
        hit("保险法(2015-04-24).md", "中华人民共和国保险法 > 第一章 总则 > 第十条", 0),
        hit("社会保险法(2018-12-29).md", "中华人民共和国社会保险法 > 第二章 > 第九条", 1),
        hit("社会保险法(2018-12-29).md", "中华人民共和国社会保险法 > 第二章 > 第十条", 2),
    ]
    for question in ("社会保险法第十条", "第十条，社会保险法"):
        assert order(first(hits, question)) == ["c2", "c0", "c1"], question
    assert order(first(hits, "保险法第十条")) == ["c0", "c1", "c2"]
    assert not_found(hits[:2], "社会保险法第十条") == ["社会保险法 第十条"]


def test_a_documents_names_are_its_file_stem_and_title_without_the_national_prefix() -> None:
    assert names_of(FUSED[2]) == {"劳动合同法"}
    assert names_of(FUSED[3]) == {"员工手册"}
    assert names_of(hit("法规/中华人民共和国民法典.md", "民法典 > 第一编 总则", 5)) == {"民法典"}


class FusedOrder:
    """A reranker preferring the fused order (劳动法's 第八十二条 first), as a model reading both laws' alike might."""

    name = "test:fused-order"

    def load(self) -> None:
        return None

    def rerank(self, query: str, hits: Sequence[Hit], top_k: int) -> list[Hit]:
        return apply_scores(hits, [-float(h.fused_rank or 0) for h in hits], top_k)


def test_a_search_naming_a_law_and_article_ranks_that_article_first(tmp_path, embed_cache_dir) -> None:
    from helpers_kb import make_settings, write_corpus
    from zhiku.api import KnowledgeBase

    files = {  # two laws with a 第八十二条 each; the other law's one says 劳动合同法 twice
        "劳动法.md": "# 劳动法\n\n第八十二条 用人单位违反劳动合同法和劳动合同法实施条例的，由劳动行政部门责令改正。\n",
        "劳动合同法.md": "# 劳动合同法\n\n第八十二条 用人单位自用工之日起超过一个月不满一年未与劳动者订立书面合同的，"
        "应当向劳动者每月支付二倍的工资。\n",
    }
    # a reranker keeping 劳动法 first does not undo the lookup
    with KnowledgeBase(make_settings(tmp_path / "idx", embed_cache_dir), reranker=FusedOrder()) as kb:
        kb.ingest([write_corpus(tmp_path / "docs", files)])
        questions = ("劳动合同法第八十二条", "劳动合同法第82条", "勞動合同法第82條")
        found = {q: kb.retrieve(q, mode="hybrid", top_k=2, rerank=False).hits for q in questions}
        fused = kb.retrieve("劳动合同法 第八十二", mode="hybrid", top_k=2, rerank=False).hits  # names no article
        reranked = kb.retrieve("劳动合同法第八十二条", mode="hybrid", top_k=2)
        one = kb.retrieve("劳动合同法第八十二条", mode="hybrid", top_k=1)  # nor does it cut the article asked for
    assert reranked.rerank == "ok" and [h.chunk.source for h in reranked.hits] == ["劳动合同法.md", "劳动法.md"]
    assert [h.rerank_rank for h in reranked.hits] == [2, 1]
    assert (one.rerank, [h.chunk.source for h in one.hits]) == ("ok", ["劳动合同法.md"])
    for question, hits in found.items():
        assert [h.chunk.source for h in hits] == ["劳动合同法.md", "劳动法.md"], question
    assert [h.chunk.source for h in fused] == ["劳动法.md", "劳动合同法.md"]


def test_articles_named_but_held_by_no_passage_are_listed() -> None:
    # 劳动合同法 has no 第二百条: five unrelated passages came back and nothing said so
    assert not_found(FUSED, "劳动合同法第二百条") == ["劳动合同法 第二百条"]
    assert not_found(FUSED, "劳动合同法第八十二条") == []
    assert not_found(FUSED, "劳动合同法第八十一条和第八十三条") == ["劳动合同法 第八十一条"]
    assert not_found(FUSED, "第九十条") == ["第九十条"]  # no document named
    assert not_found(FUSED, "劳动合同法规定的经济补偿") == []


def test_the_answer_says_which_named_article_no_passage_holds() -> None:
    from zhiku.retrieval.answer import build_answer

    def answer(question: str) -> str:  # the lookup step, then the answer (as ``KnowledgeBase.query`` does)
        found = lookup(read_question(question, TEXT, RetrievalSettings()), FUSED[:3], FUSED[:3], TEXT.normalize, None)
        return build_answer(question, "hybrid", found.hits, normalize=TEXT.normalize, missing=found.missing).markdown

    md = answer("劳动合同法第200条")
    assert md.startswith(
        "**检索问题 / Query:** 劳动合同法第200条\n\n"
        "> 注意 / Note: 劳动合同法 第二百条 不在找到的段落中 / not among the passages found.\n\n[1] "
    )
    assert "注意 / Note" not in answer("劳动合同法第82条")
