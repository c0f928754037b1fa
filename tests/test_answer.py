from zhiku.retrieval.answer import build_answer, cite, snippet
from zhiku.types import Chunk, Hit


def _hit(n: int, text: str, *, page=None, section="劳动合同法 > 第二章 劳动合同的订立 > 第十九条", score=0.03) -> Hit:
    chunk = Chunk(
        chunk_id=f"c{n}",
        doc_id="d1",
        collection="laws",
        source="劳动合同法(2012-12-28).md",
        doc_type="markdown",
        section=section,
        page=page,
        start=0,
        end=len(text),
        ordinal=n,
        text=text,
    )
    return Hit(chunk=chunk, score=score)


TEXT = "第十九条 劳动合同期限三个月以上不满一年的，试用期不得超过一个月。同一用人单位与同一劳动者只能约定一次试用期。"


def test_markdown_has_markers_snippets_and_sources():
    a = build_answer(
        "试用期最长多久",
        "hybrid",
        [_hit(1, TEXT), _hit(2, "第二十条 试用期工资。", page=3, section="")],
    )
    assert a.markdown == (
        "**检索问题 / Query:** 试用期最长多久\n\n"
        f"[1] {TEXT} (劳动合同法 > 第二章 劳动合同的订立 > 第十九条)\n\n"
        "[2] 第二十条 试用期工资。\n\n"
        "**来源 / Sources**\n\n"
        "[1] 劳动合同法(2012-12-28).md, 劳动合同法 > 第二章 劳动合同的订立 > 第十九条\n"
        "[2] 劳动合同法(2012-12-28).md, p. 3"
    )
    assert [(c.n, c.chunk_id, c.page, c.text) for c in a.citations] == [
        (1, "c1", None, TEXT),
        (2, "c2", 3, "第二十条 试用期工资。"),
    ]
    assert a.low_confidence is False


def test_no_hits_says_so():
    a = build_answer("火星移民", "bm25", [])
    assert a.citations == ()
    assert "未找到相关内容" in a.markdown


def test_low_confidence_is_flagged():
    a = build_answer("q", "hybrid", [_hit(1, TEXT)], low_confidence=True)
    assert "低置信度 / Low confidence" in a.markdown


def test_a_low_confidence_answer_says_so_first_and_shows_the_nearest_passages_short():
    # 如何做红烧肉 over labour law: five full 400-character articles under a one-line warning read as an answer
    long = "第十六条 本规定自公布之日起施行。" + "女职工禁忌从事的劳动范围包括矿山井下作业。" * 20
    hits = [_hit(1, long), _hit(2, TEXT)]
    a = build_answer("如何做红烧肉", "hybrid", hits, low_confidence=True)
    assert a.markdown == (
        "**检索问题 / Query:** 如何做红烧肉\n\n"
        "> ⚠️ 低置信度 / Low confidence: 知识库中没有找到与问题足够相关的内容，以下段落可能答非所问。"
        "No passage in the knowledge base matches this question closely: the nearest ones follow, shortened; "
        "they may not answer it, so check them before relying on them.\n\n"
        "**最接近的段落 / Closest passages**\n\n"
        f"[1] {long[: 17 + 21 * 4]}… (劳动合同法 > 第二章 劳动合同的订立 > 第十九条)\n\n"
        f"[2] {TEXT} (劳动合同法 > 第二章 劳动合同的订立 > 第十九条)\n\n"
        "**来源 / Sources**\n\n"
        "[1] 劳动合同法(2012-12-28).md, 劳动合同法 > 第二章 劳动合同的订立 > 第十九条\n"
        "[2] 劳动合同法(2012-12-28).md, 劳动合同法 > 第二章 劳动合同的订立 > 第十九条"
    )
    assert [c.text for c in a.citations] == [long, TEXT]  # the structured citations keep the whole passages
    sure = build_answer("q", "hybrid", hits, low_confidence=False).markdown
    assert "最接近的段落" not in sure and long[:390] in sure  # a confident answer shows 400-character snippets


def test_snippet_cuts_at_sentence_end():
    assert snippet(TEXT, 45) == "第十九条 劳动合同期限三个月以上不满一年的，试用期不得超过一个月。…"
    assert snippet("甲乙丙丁戊己庚辛", 5) == "甲乙丙丁…"
    assert snippet("短句。", 100) == "短句。"


