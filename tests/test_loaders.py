"""Loaders: decoding, content sniffing, titles, the suffix registry."""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest

from zhiku.errors import IngestError, LoaderError, UnsupportedFormat
from zhiku.ingest.loaders import (
    LOADER_CLASSES,
    DocxLoader,
    EpubLoader,
    HtmlLoader,
    Loader,
    MarkdownLoader,
    PdfLoader,
    SheetLoader,
    SlidesLoader,
    TextLoader,
    default_loaders,
    load_document,
    loader_for,
    supported_suffixes,
)
from zhiku.ingest.loaders.encoding import decode_text, looks_like_text, normalize_newlines, sniff_bytes
from zhiku.ingest.loaders.images import ImageLoader
from zhiku.ingest.loaders.legacy import LegacyWordLoader
from zhiku.ingest.loaders.text import markdown_title, strip_comments
from zhiku.types import SourceDoc

LAWS = Path(__file__).parent / "fixtures" / "laws"
ARTICLE = "第一条 为了保护劳动者的合法权益，调整劳动关系，制定本法。\n"


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# ------------------------------------------------------------------------------------------- decoding


def test_utf8(tmp_path: Path) -> None:
    path = write(tmp_path, "劳动法.md", ("# 劳动法\n\n" + ARTICLE).encode("utf-8"))
    doc = MarkdownLoader().load(path, "法规/劳动法.md")
    assert doc == SourceDoc(
        source="法规/劳动法.md",
        doc_type="markdown",
        title="劳动法",
        text="# 劳动法\n\n第一条 为了保护劳动者的合法权益，调整劳动关系，制定本法。\n",
        pages=(),
        encoding="utf-8",
    )


def test_utf8_bom_is_not_part_of_the_text(tmp_path: Path) -> None:
    path = write(tmp_path, "a.txt", codecs.BOM_UTF8 + ARTICLE.encode("utf-8"))
    doc = TextLoader().load(path, "a.txt")
    assert doc.text == ARTICLE
    assert doc.text[0] == "第"
    assert doc.encoding == "utf-8-sig"


def test_gbk_file_decodes_to_the_exact_text(tmp_path: Path) -> None:
    text = "第三条 劳动者享有平等就业和选择职业的权利、取得劳动报酬的权利。\n"
    path = write(tmp_path, "gbk.txt", text.encode("gbk"))
    doc = TextLoader().load(path, "gbk.txt")
    assert doc.text == "第三条 劳动者享有平等就业和选择职业的权利、取得劳动报酬的权利。\n"
    assert doc.encoding == "gb18030"


def test_gb18030_four_byte_characters(tmp_path: Path) -> None:
    # 𠮷 (U+20BB7) is not in GBK; GB18030 encodes it with four bytes.
    data = "吉祥的“𠮷”字。".encode("gb18030")
    assert len(data) == 18
    text, encoding = decode_text(data, tmp_path / "x.txt")
    assert (text, encoding) == ("吉祥的“𠮷”字。", "gb18030")


@pytest.mark.parametrize(("codec", "name"), [("utf-16-le", "utf-16-le"), ("utf-16-be", "utf-16-be")])
def test_utf16_with_bom(tmp_path: Path, codec: str, name: str) -> None:
    bom = codecs.BOM_UTF16_LE if codec == "utf-16-le" else codecs.BOM_UTF16_BE
    path = write(tmp_path, "u16.md", bom + "# 标题\r\n\r\n正文。".encode(codec))
    doc = MarkdownLoader().load(path, "u16.md")
    assert doc.text == "# 标题\n\n正文。"
    assert doc.title == "标题"
    assert doc.encoding == name


def test_zero_byte_file(tmp_path: Path) -> None:
    path = write(tmp_path, "empty.md", b"")
    with pytest.raises(LoaderError, match=r"empty file \(0 bytes\)") as e:
        MarkdownLoader().load(path, "empty.md")
    assert str(path) in str(e.value)


def test_binary_file_with_nul_bytes(tmp_path: Path) -> None:
    path = write(tmp_path, "data.txt", b"abc\x00\x01\x02\x03 def" * 10)
    with pytest.raises(LoaderError, match="binary file, not text"):
        TextLoader().load(path, "data.txt")


def test_undecodable_bytes(tmp_path: Path) -> None:
    path = write(tmp_path, "noise.txt", bytes(range(0x80, 0x100)) * 4)
    with pytest.raises(LoaderError) as e:
        TextLoader().load(path, "noise.txt")
    message = str(e.value)
    assert "cannot detect the encoding" in message
    assert "expected UTF-8, GB18030/GBK, Big5, Shift-JIS or UTF-16" in message
    assert "convert the file to UTF-8" in message
    assert str(path) in message


