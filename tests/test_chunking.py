"""The chunker: sections, paragraphs, sentence splitting, overlap, article labels, pages, ids."""

from __future__ import annotations

import hashlib
import random
import re
import sys
from collections.abc import Callable
from pathlib import Path

from zhiku.ingest.chunking import (
    ChunkShape,
    Heading,
    article_label,
    chunk_document,
    chunk_id_for,
    chunking_identity,
    iter_headings,
    page_of,
    split_long,
    split_sections,
)
from zhiku.ingest.loaders import load_document
from zhiku.settings import ChunkingSettings
from zhiku.types import Chunk, PageSpan, SourceDoc

LAWS = Path(__file__).parent / "fixtures" / "laws"

SMALL = ChunkShape(size=100, overlap=20, min_chars=10)

LAW_MD = """前言：本文件仅供测试。

# 劳动法

## 第一章 总则

第一条 为了保护劳动者的合法权益，制定本法。

第二条 在中华人民共和国境内的企业与劳动者，适用本法。

### 第一节 一般规定

第三条 劳动者享有平等就业的权利。

## 第二章 促进就业

## 第三章 空章之后

第四条 国家促进就业。
"""


def md(
    text: str, source: str = "laws/劳动法.md", doc_type: str = "markdown", pages: tuple[PageSpan, ...] = ()
) -> SourceDoc:
    return SourceDoc(source=source, doc_type=doc_type, title="t", text=text, pages=pages)


def chunks_of(doc: SourceDoc, settings: ChunkShape = SMALL, collection: str = "hr") -> list[Chunk]:
    return chunk_document(doc, collection=collection, doc_id="doc-1", settings=settings)


def pairs(chunks: list[Chunk]) -> list[tuple[str, str]]:
    return [(c.section, c.text) for c in chunks]


def check_invariants(doc: SourceDoc, chunks: list[Chunk]) -> None:
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    assert len({c.chunk_id for c in chunks}) == len(chunks)
    for c in chunks:
        assert c.text == doc.text[c.start : c.end]
        assert c.text == c.text.strip() and c.text
        assert re.fullmatch(r"[0-9a-f]{24}", c.chunk_id)
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert b.start > a.start and b.end > a.end  # never contained in the previous chunk


# ---------------------------------------------------------------------------------------- sections


def test_law_like_markdown() -> None:
    doc = md(LAW_MD)
    chunks = chunks_of(doc)
    assert pairs(chunks) == [
        ("", "前言：本文件仅供测试。"),
        (
            "劳动法 > 第一章 总则 > 第一条、第二条",
            "第一条 为了保护劳动者的合法权益，制定本法。\n\n第二条 在中华人民共和国境内的企业与劳动者，适用本法。",
        ),
        ("劳动法 > 第一章 总则 > 第一节 一般规定 > 第三条", "第三条 劳动者享有平等就业的权利。"),
        ("劳动法 > 第三章 空章之后 > 第四条", "第四条 国家促进就业。"),
    ]
    check_invariants(doc, chunks)
    first = chunks[1]
    assert (first.start, first.end) == (31, 82)
    assert (first.collection, first.doc_id, first.source, first.doc_type, first.page) == (
        "hr",
        "doc-1",
        "laws/劳动法.md",
        "markdown",
        None,
    )


def test_no_chunk_crosses_a_heading() -> None:
    # Small paragraphs that would all fit in one chunk if headings did not cut.
    text = "# 甲\n\n一段。\n\n## 乙\n\n二段。\n\n## 丙\n\n三段。\n\n# 丁\n\n四段。\n"
    chunks = chunks_of(md(text), ChunkShape(size=1000, overlap=0, min_chars=0))
    assert pairs(chunks) == [("甲", "一段。"), ("甲 > 乙", "二段。"), ("甲 > 丙", "三段。"), ("丁", "四段。")]
    for c in chunks:
        assert "#" not in c.text


def test_heading_levels_are_hierarchical() -> None:
    text = "# A\n\n## B\n\n### C\n\nc\n\n#### D\n\nd\n\n## E\n\ne\n\n### F\n\nf\n\n# G\n\n### H\n\nh\n"
    assert [s.path for s in split_sections(text)] == ["A > B > C", "A > B > C > D", "A > E", "A > E > F", "G > H"]


