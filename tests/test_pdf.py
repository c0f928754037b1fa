"""The PDF loader on real Chinese PDFs: pages, reading order, headers/footers, tables, images, scans, bad files."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest

from pdf_fixtures import (
    BOOK,
    NOTE,
    PAPER,
    PAPER_TABLE,
    PASSWORD,
    THESIS,
    THESIS_P8,
    THESIS_TABLE,
    encrypted_pdf,
    grid_table_ops,
    handmade_pdf,
    scanned_pdf,
    truncated_pdf,
)
from zhiku.errors import LoaderError
from zhiku.ingest.chunking import ChunkShape, chunk_document, page_of
from zhiku.ingest.loaders import load_document, pdf
from zhiku.ingest.loaders import ocr as ocr_mod
from zhiku.ingest.loaders.markup import join_lines
from zhiku.ingest.loaders.pdf import PdfLoader
from zhiku.ingest.loaders.pdf_layout import Layout, Line, is_garbled, page_markdown, running_lines
from zhiku.settings import ChunkingSettings, LoaderSettings
from zhiku.types import SourceDoc

NO_OCR = LoaderSettings(ocr="off")


@pytest.fixture(scope="module")
def paper() -> SourceDoc:
    return PdfLoader(NO_OCR).load(PAPER, "elegantpaper-cn.pdf")


@pytest.fixture(scope="module")
def thesis() -> SourceDoc:
    return PdfLoader(NO_OCR).load(THESIS, "论文/bithesis.pdf")


def page_at(doc: SourceDoc, needle: str) -> int | None:
    return page_of(doc.pages, doc.text.index(needle))


# --- pages and text ------------------------------------------------------------------------------------
def test_pages_of_known_sentences(paper: SourceDoc, thesis: SourceDoc) -> None:
    assert [p.number for p in paper.pages] == [1, 2, 3, 4, 5]
    assert (paper.doc_type, paper.title, paper.needs_ocr_pages, paper.ocr_pages) == (
        "pdf",
        "ElegantPaper: 一个优美的 LATEX 工作论文模板",
        (),
        (),
    )
    assert page_at(paper, "本模板使用 newtxtext 和 newtxmath 分别设置全文的英文文本字体和数学字体。") == 1
    assert page_at(paper, "插图的命令和以前一样，也是使用 figure 环境。") == 2
    assert page_at(paper, "建议使用 booktabs 宏包制作表格") == 3
    assert page_at(paper, "1). 如何删除版本信息？") == 4
    assert page_at(paper, "这是一个示例文档：") == 5
    assert [p.number for p in thesis.pages] == list(range(1, 12))
    assert page_at(thesis, "摘要是一篇具有独立性和完整性的短文") == 3
    assert page_at(thesis, "表 1-1 统计表") == 6
    assert page_at(thesis, THESIS_P8) == 8
    assert page_at(thesis, "值此论文完成之际，首先向我的导师……") == 11


def test_chunks_cite_the_page_they_start_on(thesis: SourceDoc) -> None:
    chunks = chunk_document(thesis, collection="c", doc_id="d", settings=ChunkingSettings())

    def page(start: str) -> int | None:
        [chunk] = [c for c in chunks if c.text.startswith(start)]
        return chunk.page

    assert page("本人郑重声明：所呈交的毕业设计") == 2
    assert page("本文结论……。[3]") == 8
    assert page("[1] 余雄庆. 飞机总体") == 9
    assert all(c.page is not None for c in chunks)


def test_headers_footers_and_page_numbers_are_dropped(thesis: SourceDoc, paper: SourceDoc) -> None:
    paragraphs = thesis.text.split("\n\n")
    assert "北京理工大学本科生毕业设计（论文）" not in paragraphs  # the running header of pages 2-11
    assert not [p for p in paragraphs + paper.text.split("\n\n") if re.fullmatch(r"[\dIVX]+", p)]  # page numbers


def test_running_headers_naming_the_section_and_page_of_pages_are_dropped() -> None:
    # elegantbook-cn.pdf heads pages 5-8, 10, 11 with "<section> –N/11–": the words change with the section, so
    # the repeated-text rule missed them and "2.4 章标题显示风格 –3/11–" ended passages quoted in answers
    book = PdfLoader(NO_OCR).load(BOOK, "elegantbook-cn.pdf")
    assert re.findall(r"–\d+/11–", book.text) == []
    assert "调用颜色主题 green 的方法为" in book.text and "1为原先默认主题" in book.text  # the text around them stays
    assert re.search(r"^#+ 2\.4 章标题显示风格$", book.text, re.MULTILINE)  # the section's own heading stays
    pages = [([line(f"{n}.1 第{n}节 –{n}/9–", 30), line(f"正文第{n}页。", 300)], 842.0) for n in range(1, 4)]
    assert running_lines(pages) == [{0}, {0}, {0}]
    assert running_lines(pages[:2]) == [set(), set()]  # on fewer than 3 pages it may be text
    # body lines at the foot of pages ending in a fraction or a date (N/M with the same N) are text
    for end in ("占比 3/4", "截至 2023/12"):
        text = [
            ([line(f"正文第{n}页。", 300), line(f"{group}组的结果：{end}", 790)], 842.0)
            for n, group in enumerate("甲乙丙")
        ]
        assert running_lines(text) == [set(), set(), set()], end
    # nor are three such lines at the foot of one page (a table's rows), nor N/M pages on fewer than 3 pages
    rows = [line(f"{group}组 {n}/4", 760 + 20 * n) for n, group in enumerate("甲乙丙")]
    assert running_lines([(rows, 842.0), ([line("正文。", 300)], 842.0), ([line("正文。", 300)], 842.0)]) == [set()] * 3


def test_lines_join_without_spaces_between_chinese_characters(thesis: SourceDoc, paper: SourceDoc) -> None:
    assert (
        "摘要正文选用模板中的样式所定义的“正文”，每段落首行缩进 2 个字符；或者手动设置成每段落首行缩进 2 个汉字，"
        "字体：宋体，字号：小四，行距：固定值 22磅，间距：段前、段后均为 0 行。阅后删除此段。"
    ) in thesis.text
    assert re.search(r"^#+ 摘要$", thesis.text, re.MULTILINE)  # "摘 要", letter-spaced in the PDF
    assert (
        "此模板基于 LATEX 的标准文类 article 设计，也即意味着你可以把 article 文类的选项传递给本模板，"
        "比如 a4paper, 11pt 等等。"
    ) in paper.text


def test_headings_from_font_sizes(paper: SourceDoc) -> None:
    assert re.findall(r"^#+ .*", paper.text, re.MULTILINE) == [
        "# ElegantPaper: 一个优美的 LATEX 工作论文模板",
        "## 1 模板介绍",
        "### 1.1 全局选项",
        "### 1.2 英文与数学字体",
        "### 1.3 自定义命令",
        "### 1.4 列表环境",
        "### 1.5 插图",
        "### 1.6 表格",
        "### 1.7 参考文献",
        "## 2 常见问题 FAQ",
        "## 3 示例",
        "## 参考文献",
    ]


def test_monospaced_lines_become_code_blocks(paper: SourceDoc) -> None:
    assert (
        "```\n\\documentclass [ lang = cn ]{ elegantpaper } % or\n\\documentclass { cn }{ elegantpaper }\n```"
        in paper.text
    )


# --- tables ----------------------------------------------------------------------------------------------
def test_tables_become_markdown_where_they_stand(thesis: SourceDoc, paper: SourceDoc) -> None:
    assert THESIS_TABLE in thesis.text
    assert page_at(thesis, "| 项目 | 产量 | 销量 | 产值 | 比重 |") == 6
    assert "手机 1000 10000" not in thesis.text  # the table's lines are not repeated as text
    assert PAPER_TABLE + "\n\nStandard errors in parentheses" in paper.text
    note = PdfLoader(NO_OCR).load(NOTE, "note.pdf")
    assert (
        "表 1: 燃油效率与汽车价格\n\n|  | (1) | (2) |\n| --- | --- | --- |\n| 燃油效率 | -238.90*** | -49.51 |"
        in note.text
    )
    assert page_at(note, "| 燃油效率 |") == 7


def test_a_table_stays_in_one_chunk_with_its_caption(thesis: SourceDoc) -> None:
    chunks = chunk_document(thesis, collection="c", doc_id="d", settings=ChunkShape(size=300, overlap=50))
    [chunk] = [c for c in chunks if "| 项目 | 产量 |" in c.text]
    assert THESIS_TABLE in chunk.text
    assert chunk.page == 6


# --- images ----------------------------------------------------------------------------------------------
def test_images_are_extracted_with_page_box_and_caption(thesis: SourceDoc) -> None:
    refs = [im.ref for im in thesis.images]
    assert [(r.page, r.mime_type, r.width, r.height, r.caption) for r in refs] == [
        (1, "image/png", 1358, 269, ""),  # the university logo on the cover
        (6, "image/png", 461, 330, "图 1-1 标题序号"),  # the figure
    ]
    figure = thesis.images[1]
    assert figure.ref.bbox == (192.7, 398.5, 414.0, 556.9)  # x0, top, x1, bottom from the page's top-left
    assert re.fullmatch(r"[0-9a-f]{64}\.png", figure.ref.image_id)
    assert figure.data.startswith(b"\x89PNG\r\n\x1a\n")
    assert thesis.text[figure.offset :].startswith("图 1-1 标题序号")  # anchored where it stands: above its caption
    chunks = chunk_document(thesis, collection="c", doc_id="d", settings=ChunkingSettings())
    [holder] = [c for c in chunks if c.images and c.page == 6]
    assert holder.images == (figure.ref,) and "图 1-1 标题序号" in holder.text


def test_small_images_are_skipped_by_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pdf, "IMAGE_MIN_AREA", 0.05)
    big = PdfLoader(LoaderSettings(ocr="off")).load(THESIS, "t.pdf")
    assert [im.ref.page for im in big.images] == [6]  # the logo covers 3 % of its page, the figure 7 %
    assert PdfLoader(LoaderSettings(ocr="off", images=False)).load(THESIS, "t.pdf").images == ()


def test_the_fourth_pdf() -> None:
    book = PdfLoader(NO_OCR).load(BOOK, "elegantbook-cn.pdf")
    assert len(book.pages) == 13 and book.title == "ElegantBook：优美的 LATEX 书籍模板"
    assert [(im.ref.page, im.ref.mime_type) for im in book.images] == [(1, "image/jpeg"), (1, "image/png")]
    assert "| 环境名 | 标签名 | 前缀 | 交叉引用 |\n| --- | --- | --- | --- |\n| definition | label | def |" in book.text
    assert page_at(book, "| 环境名 | 标签名 |") == 6
    assert page_at(book, "# 第 1 章 ElegantLATEX 系列模板介绍") == 3  # the cover's type is not a level (front_pages)


# --- scans and garbled text ------------------------------------------------------------------------------
def test_a_scanned_page_without_ocr_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scan = scanned_pdf(tmp_path / "扫描件.pdf")
    off = PdfLoader(NO_OCR).load(scan, "扫描件.pdf")
    assert (off.text, off.needs_ocr_pages, off.ocr_pages, [p.number for p in off.pages]) == ("", (1,), (), [1])
    monkeypatch.setattr(ocr_mod, "ocr_available", lambda: False)  # the OCR extra missing, OCR on "auto"
    missing = PdfLoader(LoaderSettings()).load(scan, "扫描件.pdf")
    assert (missing.text, missing.needs_ocr_pages) == ("", (1,))
    assert ocr_mod.needs_ocr_note((1,), "auto") == (
        "needs OCR: page 1 without a usable text layer (pip install 'zhiku[ocr]', then re-ingest)"
    )
    assert ocr_mod.needs_ocr_note((2, 3, 4, 7), "off") == (
        "needs OCR: pages 2-4, 7 without a usable text layer "
        "(OCR is off (loaders.ocr); set loaders.ocr: auto and re-ingest)"
    )


def test_a_scanned_page_among_text_pages(tmp_path: Path) -> None:
    import pypdf

    writer = pypdf.PdfWriter()
    writer.add_page(pypdf.PdfReader(str(THESIS)).pages[2])
    writer.add_page(pypdf.PdfReader(str(scanned_pdf(tmp_path / "scan.pdf"))).pages[0])
    with open(tmp_path / "mixed.pdf", "wb") as f:
        writer.write(f)
    doc = PdfLoader(NO_OCR).load(tmp_path / "mixed.pdf", "mixed.pdf")
    assert doc.needs_ocr_pages == (2,)
    assert page_at(doc, "摘要是一篇具有独立性和完整性的短文") == 1
    assert THESIS_P8 not in doc.text


def test_a_scanned_page_is_read_by_ocr(tmp_path: Path) -> None:
    pytest.importorskip("rapidocr")
    scan = scanned_pdf(tmp_path / "扫描件.pdf")
    doc = PdfLoader(LoaderSettings()).load(scan, "扫描件.pdf")
    assert (doc.needs_ocr_pages, doc.ocr_pages, doc.images) == ((), (1,), ())
    assert THESIS_P8 in doc.text
    assert page_at(doc, THESIS_P8) == 1


def test_garbled_text_is_detected() -> None:
    assert is_garbled("(cid:12)(cid:34)(cid:56)(cid:78) 第一章")
    assert is_garbled("\ue001\ue002\ue003\ue004\ue005 总则")
    assert is_garbled("\ufffd\ufffd\ufffd 劳动 \ufffd\ufffd")
    assert not is_garbled("第一章 总则 第一条 为了保护劳动者的合法权益")
    assert not is_garbled("\ue001")  # too little to tell


# --- layout rules on synthetic lines ------------------------------------------------------------------------
def line(text: str, top: float, x0: float = 72, x1: float = 520, size: float = 12) -> Line:
    return Line(text, x0, top, x1, top + size, size)


def test_running_headers_repeat_on_most_pages() -> None:
    pages = [
        ([line("公司内部资料 严禁外传", 30), line(f"正文第{n}页的内容。", 300), line(f"- {n} -", 800, 290, 310)], 842.0)
        for n in range(1, 5)
    ]
    pages.append(([line("公司内部资料 严禁外传", 300)], 842.0))  # the same words mid-page are text
    assert running_lines(pages) == [{0, 2}, {0, 2}, {0, 2}, {0, 2}, set()]


def test_paragraphs_from_line_geometry() -> None:
    layout = Layout(body_size=12, heading_levels={16.0: 1}, leading_gap=6, left=72, right=520)
    items = [
        line("第一章 总则", 100, 250, 340, size=16),
        line("为了规范公司的考勤管理，保障员工的合法权益，根据国家有关法律法规的规定，", 130, 96),
        line("结合本公司实际情况，制定本制度。", 148, 72, 300),
        line("1. 员工应当按时上下班；", 166, 84, 280),
        line("2. 因病请假须提交医院证明。", 184, 84, 300),
        line("The policy applies to every em-", 202),
        line("ployee of the company.", 220, 72, 200),
    ]
    markdown, anchors = page_markdown(items, layout)
    assert markdown == (
        "# 第一章 总则\n\n为了规范公司的考勤管理，保障员工的合法权益，根据国家有关法律法规的规定，结合本公司实际情况，制定本制度。"
        "\n\n1. 员工应当按时上下班；\n\n2. 因病请假须提交医院证明。\n\nThe policy applies to every employee of the company."
    )
    assert anchors == {}


def test_join_lines() -> None:
    assert join_lines("劳动合同", "期限") == "劳动合同期限"
    assert join_lines("比如 a4paper,", "11pt 等等") == "比如 a4paper, 11pt 等等"
    assert join_lines("hyphen-", "ated") == "hyphenated"
    assert join_lines("GB/T 7714-", "2015") == "GB/T 7714- 2015"  # a dash before a number is not hyphenation
    assert join_lines("使用", "newtxtext") == "使用newtxtext"


# --- bad files ------------------------------------------------------------------------------------------
def test_encrypted_pdf_needs_the_password(tmp_path: Path) -> None:
    locked = encrypted_pdf(tmp_path / "加密.pdf")
    with pytest.raises(LoaderError) as e:
        PdfLoader(NO_OCR).load(locked, "加密.pdf")
    assert str(e.value) == (
        f"encrypted PDF: set loaders.pdf_password (ZHIKU_LOADERS__PDF_PASSWORD) to its password to index it: {locked}"
    )
    with pytest.raises(LoaderError, match="encrypted PDF and loaders.pdf_password does not open it"):
        PdfLoader(LoaderSettings(ocr="off", pdf_password="wrong")).load(locked, "加密.pdf")
    doc = PdfLoader(LoaderSettings(ocr="off", pdf_password=PASSWORD)).load(locked, "加密.pdf")
    assert doc.text.startswith("# ElegantPaper: 一个优美的 LATEX 工作论文模板") and len(doc.pages) == 1


def test_broken_and_mislabelled_files_fail_with_reasons(tmp_path: Path) -> None:
    cases = {
        truncated_pdf(
            tmp_path / "截断.pdf"
        ): "cannot open PDF {}: it is corrupt or truncated (not a readable PDF structure)",
        tmp_path / "空.pdf": "empty file (0 bytes): {}",
        tmp_path / "文本.pdf": "content is text or an unknown format, not PDF: the file name's suffix is wrong ({})",
        tmp_path / "文档.pdf": (
            "content is a ZIP archive or Office document (.docx/.xlsx/.pptx), not PDF: "
            "the file name's suffix is wrong ({})"
        ),
    }
    (tmp_path / "空.pdf").write_bytes(b"")
    (tmp_path / "文本.pdf").write_text("这不是 PDF 文件。", encoding="utf-8")
    with zipfile.ZipFile(tmp_path / "文档.pdf", "w") as z:
        z.writestr("word/document.xml", "<w:document/>")
    for path, message in cases.items():
        with pytest.raises(LoaderError) as e:
            load_document(path, path.name)
        assert str(e.value) == message.format(path)


def test_a_ruled_grid_table_is_read_as_a_table(tmp_path: Path) -> None:
    doc = PdfLoader(NO_OCR).load(handmade_pdf(tmp_path / "grid.pdf", grid_table_ops()), "grid.pdf")
    assert doc.text == (
        "Quarterly figures of the sales team are listed below.\n\n"
        "| Region | Units | Revenue |\n| --- | --- | --- |\n| North | 1200 | 36000 |\n| South | 950 | 28500 |"
    )


def test_a_page_with_a_garbled_text_layer_needs_ocr(tmp_path: Path) -> None:
    ops = "BT /F1 12 Tf 72 700 Td (THE LABOUR CONTRACT LAW OF THE PEOPLES REPUBLIC) Tj ET"
    doc = PdfLoader(NO_OCR).load(handmade_pdf(tmp_path / "broken.pdf", ops, pua_font=True), "broken.pdf")
    assert (doc.text, doc.needs_ocr_pages) == ("", (1,))
    fine = PdfLoader(NO_OCR).load(handmade_pdf(tmp_path / "fine.pdf", ops), "fine.pdf")
    assert (fine.text, fine.needs_ocr_pages) == ("THE LABOUR CONTRACT LAW OF THE PEOPLES REPUBLIC", ())


def test_a_missing_extra_names_the_install_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import sys

    from zhiku.errors import MissingDependency

    monkeypatch.setitem(sys.modules, "pypdfium2", None)  # import pypdfium2 -> ImportError
    with pytest.raises(
        MissingDependency, match=r"reading PDF files needs pypdfium2 and pdfplumber: pip install 'zhiku\[pdf\]'"
    ):
        load_document(PAPER, "paper.pdf")
    monkeypatch.setitem(sys.modules, "docx", None)
    (tmp_path / "a.docx").write_bytes(b"PK\x03\x04")
    with pytest.raises(MissingDependency, match=r"pip install 'zhiku\[docx\]'"):
        load_document(tmp_path / "a.docx", "a.docx")