def test_latin1_is_not_guessed(tmp_path: Path) -> None:
    path = write(tmp_path, "menu.txt", "café crème brûlée".encode("latin-1"))
    with pytest.raises(LoaderError, match="cannot detect the encoding"):
        TextLoader().load(path, "menu.txt")


def test_markdown_html_comments_are_neither_indexed_nor_quoted(tmp_path: Path) -> None:
    text = (
        "# 职工带薪年休假条例\n\n2008年1月1日 施行\n\n<!-- INFO END -->\n\n"
        "第一条 为了维护职工休息休假权利<!-- 旧稿：\n待核对 -->，制定本条例。\n\n"
        "```html\n<!-- 代码里的注释原样保留 -->\n```\n\n未闭合的 <!-- 不是注释，保留\n"
    )
    doc = MarkdownLoader().load(write(tmp_path, "年休假.md", text.encode("utf-8")), "年休假.md")
    assert doc.text == (
        "# 职工带薪年休假条例\n\n2008年1月1日 施行\n\n\n\n"
        "第一条 为了维护职工休息休假权利，制定本条例。\n\n"
        "```html\n<!-- 代码里的注释原样保留 -->\n```\n\n未闭合的 <!-- 不是注释，保留\n"
    )
    only = write(tmp_path, "注释.md", "<!-- 草稿 -->\n\n<!-- 待写 -->\n".encode())
    with pytest.raises(LoaderError, match="only HTML comments"):
        MarkdownLoader().load(only, "注释.md")


def test_markdown_front_matter_titles_the_document_and_is_neither_indexed_nor_quoted(tmp_path: Path) -> None:
    text = "---\ntitle: 部署指南\ndate: 2024-05-20\ntags: [运维, 部署]\n---\n\n## 准备\n\n安装 Docker 24。\n"
    doc = MarkdownLoader().load(write(tmp_path, "deploy.md", text.encode("utf-8")), "deploy.md")
    assert (doc.title, doc.text) == ("部署指南", "\n## 准备\n\n安装 Docker 24。\n")
    # a UTF-8 BOM, "..." closing it, and no title: the first # heading titles it
    bom = "\ufeff---\nauthor: 张三\n...\n# 值班表\n\n周一 李四\n"
    doc = MarkdownLoader().load(write(tmp_path, "duty.md", bom.encode("utf-8")), "duty.md")
    assert (doc.title, doc.text) == ("值班表", "# 值班表\n\n周一 李四\n")


@pytest.mark.parametrize(
    "text",
    [
        "---\n\n正文从一条分隔线开始。\n\n---\n\n第二段。\n",  # a thematic break, not YAML: kept
        "---\n第一行: 冒号: 不是 YAML\n---\n正文\n",  # not a YAML mapping: kept
        "---\ntitle: 没有结尾\n\n正文\n",  # never closed: kept
    ],
)
def test_a_file_opening_with_a_rule_keeps_its_text(tmp_path: Path, text: str) -> None:
    doc = MarkdownLoader().load(write(tmp_path, "rule.md", text.encode("utf-8")), "rule.md")
    assert (doc.title, doc.text) == ("rule", text)


def test_a_markdown_file_of_front_matter_only_has_no_text(tmp_path: Path) -> None:
    only = write(tmp_path, "空.md", "---\ntitle: 空\n---\n\n".encode())
    with pytest.raises(LoaderError, match="only HTML comments, front matter and whitespace"):
        MarkdownLoader().load(only, "空.md")


def test_a_comment_inside_inline_code_is_code_and_shown_as_written() -> None:
    # CommonMark: a code span that opens first wins; a comment that opens first hides its backticks
    text = "用 `<!-- more -->` 切出摘要。<!-- 注 -->\n``a ` <!-- b --> `` 与 <!-- `c` -->d\n"
    assert strip_comments(text) == "用 `<!-- more -->` 切出摘要。\n``a ` <!-- b --> `` 与 d\n"
    # a backtick never closed in its paragraph is a literal one: it shields nothing in the next paragraph
    assert strip_comments("单个 ` 反引号\n\n<!-- 注 -->\n正文\r\n\r\n`x` <!-- y -->z") == (
        "单个 ` 反引号\n\n\n正文\r\n\r\n`x` z"
    )


