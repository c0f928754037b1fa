"""English questions over Chinese passages: the plan reads the language mix; BM25 gets Chinese terms from CC-CEDICT
and ECDICT and the characters of pinyin names; a second dense search starts from the first passages; the confidence adds the
share of its phrases the first passages hold; a Chinese question's plan has none of it."""

from __future__ import annotations

import importlib.util
import lzma
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import zhiku
from helpers_kb import CONTRACT_LAW
from zhiku.api import KnowledgeBase
from zhiku.evaluation.tune import offtopic_questions
from zhiku.retrieval.bridge import (
    CROSS_HITS,
    WordList,
    chinese_senses,
    english_senses,
    english_share,
    held_share,
    inflections,
    names,
    pieces,
    senses,
)
from zhiku.retrieval.confidence import CROSS_BM25, CROSS_COVERAGE, CROSS_LIFT, LEXICAL, LEXICAL_MID
from zhiku.retrieval.plan import read_question
from zhiku.retrieval.search import Retrieval
from zhiku.settings import RetrievalSettings
from zhiku.text import TextProcessor

LAWS = Path(__file__).parents[1] / "examples" / "laws"
LEAVE = "职工带薪年休假条例(2007-12-14).md"
ANNUAL_LEAVE = "How many days of annual leave does an employee get after 8 years?"


@pytest.fixture(scope="module")
def laws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("laws")
    shutil.copy(LAWS / LEAVE, root / LEAVE)
    (root / "劳动合同法.md").write_text(CONTRACT_LAW, encoding="utf-8")
    return root


@pytest.fixture
def kb(tmp_path: Path, laws: Path, kb_factory: Callable[..., KnowledgeBase]) -> KnowledgeBase:
    kb = kb_factory(tmp_path / "idx")
    kb.ingest([laws])
    return kb


def test_an_english_question_finds_the_chinese_regulation_first_and_is_not_flagged(kb: KnowledgeBase) -> None:
    answer = kb.query(ANNUAL_LEAVE, top_k=3)
    assert answer.hits[0].chunk.source == LEAVE
    assert "职工带薪年休假条例 > 第二条、第三条" in [h.chunk.section for h in answer.hits]
    assert answer.low_confidence is False
    by_words = kb.query(ANNUAL_LEAVE, mode="bm25", top_k=3)  # English words alone match no Chinese passage
    # (no chunk holds "employee"'s senses 员, 员工 or 从业人员: their piece 人员 brings 第七条's 主管人员 first)
    assert [h.chunk.section for h in by_words.hits] == [
        "职工带薪年休假条例 > 第七条",
        "职工带薪年休假条例 > 第一条",
        "职工带薪年休假条例 > 第二条、第三条",
    ]


def test_an_english_question_is_cross_lingual_over_chinese_text_only(
    kb: KnowledgeBase, tmp_path: Path, kb_factory: Callable[..., KnowledgeBase]
) -> None:
    over_chinese = kb.retrieve(ANNUAL_LEAVE, top_k=3)
    assert over_chinese.query.cross_lingual is True and over_chinese.query.bridge != ()
    root = tmp_path / "english"
    root.mkdir()
    (root / "leave.md").write_text("An employee gets 10 days of annual leave after 10 years of work.\n")
    (root / "pay.md").write_text("The employer pays the wages on the first day of the month.\n")
    english = kb_factory(tmp_path / "english-idx")
    english.ingest([root])
    r = english.retrieve(ANNUAL_LEAVE, top_k=2)  # English text: nothing bridged, no second dense search
    assert (r.query.cross_lingual, r.query.bridge, r.query.index_language) == (False, (), "en")
    assert [h.chunk.source for h in r.hits] == ["leave.md", "pay.md"]