def test_headings_inside_code_fences_are_ignored() -> None:
    text = "# 指南\n\n```bash\n# 这不是标题\necho hi\n\n## 仍在代码块内\n```\n\n正文。\n\n~~~\n# 波浪线代码块\n~~~\n\n## 真标题\n\n内容。\n"
    chunks = chunks_of(md(text), ChunkShape(size=1000, overlap=0, min_chars=0))
    assert pairs(chunks) == [
        ("指南", "```bash\n# 这不是标题\necho hi\n\n## 仍在代码块内\n```\n\n正文。\n\n~~~\n# 波浪线代码块\n~~~"),
        ("指南 > 真标题", "内容。"),
    ]
    assert [h.title for h in iter_headings(text)] == ["指南", "真标题"]


def test_unclosed_fence_runs_to_the_end() -> None:
    text = "# 甲\n\n````\n# 不是标题\n```\n## 也不是\n"
    assert [h.title for h in iter_headings(text)] == ["甲"]
    assert pairs(chunks_of(md(text))) == [("甲", "````\n# 不是标题\n```\n## 也不是")]


def test_blank_lines_inside_a_fence_do_not_cut_paragraphs() -> None:
    text = "```\n第一行\n\n\n第二行\n```\n\n后文"
    assert [s.paragraphs for s in split_sections(text)] == [((0, 17), (19, 21))]


def test_iter_headings() -> None:
    text = "# 劳动法 #\n\n正文 # 不是标题\n\n  ## 第一章 总则\n#\n####### 七级不是标题\n"
    assert list(iter_headings(text)) == [
        Heading(level=1, title="劳动法", start=0, end=7),
        Heading(level=2, title="第一章 总则", start=20, end=31),
        Heading(level=1, title="", start=32, end=33),
    ]


def test_text_documents_have_no_headings() -> None:
    text = "# 不是标题\n\n第一条 劳动者享有休息的权利。"
    chunks = chunks_of(md(text, source="a.txt", doc_type="text"), ChunkShape(size=1000, overlap=0, min_chars=0))
    assert pairs(chunks) == [("第一条", "# 不是标题\n\n第一条 劳动者享有休息的权利。")]


def test_headings_without_body_make_no_chunks() -> None:
    assert chunks_of(md("# 甲\n\n## 乙\n\n### 丙\n")) == []
    assert chunks_of(md("")) == []
    assert chunks_of(md("\n\n  \n")) == []


# ---------------------------------------------------------------------------------------- articles


def test_article_labels() -> None:
    assert article_label([]) == ""
    assert article_label(["第三条"]) == "第三条"
    assert article_label(["第三条", "第四条", "第七条"]) == "第三条、第四条、第七条"  # exactly, never a range
    assert article_label(["第三条", "第三条"]) == "第三条"


def test_chunk_starting_inside_an_article_names_it() -> None:
    items = "\n\n".join(f"（{n}）第{n}项情形的说明文字，足够长以便分块。" for n in "一二三四五")
    text = (
        f"## 第四章\n\n第四十条 用人单位在下列节日期间应当依法安排劳动者休假：\n\n{items}\n\n第四十一条 延长工作时间。"
    )
    chunks = chunks_of(md(text))  # size 100: 第四十条 (28 chars) + three items (22 each) fill the first chunk
    # 第四十条 with its items is one unit longer than 100: it is cut between items into chunks of its own, and
    # the next article starts a new chunk.
    assert [c.section for c in chunks] == ["第四章 > 第四十条", "第四章 > 第四十条", "第四章 > 第四十一条"]
    assert chunks[0].text.endswith("（三）第三项情形的说明文字，足够长以便分块。")
    assert chunks[1].text.startswith("（四）")
    assert chunks[1].text.endswith("（五）第五项情形的说明文字，足够长以便分块。")
    assert chunks[2].text == "第四十一条 延长工作时间。"


