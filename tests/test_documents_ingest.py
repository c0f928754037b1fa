"""Office documents through the whole pipeline: a folder of PDF, Word and HTML files ingested with the real
embedder; scanned pages never silent; bad files reported; images stored and returned by the MCP server."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

import anyio
import pytest
from mcp import Client

from pdf_fixtures import THESIS, THESIS_TABLE, encrypted_pdf, scanned_pdf, truncated_pdf
from test_cli import cli  # noqa: F401  (the fixture)
from test_docx_html import PAGE, handbook_docx, png
from zhiku.access import ACCESS, Access
from zhiku.errors import NotFound
from zhiku.mcp.hub import Hub, QueryArgs
from zhiku.mcp.server import build_server
from zhiku.types import DocStatus, OcrNeeded

OCR_OFF = {"loaders": {"ocr": "off"}}
ALT = "组织结构：总经理、人事部、财务部"


@pytest.fixture
def office(tmp_path: Path) -> Path:
    """A folder of office documents: a thesis PDF, a scan, a Word handbook, an HTML page and two bad PDFs."""
    folder = tmp_path / "资料"
    folder.mkdir()
    shutil.copy(THESIS, folder / "论文.pdf")
    scanned_pdf(folder / "扫描件.pdf")
    handbook_docx(folder / "员工手册.docx", alt=ALT)
    (folder / "考勤.html").write_text(PAGE.format(charset="utf-8"), encoding="utf-8")
    encrypted_pdf(folder / "加密.pdf")
    truncated_pdf(folder / "截断.pdf")
    return folder


def test_a_folder_of_office_documents(kb_factory, office: Path, tmp_path: Path) -> None:
    kb = kb_factory(tmp_path / "idx", **OCR_OFF)
    report = kb.ingest([office])
    assert report.added == ("员工手册.docx", "扫描件.pdf", "考勤.html", "论文.pdf")
    assert report.needs_ocr == (OcrNeeded("扫描件.pdf", (1,)),)
    assert {Path(f.path).name: f.reason.split(":")[0] for f in report.failed} == {
        "加密.pdf": "encrypted PDF",
        "截断.pdf": f"cannot open PDF {office / '截断.pdf'}",
    }

    docs = {d.source: d for d in kb.documents()}
    scan = docs["扫描件.pdf"]
    assert (scan.status, scan.needs_ocr_pages, scan.ocr_pages, scan.chunk_count, scan.pages) == (
        DocStatus.NEEDS_OCR,
        (1,),
        (),
        0,
        1,
    )
    assert [(d.doc_type, d.status) for d in (docs["论文.pdf"], docs["员工手册.docx"], docs["考勤.html"])] == [
        ("pdf", "ready"),
        ("docx", "ready"),
        ("html", "ready"),
    ]
    assert docs["论文.pdf"].pages == 11
    history = {Path(r.path).name: (r.status, r.error) for r in kb.history()}
    assert history["扫描件.pdf"] == (
        "added",
        "needs OCR: page 1 without a usable text layer (OCR is off (loaders.ocr); set loaders.ocr: auto and re-ingest)",
    )
    assert history["加密.pdf"][0] == "failed" and "loaders.pdf_password" in history["加密.pdf"][1]

    # citations point at the right page; the table comes back whole with its caption
    hit = kb.retrieve("统计表 手机 计算机 产量 销量", top_k=1).hits[0]
    assert (hit.chunk.source, hit.chunk.page) == ("论文.pdf", 6)
    assert THESIS_TABLE in hit.chunk.text
    hit = kb.retrieve("结论作为毕业设计正文的最后部分单独排写", top_k=1).hits[0]
    assert (hit.chunk.source, hit.chunk.page) == ("论文.pdf", 8)
    hit = kb.retrieve("年休假 婚假 天数", top_k=1, doc_type="html").hits[0]
    assert "| 年休假 | 5 天 |" in hit.chunk.text

    # images: content-addressed files in the index, listed in their chunks
    figure = next(im for c in kb.store.document_chunks(docs["论文.pdf"].doc_id) for im in c.images if im.page == 6)
    assert (figure.caption, figure.width, figure.height) == ("图 1-1 标题序号", 461, 330)
    assert (tmp_path / "idx" / "images" / figure.image_id).is_file()
    assert sorted(p.name for p in (tmp_path / "idx" / "images").iterdir()) == sorted(
        im.image_id for d in docs.values() for c in kb.store.document_chunks(d.doc_id) for im in c.images
    )

    again = kb.ingest([office])  # unchanged: nothing is re-read, the scan stays reported in the index
    assert again.counts() == {"added": 0, "updated": 0, "skipped": 4, "removed": 0, "failed": 2}


def test_a_fully_scanned_folder_is_visible_in_the_cli(cli, tmp_path: Path) -> None:  # noqa: F811
    folder = tmp_path / "扫描"
    folder.mkdir()
    scanned_pdf(folder / "合同扫描件.pdf", pages=(3, 8))
    r = cli("ingest", folder, "--index", tmp_path / "idx", "-c", "hr", env={"ZHIKU_LOADERS__OCR": "off"})
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("1 added, 0 updated, 0 skipped, 0 removed, 0 failed (1 need OCR) · 0 chunks written")
    progress = [ln for ln in r.stderr.splitlines() if ln.startswith("ingesting: ")]  # stderr is not a terminal
    assert [ln.split(" · ")[0] for ln in progress] == ["ingesting: 0/1 documents", "ingesting: 1/1 documents"]
    assert r.stderr.split("\n", len(progress))[-1] == (
        "  合同扫描件.pdf: needs OCR: pages 1-2 without a usable text layer (OCR is off "
        "(loaders.ocr); set loaders.ocr: auto and re-ingest)\n"
    )
    r = cli("documents", "--index", tmp_path / "idx")
    assert "needs_ocr" in r.stdout and "(pages 1-2)" in r.stdout  # the table may wrap the status cell
    r = cli("documents", "--index", tmp_path / "idx", "--json")
    [doc] = __import__("json").loads(r.stdout)["documents"]
    assert (doc["status"], doc["needs_ocr_pages"], doc["chunk_count"]) == ("needs_ocr", [1, 2], 0)


@pytest.mark.slow
def test_installing_ocr_then_re_ingesting_reads_the_scan(kb_factory, tmp_path: Path) -> None:
    folder = tmp_path / "扫描"
    folder.mkdir()
    scanned_pdf(folder / "扫描件.pdf")
    kb = kb_factory(tmp_path / "idx", **OCR_OFF)
    assert kb.ingest([folder]).needs_ocr == (OcrNeeded("扫描件.pdf", (1,)),)
    kb.close()
    kb = kb_factory(tmp_path / "idx", loaders={"ocr": "auto"})  # the extra is installed now
    report = kb.ingest([folder])  # unchanged bytes, but the document needed OCR: read again
    assert (report.updated, report.needs_ocr) == (("扫描件.pdf",), ())
    [doc] = kb.documents()
    assert (doc.status, doc.needs_ocr_pages, doc.ocr_pages) == ("ready", (), (1,))
    assert kb.retrieve("结论部分的撰写应简明扼要", top_k=1).hits[0].chunk.page == 1


def test_mcp_answers_carry_the_images_of_cited_passages(kb_factory, tmp_path: Path) -> None:
    folder = tmp_path / "手册"
    folder.mkdir()
    handbook_docx(folder / "员工手册.docx", alt=ALT)
    kb = kb_factory(tmp_path / "idx")  # the same chunks as in the folder test: their vectors come from the cache
    kb.ingest([folder])
    settings = kb.settings
    kb.close()

    hub = Hub.open(settings, warm=False)
    try:
        result = hub.query(QueryArgs("公司的组织结构是怎样的？", top_k=1))
        [image] = result.images
        assert (image.citation, image.mime_type, image.caption, image.page) == (1, "image/png", ALT, None)
        assert hub.image_blocks(result) == [("image/png", base64.b64encode(png()).decode())]
        summary = hub.summary("员工手册.docx")
        assert (summary.status, summary.needs_ocr_pages) == ("ready", [])
        # a caller scoped to other collections finds the image as missing as one that is not there
        name, fake = image.uri.rsplit("/", 1)[-1], "f" * 64 + ".png"
        reset = ACCESS.set(Access("other", ("elsewhere",)))
        try:
            with pytest.raises(NotFound) as hidden:
                hub.image_bytes(name)
            with pytest.raises(NotFound) as absent:
                hub.image_bytes(fake)
            ACCESS.set(Access("mine", (summary.collection,)))
            assert hub.image_bytes(name) == png()
        finally:
            ACCESS.reset(reset)
        assert str(hidden.value) == str(absent.value).replace(fake, name)
    finally:
        hub.close()

    async def call() -> tuple[object, object]:
        async with Client(build_server(settings)) as client:
            answer = await client.call_tool("query_knowledge_hub", {"query": "公司的组织结构是怎样的？", "top_k": 1})
            uri = answer.structured_content["images"][0]["uri"]
            return answer, await client.read_resource(uri)

    answer, resource = anyio.run(call)
    assert [c.type for c in answer.content] == ["text", "image"]
    assert (answer.content[1].mime_type, base64.b64decode(answer.content[1].data)) == ("image/png", png())
    assert answer.structured_content["images"][0]["uri"].startswith("zhiku://image/")
    assert base64.b64decode(resource.contents[0].blob) == png()
