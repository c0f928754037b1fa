"""Cover and declaration pages do not shape a PDF's heading tree (the PDFs in tests/fixtures/pdf)."""

from __future__ import annotations

import pytest

from pdf_fixtures import NOTE, PAPER, THESIS
from zhiku.ingest.chunking import chunk_document
from zhiku.ingest.loaders.pdf import PdfLoader
from zhiku.settings import ChunkingSettings, LoaderSettings

NO_OCR = LoaderSettings(ocr="off", images=False)


def sections(path) -> list[str]:
    doc = PdfLoader(NO_OCR).load(path, path.name)
    found: list[str] = []
    for c in chunk_document(doc, collection="c", doc_id="d", settings=ChunkingSettings()):
        if c.section not in found:
            found.append(c.section)
    return found


@pytest.fixture(scope="module")
def thesis_sections() -> list[str]:
    return sections(THESIS)


def test_the_thesis_chapters_no_longer_nest_under_its_cover_and_declarations(thesis_sections: list[str]) -> None:
    # before: 本科生毕业设计（论文） > 关于使用授权的声明 > 北京理工大学本科生毕业设计（论文）题目 > 第 1 章 一级题目 > 1. 1 二级题目
    assert thesis_sections[:3] == ["本科生毕业设计（论文）", "原创性声明", "关于使用授权的声明"]  # each titles its page
    title = "北京理工大学本科生毕业设计（论文）题目"
    assert f"{title} > 第 1 章 一级题目 > 1. 1 二级题目" in thesis_sections
    assert f"{title} > 参考文献" in thesis_sections and f"{title} > 附录 > 附录 A LATEX 环境的安装" in thesis_sections
    body = thesis_sections[3:]
    assert not [s for s in body if "声明" in s or s.startswith("本科生毕业设计")]
    assert max(s.count(" > ") + 1 for s in body) == 3  # was 5


def test_a_cover_page_titles_the_document_without_owning_its_chapters() -> None:
    note = sections(NOTE)
    assert note[:3] == ["ElegantNote：一个优美的 LATEX 笔记模板", "1 模板设计", "1 模板设计 > 1.1 护眼模式"]
    paper = sections(PAPER)  # a first page with its abstract and body is no cover: the title stays the root
    assert paper[1] == "ElegantPaper: 一个优美的 LATEX 工作论文模板 > 1 模板介绍"
