"""Chunking of Markdown tables (atomic, split by rows with the header repeated) and images linked to chunks."""

from __future__ import annotations

from zhiku.ingest.chunking import ChunkShape, chunk_document, split_table
from zhiku.reconstruct import reconstruct_markdown
from zhiku.types import ImageRef, SourceDoc, SourceImage

HEADER = "| 项目 | 产量 | 比重 |\n| --- | --- | --- |"
ROWS = [f"| 产品{i} | {i * 100} | {i * 7}% |" for i in range(1, 13)]
TABLE = HEADER + "\n" + "\n".join(ROWS)
INTRO = "这是一段说明文字，介绍下面的表格内容。"
TEXT = f"# 报告\n\n## 销量\n\n{INTRO}\n\n表 1-1 统计表\n\n{TABLE}\n\n表后的说明。"
SMALL = ChunkShape(size=150, overlap=20, min_chars=10)


def doc(text: str = TEXT, images: tuple[SourceImage, ...] = ()) -> SourceDoc:
    return SourceDoc("报告.md", "markdown", "报告", text, images=images)


def test_a_long_table_is_split_by_rows_with_the_header_repeated() -> None:
    chunks = chunk_document(doc(), collection="c", doc_id="d", settings=SMALL)
    assert [c.text for c in chunks] == [
        INTRO,
        "表 1-1 统计表\n\n" + HEADER + "\n" + "\n".join(ROWS[:5]),
        HEADER + "\n" + "\n".join(ROWS[5:10]),
        HEADER + "\n" + "\n".join(ROWS[10:]) + "\n\n表后的说明。",
    ]
    assert all(c.section == "报告 > 销量" for c in chunks)
    # offsets point at the document's own text; a continued piece's header is not part of its span
    assert TEXT[chunks[2].start : chunks[2].end] == "\n".join(ROWS[5:10])
    assert TEXT[chunks[1].start : chunks[1].end] == chunks[1].text
    assert reconstruct_markdown(chunks) == TEXT


def test_a_table_that_fits_is_never_cut_and_keeps_its_caption() -> None:
    text = f"# 报告\n\n{'前文内容。' * 20}\n\n表 2 假期\n\n{HEADER}\n{ROWS[0]}\n{ROWS[1]}"
    chunks = chunk_document(doc(text), collection="c", doc_id="d", settings=SMALL)
    assert [c.text for c in chunks] == ["前文内容。" * 20, f"表 2 假期\n\n{HEADER}\n{ROWS[0]}\n{ROWS[1]}"]


def test_only_a_caption_is_pulled_into_the_table() -> None:
    text = f"# 报告\n\n普通的一段话。\n\n{TABLE}"
    chunks = chunk_document(doc(text), collection="c", doc_id="d", settings=SMALL)
    assert chunks[0].text == "普通的一段话。\n\n" + HEADER + "\n" + "\n".join(ROWS[:5])
    assert chunks[1].text.startswith(HEADER + "\n" + ROWS[5])


def test_split_table_pieces() -> None:
    text = f"表 3\n{TABLE}"
    pieces = split_table(text, 0, len(text), text.index("|"), 120)
    assert [(text[s:e].count("\n") + 1, p) for s, e, p in pieces] == [(7, ""), (4, HEADER), (3, HEADER), (1, HEADER)]
    assert all(len(p) + bool(p) + e - s <= 120 for s, e, p in pieces)
    assert split_table("| a | b |", 0, 9, 0, 5) == [(0, 9, "")]  # no delimiter row: not split


def test_images_are_linked_to_the_chunk_that_holds_them() -> None:
    def image(n: int, offset: int) -> SourceImage:
        return SourceImage(ImageRef(f"{n:064x}.png", "image/png", caption=f"图 {n}"), offset, b"")

    at_intro = image(1, TEXT.index(INTRO) + 3)
    in_gap = image(2, TEXT.index("## 销量"))  # on a heading line: the next chunk
    at_end = image(3, len(TEXT))
    again = image(1, TEXT.index(INTRO) + 5)  # the same picture twice in one chunk: listed once
    chunks = chunk_document(doc(images=(at_end, at_intro, in_gap, again)), collection="c", doc_id="d", settings=SMALL)
    assert [[im.caption for im in c.images] for c in chunks] == [["图 2", "图 1"], [], [], ["图 3"]]


