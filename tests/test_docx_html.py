"""The Word (.docx) and HTML loaders: structure as Markdown, images, encodings, boilerplate, bad files."""

from __future__ import annotations

import io
from pathlib import Path

import docx
import pytest
from docx.oxml.ns import qn
from PIL import Image, ImageDraw

from zhiku.errors import LoaderError
from zhiku.ingest.chunking import ChunkShape, chunk_document
from zhiku.ingest.loaders import DocxLoader, HtmlLoader, load_document
from zhiku.settings import LoaderSettings

HANDBOOK = """# 员工手册

## 第一章 总则

为了规范公司管理，保障员工合法权益，制定本手册。

### 第一节 考勤

员工应当遵守以下规定：

- 按时上下班
- 请假须提前申请
1. 填写请假单
2. 部门经理审批

| 假期类型 | 天数 | 备注 |
| --- | --- | --- |
| 年休假 | 5 | 工作满1年 |
| 婚假 | 3 |  |

图 1 公司组织结构图

### 第二节 加班

加班须经部门经理书面批准。"""


def png(width: int = 200, height: int = 120) -> bytes:
    img = Image.new("RGB", (width, height), "white")
    ImageDraw.Draw(img).rectangle(
        [width // 10, height // 10, width - width // 10, height - height // 10], outline="black"
    )
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def handbook_docx(path: Path, *, alt: str = "") -> Path:
    d = docx.Document()
    d.add_heading("员工手册", 0)
    d.add_heading("第一章 总则", 1)
    d.add_paragraph("为了规范公司管理，保障员工合法权益，制定本手册。")
    d.add_heading("第一节 考勤", 2)
    d.add_paragraph("员工应当遵守以下规定：")
    d.add_paragraph("按时上下班", style="List Bullet")
    d.add_paragraph("请假须提前申请", style="List Bullet")
    d.add_paragraph("填写请假单", style="List Number")
    d.add_paragraph("部门经理审批", style="List Number")
    table = d.add_table(rows=3, cols=3)
    for r, row in enumerate([["假期类型", "天数", "备注"], ["年休假", "5", "工作满1年"], ["婚假", "3", ""]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    d.add_picture(io.BytesIO(png()))
    if alt:
        d.paragraphs[-1]._p.xpath(".//wp:docPr")[0].set("descr", alt)
    d.add_picture(io.BytesIO(png(20, 20)))  # an icon: skipped by size
    d.add_paragraph("图 1 公司组织结构图")
    d.add_heading("第二节 加班", 2)
    d.add_paragraph("加班须经部门经理书面批准。")
    d.save(path)
    return path


# --- DOCX ------------------------------------------------------------------------------------------------
def test_docx_headings_lists_tables_as_markdown(tmp_path: Path) -> None:
    doc = load_document(handbook_docx(tmp_path / "员工手册.docx"), "员工手册.docx")
    assert (doc.doc_type, doc.title, doc.pages, doc.needs_ocr_pages) == ("docx", "员工手册", (), ())
    assert doc.text == HANDBOOK
    chunks = chunk_document(doc, collection="hr", doc_id="d", settings=ChunkShape(size=200, overlap=40))
    assert [c.section for c in chunks] == [
        "员工手册 > 第一章 总则",
        "员工手册 > 第一章 总则 > 第一节 考勤",
        "员工手册 > 第一章 总则 > 第二节 加班",
    ]


def test_docx_images_with_alt_text_or_caption(tmp_path: Path) -> None:
    doc = load_document(handbook_docx(tmp_path / "a.docx"), "a.docx")
    [image] = doc.images
    assert (image.ref.mime_type, image.ref.width, image.ref.height, image.ref.page, image.ref.caption) == (
        "image/png",
        200,
        120,
        None,
        "图 1 公司组织结构图",
    )
    assert image.data == png()
    assert doc.text[image.offset :].startswith("图 1 公司组织结构图")
    chunks = chunk_document(doc, collection="hr", doc_id="d", settings=ChunkShape(size=200, overlap=40))
    assert [c.section for c in chunks if c.images] == ["员工手册 > 第一章 总则 > 第一节 考勤"]
    with_alt = DocxLoader().load(handbook_docx(tmp_path / "b.docx", alt="组织结构：总经理、人事部、财务部"), "b.docx")
    assert with_alt.images[0].ref.caption == "组织结构：总经理、人事部、财务部"
    assert DocxLoader(LoaderSettings(images=False)).load(tmp_path / "a.docx", "a.docx").images == ()


def test_bad_docx_files(tmp_path: Path) -> None:
    good = handbook_docx(tmp_path / "good.docx").read_bytes()
    (tmp_path / "截断.docx").write_bytes(good[: len(good) // 2])
    (tmp_path / "空.docx").write_bytes(b"")
    (tmp_path / "旧格式.docx").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 504)
    (tmp_path / "其实是PDF.docx").write_bytes(b"%PDF-1.7\n")
    expected = {
        "空.docx": "empty file (0 bytes): {}",
        "旧格式.docx": (
            "content is a legacy Office file (.doc/.xls/.ppt; save it as .docx), not a Word .docx document: "
            "the file name's suffix is wrong ({})"
        ),
        "其实是PDF.docx": "content is PDF, not a Word .docx document: the file name's suffix is wrong ({})",
    }
    for name, message in expected.items():
        with pytest.raises(LoaderError) as e:
            load_document(tmp_path / name, name)
        assert str(e.value) == message.format(tmp_path / name)
    with pytest.raises(
        LoaderError, match=r"not a readable \.docx document \(corrupt, truncated, or another ZIP file\)"
    ):
        load_document(tmp_path / "截断.docx", "截断.docx")


def test_docx_heading_by_outline_level_and_merged_cells(tmp_path: Path) -> None:
    d = docx.Document()
    p = d.add_paragraph("一、适用范围")
    element = p.paragraph_format.element  # the paragraph's <w:p> (python-docx has no outline-level property)
    element.get_or_add_pPr().append(element.makeelement(qn("w:outlineLvl"), {qn("w:val"): "0"}))
    d.add_paragraph("本办法适用于公司全体员工。")
    table = d.add_table(rows=2, cols=3)
    table.cell(0, 0).merge(table.cell(0, 1)).text = "项目"
    table.cell(0, 2).text = "金额"
    for c, value in enumerate(["差旅", "住宿", "300"]):
        table.cell(1, c).text = value
    d.save(tmp_path / "办法.docx")
    assert load_document(tmp_path / "办法.docx", "办法.docx").text == (
        "# 一、适用范围\n\n本办法适用于公司全体员工。\n\n| 项目 | 金额 |  |\n| --- | --- | --- |\n| 差旅 | 住宿 | 300 |"
    )


# --- HTML ------------------------------------------------------------------------------------------------
PAGE = """<!DOCTYPE html>
<html lang="zh"><head><meta charset="{charset}"><title>考勤管理制度 - 公司内网</title>
<style>body {{ color: red }}</style><script>var x = "脚本不应出现";</script></head>
<body>
<header class="site-header"><a href="/">首页</a> <a href="/about">关于我们</a></header>
<nav><ul><li><a href="/">导航一</a></li><li>导航二</li></ul></nav>
<main>
<h1>考勤管理制度</h1>
<p>为了规范公司的考勤管理，
保障员工的合法权益，制定本制度。</p>
<h2>第一章 总则</h2>
<p>第一条 本制度适用于全体员工。</p>
<ul><li>按时上下班</li><li>请假须提前<b>申请</b></li></ul>
<ol><li>填写请假单</li><li>部门经理审批</li></ol>
<table><thead><tr><th>假期类型</th><th>天数</th></tr></thead>
<tbody><tr><td>年休假</td><td>5&nbsp;天</td></tr><tr><td>婚假</td><td>3 天</td></tr></tbody></table>
<div class="share-buttons">分享到微博</div>
<pre>zhiku ingest ./制度
  --collection hr</pre>
</main>
<aside>相关文章</aside>
<footer>版权所有 2024</footer>
</body></html>
"""
PAGE_MD = """# 考勤管理制度

为了规范公司的考勤管理，保障员工的合法权益，制定本制度。

## 第一章 总则

第一条 本制度适用于全体员工。

- 按时上下班
- 请假须提前申请

1. 填写请假单
2. 部门经理审批

| 假期类型 | 天数 |
| --- | --- |
| 年休假 | 5 天 |
| 婚假 | 3 天 |

```
zhiku ingest ./制度
  --collection hr
```"""


def test_html_main_content_as_markdown(tmp_path: Path) -> None:
    path = tmp_path / "考勤.html"
    path.write_text(PAGE.format(charset="utf-8"), encoding="utf-8")
    doc = load_document(path, "考勤.html")
    assert (doc.doc_type, doc.title, doc.text) == ("html", "考勤管理制度 - 公司内网", PAGE_MD)


def test_html_in_gbk_declared_by_meta(tmp_path: Path) -> None:
    path = tmp_path / "考勤.htm"
    path.write_bytes(PAGE.format(charset="gb2312").encode("gbk"))
    assert load_document(path, "考勤.htm").text == PAGE_MD


def test_html_without_main_drops_page_chrome(tmp_path: Path) -> None:
    path = tmp_path / "通知.html"
    path.write_text(
        "<html><body><header>网站标题 登录</header><div id='breadcrumb'>首页 &gt; 通知</div>"
        "<div class='content'><h2>放假通知</h2><p>国庆节放假 7 天。</p></div>"
        "<div role='contentinfo'>联系我们</div></body></html>",
        encoding="utf-8",
    )
    doc = HtmlLoader().load(path, "通知.html")
    assert (doc.title, doc.text) == ("放假通知", "## 放假通知\n\n国庆节放假 7 天。")


def test_html_inline_code_keeps_its_backticks_and_a_code_block_its_language(tmp_path: Path) -> None:
    # an API page: "携带 Authorization: Bearer <token>" came back bare (Markdown then hides <token> as a tag) and
    # <pre><code class="language-python"> as a block without its language
    path = tmp_path / "api.html"
    path.write_text(
        "<html><body><main><h2>认证</h2><p>请求头携带 <code>Authorization: Bearer &lt;token&gt;</code>，调用 "
        "<code>POST /auth/token</code> 获取。</p><table><tr><th>参数</th></tr><tr><td><code>sku_id</code></td></tr>"
        "</table><pre><code class='hljs language-python'>resp = post(url)\nprint(resp)</code></pre>"
        "<pre>plain text</pre></main></body></html>",
        encoding="utf-8",
    )
    assert HtmlLoader().load(path, "api.html").text == (
        "## 认证\n\n请求头携带 `Authorization: Bearer <token>`，调用 `POST /auth/token` 获取。\n\n"
        "| 参数 |\n| --- |\n| `sku_id` |\n\n```python\nresp = post(url)\nprint(resp)\n```\n\n```\nplain text\n```"
    )


def test_html_inline_code_holding_backticks_stays_one_code_span(tmp_path: Path) -> None:
    # <code>echo `date`</code> came back as `echo `date`` (two spans and a stray backtick); an empty <code> as ``
    path = tmp_path / "shell.html"
    path.write_text(
        "<main><p>运行 <code>echo `date`</code> 或 <code>a``b</code>，<code></code>再看 <code>ls</code>。</p></main>",
        encoding="utf-8",
    )
    assert HtmlLoader().load(path, "shell.html").text == "运行 `` echo `date` `` 或 ```a``b```，再看 `ls`。"


def test_bad_html_files(tmp_path: Path) -> None:
    (tmp_path / "空.html").write_bytes(b"")
    (tmp_path / "只有导航.html").write_text(
        "<html><body><nav>首页</nav><script>x()</script></body></html>", encoding="utf-8"
    )
    (tmp_path / "图片.html").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    expected = {
        "空.html": "empty file (0 bytes): {}",
        "只有导航.html": "no text in the HTML page's content: {}",
        "图片.html": "content is an image, not HTML: the file name's suffix is wrong ({})",
    }
    for name, message in expected.items():
        with pytest.raises(LoaderError) as e:
            load_document(tmp_path / name, name)
        assert str(e.value) == message.format(tmp_path / name)
