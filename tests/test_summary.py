"""Extractive document summaries (get_document_summary without an LLM): whole sentences of the document's text."""

from __future__ import annotations

from zhiku.ingest.transforms.summary import document_summary, extractive_summary, sentences_of
from zhiku.text import TextProcessor
from zhiku.types import Chunk

LEAVE = (
    "# 职工带薪年休假条例\n\n"
    "第三条 职工累计工作已满1年不满10年的，年休假5天；已满10年不满20年的，年休假10天；已满20年的，年休假15天。\n\n"
    "第五条 单位确因工作需要不能安排职工休年休假的，经职工本人同意，可以不安排职工休年休假。"
)


def chunks(text: str, cuts: list[int]) -> list[Chunk]:
    """``text`` in pieces ending at ``cuts`` (each piece overlapping the previous one by 10 characters)."""
    out, start = [], 0
    for n, end in enumerate([*cuts, len(text)]):
        s = max(0, start - 10) if n else 0
        out.append(Chunk(f"c{n}", "d1", "laws", "条例.md", "markdown", "条例", None, s, end, n, text[s:end]))
        start = end
    return out


def test_sentences_are_whole_not_clauses_cut_at_semicolons_nor_chunk_pieces() -> None:
    # cut in the middle of 第三条: the second piece starts mid-sentence, and its clauses once made "sentences"
    got = sentences_of(chunks(LEAVE, [LEAVE.index("已满10年")]))
    assert got == [
        "第三条 职工累计工作已满1年不满10年的，年休假5天；已满10年不满20年的，年休假10天；已满20年的，年休假15天。",
        "第五条 单位确因工作需要不能安排职工休年休假的，经职工本人同意，可以不安排职工休年休假。",
    ]


def test_a_summary_never_joins_a_clause_of_one_article_to_another() -> None:
    # was: "第三条 职工累计工作已满1年不满10年的，年休假5天；单位因…可以跨1个年度安排。" (as if one rule)
    s = extractive_summary(chunks(LEAVE, [60]), TextProcessor().words, n_sentences=2)
    assert s.summary == (
        "第三条 职工累计工作已满1年不满10年的，年休假5天；已满10年不满20年的，年休假10天；已满20年的，年休假15天。"
        "第五条 单位确因工作需要不能安排职工休年休假的，经职工本人同意，可以不安排职工休年休假。"
    )


def test_code_headings_captions_and_list_items_are_not_summary_sentences() -> None:
    text = (
        "# 模板说明\n\n目录 2.5.1 定理类环境的使用 … 4\n\n本模板内置 5 组颜色主题，默认为蓝色主题。\n\n"
        "```\n\\documentclass [ lang = en ]{ elegantnote } % the English mode sentence.\n```\n\n"
        "表 2.2: 定理类环境的名称与标签\n\n（一）第一项不完整的列举内容；\n\n切换语言请使用 lang 选项，中文为 cn。"
    )
    assert sentences_of(chunks(text, [])) == [
        "本模板内置 5 组颜色主题，默认为蓝色主题。",
        "切换语言请使用 lang 选项，中文为 cn。",
    ]
    # a text of headings only still gets a summary from what there is
    assert sentences_of(chunks("# 标题\n\n第一章 总则的标题行很长\n\n第二章 附则的标题行也很长", [])) == [
        "第一章 总则的标题行很长",
        "第二章 附则的标题行也很长",
    ]


def test_pronouns_are_not_keywords() -> None:
    # elegantbook-cn.pdf's keywords were 函数、环境、积分、我们、…: "we" says nothing about a document
    text = "我们定义可测函数的积分。我们证明积分的性质。我们讨论函数的积分与测度。我们给出积分的例子。"
    s = extractive_summary(chunks(text, []), TextProcessor().words, n_keywords=3)
    assert s.keywords == ("函数", "积分", "可测")