def test_an_english_question_is_scored_on_its_gloss_cosine_and_the_evidence_of_its_first_passages(
    kb: KnowledgeBase,
) -> None:
    r = kb.retrieve(ANNUAL_LEAVE, top_k=3)
    assert (len(r.hits), len(r.candidates), r.query.index_chunks) == (3, CROSS_HITS, 8)  # 8 chunks hold 的
    shown, lead = (("\n".join(kb.text.normalize(h.chunk.text) for h in hs)) for hs in (r.hits, r.candidates))
    # of its 6 phrases, the 3 passages shown hold 3: days (天), annual leave (年假: 年, 假), years (年); the first five
    # (what its confidence reads, however few are asked for) hold 5
    assert (held_share(r.query.bridge, shown), held_share(r.query.bridge, lead)) == (0.5, 5 / 6)

    def score(r: Retrieval, held: float) -> float:  # its gloss's best cosine + the lexical evidence − the lift
        bm25 = CROSS_BM25 * math.log1p(r.bm25[0].score / math.log1p(r.query.index_chunks)) if r.bm25 else 0.0
        best = (r.clauses or r.dense)[0].score  # (no sense held anywhere: no gloss, its own cosine)
        return best + CROSS_COVERAGE * held + bm25 - CROSS_LIFT["zh"]

    answer = kb.query(ANNUAL_LEAVE, top_k=3)
    assert answer.confidence == pytest.approx(score(r, 5 / 6)) and answer.low_confidence is False  # 0.910
    assert [h.chunk.chunk_id for h in answer.hits] == [h.chunk.chunk_id for h in r.hits]  # the 3 asked for
    for question, held in (
        ("What should I make for dinner tonight?", 1 / 3),
        ("Who won the football match last night?", 0.0),
    ):
        off = kb.query(question, top_k=3)  # 0.71 and 0.61: below 0.88
        assert (off.low_confidence, off.confidence) == (True, pytest.approx(score(kb.retrieve(question), held)))
    assert held_share((), "年休假") == 0.0


def test_a_chinese_question_is_scored_on_its_cosine_moved_by_its_bm25_score_on_the_index_scale(
    kb: KnowledgeBase,
) -> None:
    def score(r: Retrieval) -> float:
        assert r.query.index_chunks == 8  # every question's plan carries the index's size, not only an English one's
        lexical = math.log1p((r.bm25[0].score if r.bm25 else 0.0) / math.log1p(8))
        return r.dense[0].score + LEXICAL * (lexical - LEXICAL_MID["zh"])

    confident, off = kb.query("年休假有几天", top_k=3), kb.query("今天晚饭做什么菜好？", top_k=3)
    assert confident.confidence == pytest.approx(score(kb.retrieve("年休假有几天", top_k=3)))
    assert off.confidence == pytest.approx(score(kb.retrieve("今天晚饭做什么菜好？", top_k=3)))
    assert (confident.low_confidence, off.low_confidence) == (False, True)
    assert off.confidence < 0.88 < confident.confidence


def test_the_english_offtopic_questions_are_english() -> None:
    questions = offtopic_questions("en")
    assert len(questions) == 106
    assert all(english_share(q.lower()) == 1.0 for q in questions)
    assert len(offtopic_questions()) == len(offtopic_questions("zh")) == 275


def test_the_plan_reads_the_language_mix_and_a_chinese_question_takes_the_chinese_path() -> None:
    text, settings = TextProcessor(), RetrievalSettings()
    chinese = read_question("年休假有几天", text, settings)
    assert (chinese.english, chinese.bridge, chinese.cross_lingual) == (0.0, (), False)
    assert chinese.terms == ("休假", "年休假", "几天")
    coded = read_question("ORD-4290 的状态", text, settings)  # a code in a Chinese question: still Chinese
    assert (coded.cross_lingual, coded.bridge) == (False, ())
    mixed = read_question("What is the 试用期 of a labor contract?", text, settings)
    assert (mixed.cross_lingual, mixed.bridge) == (True, ())  # (its senses are read from the index: ``search``)
    cut = lambda head: [t for t in text.query_tokens(head) if t not in text.stopwords]  # noqa: E731
    assert ("劳动合同", "劳动", "合同", "劳动合同") in chinese_senses(mixed.normalized, cut, None)[-1]