def test_whole_units_are_packed_and_labelled_exactly() -> None:
    arts = [f"第{n}条 " + "内容" * 12 + "。" for n in "一二三四五"]  # 29 characters each
    doc = md("# 法\n\n" + "\n\n".join(arts))
    chunks = chunks_of(doc, ChunkShape(size=70, overlap=0, min_chars=0))
    assert [c.section for c in chunks] == ["法 > 第一条、第二条", "法 > 第三条、第四条", "法 > 第五条"]
    assert [c.text.split("\n\n") for c in chunks] == [arts[0:2], arts[2:4], arts[4:5]]


def test_faq_pairs_and_numbered_parts_are_units() -> None:
    faq = "问：年假有几天？\n\n答：工作满一年不满十年的，年休假五天。\n\n问：病假工资怎么算？\n\n答：按病假工资规定。"
    chunks = chunks_of(md(f"# 常见问题\n\n{faq}"), ChunkShape(size=40, overlap=0, min_chars=0))
    assert [c.text for c in chunks] == [
        "问：年假有几天？\n\n答：工作满一年不满十年的，年休假五天。",
        "问：病假工资怎么算？\n\n答：按病假工资规定。",
    ]
    parts = "一、总则说明文字。\n\n细则甲。\n\n二、附则说明文字。\n\n细则乙。"
    chunks = chunks_of(md(parts), ChunkShape(size=22, overlap=0, min_chars=0))
    assert [c.text for c in chunks] == ["一、总则说明文字。\n\n细则甲。", "二、附则说明文字。\n\n细则乙。"]


def test_article_marker_needs_whitespace_and_line_start() -> None:
    text = "# 法\n\n依照本法第三十六条 规定执行。\n\n第三十六条规定的工时制度。\n\n第３７条　全角空格也算。"
    chunks = chunks_of(md(text), ChunkShape(size=1000, overlap=0, min_chars=0))
    assert [c.section for c in chunks] == ["法 > 第３７条"]


# ----------------------------------------------------------------------------------- long sections


def long_section_doc() -> SourceDoc:
    body = "".join(f"这是第{i}个句子，用来测试长段落的切分是否正确。" for i in range(130))
    return md(f"# 长文\n\n## 第三章 长段落\n\n{body}\n\n## 第四章\n\n短。\n")


def test_long_section_is_split_at_sentence_ends_with_overlap() -> None:
    settings = ChunkShape(size=500, overlap=100, min_chars=50)
    doc = long_section_doc()
    assert 3000 < len(doc.text) < 3200
    chunks = chunks_of(doc, settings)
    check_invariants(doc, chunks)
    long = [c for c in chunks if c.section == "长文 > 第三章 长段落"]
    assert len(long) == 8
    assert chunks[-1].section == "长文 > 第四章" and chunks[-1].text == "短。"
    for c in long:
        assert len(c.text) <= 500 + 50
        assert c.text.endswith("。")
        assert c.text.startswith("这是第")  # every piece starts at a sentence start
    for a, b in zip(long, long[1:], strict=False):
        overlap = a.end - b.start
        assert 0 < overlap <= 100
        assert b.end - a.end >= 50
    assert long[0].text.startswith("这是第0个句子")
    assert long[-1].text.endswith("这是第129个句子，用来测试长段落的切分是否正确。")


def test_split_long_prefers_sentence_ends_and_keeps_closing_quotes() -> None:
    text = "甲" * 40 + "。”" + "乙" * 70 + "。"
    assert split_long(text, 0, len(text), size=100, overlap=0, min_chars=0) == [(0, 42), (42, 113)]


def test_split_long_falls_back_to_clauses_then_hard_cuts() -> None:
    text = "甲" * 30 + "，" + "乙" * 30 + "，" + "丙" * 30 + "，" + "丁" * 30 + "。"
    assert split_long(text, 0, len(text), size=100, overlap=0, min_chars=0) == [(0, 93), (93, 124)]
    assert split_long(text, 0, len(text), size=100, overlap=40, min_chars=0) == [(0, 93), (62, 124)]
    text = "啊" * 250
    assert split_long(text, 0, 250, size=100, overlap=0, min_chars=0) == [(0, 100), (100, 200), (200, 250)]
    assert split_long(text, 0, 250, size=100, overlap=30, min_chars=0) == [(0, 100), (70, 170), (140, 240), (210, 250)]