def test_list_markers_html_tags_and_links_stay_out_of_sentences_and_code_characters_stay_in() -> None:
    # 员工手册.docx: "员工在费控系统提交报销单并上传发票照片；6."; deploy-guide.md: "详见 [平台组 Wiki](https://…)。
    # <div class="warning"> <strong>注意：</strong>…" (keyword: strong); a log: "SELECT  FROM orders WHERE userid=?"
    text = (
        "# 手册\n\n报销按以下流程办理：\n\n1. 员工在费控系统提交报销单并上传发票照片；\n2. 部门负责人审核业务真实性；\n"
        "3. 审核通过后，款项统一打入员工工资卡。\n\n详见 [平台组 Wiki](https://wiki.example/platform) 的部署页面。\n\n"
        '![架构图](images/arch.png)\n\n<div class="warning">\n<strong>注意：</strong>生产环境必须设置不少于 3 个副本。\n</div>\n\n'
        "慢查询日志：SELECT * FROM orders WHERE user_id=1 用时很长。\n\n这是**加粗**与*强调*的说明文字。"
    )
    assert sentences_of(chunks(text, [])) == [
        "审核通过后，款项统一打入员工工资卡。",
        "详见 平台组 Wiki 的部署页面。",
        "注意：生产环境必须设置不少于 3 个副本。",
        "慢查询日志：SELECT * FROM orders WHERE user_id=1 用时很长。",
        "这是加粗与强调的说明文字。",
    ]
    keywords = extractive_summary(chunks(text, []), TextProcessor().words).keywords
    assert not {"strong", "div", "warning", "https", "png"} & set(keywords)


def test_a_less_than_sign_is_no_tag_and_a_link_target_may_hold_parentheses() -> None:
    # "若 x<y 则 <b>粗</b>…" lost "y 则" (read as one tag "<y 则 <b>"); a wiki target A_(b) left "_(b))" behind
    text = "若 x<y 则 <b>该值</b>加倍。\n\n详见 [维基](https://en.wikipedia.org/wiki/A_(b)) 的说明页面。"
    assert sentences_of(chunks(text, [])) == ["若 x<y 则 该值加倍。", "详见 维基 的说明页面。"]


def test_chinese_numbered_items_are_sentences_of_their_own() -> None:
    # "报销流程如下：1、员工…照片；2、部门…；3、审核…。" was one sentence, its numbers glued in (as 1. 2. were)
    steps = "1、员工在费控系统提交报销单并上传发票照片；\n2、部门负责人审核业务真实性；\n3、审核通过后款项统一打入员工工资卡。"
    assert sentences_of(chunks("报销流程如下：\n" + steps, [])) == ["审核通过后款项统一打入员工工资卡。"]
    circled = "要求：\n①员工提交报销单并上传发票照片；\n②审核通过后款项统一打入员工工资卡。"
    assert sentences_of(chunks(circled, [])) == ["审核通过后款项统一打入员工工资卡。"]
    spelled = "办法：\n（一）员工提交报销单并上传发票照片；\n（二）审核通过后款项统一打入员工工资卡。"
    assert sentences_of(chunks(spelled, [])) == ["（二）审核通过后款项统一打入员工工资卡。"]  # its marker kept


def test_a_report_is_summarised_by_its_headings_with_a_line_each() -> None:
    parts = [
        ("年度报告 > 一、总体情况", "本年度收入增长百分之十二，利润持平。各部门均完成了年初的目标。"),
        ("年度报告 > 二、主要问题", "成本上升较快。"),
        (
            "年度报告 > 二、主要问题 > （一）原材料",
            "原材料价格全年上涨了两成，挤压了毛利率，这是今年利润没有随收入一同增长的主要原因之一。",
        ),
        ("年度报告 > 三、明年计划", "明年将开拓两个新市场。"),
    ]
    chunks = [
        Chunk(f"c{n}", "d1", "reports", "报告.md", "markdown", section, None, 0, len(text), n, text)
        for n, (section, text) in enumerate(parts)
    ]
    s = document_summary(chunks, None, TextProcessor().words)
    assert (s.kind, s.summary.splitlines()) == (
        "outline",
        [
            "- 一、总体情况：本年度收入增长百分之十二，利润持平。",
            "- 二、主要问题：成本上升较快。",
            "  - （一）原材料：原材料价格全年上涨了两成，挤压了毛利率，这是今年利润没有随收入一同增长的主要原因之一。",
            "- 三、明年计划：明年将开拓两个新市场。",
        ],
    )