def test_a_phrase_whose_senses_the_index_lacks_gives_way_to_its_words(kb: KnowledgeBase) -> None:
    # ECDICT's "labour contract" is 劳资合同, which no chunk holds: "labour" (劳动) and "contract" (合同) are
    r = kb.retrieve("Who signs the labour contract?", top_k=3)
    assert r.query.cross_lingual and ("劳动", "劳动") in r.query.bridge[1] and ("合同", "合同") in r.query.bridge[2]
    assert [sense[0] for sense in chinese_senses("labour contract", lambda h: [h], None)[0]] == ["劳资合同"]
    assert kb.retrieve(ANNUAL_LEAVE, top_k=3, mode="dense").query.bridge == ()  # no BM25: nothing to bridge


def test_a_phrase_no_chunk_holds_in_any_sense_takes_the_pieces_chunks_hold() -> None:
    text = TextProcessor()
    cut = lambda head: [t for t in text.query_tokens(head) if t not in text.stopwords]  # noqa: E731
    chunks = {"审判": 4, "法院": 9, "人民法院": 7, "技术": 2}  # chunks holding each term; 司法权, 审判权 in none
    counts = lambda terms: {t: chunks.get(t, 0) for t in terms}  # noqa: E731
    court, jurisdiction = chinese_senses("which court has jurisdiction", cut, counts)
    assert court == chinese_senses("which court has jurisdiction", cut, None)[0]  # held: as the dictionary gives it
    assert jurisdiction[2:] == (("审判", "审判"),)  # of 司法 法权 审判 判权 (pairs and terms), the one held
    assert [sense[0] for sense in jurisdiction[:2]] == ["司法权", "审判权"]
    assert pieces((("技术性", "技术", "技术性"),)) == ["技术", "技术性", "术性"]
    assert pieces((("甲",), ("乙丙",), ("丙丁",), ("丁戊",))) == ["丙丁", "乙丙"]  # the first senses' only
    assert chinese_senses("which court has jurisdiction", cut, lambda terms: {})[1][0][0] == "司法权"  # none held


def test_dictionary_phrases_come_before_their_words() -> None:
    assert english_share("what is 试用期") == pytest.approx(2 / 3.5)
    assert english_share("stam1na是什么") == pytest.approx(1 / 2.5)  # a name with a digit: one word
    found = senses("annual leave for workers")
    assert found[0] == (
        "年假",
    )  # one phrase, not "annual" and "leave" (30 senses); ECDICT's only where CC-CEDICT has none
    assert "职工" in found[1]  # workers: staff
    assert senses("what is the") == ()
    # phrases only ECDICT has: one sense each, where CC-CEDICT read backwards had 缓刑 and 24 senses of "period"
    assert senses("what is the probation period?") == (("试用期",),)
    debts = ("欠款", "债", "债务", "债款", "欠账", "欠项", "窟窿", "账", "饥荒")  # CC-CEDICT's: ECDICT's not asked
    assert senses("debts of a sole proprietorship") == (debts, ("独资",))
    assert senses("a sole proprietorship's debts") == (("独资",), debts)  # the possessive off ('s, ’s, s')
    assert senses("the partners’ debts") == (senses("partners")[0], debts) and "合伙人" in senses("partners")[0]


def test_the_english_word_list_is_looked_up_by_bisection() -> None:
    words = WordList("a\t一\na b\t甲 乙\nab\t丙\nzz top\t乐队\n".encode())
    assert [words.get(w) for w in ("a", "a b", "ab", "zz top")] == ["一", "甲 乙", "丙", "乐队"]
    assert [words.get(w, "-") for w in ("", "a c", "aa", "b", "zz", "zzz")] == ["-"] * 6
    shipped = WordList(lzma.decompress((Path(zhiku.__file__).parent / "data" / "ecdict_en_zh.tsv.xz").read_bytes()))
    keys = [shipped[n] for n in range(len(shipped))]
    assert len(keys) == 567_506 and keys == sorted(keys)  # (bisection needs the lines sorted by bytes)
    assert (shipped.get("overtime"), shipped.get("labor contract"), shipped.get("zhiku")) == (
        "超时 加班 延长时间",
        "劳工合同",
        "",
    )