def test_split_long_overlap_starts_on_a_sentence_and_tiny_tail_is_merged() -> None:
    text = ("甲" * 19 + "。") * 10 + "尾巴很短。"  # 205 characters
    assert split_long(text, 0, 205, size=100, overlap=0, min_chars=10) == [(0, 100), (100, 205)]
    assert split_long(text, 0, 205, size=100, overlap=30, min_chars=10) == [(0, 100), (80, 180), (160, 205)]
    assert split_long(text, 0, 205, size=100, overlap=30, min_chars=30) == [(0, 100), (80, 205)]


def test_tiny_trailing_paragraph_is_merged_into_the_previous_chunk() -> None:
    big = "甲" * 96 + "。"  # 97 + 2 + 3 > 100: the tail does not fit by packing
    doc = md(f"## 节\n\n{big}\n\n尾声。")
    assert pairs(chunks_of(doc, ChunkShape(size=100, overlap=0, min_chars=20))) == [("节", f"{big}\n\n尾声。")]
    assert pairs(chunks_of(doc, ChunkShape(size=100, overlap=0, min_chars=0))) == [("节", big), ("节", "尾声。")]
    # A section shorter than min_chars is still emitted.
    assert pairs(chunks_of(md("## 节\n\n短。"), ChunkShape(size=100, overlap=0, min_chars=50))) == [("节", "短。")]


def test_tiny_tail_of_a_split_paragraph_is_merged() -> None:
    body = ("甲" * 19 + "。") * 10 + "尾巴很短。"  # 205 characters, one paragraph
    doc = md(f"## 节\n\n{body}")
    chunks = chunks_of(doc, ChunkShape(size=100, overlap=30, min_chars=30))
    assert [(c.start - 6, c.end - 6) for c in chunks] == [(0, 100), (80, 205)]
    assert chunks[-1].text.endswith("。尾巴很短。")


def test_tiny_first_chunk_joins_the_next_one() -> None:
    long = ("乙" * 29 + "。") * 5  # 150 characters: split in two
    doc = md(f"## 节\n\n短。\n\n{long}")
    chunks = chunks_of(doc, ChunkShape(size=100, overlap=0, min_chars=10))
    assert [c.text for c in chunks] == ["短。\n\n" + long[:90], long[90:]]


def test_paragraphs_are_packed_whole() -> None:
    p = [
        "第一段有三十个字符的内容用于测试打包是否正确完成了。",
        "第二段。",
        "第三段有三十个字符的内容用于测试打包是否正确完成了呀。",
    ]
    doc = md("\n\n".join(p * 3))
    chunks = chunks_of(doc, ChunkShape(size=100, overlap=20, min_chars=0))
    check_invariants(doc, chunks)
    for c in chunks:
        assert len(c.text) <= 100
        assert all(part in p for part in c.text.split("\n\n"))
    assert sum(len(c.text.split("\n\n")) for c in chunks) == 9


def test_english_sentences_split_at_period_space() -> None:
    text = (
        "The employer shall pay wages on time. Overtime is paid at 150 percent of the normal rate! "
        "Is annual leave paid? Yes, it is paid in full. Version 3.5 of the handbook applies to all staff "
        '(see "Leave.") Questions go to HR.'
    )
    chunks = chunks_of(md(text), ChunkShape(size=100, overlap=0, min_chars=0))
    assert [c.text for c in chunks] == [
        "The employer shall pay wages on time. Overtime is paid at 150 percent of the normal rate!",
        "Is annual leave paid? Yes, it is paid in full.",
        'Version 3.5 of the handbook applies to all staff (see "Leave.") Questions go to HR.',
    ]
    overlapping = chunks_of(md(text), ChunkShape(size=100, overlap=40, min_chars=0))
    assert [c.text for c in overlapping] == [
        "The employer shall pay wages on time. Overtime is paid at 150 percent of the normal rate!",
        "paid at 150 percent of the normal rate! Is annual leave paid? Yes, it is paid in full.",
        'Yes, it is paid in full. Version 3.5 of the handbook applies to all staff (see "Leave.")',
        'applies to all staff (see "Leave.") Questions go to HR.',
    ]


