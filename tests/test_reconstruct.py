"""Rebuilding a document from its chunks: overlaps taken once, headings from section paths, article labels."""

from __future__ import annotations

from zhiku.reconstruct import heading_path, outline, reconstruct_markdown
from zhiku.types import Chunk


def chunk(start: int, text: str, section: str, ordinal: int) -> Chunk:
    return Chunk(
        chunk_id=f"c{ordinal}",
        doc_id="d",
        collection="laws",
        source="law.md",
        doc_type="markdown",
        section=section,
        page=None,
        start=start,
        end=start + len(text),
        ordinal=ordinal,
        text=text,
    )


DOC = "# 劳动法\n\n## 第一章 总则\n\n第一条 为了保护劳动者的合法权益，制定本法。\n\n### 第二条\n\n在中华人民共和国境内的企业适用本法。\n前款规定继续适用。"


def spans() -> list[Chunk]:
    s1 = DOC.index("第一条")
    s2 = DOC.index("在中华")
    s3 = DOC.index("前款")
    return [
        chunk(s1, DOC[s1 : DOC.index("\n\n###")], "劳动法 > 第一章 总则 > 第一条", 0),
        chunk(s2, DOC[s2 : s3 - 1], "劳动法 > 第一章 总则 > 第二条", 1),  # a heading "### 第二条", not a label
        chunk(s2 + 10, DOC[s2 + 10 :], "劳动法 > 第一章 总则 > 第二条", 2),  # overlaps the previous chunk
    ]


def test_rebuilds_the_document_exactly() -> None:
    assert reconstruct_markdown(spans()) == DOC
    assert reconstruct_markdown(list(reversed(spans()))) == DOC  # order of the input does not matter


def test_article_labels_are_not_headings() -> None:
    c = chunk(20, "第一条 为了保护劳动者。", "劳动法 > 第一章 总则 > 第一条", 0)
    assert heading_path(c, gap=20) == ("劳动法", "第一章 总则")
    inside = chunk(40, "的合法权益。", "劳动法 > 第一章 总则 > 第一条至第三条", 1)  # a later piece of an article
    assert heading_path(inside, gap=-5) == ("劳动法", "第一章 总则")
    heading = chunk(60, "在境内的企业适用本法。", "劳动法 > 第一章 总则 > 第二条", 2)
    assert heading_path(heading, gap=len("\n\n### 第二条\n\n")) == ("劳动法", "第一章 总则", "第二条")


def test_text_before_the_first_heading_and_small_gaps() -> None:
    chunks = [chunk(0, "前言。", "", 0), chunk(4, "第二段。", "", 1), chunk(8, "紧接着。", "", 2)]
    assert reconstruct_markdown(chunks) == "前言。\n第二段。紧接着。"


def test_outline_lists_distinct_sections_in_order() -> None:
    assert outline(spans()) == ["劳动法 > 第一章 总则 > 第一条", "劳动法 > 第一章 总则 > 第二条"]


def test_outline_lists_an_article_cut_in_pieces_once() -> None:
    # 劳动合同法's outline listed "… > 第六十六条" and then "… > 第六十六条、第六十七条" (its last piece packed with 67)
    path = "劳动合同法 > 第五章 特别规定 > 第二节 劳务派遣"
    pieces = [
        chunk(0, "第六十五条 被派遣劳动者可以解除劳动合同。", f"{path} > 第六十五条", 0),
        chunk(30, "第六十六条 劳动合同用工是我国的企业基本用工形式。", f"{path} > 第六十六条", 1),
        chunk(
            60,
            "劳务派遣用工只能在临时性岗位上实施。第六十七条 用人单位不得设立劳务派遣单位。",
            f"{path} > 第六十六条、第六十七条",
            2,
        ),
        chunk(110, "第六十八条 非全日制用工。", "劳动合同法 > 第五章 特别规定 > 第三节 非全日制用工 > 第六十八条", 3),
        chunk(
            130, "第六十九条 可以订立口头协议。", "劳动合同法 > 第五章 特别规定 > 第三节 非全日制用工 > 第六十九条", 4
        ),
    ]
    assert outline(pieces) == [
        f"{path} > 第六十五条",
        f"{path} > 第六十六条、第六十七条",
        "劳动合同法 > 第五章 特别规定 > 第三节 非全日制用工 > 第六十八条",
        "劳动合同法 > 第五章 特别规定 > 第三节 非全日制用工 > 第六十九条",
    ]
    # sections without article labels are listed as before, each once
    plain = [
        chunk(0, "甲。", "手册 > 第一章", 0),
        chunk(5, "乙。", "手册 > 第一章", 1),
        chunk(9, "丙。", "手册 > 附录", 2),
    ]
    assert outline(plain) == ["手册 > 第一章", "手册 > 附录"]


def test_a_code_block_in_a_list_item_starting_a_chunk_keeps_its_indent() -> None:
    # deploy-guide.md, step 2: "```bash" came back at the margin under "2. 安装 Helm chart：" (list ended there)
    from zhiku.ingest.chunking import ChunkShape, chunk_document
    from zhiku.types import SourceDoc

    step2 = "2. 安装：\n\n   ```bash\n   helm install rec \\\n     --version 1.4.0 \\\n     -f values-prod.yaml\n   ```"
    text = f"# 部署\n\n1. 登录仓库，使用公司统一账号登录镜像仓库后再继续，账号由平台组在入职时统一分配，首次登录须修改初始密码并绑定手机。\n\n{step2}\n\n3. 检查状态。"
    chunks = chunk_document(
        SourceDoc("d.md", "markdown", "部署", text),
        collection="c",
        doc_id="d",
        settings=ChunkShape(size=100, overlap=0, min_chars=5),
    )
    assert any(c.text.startswith("```bash") for c in chunks)  # the chunk starting at the fence, its indent outside
    assert reconstruct_markdown(chunks).endswith(f"。\n\n{step2}\n\n3. 检查状态。")