@pytest.mark.slow  # (embeds the five sample laws)
def test_english_questions_over_the_sample_laws_find_the_governing_article_first(
    tmp_path: Path, kb_factory: Callable[..., KnowledgeBase]
) -> None:
    kb = kb_factory(tmp_path / "idx")
    kb.ingest([LAWS])
    written = kb.query("When does an employer have to sign a written labour contract?", top_k=5)
    assert "中华人民共和国劳动合同法 > 第二章 劳动合同的订立 > 第九条、第十条" in [
        h.chunk.section for h in written.hits
    ]
    probation = kb.query("How long can the probation period be?", top_k=3)  # 试用期: ECDICT's, not CC-CEDICT's 缓刑
    assert probation.hits[0].chunk.section == "中华人民共和国劳动合同法 > 第二章 劳动合同的订立 > 第十九条"
    maternity = kb.query("How long is maternity leave?", top_k=3)
    assert maternity.hits[0].chunk.section == "女职工劳动保护特别规定 > 第七条"
    assert (written.low_confidence, maternity.low_confidence) == (False, False)


def test_a_pinyin_name_meets_the_characters_it_stands_for(
    tmp_path: Path, kb_factory: Callable[..., KnowledgeBase]
) -> None:
    assert "邹游" in names("What does Zou You do for a living?")
    assert "耶律" in names("When was Yelü Yixin made Prince of Zhao?")  # the name, not Prince (no syllables)
    assert names("What is the probation period?") == names("Who won in Zhao?") == ()  # the first word; one syllable
    assert names("Is the Loan Prime Rate capped?") == ()  # lo an, r a te: no syllables of names
    root = tmp_path / "docs"
    root.mkdir()
    (root / "邹游.md").write_text("邹游，中国服装设计师，毕业于东华大学服装学院。", encoding="utf-8")
    (root / "王沈.md").write_text("王沈，三国时期曹魏大臣，出身太原王氏。", encoding="utf-8")
    (root / "生活.md").write_text("生活是每个人每天的日常，衣食住行都在其中。", encoding="utf-8")
    kb = kb_factory(tmp_path / "idx")
    kb.ingest([root])
    found = kb.retrieve("What does Zou You do for a living?", mode="bm25", top_k=3)
    assert [h.chunk.source for h in found.hits][:2] == ["邹游.md", "生活.md"]  # by name, then "living" (生活)
    assert kb.retrieve("What does Zou You do for a living?", top_k=1).hits[0].chunk.source == "邹游.md"  # hybrid
    assert read_question("邹游是做什么的", TextProcessor(), RetrievalSettings()).names == ()


HTTP_DOCS = {
    "timeouts.md": "# Timeouts\n\nThe default timeout for network inactivity is five seconds. You can disable "
    "timeouts for a request.\n",
    "redirects.md": "# Redirects\n\nBy default the client will not follow redirects. Pass follow_redirects to "
    "follow them.\n",
    "proxies.md": "# Proxies\n\nProxy credentials can be passed as the userinfo section of the proxy URL: the "
    "username and the password.\n",
}


@pytest.fixture
def english_docs(tmp_path: Path, kb_factory: Callable[..., KnowledgeBase]) -> KnowledgeBase:
    root = tmp_path / "docs"
    root.mkdir()
    for name, text in HTTP_DOCS.items():
        (root / name).write_text(text, encoding="utf-8")
    kb = kb_factory(tmp_path / "english-idx")
    kb.ingest([root])
    return kb


def test_a_chinese_question_over_english_text_meets_it_in_english_words(english_docs: KnowledgeBase) -> None:
    """BM25 alone: the Chinese words match no English passage; their CC-CEDICT glosses, in the forms the index
    holds (redirect → redirects), do."""
    for question, source in [
        ("客户端默认会跟随重定向吗？", "redirects.md"),
        ("代理的用户名和密码写在哪里？", "proxies.md"),
        ("怎么关闭超时？", "timeouts.md"),
    ]:
        r = english_docs.retrieve(question, mode="bm25", top_k=3)
        assert (r.query.index_language, r.query.cross_lingual) == ("en", True)
        assert r.hits[0].chunk.source == source, question
    plan = english_docs.retrieve("客户端默认会跟随重定向吗？", mode="bm25").query
    assert ("redirect", "redirects") in plan.bridge[-1]  # 重定向: "redirect", as the text writes it
    assert english_docs.retrieve("怎么关闭超时？", mode="dense").query.bridge == ()  # no BM25: nothing to bridge