# ------------------------------------------------------------------------------------------- pages


def test_page_assignment() -> None:
    p1, p2, p3 = ("一" * 79 + "。", "二" * 79 + "。", "三" * 79 + "。")
    text = f"{p1}\n\n{p2}\n\n{p3}"
    settings = ChunkShape(size=100, overlap=0, min_chars=0)
    pages = (PageSpan(1, 0, 82), PageSpan(2, 82, 164), PageSpan(3, 164, 244))
    assert [c.page for c in chunks_of(md(text, pages=pages), settings)] == [1, 2, 3]
    # Unsorted spans; an offset in a gap between pages belongs to the page before it.
    gappy = (PageSpan(3, 164, 244), PageSpan(1, 0, 80))
    assert [c.page for c in chunks_of(md(text, pages=gappy), settings)] == [1, 1, 3]
    assert [c.page for c in chunks_of(md(text), settings)] == [None, None, None]
    assert page_of(pages, 81) == 1 and page_of(pages, 82) == 2 and page_of((), 5) is None


def test_page_is_where_most_of_the_chunk_is() -> None:
    # A caption line at the foot of page 1, its table on page 2: the citation names page 2, not the start page.
    caption, rows = (
        "表 1 加班工资标准",
        "| 情形 | 标准 |\n| --- | --- |\n" + "\n".join(f"| 情形{n} | 150% |" for n in range(6)),
    )
    text = f"{caption}\n\n{rows}"
    pages = (PageSpan(1, 0, len(caption) + 1), PageSpan(2, len(caption) + 1, len(text)))
    (chunk,) = chunks_of(md(text, pages=pages), ChunkShape(size=200, overlap=0, min_chars=0))
    assert (chunk.start, chunk.page) == (0, 2)
    half = "甲" * 50
    tie = f"{half}{half}"
    assert chunks_of(md(tie, pages=(PageSpan(4, 0, 50), PageSpan(5, 50, 100))), ChunkingSettings())[0].page == 4


# --------------------------------------------------------------------------------------------- ids


def test_chunk_ids_are_content_hashes() -> None:
    doc = md(LAW_MD)
    first, second = chunks_of(doc), chunks_of(doc)
    assert [c.chunk_id for c in first] == [c.chunk_id for c in second]
    c = first[2]
    expected = hashlib.sha256(f"hr\x00laws/劳动法.md\x00{c.section}\x00{c.text}".encode()).hexdigest()[:24]
    assert c.chunk_id == expected == chunk_id_for("hr", "laws/劳动法.md", c.section, c.text)
    assert chunk_id_for("hr", "a.md", "节", "正文。") == "8d0c6fc8f48125e69c49d4a2"
    # The id depends on collection, source, section and text, and not on position.
    assert chunks_of(doc, collection="other")[2].chunk_id != c.chunk_id
    moved = chunks_of(md("# 前面加了一节\n\n新内容。\n\n" + LAW_MD))
    assert c.chunk_id in {x.chunk_id for x in moved}


def test_repeated_text_gets_unique_ids() -> None:
    para = "同一段落重复出现" * 10 + "。"  # 81 characters: one chunk each
    doc = md(f"## 节\n\n{para}\n\n{para}\n\n{para}")
    chunks = chunks_of(doc, ChunkShape(size=100, overlap=0, min_chars=0))
    assert [c.text for c in chunks] == [para] * 3
    assert [c.chunk_id for c in chunks] == [
        chunk_id_for("hr", "laws/劳动法.md", "节", para),
        chunk_id_for("hr", "laws/劳动法.md", "节", para, occurrence=1),
        chunk_id_for("hr", "laws/劳动法.md", "节", para, occurrence=2),
    ]
    assert len(set(c.chunk_id for c in chunks)) == 3


def test_chunking_identity() -> None:
    assert chunking_identity(ChunkingSettings()) == "zhiku-chunker-3;size=200;overlap=50;min_chars=50;context=1"


# ------------------------------------------------------------------------------------- real laws