def test_many_comments_never_closed_are_kept_in_one_pass() -> None:
    # each stray <!-- used to rescan the rest of the text for a -->: 200,000 of them (1.8 MB) took ~14 minutes (40,000: 34 s)
    text = "<!-- 未闭合\n" * 200_000 + "`<!--` <!-- 也未闭合"
    assert strip_comments(text) == text


def test_gb18030_that_decodes_to_noise_is_refused(tmp_path: Path) -> None:
    # Valid GB18030 byte sequences, but they decode to private-use / C1 control characters.
    for data in (b"\xaa\xa1" * 50, b"\x81\x30\x81\x30" * 10):
        with pytest.raises(LoaderError, match="cannot detect the encoding"):
            decode_text(data, tmp_path / "x.txt")


def test_whitespace_only_file(tmp_path: Path) -> None:
    path = write(tmp_path, "blank.md", " \n\t\r\n\u3000\n".encode("utf-8"))
    with pytest.raises(LoaderError, match="no text in file"):
        MarkdownLoader().load(path, "blank.md")


def test_bom_only_file_has_no_text(tmp_path: Path) -> None:
    with pytest.raises(LoaderError, match="no text in file"):
        decode_text(codecs.BOM_UTF8, tmp_path / "bom.txt")


def test_crlf_and_cr_become_lf(tmp_path: Path) -> None:
    path = write(tmp_path, "win.txt", "第一行\r\n第二行\r第三行\n\r\n".encode())
    doc = TextLoader().load(path, "win.txt")
    assert doc.text == "第一行\n第二行\n第三行\n\n"
    assert normalize_newlines("a\r\n\r\nb\rc") == "a\n\nb\nc"


def test_text_is_otherwise_unchanged(tmp_path: Path) -> None:
    text = "　　全角空格缩进，ＡＢＣ全角字母，繁體字，  两个空格  \n\n\n末尾"
    path = write(tmp_path, "raw.txt", text.encode("utf-8"))
    assert TextLoader().load(path, "raw.txt").text == text


def test_looks_like_text() -> None:
    assert looks_like_text("第一条 为了保护劳动者的合法权益。Hello, world!\n")
    assert not looks_like_text("\ue000\ue001\ue002第一条")
    assert not looks_like_text("abc\x01\x02\x03")


# ------------------------------------------------------------------------------------------- sniffing