def test_glosses_take_the_form_the_index_holds() -> None:
    assert inflections("redirect") == ("redirect", "redirects", "redirected", "redirecting")
    assert inflections("close") == ("close", "closes", "closed", "closing")
    assert inflections("proxy") == ("proxy", "proxies", "proxied", "proxying")
    held = {"proxies": 3, "proxy": 5, "timeouts": 2}
    found = english_senses(["代理", "超时"], lambda terms: {t: held.get(t, 0) for t in terms})
    assert ("proxy", "proxy") in found[0] and ("timeout", "timeouts") in found[1]
    assert english_senses(["的", "发"], lambda terms: {}) == ()  # one character: too many senses to bridge


def test_a_cross_lingual_question_that_finds_nothing_answers_with_nothing(
    kb: KnowledgeBase, english_docs: KnowledgeBase
) -> None:
    """No passage passes the filter: no second dense search from the (absent) first passages, no error."""
    assert kb.retrieve(ANNUAL_LEAVE, source="nothing-*.md").hits == ()
    assert english_docs.retrieve("怎么关闭超时？", source="nothing-*.md").hits == ()


def test_an_index_with_neither_的_nor_the_leaves_either_question_in_its_own_language(
    tmp_path: Path, kb_factory: Callable[..., KnowledgeBase]
) -> None:
    """No evidence of the other language, no bridge: a Chinese rule without 的, English notes without "the"."""
    root = tmp_path / "rules"
    root.mkdir()
    (root / "规定.md").write_text("第一条 用人单位应当依法建立和完善劳动规章制度。\n", encoding="utf-8")
    (root / "notes.md").write_text("Zeta alpha: overtime rules apply.\n", encoding="utf-8")
    kb = kb_factory(tmp_path / "idx")
    kb.ingest([root])
    chinese, english = kb.retrieve("劳动规章制度", top_k=3), kb.retrieve("zeta alpha overtime", top_k=3)
    assert (chinese.query.index_language, chinese.query.cross_lingual, chinese.hits[0].chunk.source) == (
        "",
        False,
        "规定.md",
    )
    assert (english.query.cross_lingual, english.query.bridge, english.hits[0].chunk.source) == (False, (), "notes.md")


def test_the_word_list_builder_keeps_chinese_words_of_the_senses_a_dictionary_gives() -> None:
    spec = importlib.util.spec_from_file_location(
        "build_ecdict", Path(__file__).parents[1] / "scripts" / "build_ecdict.py"
    )
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    field = "n. 超时, 加班, 延长时间\\na. 超时的（口）\\n[网络] 加班费\\nn. (Hood)人名；(英)胡德\\n[经] 雇主；业主, a"
    assert build.translations(field) == ["超时", "加班", "延长时间", "超时的", "雇主", "业主"]


def test_the_characters_a_pinyin_syllable_stands_for_are_the_same_in_every_process() -> None:
    # Python's string hash, and so a set's order, differ from one process to the next; characters as common as each
    # other must not be ordered (and cut at PER_SYLLABLE) by it, or a question with a name ranks differently
    program = (
        "import hashlib; from zhiku.retrieval.bridge import readings, names; "
        "print(hashlib.sha256(repr(sorted(readings().items())).encode()).hexdigest(), "
        "hashlib.sha256(repr(names('Whose favor did Xu Ling win after he returned?')).encode()).hexdigest())"
    )
    seen = {
        subprocess.run(
            [sys.executable, "-c", program],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout  # fmt: skip
        for seed in ("1", "6")
    }
    assert len(seen) == 1, seen
