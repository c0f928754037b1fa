"""The low-confidence decision (zhiku.retrieval.confidence): signals of one retrieval, thresholds, bm25 mode."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from zhiku.errors import NotFound
from zhiku.retrieval.confidence import MIN_COVERAGE, Signals, assess, check_collection, signals_of
from zhiku.types import Chunk, Hit, ScoredId


def hit(text: str, cid: str = "c1") -> Hit:
    return Hit(Chunk(cid, "d", "laws", "劳动合同法.md", "markdown", "", None, 0, len(text), 0, text), 1.0)


def test_signals_of_one_retrieval() -> None:
    dense = [ScoredId("c1", 0.9, 1), ScoredId("c2", 0.8, 2), ScoredId("c3", 0.7, 3)]
    s = signals_of([hit("试用期不得超过六个月")], dense, [ScoredId("c1", 7.5, 1)], ["试用期", "六个月", "加班"])
    assert s.top_cosine == 0.9 and s.top_bm25 == 7.5
    assert s.margin == pytest.approx(0.1)  # 0.9 − mean(0.9, 0.8, 0.7)
    assert s.coverage == pytest.approx(2 / 3)  # 加班 is in no returned passage
    empty = signals_of([], [], [], [])
    assert (empty.top_cosine, empty.margin, empty.coverage, empty.top_bm25, empty.top_clause) == (None,) * 5
    assert signals_of([], dense, [], [], clauses=[ScoredId("c2", 0.87, 1)]).top_clause == 0.87


def test_coverage_compares_normalised_text() -> None:
    s = signals_of([hit("員工加班費")], [], [], ["员工", "加班"], normalize=lambda t: t.replace("員", "员"))
    assert s.coverage == 1.0


def test_assess_thresholds_and_modes() -> None:
    s = Signals(top_cosine=0.86, margin=0.05, coverage=0.25, top_bm25=3.0)
    low = assess(s, found=True, mode="dense", min_score=0.88)
    assert (low.low, low.score, low.signal, low.threshold) == (True, 0.86, "top_cosine", 0.88)
    assert assess(s, found=True, mode="dense", min_score=0.85).low is False
    assert assess(s, found=True, mode="hybrid", min_score=0.0).low is False  # 0 turns the flag off
    assert assess(s, found=False, mode="hybrid", min_score=0.0).low is True  # nothing matched: always low
    bm25 = assess(s, found=True, mode="bm25", min_score=0.88)
    assert (bm25.low, bm25.signal, bm25.score, bm25.threshold) == (True, "coverage", 0.25, MIN_COVERAGE)
    covered = Signals(top_cosine=None, margin=None, coverage=MIN_COVERAGE, top_bm25=3.0)
    assert assess(covered, found=True, mode="bm25", min_score=0.88).low is False
    assert assess(s, found=True, mode="bm25", min_score=0.0).low is False


def test_a_hybrid_question_scores_its_cosine_moved_by_its_lexical_evidence() -> None:
    # best cosine + 0.03 × (ln(1 + top BM25 ÷ ln(1 + chunks)) − 1.1 over Chinese text, 1.15 over English)
    chunks = 7  # ln(1 + 7) ≈ 2.08
    strong = Signals(top_cosine=0.87, margin=0.05, coverage=1.0, top_bm25=math.log1p(chunks) * (math.e**3 - 1))
    zh = assess(strong, found=True, mode="hybrid", min_score=0.88, language="zh", chunks=chunks)
    assert (zh.signal, zh.threshold, zh.low) == ("cosine_bm25", 0.88, False)
    assert zh.score == pytest.approx(0.87 + 0.03 * (3 - 1.1))  # 0.927: many of the index's words, not low
    en = assess(strong, found=True, mode="hybrid", min_score=0.88, language="en", chunks=chunks)
    assert en.score == pytest.approx(zh.score + 0.03 * (1.1 - 1.15))
    # no BM25 match at all (or a question of stopwords alone): no lexical evidence, the cosine alone is not enough
    unmatched = assess(replace(strong, top_bm25=None), found=True, mode="hybrid", min_score=0.88, chunks=chunks)
    assert (unmatched.score, unmatched.low) == (pytest.approx(0.87 - 0.03 * 1.1), True)
    # the same BM25 score from an index 100 times larger counts for less (its idf runs higher)
    big = assess(strong, found=True, mode="hybrid", min_score=0.88, language="zh", chunks=100 * chunks)
    assert 0.88 < big.score < zh.score
    # dense mode has no BM25 channel: the cosine alone, whatever the signals hold
    assert assess(strong, found=True, mode="dense", min_score=0.88, chunks=chunks).score == 0.87


def test_a_cross_lingual_question_scores_its_gloss_cosine_and_lexical_evidence() -> None:
    # best clause cosine + 0.1 × held share + 0.06 × ln(1 + top BM25 ÷ ln(1 + chunks)) − the text language's lift
    chunks = 7  # a tiny index: ln(1 + 7) ≈ 2.08 scales its BM25 score
    s = Signals(top_cosine=0.78, margin=0.02, coverage=0.5, top_bm25=2 * (math.e - 1), top_clause=0.86)
    zh = assess(s, found=True, mode="hybrid", min_score=0.88, held=0.5, language="zh", chunks=chunks)
    assert (zh.signal, zh.threshold, zh.low) == ("cross_lingual", 0.88, False)
    bm25 = 0.06 * math.log1p(2 * (math.e - 1) / math.log1p(chunks))
    assert zh.score == pytest.approx(0.86 + 0.05 + bm25 - 0.082)  # 0.888
    en = assess(s, found=True, mode="hybrid", min_score=0.88, held=0.5, language="en", chunks=chunks)
    assert en.score == pytest.approx(zh.score + 0.082 - 0.038)
    # the same score from an index 100 times larger counts for less: its idf, so its BM25 scores, run higher
    big = assess(s, found=True, mode="hybrid", min_score=0.88, held=0.5, language="zh", chunks=100 * chunks)
    assert big.score < zh.score and big.low is True
    # no clause (dense mode): the question's own cosine stands in; min_score 0 turns the flag off as for any question
    alone = assess(replace(s, top_clause=None), found=True, mode="dense", min_score=0.88, held=0.0)
    assert alone.score == pytest.approx(0.78 + 0.06 * math.log1p(2 * (math.e - 1) / math.log(2)) - 0.082)
    assert alone.low is True
    assert assess(s, found=True, mode="hybrid", min_score=0.0, held=0.0).low is False


def test_check_collection_names_the_real_ones() -> None:
    check_collection(None, ["laws"])  # no collection asked for: nothing to check
    check_collection("laws", ["laws", "hr"])
    with pytest.raises(NotFound) as e:
        check_collection("lwas", ["laws", "hr"])
    assert str(e.value) == "no collection 'lwas' in this knowledge base; available: laws, hr"
    with pytest.raises(NotFound, match=r"available: \(none yet\)$"):
        check_collection("laws", [])


def test_a_code_the_first_passage_holds_verbatim_is_not_low_confidence() -> None:
    # ORD-4290 (an error code alone) scored 0.870 < 0.88 with its table row at [1]: "知识库中没有找到…" was false
    from zhiku.retrieval.confidence import codes_in_first, judge
    from zhiku.retrieval.plan import QueryPlan
    from zhiku.retrieval.search import Retrieval

    row, log = hit("| ORD-4290 | 请求过于频繁（限流） | 每秒最多 50 次 |"), hit("ERROR ORD-5000 Internal error", "c2")

    def judged(terms: tuple[str, ...], hits: tuple[Hit, ...]) -> bool:
        # a weak BM25 score beside the cosine: 0.870 + 0.03 × (ln(1 + 1 ÷ ln 2) − 1.1) ≈ 0.864, below 0.88
        r = Retrieval(QueryPlan("q", terms), "hybrid", [ScoredId("c1", 1.0, 1)], [ScoredId("c1", 0.870, 1)], hits)
        return judge(r, min_score=0.88).low

    assert judged(("ord", "ord-4290"), (row, log)) is False
    assert judged(("ord", "ord-4290"), (log, row)) is True  # [1] lacks it: still low
    assert judged(("ord", "ord-4290", "ord-4002"), (row,)) is True  # every code named must be there
    assert judged(("限流", "请求"), (row,)) is True  # no code in the question: the cosine decides, as before
    assert codes_in_first([hit("model.version 为 v2.3")], ["v2.3"]) and not codes_in_first([row], ["16g", "32g"])


def test_a_code_counts_only_whole_and_distinct() -> None:
    # ORD-429 (no such code) was answered with confidence over ORD-4290's row, v2.3 over v2.3.0; an off-topic
    # win10怎么激活 lost its flag over any passage mentioning win10
    from zhiku.retrieval.confidence import codes_in_first

    row = hit("| ORD-4290 | 请求过于频繁（限流） | 见 v2.3.0 说明 |")
    assert codes_in_first([row], ["ord", "ord-4290"]) and codes_in_first([row], ["v2.3.0"])
    assert not codes_in_first([row], ["ord", "ord-429"])
    assert not codes_in_first([row], ["v2.3"])  # another version
    assert not codes_in_first([row], ["rd-4290"])
    assert codes_in_first([hit("当前版本为 v2.3。")], ["v2.3"])  # a full stop after it: still whole
    assert codes_in_first([hit("文件须为 GB18030 编码")], ["gb18030"])
    common = hit("本机 win10，播放 mp4，x86 架构，k8s 集群，ipv6 地址，python3 环境")
    for term in ("win10", "mp4", "x86", "k8s", "ipv6", "python3"):
        assert not codes_in_first([common], [term, "激活"]), term