def test_labor_law_default_settings() -> None:
    doc = load_document(LAWS / "劳动法(2018-12-29).md", "laws/劳动法(2018-12-29).md")
    chunks = chunks_of(doc, ChunkingSettings())
    check_invariants(doc, chunks)
    assert len(chunks) == 55
    assert chunks[0].section == "中华人民共和国劳动法"
    assert chunks[0].text.startswith("1994年7月5日")
    assert chunks[0].text.endswith("第二次修正")  # its <!-- INFO END --> marker left out (a comment)
    assert all("<!--" not in c.text for c in chunks)
    chapter4 = [
        (c.section.removeprefix("中华人民共和国劳动法 > "), c.text[:6]) for c in chunks if "第四章" in c.section
    ]
    assert chapter4 == [  # whole articles, labelled exactly
        ("第四章 工作时间和休息休假 > 第三十六条、第三十七条、第三十八条、第三十九条", "第三十六条 "),
        ("第四章 工作时间和休息休假 > 第四十条、第四十一条", "第四十条 用"),
        ("第四章 工作时间和休息休假 > 第四十二条、第四十三条", "第四十二条 "),
        ("第四章 工作时间和休息休假 > 第四十四条", "第四十四条 "),
        ("第四章 工作时间和休息休假 > 第四十五条", "第四十五条 "),
    ]
    assert chunks[-1].section == "中华人民共和国劳动法 > 第十三章 附则 > 第一百零六条、第一百零七条"
    assert chunks[-1].text.endswith("第一百零七条 本法自1995年1月1日起施行。")
    for c in chunks:
        assert "\n#" not in c.text and not c.text.startswith("#")
        assert len(c.text) <= 200 + 50
        assert "至" not in c.section.rpartition(" > ")[2]


def test_annual_leave_regulation() -> None:
    doc = load_document(LAWS / "职工带薪年休假条例(2007-12-14).md", "laws/职工带薪年休假条例(2007-12-14).md")
    assert doc.title == "职工带薪年休假条例"
    big = chunks_of(doc, ChunkShape(size=1000, overlap=200))
    assert [c.section for c in big] == [
        "职工带薪年休假条例 > 第一条、第二条、第三条、第四条、第五条、第六条、第七条",  # (its comment left out)
        "职工带薪年休假条例 > 第八条、第九条、第十条",
    ]
    assert big[0].text.startswith("2007年12月7日 国务院第198次常务会议通过")
    assert big[1].text.endswith("第十条 本条例自2008年1月1日起施行。")
    small = chunks_of(doc, ChunkShape(size=200, overlap=40, min_chars=20))
    check_invariants(doc, small)
    assert [c.section.removeprefix("职工带薪年休假条例 > ") for c in small] == [
        "第一条",
        "第二条、第三条",
        "第四条",
        "第五条",
        "第六条",
        "第七条",
        "第七条",
        "第八条、第九条、第十条",
    ]
    # 第七条 is longer than 200 characters: it is cut into two chunks of its own, the second overlapping the
    # first. No sentence ends within the 40 characters before the cut, so the overlap starts after a clause mark.
    a, b = small[5], small[6]
    assert a.text.endswith("对直接负责的主管人员以及其他直接责任人员依法给予处分；")
    assert b.text.startswith("对直接负责的主管人员以及其他直接责任人员依法给予处分；属于其他单位的")
    assert b.text.endswith("人民法院强制执行。")
    assert a.end - b.start == 27
    assert doc.text[b.start - 1] == "，"


def test_law_corpus_invariants() -> None:
    settings = ChunkShape(size=300, overlap=60, min_chars=30)
    laws = sorted(p for p in LAWS.glob("*.md") if p.name != "SOURCES.md")
    assert len(laws) == 5  # tests/fixtures/laws/SOURCES.md: five shapes of the shared corpus
    for path in laws:
        doc = load_document(path, f"laws/{path.name}")
        chunks = chunks_of(doc, settings)
        assert chunks, path.name
        check_invariants(doc, chunks)
        for c in chunks:
            assert len(c.text) <= settings.size + settings.min_chars + 2, (path.name, c.section)
            assert c.section.startswith(doc.title), (path.name, c.section)