def test_a_hit_on_a_piece_of_a_split_table_returns_the_whole_table_with_its_caption(monkeypatch) -> None:
    # 表 2.1 of elegantbook-cn.pdf came back as two hits: [1] the caption and one row, [3] the rest without a caption
    from zhiku.retrieval import context
    from zhiku.types import Hit

    chunks = chunk_document(doc(), collection="c", doc_id="d", settings=SMALL)
    hits = [Hit(chunk=chunks[3], score=3.0), Hit(chunk=chunks[0], score=2.0), Hit(chunk=chunks[1], score=1.0)]
    out = context.whole_articles(hits, lambda doc_id: chunks)
    assert [(h.chunk.chunk_id, h.score) for h in out] == [(chunks[3].chunk_id, 3.0), (chunks[0].chunk_id, 2.0)]
    assert out[0].chunk.text == "表 1-1 统计表\n\n" + TABLE + "\n\n表后的说明。"  # one header, every row, in order
    assert (out[0].chunk.start, out[0].chunk.end) == (chunks[1].start, chunks[3].end)
    assert out[1].chunk == chunks[0]  # prose is returned as it is
    middle = context.whole_articles([Hit(chunk=chunks[2], score=1.0)], lambda doc_id: chunks)
    assert middle[0].chunk.text == out[0].chunk.text
    monkeypatch.setattr(context, "TABLE_MAX_CHARS", 200)  # a table too long for an answer stays in pieces
    assert context.whole_articles([Hit(chunk=chunks[2], score=1.0)], lambda doc_id: chunks)[0].chunk == chunks[2]


CODE = "```python\n" + "\n".join(f"step_{i} = call_api('/orders', n={i})" for i in range(8)) + "\n```"


def test_a_hit_on_a_piece_of_a_split_code_block_returns_the_whole_block() -> None:
    # 创建订单接口怎么调用: [1] the block's first lines, fence left open; [3] the rest flattened, its closing fence
    # read as an opening one (every later passage of the answer turned to code)
    from zhiku.retrieval import context
    from zhiku.types import Hit

    text = f"# 接口\n\n## 创建订单\n\n调用方法如下：\n\n{CODE}\n\n成功时返回 201。\n\n## 错误码\n\n失败时返回错误码。"
    chunks = chunk_document(doc(text), collection="c", doc_id="d", settings=SMALL)
    pieces = [c for c in chunks if "call_api" in c.text]
    assert len(pieces) >= 2 and [c.text.count("```") % 2 for c in (pieces[0], pieces[-1])] == [1, 1]
    whole = f"调用方法如下：\n\n{CODE}"  # the pieces joined, the overlap (n=3) taken once
    for piece in pieces:
        out = context.whole_articles(
            [Hit(chunk=piece, score=1.0), *(Hit(chunk=c, score=0.5) for c in chunks)], lambda d: chunks
        )
        assert out[0].chunk.text == whole
        assert out[0].chunk.chunk_id == piece.chunk_id
        assert [h.chunk.chunk_id for h in out[1:]] == [c.chunk_id for c in chunks if c not in pieces]
    last = chunks[-1]
    assert (
        last.section.endswith("错误码")
        and context.whole_articles([Hit(chunk=last, score=1.0)], lambda d: chunks)[0].chunk == last
    )


def test_a_piece_holding_one_blocks_end_and_the_next_blocks_start_returns_both_whole() -> None:
    # two code blocks in a section: the piece holding "a11 …```" and "```bash curl /b0…" has two fences (even), so it
    # came back alone; its closing fence then read as an opening one (然后： shown as code, the code as prose)
    from zhiku.retrieval import context
    from zhiku.types import Hit

    first = "```python\n" + "\n".join(f"a{i} = f({i})" for i in range(12)) + "\n```"
    second = "```bash\n" + "\n".join(f"curl /b{i}" for i in range(12)) + "\n```"
    text = f"# 接口\n\n## 创建订单\n\n调用：\n\n{first}\n然后：\n{second}\n\n## 错误码\n\n失败时返回错误码。"
    settings = ChunkShape(size=100, overlap=20, min_chars=10)
    chunks = chunk_document(doc(text), collection="c", doc_id="d", settings=settings)
    middle = [c for c in chunks if "a11 = f(11)\n```\n然后：\n```bash" in c.text]
    assert len(middle) == 1 and middle[0].text.count("```") == 2
    out = context.whole_articles([Hit(chunk=middle[0], score=1.0)], lambda d: chunks)
    assert out[0].chunk.text == f"调用：\n\n{first}\n然后：\n{second}"
    assert out[0].chunk.chunk_id == middle[0].chunk_id
    whole = [c for c in chunks if c.text.count("```") == 0]  # no fence: untouched, no document read
    assert context.whole_articles([Hit(chunk=whole[-1], score=1.0)], lambda d: []) == [Hit(chunk=whole[-1], score=1.0)]