def test_budget_shrinks_snippets_but_keeps_every_citation():
    hits = [_hit(i, TEXT * 20) for i in range(1, 11)]
    a = build_answer("试用期", "hybrid", hits, max_chars=3000, snippet_chars=2000)
    assert len(a.markdown) <= 3000
    assert all(f"[{n}] 劳动合同法(2012-12-28).md" in a.markdown for n in range(1, 11))
    assert len(a.citations) == 10 and a.citations[0].text == TEXT * 20


def test_cite():
    assert (
        cite(_hit(1, "x", page=7)) == "劳动合同法(2012-12-28).md, p. 7, 劳动合同法 > 第二章 劳动合同的订立 > 第十九条"
    )


def test_focused_snippet_shows_the_matching_sentence():
    from zhiku.retrieval.answer import focused_snippet

    text = (
        "第十六条 劳动合同由用人单位与劳动者协商一致。" * 3 + "\n\n"
        "第十九条 劳动合同期限三个月以上不满一年的，试用期不得超过一个月。\n\n"
        "第二十条 劳动者在试用期的工资不得低于本单位相同岗位最低档工资。"
    )
    got = focused_snippet(text, 40, ["试用期", "超过"])
    assert got == "…第十九条 劳动合同期限三个月以上不满一年的，试用期不得超过一个月。…"
    # without terms, or when the text fits, it is the plain leading snippet
    assert focused_snippet(text, 40, []) == snippet(text, 40)
    assert focused_snippet("短文本，试用期。", 40, ["试用期"]) == "短文本，试用期。"


def test_one_character_terms_do_not_move_the_snippet_off_an_articles_opening():
    from zhiku.retrieval.answer import focused_snippet

    text = (
        "第十三条 用人单位安排劳动者在法定标准工作时间以外工作的，应按以下标准支付工资。"
        "（一）延长工作时间的，按照不低于本人小时工资标准的百分之一百五十支付。"
        * 2
        + "实行综合计算工时工作制的，其综合计算工作时间超过法定标准工作时间的部分，应视为延长工作时间。"
    )
    # 加班费怎么算: jieba's terms; only 算 (in 计算) is in the text, and it alone must not choose the window
    assert focused_snippet(text, 60, ["加班", "班费", "加班费", "算"]) == snippet(text, 60)
    assert focused_snippet(text, 60, ["加班", "班费", "加班费", "算"]).startswith("第十三条")
    # a longer term still moves it; a query of one-character terms only still uses them
    assert focused_snippet(text, 60, ["综合计算", "算"]).startswith("…实行综合计算工时工作制")
    assert focused_snippet(text, 60, ["算"]).startswith("…实行综合计算工时工作制")


def test_answer_uses_query_terms_for_snippets():
    long_text = "无关的开头内容。" * 60 + "试用期不得超过六个月。"
    a = build_answer("试用期", "hybrid", [_hit(1, long_text)], terms=["试用期"], snippet_chars=60)
    assert "[1] …" in a.markdown and "试用期不得超过六个月。" in a.markdown


ART_31 = "第三十一条 用人单位应当严格执行劳动定额标准，不得强迫或者变相强迫劳动者加班。用人单位安排加班的，应当按照国家有关规定向劳动者支付加班费。"
ART_32 = "第三十二条 劳动者拒绝用人单位管理人员违章指挥、强令冒险作业的，不视为违反劳动合同。"
SEC_31_32 = "劳动合同法 > 第三章 劳动合同的履行和变更 > 第三十一条、第三十二条"


def test_a_passage_of_several_articles_quotes_and_cites_the_one_that_answers():
    hit = _hit(1, f"{ART_31}\n\n{ART_32}", section=SEC_31_32)
    a = build_answer("加班费怎么算", "hybrid", [hit], terms=["加班", "班费", "加班费", "算"])
    sec_31 = "劳动合同法 > 第三章 劳动合同的履行和变更 > 第三十一条"
    assert a.markdown == (
        "**检索问题 / Query:** 加班费怎么算\n\n"
        f"[1] {ART_31} ({sec_31})\n\n"
        "**来源 / Sources**\n\n"
        f"[1] 劳动合同法(2012-12-28).md, {sec_31}"
    )
    assert (a.citations[0].section, a.citations[0].text) == (SEC_31_32, f"{ART_31}\n\n{ART_32}")  # all of it


