"""The ``Store`` contract: behaviour every storage backend must show, through the protocol only.

Use it by subclassing ``StoreContract`` in a test module that defines a ``make_store`` fixture: a callable
that opens the backend on this test's own, initially empty, index. Calling it again (after ``close()``)
must reopen the same index; the fixture closes whatever it opened when the test ends.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pytest

from zhiku.errors import IndexMismatch, StoreError
from zhiku.stores.base import Store
from zhiku.types import Chunk, CollectionStats, DocRecord, DocStatus, Filters, ImageRef, IngestionRecord

MakeStore = Callable[[], Store]


@dataclass(frozen=True)
class Doc:
    """Everything ``write_document`` takes, for one document."""

    record: DocRecord
    chunks: list[Chunk]
    tokens: list[list[str]]
    vectors: np.ndarray

    @property
    def ids(self) -> list[str]:
        return [c.chunk_id for c in self.chunks]

    def write(self, store: Store) -> None:
        store.write_document(self.record, self.chunks, self.tokens, self.vectors)


def make_doc(
    doc_id: str, collection: str, source: str, doc_type: str, items: Sequence[tuple[str, list[str], list[float]]]
) -> Doc:
    """A document whose chunks are ``(text, tokens, vector)``; chunk ids hash source and text, like ingestion."""
    chunks, start = [], 0
    for ordinal, (text, _, _) in enumerate(items):
        chunk_id = hashlib.sha256(f"{collection}|{source}|{text}".encode()).hexdigest()[:16]
        chunks.append(
            Chunk(
                chunk_id,
                doc_id,
                collection,
                source,
                doc_type,
                "第一章 总则",
                None if doc_type != "pdf" else 1,
                start,
                start + len(text),
                ordinal,
                text,
            )
        )
        start += len(text)
    record = DocRecord(
        doc_id=doc_id, collection=collection, source=source, path=f"/数据/{source}", doc_type=doc_type, title=source.rsplit("/", 1)[-1],
        sha256=hashlib.sha256(source.encode()).hexdigest(), size=3 * start, chunk_count=len(chunks), pages=None, ingested_at=1700000000.5,
    )  # fmt: skip
    return Doc(
        record,
        chunks,
        [list(t) for _, t, _ in items],
        np.asarray([v for _, _, v in items], dtype=np.float32).reshape(len(items), -1),
    )


LABOR = make_doc("doc-labor", "法规", "法规/劳动合同法.md", "markdown", [
    ("第三十六条 用人单位与劳动者协商一致，可以解除劳动合同。", ["第三十六条", "用人单位", "劳动者", "协商一致", "解除", "劳动", "合同"], [1.0, 0.0, 0.0]),
    ("第四十七条 经济补偿按劳动者在本单位工作的年限支付。", ["第四十七条", "经济补偿", "劳动者", "本单位", "工作", "年限", "支付"], [0.6, 0.8, 0.0]),
])  # fmt: skip
LABOR_V2 = make_doc("doc-labor", "法规", "法规/劳动合同法.md", "markdown", [
    ("第三十六条（修订） 双方协商一致可以变更劳动合同。", ["第三十六条", "修订", "双方", "协商一致", "变更", "劳动", "合同"], [0.0, 0.0, 1.0]),
])  # fmt: skip
WAGE = make_doc("doc-wage", "法规", "法规/工资支付规定.txt", "text", [
    ("工资应当以货币形式按月支付给劳动者本人。", ["工资", "货币", "形式", "按月", "支付", "劳动者", "本人"], [0.0, 1.0, 0.0]),
])  # fmt: skip
NOTE = make_doc("doc-note", "笔记", "笔记/会议纪要.md", "markdown", [
    ("会议讨论了年度预算和招聘计划。", ["会议", "讨论", "年度", "预算", "招聘", "计划"], [0.0, 0.6, 0.8]),
])  # fmt: skip
ALL_TERMS = ["劳动者", "会议"]  # together these match every chunk of LABOR, WAGE and NOTE

# A PDF with an image in its second chunk, one OCR'd page and one page that still needs OCR.
FIGURE = ImageRef(
    "ab" * 32 + ".png",
    "image/png",
    page=2,
    bbox=(192.5, 398.25, 414.0, 557.0),
    width=461,
    height=330,
    caption="图 1-1 标题序号",
)
_SCAN = make_doc("doc-scan", "法规", "法规/扫描件.pdf", "pdf", [
    ("表 1-1 统计表 项目 产量 销量", ["统计表", "项目", "产量", "销量"], [0.0, 0.0, 1.0]),
    ("图 1-1 标题序号 正文", ["标题", "序号", "正文"], [0.0, 1.0, 0.0]),
])  # fmt: skip
SCAN = Doc(
    replace(_SCAN.record, status=DocStatus.NEEDS_OCR, needs_ocr_pages=(3, 5), ocr_pages=(2,), pages=5),
    [
        _SCAN.chunks[0],
        replace(
            _SCAN.chunks[1],
            page=2,
            images=(
                FIGURE,
                replace(FIGURE, image_id="cd" * 32 + ".jpg", mime_type="image/jpeg", bbox=None, caption=""),
            ),
        ),
    ],
    _SCAN.tokens,
    _SCAN.vectors,
)
# A fully scanned PDF without OCR: recorded (so the user sees it), with no chunks at all.
BLANK = Doc(
    DocRecord(
        "doc-blank",
        "法规",
        "法规/全扫描.pdf",
        "/数据/法规/全扫描.pdf",
        "pdf",
        "全扫描",
        "e" * 64,
        2048,
        0,
        2,
        1700000001.0,
        DocStatus.NEEDS_OCR,
        (1, 2),
    ),
    [],
    [],
    np.zeros((0, 3), np.float32),
)


def ids(results) -> list[str]:
    return [r.chunk_id for r in results]


class StoreContract:
    @pytest.fixture
    def store(self, make_store: MakeStore) -> Store:
        return make_store()

    @pytest.fixture
    def full(self, store: Store) -> Store:
        for doc in (LABOR, WAGE, NOTE):
            doc.write(store)
        return store

    def test_is_a_store(self, store: Store) -> None:
        assert isinstance(store, Store)

    # --- roundtrip ---------------------------------------------------------------------------------
    def test_new_index_is_empty(self, store: Store) -> None:
        assert store.index_version() == 0
        assert store.list_documents() == []
        assert store.collections() == []
        assert store.ingestion_history() == []
        assert store.bm25_search(["劳动者"], 5) == []
        assert store.dense_search(np.array([1.0, 0.0, 0.0], np.float32), 5) == []

    def test_roundtrip(self, full: Store) -> None:
        assert full.get_document("doc-labor") == LABOR.record
        assert full.find_document("法规", "法规/劳动合同法.md") == LABOR.record
        assert full.find_document("笔记", "法规/劳动合同法.md") is None
        assert full.get_document("doc-missing") is None
        assert full.document_chunks("doc-labor") == LABOR.chunks
        assert full.get_chunks(LABOR.ids + WAGE.ids) == LABOR.chunks + WAGE.chunks
        assert full.list_documents() == [
            LABOR.record,
            WAGE.record,
            NOTE.record,
        ]  # by collection, then source (code points)
        assert full.list_documents("笔记") == [NOTE.record]
        assert full.list_documents("不存在") == []
        assert full.get_meta()["dim"] == "3"

    def test_get_chunks_keeps_the_asked_order_and_drops_unknown_ids(self, full: Store) -> None:
        asked = [WAGE.ids[0], "no-such-chunk", LABOR.ids[1], NOTE.ids[0], LABOR.ids[0]]
        assert ids(full.get_chunks(asked)) == [WAGE.ids[0], LABOR.ids[1], NOTE.ids[0], LABOR.ids[0]]
        assert full.get_chunks([]) == []

    def test_document_chunks_are_in_ordinal_order(self, store: Store) -> None:
        store.write_document(LABOR.record, LABOR.chunks[::-1], LABOR.tokens[::-1], LABOR.vectors[::-1])
        assert [c.ordinal for c in store.document_chunks("doc-labor")] == [0, 1]

    def test_status_ocr_pages_and_images_roundtrip(self, full: Store) -> None:
        SCAN.write(full)
        BLANK.write(full)
        store = full
        assert store.get_document("doc-scan") == SCAN.record
        assert store.get_document("doc-scan").status == "needs_ocr"
        assert store.get_document("doc-scan").needs_ocr_pages == (3, 5)
        assert store.get_document("doc-scan").ocr_pages == (2,)
        assert store.find_document("法规", "法规/全扫描.pdf") == BLANK.record
        assert store.document_chunks("doc-scan") == SCAN.chunks
        assert store.get_chunks(SCAN.ids[1:]) == SCAN.chunks[1:]
        assert store.get_chunks(SCAN.ids[1:])[0].images[0] == FIGURE
        assert store.document_chunks("doc-blank") == []
        assert store.get_document("doc-labor").status == DocStatus.READY
        assert store.get_document("doc-labor").needs_ocr_pages == ()
        assert [d.doc_id for d in store.list_documents("法规")] == ["doc-blank", "doc-labor", "doc-wage", "doc-scan"]
        hits = store.bm25_search(["标题"], 10)
        assert ids(hits) == SCAN.ids[1:]
        assert store.get_chunks(ids(hits))[0].images == SCAN.chunks[1].images
        assert store.collections()[0] == CollectionStats("法规", 4, 5, 28 + 26 + 20 + 19 + 12)

    def test_a_document_without_chunks_can_be_replaced_and_deleted(self, full: Store) -> None:
        BLANK.write(full)
        version = full.index_version()
        ready = Doc(
            replace(BLANK.record, status=DocStatus.READY, needs_ocr_pages=(), ocr_pages=(1, 2), chunk_count=1),
            [replace(SCAN.chunks[0], doc_id="doc-blank", source="法规/全扫描.pdf", chunk_id="blank-1")],
            SCAN.tokens[:1],
            SCAN.vectors[:1],
        )
        ready.write(full)
        assert full.index_version() > version
        assert full.get_document("doc-blank") == ready.record
        assert ids(full.bm25_search(["统计表"], 10)) == ["blank-1"]
        assert full.delete_document("doc-blank") is True
        assert full.get_document("doc-blank") is None
        assert full.bm25_search(["统计表"], 10) == []

    # --- replace and delete ------------------------------------------------------------------------
    def test_replace_removes_the_old_version_everywhere(self, full: Store) -> None:
        LABOR_V2.write(full)
        assert full.get_document("doc-labor") == LABOR_V2.record
        assert full.document_chunks("doc-labor") == LABOR_V2.chunks
        assert full.get_chunks(LABOR.ids) == []
        assert full.bm25_search(["经济补偿", "解除"], 10) == []
        assert ids(full.bm25_search(["变更"], 10)) == LABOR_V2.ids
        dense = ids(full.dense_search(np.array([1.0, 0.0, 0.0], np.float32), 10))
        assert sorted(dense) == sorted(LABOR_V2.ids + WAGE.ids + NOTE.ids)
        assert [d.doc_id for d in full.list_documents("法规")] == ["doc-labor", "doc-wage"]
        assert full.collections()[0] == CollectionStats("法规", 2, 2, 45)

    def test_delete_removes_the_document_from_every_index(self, full: Store) -> None:
        assert full.delete_document("doc-labor") is True
        assert full.delete_document("doc-labor") is False
        assert full.delete_document("no-such-doc") is False
        assert full.get_document("doc-labor") is None
        assert full.find_document("法规", "法规/劳动合同法.md") is None
        assert full.document_chunks("doc-labor") == []
        assert full.get_chunks(LABOR.ids) == []
        assert ids(full.bm25_search(["劳动者", "解除"], 10)) == WAGE.ids
        assert sorted(ids(full.dense_search(np.array([1.0, 0.0, 0.0], np.float32), 10))) == sorted(WAGE.ids + NOTE.ids)
        assert full.collections() == [CollectionStats("法规", 1, 1, 20), CollectionStats("笔记", 1, 1, 15)]

    def test_a_deleted_document_can_be_written_again(self, full: Store) -> None:
        full.delete_document("doc-labor")
        LABOR.write(full)
        assert full.document_chunks("doc-labor") == LABOR.chunks
        assert ids(full.bm25_search(["解除"], 10)) == LABOR.ids[:1]

    # --- searching ---------------------------------------------------------------------------------
    def test_bm25_ranks_matching_chunks_with_or_semantics(self, full: Store) -> None:
        hits = full.bm25_search(["工资", "劳动者"], 10)
        assert hits[0].chunk_id == WAGE.ids[0]  # the only chunk holding both terms
        assert sorted(ids(hits)) == sorted(WAGE.ids + LABOR.ids)  # NOTE holds neither term
        assert [h.rank for h in hits] == [1, 2, 3]
        assert all(h.score > 0 for h in hits)
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert hits[0].score > hits[1].score
        assert sorted(ids(full.bm25_search(["预算", "工资"], 10))) == sorted(NOTE.ids + WAGE.ids)

    def test_bm25_edge_cases(self, full: Store) -> None:
        assert full.bm25_search([], 10) == []
        assert full.bm25_search(["不存在的词"], 10) == []
        assert full.bm25_search(['引号"词'], 10) == []  # quotes are escaped, not a syntax error
        assert len(full.bm25_search(ALL_TERMS, 2)) == 2
        assert ids(full.bm25_search(["解除", "解除"], 10)) == LABOR.ids[:1]

    def test_dense_returns_exact_cosine_in_order(self, full: Store) -> None:
        hits = full.dense_search(np.array([0.0, 0.6, 0.8], np.float32), 10)
        assert ids(hits) == [NOTE.ids[0], WAGE.ids[0], LABOR.ids[1], LABOR.ids[0]]
        assert [h.score for h in hits] == pytest.approx([1.0, 0.6, 0.48, 0.0], abs=1e-6)
        assert [h.rank for h in hits] == [1, 2, 3, 4]
        top = full.dense_search(np.array([1.0, 0.0, 0.0], np.float32), 2)
        assert ids(top) == LABOR.ids
        assert [h.score for h in top] == pytest.approx([1.0, 0.6], abs=1e-6)

    def test_dense_scores_are_the_exact_cosines_of_the_asked_chunks(self, full: Store) -> None:
        query = np.array([0.0, 1.2, 1.6], np.float32)  # not unit length: scored as its direction
        got = full.dense_scores(query, [LABOR.ids[1], NOTE.ids[0], "no-such-chunk", LABOR.ids[1]])
        assert sorted(got) == sorted([LABOR.ids[1], NOTE.ids[0]])
        assert got[LABOR.ids[1]] == pytest.approx(0.48, abs=1e-6)
        assert got[NOTE.ids[0]] == pytest.approx(1.0, abs=1e-6)
        assert full.dense_scores(query, []) == {}
        LABOR_V2.write(full)  # the replaced version's chunks are no longer scored
        assert full.dense_scores(query, LABOR.ids + LABOR_V2.ids) == {LABOR_V2.ids[0]: pytest.approx(0.8, abs=1e-6)}
        with pytest.raises(IndexMismatch):
            full.dense_scores(np.ones(4, np.float32), WAGE.ids)

    @pytest.mark.parametrize(
        ("filters", "expected"),
        [
            (Filters(), [LABOR, WAGE, NOTE]),
            (Filters(collection="笔记"), [NOTE]),
            (Filters(doc_type="text"), [WAGE]),
            (Filters(source_glob="法规/*.md"), [LABOR]),
            (Filters(source_glob="*会议*"), [NOTE]),
            (Filters(source_glob="法规/[!劳]*"), [WAGE]),
            (Filters(source_glob="法规/?资*.txt"), [WAGE]),
            (Filters(source_glob="*"), [LABOR, WAGE, NOTE]),
            (Filters(collection="法规", doc_type="markdown"), [LABOR]),
            (Filters(collection="法规", source_glob="*.txt", doc_type="text"), [WAGE]),
            (Filters(collection="法规", source_glob="笔记/*"), []),
            (Filters(collection="不存在"), []),
            (Filters(collection=("笔记", "不存在")), [NOTE]),  # any of several (a scoped token's collections)
            (Filters(collection=("法规", "笔记"), source_glob="*.md"), [LABOR, NOTE]),
            (Filters(doc_type="pdf"), []),
            (Filters(source_glob="法规/劳动合同法"), []),  # a glob matches the whole path
        ],
    )
    def test_filters_restrict_both_retrievers_alike(self, full: Store, filters: Filters, expected: list[Doc]) -> None:
        want = sorted(i for doc in expected for i in doc.ids)
        assert sorted(ids(full.bm25_search(ALL_TERMS, 10, filters))) == want
        assert sorted(ids(full.dense_search(np.array([0.5, 0.5, 0.5], np.float32), 10, filters))) == want

    # --- failures leave the index unchanged --------------------------------------------------------
    def test_dim_mismatch_raises_and_changes_nothing(self, full: Store) -> None:
        version = full.index_version()
        wide = make_doc(
            "doc-wide",
            "法规",
            "法规/宽向量.md",
            "markdown",
            [("劳动者的权利", ["劳动者", "权利"], [0.5, 0.5, 0.5, 0.5])],
        )
        with pytest.raises(IndexMismatch, match="3-dimensional"):
            wide.write(full)
        with pytest.raises(IndexMismatch):
            full.write_document(LABOR_V2.record, LABOR_V2.chunks, LABOR_V2.tokens, np.ones((1, 4), np.float32) / 2)
        assert full.index_version() == version
        assert full.get_document("doc-wide") is None
        assert full.document_chunks("doc-labor") == LABOR.chunks
        assert sorted(ids(full.bm25_search(["劳动者"], 10))) == sorted(LABOR.ids + WAGE.ids)
        assert ids(full.dense_search(np.array([1.0, 0.0, 0.0], np.float32), 1)) == LABOR.ids[:1]
        assert full.get_meta()["dim"] == "3"

    def test_a_failing_write_keeps_the_old_version(self, full: Store) -> None:
        version = full.index_version()
        bad_writes = [
            (LABOR_V2.record, LABOR_V2.chunks, LABOR_V2.tokens + [["多余"]], LABOR_V2.vectors),  # lengths differ
            (LABOR_V2.record, LABOR_V2.chunks, LABOR_V2.tokens, np.ones((2, 3), np.float32)),
            (LABOR_V2.record, [replace(LABOR_V2.chunks[0], doc_id="doc-other")], LABOR_V2.tokens, LABOR_V2.vectors),
        ]
        for record, chunks, tokens, vectors in bad_writes:
            with pytest.raises(StoreError):
                full.write_document(record, chunks, tokens, vectors)
        assert full.index_version() == version
        assert full.get_document("doc-labor") == LABOR.record
        assert full.document_chunks("doc-labor") == LABOR.chunks
        assert full.get_chunks(LABOR_V2.ids) == []
        assert ids(full.bm25_search(["经济补偿"], 10)) == LABOR.ids[1:]
        assert ids(full.dense_search(np.array([1.0, 0.0, 0.0], np.float32), 1)) == LABOR.ids[:1]

    # --- history, stats, metadata, versions --------------------------------------------------------
    def test_ingestion_history_is_newest_first(self, store: Store) -> None:
        records = [
            IngestionRecord("/数据/法规/劳动合同法.md", "法规", "a" * 64, 120, "added", None, 2, 1700000000.0),
            IngestionRecord("/数据/法规/劳动合同法.md", "法规", "b" * 64, 130, "updated", None, 1, 1700000100.0),
            IngestionRecord("/数据/扫描件.pdf", "法规", None, None, "failed", "无法解析 PDF", 0, 1700000200.0),
        ]
        for record in records:
            store.record_ingestion(record)
        assert store.ingestion_history() == records[::-1]
        assert store.ingestion_history(limit=2) == [records[2], records[1]]

    def test_collection_stats(self, full: Store) -> None:
        assert full.collections() == [CollectionStats("法规", 2, 3, 28 + 26 + 20), CollectionStats("笔记", 1, 1, 15)]

    def test_meta_roundtrip(self, store: Store) -> None:
        store.set_meta({"embedder": "multilingual-e5-small", "tokenizer": "rjieba 0.2 + 用户词典"})
        store.set_meta({"embedder": "bge-small-zh"})
        meta = store.get_meta()
        assert meta["embedder"] == "bge-small-zh"
        assert meta["tokenizer"] == "rjieba 0.2 + 用户词典"
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items())

    def test_index_version_increases_on_every_write_and_delete(self, store: Store) -> None:
        seen = [store.index_version()]
        LABOR.write(store)
        seen.append(store.index_version())
        LABOR_V2.write(store)
        seen.append(store.index_version())
        assert store.delete_document("doc-labor")
        seen.append(store.index_version())
        assert seen[0] == 0
        assert seen == sorted(set(seen))  # strictly increasing
        assert not store.delete_document("doc-labor")
        assert store.index_version() == seen[-1]

    def test_data_persists_across_reopen(self, make_store: MakeStore) -> None:
        store = make_store()
        for doc in (LABOR, WAGE, NOTE, SCAN, BLANK):
            doc.write(store)
        store.set_meta({"embedder": "multilingual-e5-small"})
        store.record_ingestion(
            IngestionRecord("/数据/笔记/会议纪要.md", "笔记", "c" * 64, 45, "added", None, 1, 1700000300.0)
        )
        bm25 = store.bm25_search(["劳动者", "预算"], 10)
        version = store.index_version()
        store.close()

        again = make_store()
        assert again.index_version() == version
        assert again.get_meta()["embedder"] == "multilingual-e5-small"
        assert again.list_documents() == [BLANK.record, LABOR.record, WAGE.record, SCAN.record, NOTE.record]
        assert again.document_chunks("doc-scan") == SCAN.chunks
        assert again.get_chunks(NOTE.ids) == NOTE.chunks
        assert again.ingestion_history()[0].status == "added"
        assert ids(again.bm25_search(["劳动者", "预算"], 10)) == ids(bm25)
        assert [h.score for h in again.bm25_search(["劳动者", "预算"], 10)] == pytest.approx([h.score for h in bm25])
        hits = again.dense_search(np.array([0.0, 0.6, 0.8], np.float32), 2)
        assert ids(hits) == [NOTE.ids[0], SCAN.ids[0]]
        assert [h.score for h in hits] == pytest.approx([1.0, 0.8], abs=1e-6)
