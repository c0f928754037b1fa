"""A question asking for a page (论文第8页讲了什么) gets that page's passages first, whatever they rank by content."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from pdf_fixtures import PAPER, THESIS
from zhiku.mcp.hub import Hub, QueryArgs
from zhiku.retrieval import rewrite
from zhiku.retrieval.confidence import judge
from zhiku.retrieval.lookups import pages_first
from zhiku.retrieval.plan import MAX_PAGES, QueryPlan, asked_pages, read_question
from zhiku.settings import RetrievalSettings
from zhiku.text import TextProcessor
from zhiku.types import Chunk, DocRecord, DocStatus, Filters, Hit

TEXT = TextProcessor()
NORMALIZE = TEXT.normalize


def ask(question: str) -> QueryPlan:
    return read_question(question, TEXT, RetrievalSettings())


@pytest.mark.parametrize(
    ("question", "pages"),
    [
        ("论文第8页讲了什么", (8,)),
        ("第 8 页", (8,)),
        ("第八页写了什么", (8,)),
        ("第十二页和第3页", (12, 3)),
        ("第3-5页", (3, 4, 5)),
        ("第3至5页的内容", (3, 4, 5)),
        ("第3页到第5页讲了什么", (3, 4, 5)),
        ("第3和第5页讲了什么", (3, 5)),  # a list: each page (was page 5 alone)
        ("第3、5页", (3, 5)),
        ("第十二、第三页", (12, 3)),
        ("第3和第5条", ()),
        ("第3,000页", ()),  # (a thousands separator, no list; past 9999 anyway)
        ("第3—5页", (3, 4, 5)),  # the dash Chinese writes a range with (GB/T 15834), and the wave dash
        ("第3〜5页", (3, 4, 5)),
        ("pages 3—5", (3, 4, 5)),
        ("第二十页", (20,)),
        ("第两页", ()),  # (not how a page is said: 第二页)
        ("第0页", ()),
        ("what is on page 12 of the report", (12,)),
        ("see p. 7", (7,)),
        ("pp. 3-4", (3, 4)),
        ("pages 2 to 3", (2, 3)),
        ("summarise page 12.", (12,)),  # a full stop ends the sentence, not the number
        ("what is on pp. 3-5.", (3, 4, 5)),
        ("page 3.5", ()),
        ("P3 级故障怎么处理", ()),  # P0–P3 name incident levels
        ("mp3 格式第几页", ()),
        ("homepage 3", ()),
        ("劳动合同法第十条", ()),
    ],
)
def test_the_pages_a_question_asks_for(question: str, pages: tuple[int, ...]) -> None:
    assert asked_pages(NORMALIZE(question)) == pages


def test_a_wide_range_is_read_as_its_first_pages() -> None:
    assert asked_pages("第1-500页") == tuple(range(1, MAX_PAGES + 1))


def chunk(doc: str, ordinal: int, page: int | None, section: str = "") -> Chunk:
    cid = f"{doc}-{ordinal}"
    start = 10 * ordinal  # (each chunk its own span of the document)
    return Chunk(cid, doc, "docs", f"{doc}.pdf", "pdf", section or doc, page, start, start + 10, ordinal, f"text {cid}")


# two PDFs: "report" (pages 1-5; page 3 in two chunks, page 4 none of its own: its text runs on from chunk 4) and
# "manual" (pages 1-2)
DOCS = {
    "report": [chunk("report", 0, 1), chunk("report", 1, 2), chunk("report", 2, 3), chunk("report", 3, 3)]
    + [chunk("report", 4, 3), chunk("report", 5, 5)],
    "manual": [chunk("manual", 0, 1), chunk("manual", 1, 2)],
}
RECORDS = {
    d: DocRecord(
        d, "docs", f"{d}.pdf", f"/x/{d}.pdf", "pdf", f"{d} title", "0", 1, len(c), 5 if d == "report" else 2, 0.0
    )
    for d, c in DOCS.items()
}


def lookup(hits: list[Hit], question: str) -> tuple[list[str], list[float], tuple[str, ...], tuple[int, ...]]:
    found = pages_first(hits, ask(question), NORMALIZE, lambda d: list(DOCS[d]), RECORDS.get)
    return [h.chunk.chunk_id for h in found.hits], [h.score for h in found.hits], found.missing, found.pages


def fused(*ids: str) -> list[Hit]:
    by_id = {c.chunk_id: c for chunks in DOCS.values() for c in chunks}
    return [Hit(chunk=by_id[cid], score=10.0 - n, fused_rank=n + 1) for n, cid in enumerate(ids)]


def test_the_asked_pages_passages_come_first_in_document_order() -> None:
    hits = fused("report-5", "report-3", "manual-1", "report-0")
    # report-2 and report-4 are not among the hits: read from the document, with no search score
    assert lookup(hits, "第3页讲了什么") == (
        ["report-2", "report-3", "report-4", "report-5"],
        [0.0, 9.0, 0.0, 10.0],
        (),
        (3,),
    )
    # a question asking for no page: the hits as they are
    assert lookup(hits, "第三条讲了什么")[0] == ["report-5", "report-3", "manual-1", "report-0"]


def test_a_page_asked_in_full_width_letters() -> None:
    hits = fused("report-5", "report-3", "manual-1", "report-0")
    assert lookup(hits, "ｒｅｐｏｒｔ ＰＡＧＥ ３")[0] == ["report-2", "report-3", "report-4", "report-5"]


def test_the_document_the_question_names_is_the_one_looked_up() -> None:
    hits = fused("report-5", "manual-0", "report-3")
    assert lookup(hits, "manual 第2页")[0] == ["manual-1", "report-5", "manual-0"]
    # without a name: the first hit's document
    assert lookup(hits, "第2页")[0] == ["report-1", "report-5", "manual-0"]


def test_a_page_inside_a_neighbours_chunk_and_a_range_sharing_the_room() -> None:
    hits = fused("manual-0", "report-0", "report-1", "report-5")
    # page 4 has no chunk of its own: the chunk running into it (report-4, page 3)
    assert lookup(hits, "report 第4页")[0][0] == "report-4"
    # pages 3-5 take turns for the four places: 3, 4 (report-4 is also page 3's first turn), 5, then 3 again
    assert lookup(hits, "report 第3-5页") == (
        ["report-2", "report-3", "report-4", "report-5"],
        [0.0, 0.0, 0.0, 7.0],
        (),
        (3, 4, 5),
    )


def test_a_page_the_document_does_not_have_is_said() -> None:
    hits = fused("report-5", "manual-0")
    ids, _, missing, pages = lookup(hits, "report 第 9 页")
    assert (ids, missing, pages) == (["report-5", "manual-0"], ("《report title》第 9 页（共 5 页）",), ())


def test_a_page_one_named_document_has_is_not_missing() -> None:
    hits = fused("report-5", "manual-0", "report-3")
    # manual has no page 4, report has: the question asks page 4 of report, not of manual
    assert lookup(hits, "report 第4页和 manual 第1页") == (
        ["report-0", "report-4", "manual-0"],
        [0.0, 0.0, 9.0],
        (),
        (4, 1),
    )
    # a page neither has: said of each
    assert lookup(hits, "report 和 manual 的第9页")[2] == (
        "《report title》第 9 页（共 5 页）",
        "《manual title》第 9 页（共 2 页）",
    )


def test_a_piece_inside_a_hit_made_whole_is_not_shown_again() -> None:
    pieces = [
        Chunk(f"law-{n}", "law", "docs", "law.pdf", "pdf", "law > 第十条", 1, 10 * n, 10 * n + 10, n, f"piece {n}")
        for n in range(3)
    ]
    # law-0 and law-1 are the two pieces of one article, made one passage by small-to-big
    whole = Hit(chunk=replace(pieces[0], text="piece 0piece 1", end=20), score=3.0, fused_rank=1)
    hits = [whole, *fused("report-5", "manual-0")]
    found = pages_first(hits, ask("第1页"), NORMALIZE, lambda d: list(pieces), lambda d: RECORDS["manual"])
    assert [(h.chunk.chunk_id, h.chunk.text) for h in found.hits] == [
        ("law-0", "piece 0piece 1"),
        ("law-2", "piece 2"),
        ("report-5", "text report-5"),
    ]


def test_no_paged_hit_no_lookup() -> None:
    md = Chunk("m0", "law", "docs", "law.md", "markdown", "law", None, 0, 10, 0, "第三页")
    hits = [Hit(chunk=md, score=1.0)]
    found = pages_first(hits, ask("第3页"), NORMALIZE, lambda d: [md], lambda d: None)
    assert (found.hits, found.missing, found.pages) == (tuple(hits), (), ())
    # a question naming a document without pages: no page of another (paged) document is looked up
    hits = [*fused("report-5"), Hit(chunk=replace(md, source="员工手册.docx", section="员工手册"), score=0.5)]
    found = pages_first(hits, ask("员工手册第3页"), NORMALIZE, lambda d: list(DOCS[d]), RECORDS.get)
    assert (found.hits, found.missing, found.pages) == (tuple(hits), (), ())
    # naming no document, answered first by a passage without pages: no page of a PDF ranked lower is looked up
    # (劳动合同第一页要写什么 over statutes and a few PDFs; was: that PDF's page 1 first)
    hits = [Hit(chunk=md, score=2.0), *fused("report-5")]
    found = pages_first(hits, ask("劳动合同第一页要写什么"), NORMALIZE, lambda d: list(DOCS[d]), RECORDS.get)
    assert (found.hits, found.missing, found.pages) == (tuple(hits), (), ())


def test_a_page_question_over_a_real_pdf(kb_factory, tmp_path: Path) -> None:
    folder = tmp_path / "资料"
    folder.mkdir()
    shutil.copy(THESIS, folder / "论文.pdf")
    kb = kb_factory(tmp_path / "idx", loaders={"ocr": "off"})
    kb.ingest([folder])
    doc = kb.documents()[0]
    assert (doc.pages, doc.status) == (11, DocStatus.READY)
    page8 = [c.chunk_id for c in kb.store.document_chunks(doc.doc_id) if c.page == 8]

    assert 1 <= len(page8) <= 3
    answer = kb.query("论文第8页讲了什么", top_k=3)
    assert [c.chunk_id for c in answer.citations[: len(page8)]] == page8
    assert not answer.low_confidence  # the page asked for was found: a lookup, not a weak match
    assert "p. 8" in answer.markdown

    answer = kb.query("论文第 30 页", top_k=3)
    assert "> 注意 / Note: 《" in answer.markdown and "》第 30 页（共 11 页） 不在找到的段落中" in answer.markdown
    settings = kb.settings
    kb.close()

    hub = Hub.open(settings, warm=False)  # over MCP: the same passages, the note in the text
    try:
        result = hub.query(QueryArgs("第8页讲了什么", top_k=3))
        assert [c.chunk_id for c in result.citations[: len(page8)]] == page8
        assert result.low_confidence is False
        assert "第 30 页（共 11 页）" in hub.query(QueryArgs("第30页", top_k=3)).answer
    finally:
        hub.close()


def two_pdfs(kb_factory, tmp_path: Path):  # type: ignore[no-untyped-def]
    folder = tmp_path / "资料"
    folder.mkdir()
    shutil.copy(THESIS, folder / "论文.pdf")
    shutil.copy(PAPER, folder / "模板.pdf")
    kb = kb_factory(tmp_path / "idx", loaders={"ocr": "off"})
    kb.ingest([folder])
    return kb, {d.source.rsplit("/", 1)[-1]: d for d in kb.documents()}


def test_a_page_lookup_stays_inside_the_tag_filter(kb_factory, tmp_path: Path) -> None:
    kb, docs = two_pdfs(kb_factory, tmp_path)
    # the document the unfiltered search ranks first (the thesis: its table) is the one the tags filter out
    question = "统计表里手机的产量 第2页"
    kept, dropped = docs["模板.pdf"], docs["论文.pdf"]
    assert kb.searcher.search(kb.searcher.read(question), top_k=5).hits[0].chunk.doc_id == dropped.doc_id
    page2 = [c.chunk_id for c in kb.store.document_chunks(kept.doc_id) if c.page == 2]
    assert page2
    args = dict(rewriter=None, top_k=5, per_source_k=None, rerank=None)
    read = kb.searcher.read
    r = rewrite.search(kb.searcher, read(question), tagged=(set(), {kept.doc_id}), **args)
    assert {h.chunk.doc_id for h in r.hits} == {kept.doc_id}
    # the kept document's page 2 is looked up, not the filtered-out document's
    assert [h.chunk.chunk_id for h in r.hits[: len(page2)]] == page2[:5]
    assert r.pages == (2,)
    # a page past the kept document's last is said of it (the filtered-out document has that page)
    far = kept.pages + 1
    assert dropped.pages >= far
    r = rewrite.search(kb.searcher, read(f"第{far}页"), tagged=(set(), {kept.doc_id}), **args)
    assert (r.missing, r.pages) == ((f"《{kept.title or kept.source}》第 {far} 页（共 {kept.pages} 页）",), ())
    assert {h.chunk.doc_id for h in r.hits} == {kept.doc_id}
    # a tag on chunks, not on their document: only the tagged chunks of the page are looked up
    tagged_ids = {page2[-1]} | {h.chunk.chunk_id for h in r.hits}
    r = rewrite.search(kb.searcher, read(question), tagged=(tagged_ids, set()), **args)
    assert {h.chunk.chunk_id for h in r.hits} <= tagged_ids and r.hits[0].chunk.chunk_id == page2[-1]


def test_a_page_the_search_itself_put_first_is_still_a_page_found(kb_factory, tmp_path: Path) -> None:
    kb, _ = two_pdfs(kb_factory, tmp_path)
    r = kb.retrieve("模板第2页讲了什么", top_k=3)
    assert r.pages == (2,) and r.hits[0].chunk.page == 2
    # the same hits, already leading with page 2: the lookup reorders nothing, and the page is still found
    again = kb.searcher.looked_up(replace(r, pages=()))
    assert again.hits == r.hits and again.pages == (2,)
    assert not judge(again, min_score=1.0, normalize=kb.text.normalize).low


def test_a_document_gone_since_the_search_is_not_looked_up(kb_factory, tmp_path: Path) -> None:
    kb, _ = two_pdfs(kb_factory, tmp_path)
    r = kb.searcher.search(kb.searcher.read("第2页讲了什么"), top_k=3)
    assert kb.searcher.looked_up(r).pages == (2,)
    kb.store.delete_document(r.hits[0].chunk.doc_id)  # (another process, between the search and the lookup)
    again = kb.searcher.looked_up(r)
    # no note that a document id "has 0 pages", no passage of another version
    assert (again.hits, again.missing, again.pages) == (r.hits, (), ())


def test_no_passage_twice_over_a_real_pdf(kb_factory, tmp_path: Path) -> None:
    kb, _ = two_pdfs(kb_factory, tmp_path)
    r = kb.retrieve("模板第3页的表格", top_k=8)
    assert r.pages == (3,)
    spans = [(h.chunk.doc_id, h.chunk.start, h.chunk.end) for h in r.hits]
    # (the table on page 3 is one passage made whole from its pieces: none of them shown again on its own)
    inside = [(a, b) for a in spans for b in spans if a != b and a[0] == b[0] and a[1] <= b[1] <= b[2] <= a[2]]
    assert inside == []


def test_a_named_document_the_search_did_not_find_is_looked_up_within_the_filters(kb_factory, tmp_path: Path) -> None:
    kb, docs = two_pdfs(kb_factory, tmp_path)
    thesis, paper = docs["论文.pdf"], docs["模板.pdf"]
    page8 = [c.chunk_id for c in kb.store.document_chunks(thesis.doc_id) if c.page == 8]
    assert page8 and thesis.pages == 11 and paper.pages == 5
    # every hit of the paper: the thesis the question names is looked up all the same (was: the paper's page 8,
    # noted as "《…》第 8 页（共 5 页）", a document the question did not ask about)
    only_paper = Filters(source_glob="*模板*")
    r = kb.searcher.search(kb.searcher.read("论文第8页讲了什么", filters=only_paper), top_k=3)
    assert {h.chunk.doc_id for h in r.hits} == {paper.doc_id}
    found = kb.searcher.looked_up(replace(r, query=replace(r.query, filters=Filters())))
    assert ([h.chunk.chunk_id for h in found.hits[: len(page8)]], found.missing, found.pages) == (page8, (), (8,))
    # a document the search's filters leave out is not looked up: the first hit's document is
    found = kb.searcher.looked_up(r)
    assert {h.chunk.doc_id for h in found.hits} == {paper.doc_id} and found.pages == ()
    assert found.missing == (f"《{paper.title or paper.source}》第 8 页（共 5 页）",)
