"""Spreadsheets, slide decks and e-books: files written by openpyxl, python-pptx and a zip per the EPUB spec, plus
real-world samples (tests/fixtures/formats/SOURCES.md): their text, their pages, their citations, their bad files."""

from __future__ import annotations

import io
import json
import logging
import shutil
import sys
import zipfile
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

import openpyxl
import pptx
import pytest
from pptx.util import Inches
from typer.testing import CliRunner

from test_docx_html import png
from zhiku.api import KnowledgeBase
from zhiku.cli.app import app
from zhiku.errors import LoaderError, MissingDependency
from zhiku.ingest.chunking import ChunkShape, chunk_document
from zhiku.ingest.loaders import load_document
from zhiku.ingest.loaders.images import ImageLoader
from zhiku.settings import LoaderSettings

FIXTURES = Path(__file__).parent / "fixtures" / "formats"
PRICES = [
    ("苹果", 3.5, "2024-03-01"),
    ("香蕉", 2, "2024-03-02"),
    ("荔枝", 28, "2024-06-15"),
    ("榴莲", 45.8, "2024-07-01"),
]


def make_workbook(path: Path) -> Path:
    """Four sheets: a note, a price list under a merged title row (a merged category, dates, a formula), a hidden
    sheet and a question/answer sheet; the formula's cached value written as Excel writes it."""
    import datetime as dt

    wb = openpyxl.Workbook()
    note = wb.active
    note.title = "说明"
    note["A1"] = "本工作簿由采购部维护，每月更新一次。"
    prices = wb.create_sheet("价格表")
    prices.append(["2024 年水果采购价格"])
    prices.merge_cells("A1:D1")
    prices.append(["类别", "品名", "单价（元/斤）", "生效日期"])
    for name, price, day in PRICES:
        prices.append(["水果", name, price, dt.date.fromisoformat(day)])
    prices.merge_cells("A3:A6")
    prices.append(["合计", "", "=SUM(C3:C6)", None])
    wb.create_sheet("内部").append(["机密", "不得外传的底价 1 元"])
    wb["内部"].sheet_state = "hidden"
    faq = wb.create_sheet("常见问题")
    faq.append(["问题", "答案", "负责人"])
    faq.append(["发票多久能开出来？", "付款后三个工作日内开具电子发票。", "财务部"])
    faq.append(["可以开增值税专用发票吗？", "可以，请提供税号和开户行信息。", ""])
    buf = io.BytesIO()
    wb.save(buf)
    with zipfile.ZipFile(buf) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "xl/worksheets/sheet2.xml":
                data = data.replace(b"<f>SUM(C3:C6)</f><v></v>", b"<f>SUM(C3:C6)</f><v>79.3</v>")
            out.writestr(item, data)
    return path


def make_deck(path: Path, slides: int = 3) -> Path:
    deck = pptx.Presentation()
    for n in range(1, slides + 1):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = f"第 {n} 讲 新员工培训" if n > 2 else ["公司简介", "报销流程"][n - 1]
        body = slide.placeholders[1].text_frame
        body.text = (
            ["公司成立于 2008 年，总部位于杭州。", "差旅费在出差结束后十日内报销。"][n - 1] if n <= 2 else "课程"
        )
        if n == 2:
            sub = body.add_paragraph()
            sub.text, sub.level = "住宿标准：一线城市每晚 600 元", 1
            table = slide.shapes.add_table(2, 2, Inches(1), Inches(5), Inches(4), Inches(1)).table
            for (r, c), text in {(0, 0): "费用", (0, 1): "上限", (1, 0): "餐补", (1, 1): "每天 100 元"}.items():
                table.cell(r, c).text = text
            pic = slide.shapes.add_picture(io.BytesIO(png()), Inches(6), Inches(2))
            pic._element.nvPicPr.cNvPr.set("descr", "报销审批流程图")
            slide.notes_slide.notes_text_frame.text = "提醒大家：发票抬头必须是公司全称。"
    deck.save(str(path))
    return path