@pytest.mark.parametrize(
    ("head", "kind"),
    [
        (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n", "pdf"),
        (b"PK\x03\x04\x14\x00\x06\x00", "zip/office"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "image"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF", "image"),
        (b"GIF89a\x01\x00", "image"),
        (b"  \n<!DOCTYPE html>\n<html>", "html"),
        (b"<HTML><body>", "html"),
        (codecs.BOM_UTF8 + b"<!doctype html>", "html"),
        ("# 标题\n".encode(), None),
        (b"", None),
    ],
)
def test_sniff(head: bytes, kind: str | None) -> None:
    assert sniff_bytes(head) == kind


def test_pdf_content_in_a_markdown_file(tmp_path: Path) -> None:
    path = write(tmp_path, "report.md", b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog >>\nendobj\n")
    with pytest.raises(LoaderError) as e:
        MarkdownLoader().load(path, "report.md")
    assert "content is PDF, not text: the file name's suffix is wrong" in str(e.value)


@pytest.mark.parametrize(
    ("data", "named"),
    [(b"PK\x03\x04rest-of-a-docx", "ZIP archive or Office document"), (b"\x89PNG\r\n\x1a\nIHDR", "an image")],
)
def test_other_non_text_content_in_a_text_file(tmp_path: Path, data: bytes, named: str) -> None:
    with pytest.raises(LoaderError, match=f"content is .*{named}.*, not text: the file name's suffix is wrong"):
        TextLoader().load(write(tmp_path, "x.txt", data), "x.txt")


def test_html_in_a_txt_file_is_loaded_as_text(tmp_path: Path) -> None:
    html = "<!DOCTYPE html>\n<html><body><p>劳动合同</p></body></html>\n"
    doc = TextLoader().load(write(tmp_path, "page.txt", html.encode("utf-8")), "page.txt")
    assert doc.text == html
    assert doc.doc_type == "text"


# ---------------------------------------------------------------------------------------------- titles


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("# 劳动合同法\n\n## 第一章 总则\n", "劳动合同法"),
        ("前言。\n\n## 第一章\n\n# 真正的标题 #\n", "真正的标题"),
        ("```\n# 代码注释\n```\n\n# 文档标题\n", "文档标题"),
        ("~~~python\n# 注释\n~~~\n", None),
        ("## 只有二级标题\n", None),
        ("#没有空格不是标题\n", None),
        ("    # 缩进四格是代码\n", None),
        ("   # 缩进三格仍是标题\n", "缩进三格仍是标题"),
    ],
)
def test_markdown_title(text: str, title: str | None) -> None:
    assert markdown_title(text) == title


def test_title_falls_back_to_the_file_stem(tmp_path: Path) -> None:
    md = write(tmp_path, "员工手册(2024).md", "## 第一章 总则\n\n正文。\n".encode())
    assert MarkdownLoader().load(md, "员工手册(2024).md").title == "员工手册(2024)"
    txt = write(tmp_path, "请假制度.txt", "# 这不是 Markdown 标题\n".encode())
    assert TextLoader().load(txt, "请假制度.txt").title == "请假制度"


def test_real_law_file() -> None:
    path = LAWS / "劳动法(2018-12-29).md"
    doc = load_document(path, "laws/劳动法(2018-12-29).md")
    assert doc.title == "中华人民共和国劳动法"
    assert doc.doc_type == "markdown"
    assert doc.encoding == "utf-8"
    assert doc.source == "laws/劳动法(2018-12-29).md"
    assert doc.text == path.read_text(encoding="utf-8").replace("<!-- INFO END -->", "")  # its one comment
    assert doc.text.startswith("# 中华人民共和国劳动法\n\n1994年7月5日")


# -------------------------------------------------------------------------------------------- registry


def test_registry() -> None:
    loaders = default_loaders()
    classes = (MarkdownLoader, TextLoader, PdfLoader, DocxLoader, HtmlLoader, EpubLoader, SheetLoader, SlidesLoader)
    classes += (ImageLoader, LegacyWordLoader)
    assert (LOADER_CLASSES, tuple(type(x) for x in loaders)) == (classes, classes)
    assert all(isinstance(x, Loader) for x in loaders)
    assert " ".join(supported_suffixes()) == (
        ".md .markdown .txt .text .pdf .docx .html .htm .xhtml .epub .xlsx .xlsm .xls .ods .csv .tsv .pptx "
        ".png .jpg .jpeg .tif .tiff .bmp .webp .doc .wps .rtf"
    )
    assert [x.doc_type for x in loaders] == [
        *("markdown", "text", "pdf", "docx", "html", "epub", "sheet", "slides", "image", "doc")
    ]


@pytest.mark.parametrize(
    ("name", "loader"),
    [("a.md", MarkdownLoader), ("B.MARKDOWN", MarkdownLoader), ("说明.TXT", TextLoader), ("x.text", TextLoader)],
)
def test_loader_for(name: str, loader: type) -> None:
    assert type(loader_for(Path(name))) is loader


def test_unknown_suffix() -> None:
    with pytest.raises(UnsupportedFormat) as e:
        loader_for(Path("docs/报表.xyz"))
    assert str(e.value) == (
        "unsupported file type '.xyz' for 报表.xyz "
        "(supported: .md, .markdown, .txt, .text, .pdf, .docx, .html, .htm, .xhtml, .epub, .xlsx, .xlsm, .xls, .ods, "
        ".csv, .tsv, .pptx, .png, .jpg, .jpeg, .tif, .tiff, .bmp, .webp, .doc, .wps, .rtf)"
    )
    assert isinstance(e.value, IngestError)


def test_no_suffix() -> None:
    with pytest.raises(UnsupportedFormat, match=r"unsupported file type \(no suffix\) for README"):
        loader_for(Path("README"))


def test_custom_loader_list() -> None:
    only_text = (TextLoader(),)
    assert supported_suffixes(only_text) == (".txt", ".text")
    with pytest.raises(UnsupportedFormat, match=r"\(supported: \.txt, \.text\)"):
        loader_for(Path("a.md"), only_text)


def test_load_document_dispatches_by_suffix(tmp_path: Path) -> None:
    md = write(tmp_path, "规定.md", "# 考勤规定\n\n迟到三次扣半天工资。\n".encode())
    txt = write(tmp_path, "规定.txt", "# 考勤规定\n".encode())
    assert load_document(md, "规定.md").doc_type == "markdown"
    assert load_document(md, "规定.md").title == "考勤规定"
    assert load_document(txt, "规定.txt").doc_type == "text"
    assert load_document(txt, "规定.txt").title == "规定"


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(LoaderError, match="cannot read"):
        load_document(tmp_path / "不存在.md", "不存在.md")