def calls_while(fn: Callable[[], object]) -> int:
    """How many Python and C function calls ``fn()`` makes (a count, the same on every machine)."""
    n = 0

    def count(frame: object, event: str, arg: object) -> None:
        nonlocal n
        n += event in ("call", "c_call")

    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return n


def test_linear_on_400kb() -> None:
    law = (LAWS / "劳动法(2018-12-29).md").read_text(encoding="utf-8")
    text = "\n\n".join([law] * 16)
    assert len(text.encode("utf-8")) > 400_000
    settings = ChunkShape(size=300, overlap=60, min_chars=30)
    doc, one_doc = md(text), md(law)
    chunks = chunks_of(doc, settings)
    one = chunks_of(one_doc, settings)
    assert len(one) == 38
    assert len(chunks) == 16 * 38
    assert len({c.chunk_id for c in chunks}) == 16 * 38  # repeats get occurrence-suffixed ids
    # The work grows linearly: 16 copies cost at most 17 times the calls of one (measured: 85,150 vs 5,200);
    # anything quadratic in the text would cost ~8x more. Wall time: bench, not a test.
    assert calls_while(lambda: chunks_of(doc, settings)) <= 17 * calls_while(lambda: chunks_of(one_doc, settings))


def test_invariants_on_random_documents() -> None:
    """Seeded random Markdown/text made of the characters the chunker cares about."""
    rng = random.Random(20240601)
    pieces = list("甲乙丙丁。，；！？…”） .,:;!?ab\n\n\n   \t\u3000")
    pieces += ["# ", "## ", "\n```\n", "\n~~~\n", "第三条 ", "\n第十条 ", "Hello world. "]
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 1200)))
        size = rng.randint(100, 400)
        settings = ChunkShape(size=size, overlap=rng.randint(0, size // 2 - 1), min_chars=rng.randint(0, 80))
        for doc_type in ("markdown", "text"):
            doc = md(text, doc_type=doc_type)
            chunks = chunks_of(doc, settings)
            check_invariants(doc, chunks)
            for c in chunks:
                assert len(re.sub(r"\n\s*\n", "", c.text)) <= settings.size + settings.min_chars
            for a, b in zip(chunks, chunks[1:], strict=False):
                assert a.end - b.start <= settings.overlap


def test_an_overlap_never_starts_inside_a_latin_word() -> None:
    # order-service.log: a piece opened on "riPool.createTimeoutException(HikariPool.java:696)"
    line = "at com.zaxxer.hikari.pool.HikariPool.createTimeoutException(HikariPool.java:696)"
    text = (
        "2024-05-20 10:07:02 ERROR [order-service] ORD-5000 Internal error: java.sql.SQLTransientConnectionException: "
        "HikariPool-1 - Connection is not available, request timed out after 30000ms.\n"
        f"2024-05-20 10:07:02 ERROR [order-service]   {line}\n2024-05-20 10:09:30 INFO  [order-service] Connection pool"
    )
    pieces = split_long(text, 0, len(text), size=200, overlap=50, min_chars=50)
    assert [text[a:b][:20] for a, b in pieces] == [
        "2024-05-20 10:07:02 ",
        "request timed out af",
        "2024-05-20 10:09:30 ",
    ]
    assert pieces[2][0] == pieces[1][1] + 1  # no overlap rather than a broken word (was: from "riPool.create…")
    chinese = "甲" * 90 + "乙" * 60  # no boundary in the window either: the overlap is kept, as before
    assert split_long(chinese, 0, 150, size=100, overlap=20, min_chars=0) == [(0, 100), (80, 150)]


def test_a_hard_cut_inside_a_run_of_latin_text_keeps_its_overlap() -> None:
    # a run with no space (base64, a long URL): every cut falls inside it, so the next piece starts mid-word either
    # way; it lost its overlap too ((0, 100), (100, 200), …: a term across the cut was in no piece whole)
    run = "".join(chr(ord("a") + i % 26) for i in range(400))
    assert split_long(run, 0, 400, size=100, overlap=20, min_chars=10) == [
        (0, 100),
        (80, 180),
        (160, 260),
        (240, 340),
        (320, 400),
    ]