def make_epub(path: Path, title: str, chapters: Sequence[tuple[str, str]], *, nav: bool = True) -> Path:
    """An EPUB 3: the mimetype stored first, the container, the OPF package (manifest, spine, nav) and XHTML
    chapters without headings of their own: the table of contents names them."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        z.writestr(
            "META-INF/container.xml",
            '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
            '<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
            "</rootfiles></container>",
        )
        items = "".join(
            f'<item id="c{i}" href="text/c{i}.xhtml" media-type="application/xhtml+xml"/>' for i in range(len(chapters))
        )
        items += '<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>' if nav else ""
        spine = "".join(f'<itemref idref="c{i}"/>' for i in reversed(range(len(chapters))))  # spine order wins
        z.writestr(
            "OEBPS/content.opf",
            '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0"><metadata '
            f'xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>{title}</dc:title></metadata>'
            f"<manifest>{items}</manifest><spine>{spine}</spine></package>",
        )
        links = "".join(f'<li><a href="text/c{i}.xhtml">{h}</a></li>' for i, (h, _) in enumerate(chapters))
        z.writestr("OEBPS/nav.xhtml", f'<html><body><nav epub:type="toc"><ol>{links}</ol></nav></body></html>')
        for i, (_, body) in enumerate(chapters):
            z.writestr(
                f"OEBPS/text/c{i}.xhtml",
                '<?xml version="1.0" encoding="utf-8"?><html xmlns="http://www.w3.org/1999/xhtml"><head>'
                f"<title>c{i}</title></head><body><p>{body}</p></body></html>",
            )
    return path


CHAPTERS = [
    ("第一章 入职", "新员工入职当天领取工牌和电脑。"),
    ("第二章 考勤", "每天上午九点前打卡，迟到三次扣除全勤奖。"),
]


FRONT = "---\ntitle: 员工福利\ntags: [福利, 节日]\n---\n\n端午节每人发放粽子一盒。\n"


def test_front_matter_titles_and_tags_a_markdown_file(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text(FRONT, encoding="utf-8")
    (tmp_path / "b.md").write_text("---\ntags: 入职，#福利, 42\n---\n# 标题\n\n正文。\n", encoding="utf-8")
    a, b = load_document(tmp_path / "a.md", "a.md"), load_document(tmp_path / "b.md", "b.md")
    assert (a.title, a.tags, a.text) == ("员工福利", ("福利", "节日"), "\n端午节每人发放粽子一盒。\n")
    assert (b.title, b.tags) == ("标题", ("入职", "福利", "42"))


def test_a_workbook_is_a_page_per_sheet_with_its_rows_under_their_numbers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "zhiku.ingest"):
        doc = load_document(make_workbook(tmp_path / "采购.xlsx"), "采购.xlsx")
    assert doc.text == (
        "# 说明\n\n本工作簿由采购部维护，每月更新一次。\n\n"
        "# 价格表\n\n2024 年水果采购价格\n\n"
        "| 行 | 类别 | 品名 | 单价（元/斤） | 生效日期 |\n| --- | --- | --- | --- | --- |\n"
        "| 3 | 水果 | 苹果 | 3.5 | 2024-03-01 |\n| 4 | 水果 | 香蕉 | 2 | 2024-03-02 |\n"
        "| 5 | 水果 | 荔枝 | 28 | 2024-06-15 |\n| 6 | 水果 | 榴莲 | 45.8 | 2024-07-01 |\n"
        "| 7 | 合计 |  | 79.3 |  |\n\n"
        "# 常见问题\n\n问：发票多久能开出来？\n答：付款后三个工作日内开具电子发票。\n负责人：财务部\n行：2\n\n"
        "问：可以开增值税专用发票吗？\n答：可以，请提供税号和开户行信息。\n行：3"
    )
    assert (doc.doc_type, doc.title) == ("sheet", "采购")
    assert [(p.number, doc.text[p.start : p.end].split("\n")[0]) for p in doc.pages] == [
        (1, "# 说明"),
        (2, "# 价格表"),
        (4, "# 常见问题"),  # the hidden third sheet is left out, and said so
    ]
    assert caplog.messages == ["采购.xlsx: hidden sheets not indexed: 内部"]
    chunks = chunk_document(doc, collection="c", doc_id="d", settings=ChunkShape(size=120))
    assert [(c.page, c.section, c.text.split("\n")[-1]) for c in chunks] == [
        (1, "说明", "本工作簿由采购部维护，每月更新一次。"),
        (2, "价格表", "| 3 | 水果 | 苹果 | 3.5 | 2024-03-01 |"),
        (2, "价格表", "| 5 | 水果 | 荔枝 | 28 | 2024-06-15 |"),  # each later piece under the header again
        (2, "价格表", "| 7 | 合计 |  | 79.3 |  |"),
        (4, "常见问题", "行：3"),  # whole question/answer pairs
    ]
    assert chunks[2].text.startswith("| 行 | 类别 | 品名 | 单价（元/斤） | 生效日期 |\n| --- |")
    assert chunks[4].text.count("问：") == 2


def test_csv_and_tsv_in_their_encodings(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_bytes('工号;姓名;岗位\n1001;张三;出纳\n\n1002;李四;"会计,主管"\n'.encode("gb18030"))
    (tmp_path / "b.tsv").write_text("问题\t答案\n如何请假？\t在 OA 里提交请假单。\n", encoding="utf-8-sig")
    a, b = load_document(tmp_path / "a.csv", "a.csv"), load_document(tmp_path / "b.tsv", "b.tsv")
    assert (a.text, a.encoding, a.pages[0].number) == (
        "# a\n\n| 行 | 工号 | 姓名 | 岗位 |\n| --- | --- | --- | --- |\n| 2 | 1001 | 张三 | 出纳 |\n"
        "| 4 | 1002 | 李四 | 会计,主管 |",
        "csv",
        1,
    )
    assert b.text == "# b\n\n问：如何请假？\n答：在 OA 里提交请假单。\n行：2"
    (tmp_path / "c.csv").write_text(",# 价目表\n名称,价格\n苹果,3\n", encoding="utf-8")  # a title above the header
    (tmp_path / "d.csv").write_text('Q,A\n"退款\n多久到账？","# 三个\n工作日"\n', encoding="utf-8")
    c, d = load_document(tmp_path / "c.csv", "c.csv"), load_document(tmp_path / "d.csv", "d.csv")
    assert c.text == "# c\n\n\\# 价目表\n\n| 行 | 名称 | 价格 |\n| --- | --- | --- |\n| 3 | 苹果 | 3 |"  # no heading
    assert d.text == "# d\n\n问：退款 多久到账？\n答：# 三个 工作日\n行：2"


def test_real_world_workbooks_xls_and_ods() -> None:
    xls = load_document(FIXTURES / "chinese-provinces.xls", "chinese-provinces.xls")
    assert xls.text.split("\n")[-1] == "| 4 | Chongqing | 重庆市 |"
    ods = load_document(FIXTURES / "SampleSS.ods", "SampleSS.ods")
    assert [p.number for p in ods.pages] == [1, 2]
    assert ods.text.split("\n")[:5] == [
        "# First Sheet",
        "",
        "Test spreadsheet",
        "",
        "| 行 | 2nd row | 2nd row 2nd column |",
    ]


def test_a_deck_is_a_page_and_a_section_per_slide(tmp_path: Path) -> None:
    doc = load_document(make_deck(tmp_path / "培训.pptx"), "培训.pptx")
    assert doc.text == (
        "# 公司简介\n\n公司成立于 2008 年，总部位于杭州。\n\n"
        "# 报销流程\n\n差旅费在出差结束后十日内报销。\n  - 住宿标准：一线城市每晚 600 元\n\n图片：报销审批流程图\n\n"
        "| 费用 | 上限 |\n| --- | --- |\n| 餐补 | 每天 100 元 |\n\n备注：提醒大家：发票抬头必须是公司全称。\n\n"
        "# 第 3 讲 新员工培训\n\n课程"
    )
    assert (doc.doc_type, doc.title, [p.number for p in doc.pages]) == ("slides", "公司简介", [1, 2, 3])
    [image] = doc.images
    assert (image.ref.page, image.ref.caption, image.ref.mime_type) == (2, "报销审批流程图", "image/png")
    assert doc.text[image.offset :].startswith("图片：报销审批流程图")
    real = load_document(FIXTURES / "SampleShow.pptx", "SampleShow.pptx")
    assert (real.title, [p.number for p in real.pages]) == ("SlideShow Sample", [1, 2])
    assert "备注：I am the notes of the first slide" in real.text


def test_an_epub_is_its_chapters_in_spine_order_named_by_the_toc(tmp_path: Path) -> None:
    doc = load_document(make_epub(tmp_path / "手册.epub", "员工手册", CHAPTERS), "手册.epub")
    assert (doc.doc_type, doc.title) == ("epub", "员工手册")
    assert (
        doc.text
        == "# 第二章 考勤\n\n每天上午九点前打卡，迟到三次扣除全勤奖。\n\n# 第一章 入职\n\n新员工入职当天领取工牌和电脑。"
    )
    real = load_document(FIXTURES / "wasteland.epub", "wasteland.epub")
    sections = {c.section for c in chunk_document(real, collection="c", doc_id="d", settings=ChunkShape())}
    assert "The Waste Land > IV. DEATH BY WATER" in sections and real.title == "The Waste Land"


def test_questions_find_the_row_slide_and_chapter_and_cite_them(
    tmp_path: Path, kb_factory: Callable[..., KnowledgeBase], embed_cache_dir: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    make_workbook(docs / "采购.xlsx")
    make_deck(docs / "培训.pptx")
    make_epub(docs / "手册.epub", "员工手册", CHAPTERS)
    (docs / "福利.md").write_text(FRONT, encoding="utf-8")
    kb = kb_factory(tmp_path / "idx")
    report = kb.ingest([docs])
    assert (sorted(report.added), report.failed) == (["培训.pptx", "手册.epub", "福利.md", "采购.xlsx"], ())
    assert [d.title for d in kb.documents() if d.source == "福利.md"] == ["员工福利"]
    assert kb.retrieve("发票", tags=["节日"]).hits[0].chunk.source == "福利.md"  # the file's own tags filter
    assert kb.retrieve("发票", tags=["节日", "入职"]).hits == ()
    for question, source, page, cited in [
        ("荔枝的单价是多少", "采购.xlsx", 2, "采购.xlsx, sheet 2, rows 3–7, 价格表"),
        ("发票多久能开出来", "采购.xlsx", 4, "采购.xlsx, sheet 4, rows 2–3, 常见问题"),
        ("出差住宿标准是多少", "培训.pptx", 2, "培训.pptx, slide 2, 报销流程"),
        ("迟到几次扣全勤奖", "手册.epub", None, "手册.epub, 第二章 考勤"),
    ]:
        answer = kb.query(question, top_k=3)
        first = answer.citations[0]
        assert (first.source, first.page) == (source, page), question
        assert f"[1] {cited}" in answer.markdown, answer.markdown
    args = ["query", "荔枝的单价是多少", "--index", str(tmp_path / "idx"), "--json", "-k", "1"]
    done = CliRunner().invoke(app, args, env={"ZHIKU_CACHE_DIR": str(embed_cache_dir)}, catch_exceptions=False)
    hits = json.loads(done.stdout)["hits"]
    assert [(h["source"], h["page"]) for h in hits] == [("采购.xlsx", 2)]


def test_bad_workbooks_decks_and_books_fail_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = make_workbook(tmp_path / "good.xlsx").read_bytes()
    (tmp_path / "cut.xlsx").write_bytes(good[: len(good) // 2])
    with zipfile.ZipFile(tmp_path / "bomb.xlsx", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("xl/worksheets/sheet1.xml", b"<a>" + b" " * (3 * 1024 * 1024) + b"</a>")
    (tmp_path / "fake.pptx").write_bytes(b"%PDF-1.7\n")
    (tmp_path / "nobook.epub").write_bytes(good)
    (tmp_path / "bin.csv").write_bytes(b"\x00\x01\x02" * 100)
    with zipfile.ZipFile(make_epub(tmp_path / "drm.epub", "书", CHAPTERS), "a") as z:
        z.writestr(
            "META-INF/encryption.xml",
            '<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
            'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData><enc:CipherData>'
            '<enc:CipherReference URI="OEBPS/text/c1.xhtml"/></enc:CipherData></enc:EncryptedData></encryption>',
        )
    small = LoaderSettings(max_file_mb=1)
    from zhiku.ingest.loaders import default_loaders

    loaders = default_loaders(small)

    def reason(name: str) -> str:
        with pytest.raises(LoaderError) as e:
            load_document(tmp_path / name if "/" not in name else Path(name), name, loaders)
        return str(e.value).replace(str(tmp_path) + "/", "")

    assert reason("cut.xlsx").startswith("not a readable .xlsx document (corrupt, truncated, or another ZIP file)")
    assert reason("bomb.xlsx") == (
        "bomb.xlsx unpacks to 3 MiB, over loaders.max_file_mb (1 MiB): a zip bomb, or a document too large to index"
    )
    assert reason(str(FIXTURES / "protect.xlsx")).startswith("password-protected workbook: remove the password")
    assert (
        reason("fake.pptx")
        == "content is PDF, not a PowerPoint .pptx deck: the file name's suffix is wrong (fake.pptx)"
    )
    assert reason("nobook.epub") == (
        "not a readable EPUB e-book: nobook.epub (KeyError: \"There is no item named 'META-INF/container.xml' in the "
        'archive")'
    )
    assert reason("drm.epub") == "the EPUB's chapters are encrypted (DRM): drm.epub"
    assert reason("bin.csv") == "binary file, not text (it contains NUL bytes): bin.csv"
    monkeypatch.setitem(sys.modules, "python_calamine", None)
    monkeypatch.setitem(sys.modules, "pptx", None)
    for name, line in [
        ("good.xlsx", "reading .xlsx workbooks needs python-calamine: pip install 'zhiku[sheets]'"),
        ("x.pptx", "reading PowerPoint files needs python-pptx: pip install 'zhiku[slides]'"),
    ]:
        with pytest.raises(MissingDependency, match=f"^{line.replace('[', '.').replace(']', '.')}$"):
            load_document(tmp_path / name, name)


CJK_FONT = "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc"  # fonts-wqy-microhei (.ci/run installs it)


def make_scan(path: Path, pages: Sequence[Sequence[str]]) -> Path:
    """Lines of Chinese text drawn by Pillow: one frame per page (a multi-page TIFF when there are several)."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype(CJK_FONT, 28)
    frames = []
    for lines in pages:
        img = Image.new("RGB", (900, 60 + 50 * len(lines)), "white")
        for i, text in enumerate(lines):
            ImageDraw.Draw(img).text((40, 30 + 50 * i), text, fill="black", font=font)
        frames.append(img)
    frames[0].save(path, save_all=len(frames) > 1, append_images=frames[1:])
    return path