def test_articles_are_kept_whole_when_none_or_all_hold_the_most_terms():
    from zhiku.retrieval.answer import exact_articles

    hit = _hit(1, f"{ART_31}\n\n{ART_32}", section=SEC_31_32)
    assert exact_articles(hit, ["劳动者"]) == (hit.chunk.text, SEC_31_32)  # both hold it
    assert exact_articles(hit, ["红烧肉"]) == (hit.chunk.text, SEC_31_32)  # neither does
    assert exact_articles(hit, []) == (hit.chunk.text, SEC_31_32)
    assert exact_articles(hit, ["违章", "加班", "指挥"]) == (
        ART_32,
        "劳动合同法 > 第三章 劳动合同的履行和变更 > 第三十二条",
    )
    # ties keep each article with the most terms; a label the text does not match leaves the passage as it is
    three = _hit(
        1,
        f"{ART_31}\n\n{ART_32}\n\n第三十三条 用人单位变更名称的，不影响劳动合同的履行。",
        section=SEC_31_32 + "、第三十三条",
    )
    assert exact_articles(three, ["加班", "违章"])[1].endswith(" > 第三十一条、第三十二条")
    assert exact_articles(three, ["加班", "违章"])[0] == f"{ART_31}\n\n{ART_32}"
    odd = _hit(1, f"{ART_31}\n\n{ART_32}", section="劳动合同法 > 第三十一条、第三十三条")
    assert exact_articles(odd, ["加班"]) == (odd.chunk.text, "劳动合同法 > 第三十一条、第三十三条")


def test_a_low_confidence_answer_to_an_english_question_over_chinese_passages_suggests_asking_in_chinese():
    # "maternity leave days" over the laws: right articles, cosine 0.80 < 0.88 (产假多少天: 0.92, right, confident)
    tip = (
        "> 提示 / Tip: the passages are in Chinese and the question is not; a question in Chinese (用中文提问) usually "
    )
    tip += "matches them better.\n\n**最接近的段落 / Closest passages**"
    low = build_answer("maternity leave days", "hybrid", [_hit(1, TEXT)], low_confidence=True)
    assert tip in low.markdown
    assert tip not in build_answer("如何做红烧肉", "hybrid", [_hit(1, TEXT)], low_confidence=True).markdown
    assert (
        tip not in build_answer("leave", "hybrid", [_hit(1, "Annual leave is 5 days.")], low_confidence=True).markdown
    )
    assert "提示" not in build_answer("maternity leave", "hybrid", [_hit(1, TEXT)]).markdown
    # a question of digits only (996) is no question in another language: no tip that it is not in Chinese
    assert "提示" not in build_answer("996", "hybrid", [_hit(1, TEXT)], low_confidence=True).markdown


def test_a_low_confidence_answer_to_a_chinese_question_over_english_passages_suggests_asking_in_english():
    tip = "> 提示 / Tip: 段落是英文的，问题是中文的；用英文提问 (ask in English) 通常匹配得更好。"
    english = [_hit(1, "Annual leave is 5 days."), _hit(2, "Overtime is paid at 150 %."), _hit(3, TEXT)]
    assert tip in build_answer("年假几天", "hybrid", english, low_confidence=True).markdown
    assert tip not in build_answer("年假几天", "hybrid", english[1:] + [_hit(4, TEXT)], low_confidence=True).markdown
    assert tip not in build_answer("annual leave", "hybrid", english, low_confidence=True).markdown
    assert "提示" not in build_answer("年假几天", "hybrid", english).markdown  # (confident: no tip)


def test_a_document_numbering_its_articles_in_digits_is_quoted_by_the_article_asked_for():
    from zhiku.retrieval.answer import exact_articles
    from zhiku.text import TextProcessor

    text = TextProcessor()
    six, seven = "第6条 员工应当按时考勤。", "第7条 员工每年享有带薪年假五天。"
    hit = _hit(1, f"{six}\n{seven}", section="员工手册 > 第6条、第7条")
    for question in ("员工手册第7条", "第七条"):  # the question's terms are the spelled article's (第七条)
        terms = text.query_tokens(question)
        assert exact_articles(hit, terms, text.normalize) == (seven, "员工手册 > 第7条"), question
        md = build_answer(question, "hybrid", [hit], terms=terms, normalize=text.normalize).markdown
        assert md.startswith(f"**检索问题 / Query:** {question}\n\n[1] {seven} (员工手册 > 第7条)\n\n"), question