SCAN = [
    [
        "报销须知",
        "差旅住宿标准为一线城市每晚六百元。",
        "二线城市每晚四百元，其他城市三百元。",
        "发票须在出差结束后十日内提交财务部。",
        "出差期间的市内交通费凭票据实报实销。",
        "超出标准的部分由员工本人自行承担。",
    ],
    [
        "年假规定",
        "工作满一年的员工每年享有五天带薪年假。",
        "工作满十年的员工每年享有十天带薪年假。",
        "年假须提前一周申请。",
    ],
]


def test_an_image_is_read_by_ocr_a_page_per_tiff_frame(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = load_document(make_scan(tmp_path / "制度.tif", SCAN), "制度.tif")
    assert doc.text == (  # lines joined into paragraphs as on an OCR'd PDF page
        "报销须知\n\n差旅住宿标准为一线城市每晚六百元。二线城市每晚四百元，其他城市三百元。发票须在出差结束后十日内"
        "提交财务部。\n\n出差期间的市内交通费凭票据实报实销。超出标准的部分由员工本人自行承担。\n\n年假规定\n\n"
        "工作满一年的员工每年享有五天带薪年假。\n\n工作满十年的员工每年享有十天带薪年假。年假须提前一周申请。"
    )
    assert (doc.doc_type, doc.title, doc.ocr_pages, doc.needs_ocr_pages) == ("image", "制度", (1, 2), ())
    assert [(p.number, doc.text[p.start : p.end].split("\n")[0]) for p in doc.pages] == [
        (1, "报销须知"),
        (2, "年假规定"),
    ]
    assert [(im.ref.page, im.ref.mime_type, im.ref.width) for im in doc.images] == [
        (1, "image/png", 900),
        (2, "image/png", 900),
    ]
    png_file = make_scan(tmp_path / "a.png", SCAN[1:])
    off = load_document(png_file, "a.png", [ImageLoader(LoaderSettings(ocr="off"))])
    assert (off.text, off.needs_ocr_pages, off.ocr_pages) == ("", (1,), ())  # as without the OCR extra
    assert [im.data for im in off.images] == [png_file.read_bytes()]  # a PNG is stored as it is
    monkeypatch.setitem(sys.modules, "PIL", None)  # the base install: no Pillow, no OCR
    bare = load_document(png_file, "a.png")
    assert (bare.text, bare.needs_ocr_pages, bare.images) == ("", (1,), ())
    monkeypatch.undo()
    (tmp_path / "cut.png").write_bytes(png_file.read_bytes()[:300])
    (tmp_path / "fake.jpg").write_bytes(b"%PDF-1.7\n")
    ihdr, idat = b"IHDR" + (100_000).to_bytes(4, "big") * 2 + b"\x08\x02\x00\x00\x00", b"IDAT"  # 100,000 px square
    chunks = [len(c[4:]).to_bytes(4, "big") + c + zlib.crc32(c).to_bytes(4, "big") for c in (ihdr, idat)]
    (tmp_path / "bomb.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"".join(chunks))
    for name, line in [
        ("cut.png", "not a readable image, corrupt or truncated (image file is truncated): cut.png"),
        ("fake.jpg", "content is PDF, not an image Pillow reads: the file name's suffix is wrong (fake.jpg)"),
        (
            "bomb.png",
            "image too large to read (Image size (10000000000 pixels) exceeds limit of 178956970 pixels, "
            "could be decompression bomb DOS attack.): bomb.png",
        ),
    ]:
        with pytest.raises(LoaderError) as e:
            load_document(tmp_path / name, name)
        assert str(e.value).replace(f"{tmp_path}/", "") == line


def test_legacy_word_and_rtf_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = load_document(FIXTURES / "61490.doc", "61490.doc")
    assert (doc.doc_type, doc.title) == ("doc", "61490")
    assert doc.text.startswith(
        "居中的大标题\n\n1. 章节1\n   章节1的内容，一段话\n 1. 章节1.1\n   章节1.1的内容，有点长，"
    )
    assert doc.text.endswith(
        "   下面是表格3x3\n| 11 | 12 | 13 |\n| --- | --- | --- |\n| 21 | 22 | 23 |\n| 31 | 32 | 33 |"
    )
    rtf = load_document(FIXTURES / "issue_28.rtf", "issue_28.rtf")
    assert (rtf.doc_type, rtf.encoding, rtf.text) == (
        "doc",
        "rtf",
        "印刷情况反映：\n201-003-00155 (Multiple)\n\n市政府情况反映：\n022-021-00768 (Multiple)",
    )
    (tmp_path / "rtf.doc").write_bytes((FIXTURES / "issue_28.rtf").read_bytes())  # Word saves RTF as .doc too
    assert load_document(tmp_path / "rtf.doc", "rtf.doc").text == rtf.text
    good = (FIXTURES / "61490.doc").read_bytes()
    (tmp_path / "cut.doc").write_bytes(good[:4096])
    (tmp_path / "fake.doc").write_bytes(b"PK\x03\x04" + b"\x00" * 100)
    for name, line in [
        ("cut.doc", "antiword cannot read it (Read long 0x7274 not possible): {}"),
        (
            "fake.doc",
            "content is a ZIP archive or Office document (.docx/.xlsx/.pptx), not a Word .doc or .rtf "
            "document: the file name's suffix is wrong ({})",
        ),
    ]:
        with pytest.raises(LoaderError) as e:
            load_document(tmp_path / name, name)
        assert str(e.value) == line.format(tmp_path / name, tmp_path / name)
    monkeypatch.setattr(shutil, "which", lambda cmd: None)  # a machine without LibreOffice, antiword or catdoc
    monkeypatch.setitem(sys.modules, "striprtf.striprtf", None)
    for name, line in [
        (
            "61490.doc",
            "reading .doc files needs a converter: install LibreOffice, antiword or catdoc (apt-get "
            "install antiword), or save the file as .docx",
        ),
        ("issue_28.rtf", "reading .rtf files needs striprtf: pip install 'zhiku[rtf]'"),
    ]:
        with pytest.raises(MissingDependency) as m:
            load_document(FIXTURES / name, name)
        assert str(m.value) == line


def test_questions_find_the_image_text_and_the_legacy_word_file(
    tmp_path: Path, kb_factory: Callable[..., KnowledgeBase]
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    make_scan(docs / "制度.tif", SCAN)
    shutil.copy(FIXTURES / "61490.doc", docs / "旧文档.doc")
    shutil.copy(FIXTURES / "issue_28.rtf", docs / "反映.rtf")
    kb = kb_factory(tmp_path / "idx", chunking={"size_chars": 100})  # the scan's two pages in passages of their own
    assert (sorted(kb.ingest([docs]).added), kb.ingest([docs]).skipped) == (
        ["制度.tif", "反映.rtf", "旧文档.doc"],
        ("制度.tif", "反映.rtf", "旧文档.doc"),
    )
    for question, source, page, cited in [
        ("员工每年有几天带薪年假", "制度.tif", 2, "制度.tif, p. 2"),
        ("下面是表格3x3", "旧文档.doc", None, "旧文档.doc"),
        ("市政府情况反映", "反映.rtf", None, "反映.rtf"),
    ]:
        answer = kb.query(question, top_k=3)
        first = answer.citations[0]
        assert (first.source, first.page) == (source, page), question
        assert f"[1] {cited}" in answer.markdown, answer.markdown
    [hit] = kb.retrieve("员工每年有几天带薪年假", top_k=1).hits
    assert [(im.page, im.width) for im in hit.chunk.images] == [(2, 900)]
