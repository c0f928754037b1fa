"""``KnowledgeBase`` queries on a small Chinese corpus: the expected hits per mode, 繁→简, filters, cited answers,
input validation, an index built with another embedder, read-only/locked indexes and a missing index."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import numpy as np
import pytest

from helpers_kb import (
    CORPUS,
    CORPUS_CHUNKS,
    SEC_LEAVE,
    SEC_PROBATION,
    SEC_SEVERANCE,
    RenamedEmbedder,
    make_settings,
    write_corpus,
)
from helpers_perms import permissions_enforced
from zhiku import stores
from zhiku.api import KnowledgeBase
from zhiku.embedding import CachedEmbedder, EmbeddingCache
from zhiku.errors import IndexLocked, IndexMismatch, IndexNotFound, InvalidInput, NotFound, ReadOnlyIndex, StoreError
from zhiku.retrieval.context import chunk_context

PROBATION = CORPUS["劳动合同法.md"].split("\n\n")[2]
SEVERANCE = CORPUS["劳动合同法.md"].split("\n\n")[4].strip()
WAGE = CORPUS["规章/工资支付规定.txt"].strip()


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory, e5, embed_cache_dir: Path):
    """The corpus in collection ``hr`` plus the wage rules again as ``笔记/工资.txt`` in collection ``notes``."""
    root = tmp_path_factory.mktemp("api")
    docs = write_corpus(root / "docs")
    notes = write_corpus(root / "notes", {"工资支付规定.txt": CORPUS["规章/工资支付规定.txt"]})
    embedder = CachedEmbedder(e5, EmbeddingCache(embed_cache_dir / "embeddings.sqlite"))
    with KnowledgeBase(make_settings(root / "idx", embed_cache_dir), embedder=embedder) as kb:
        assert kb.ingest([docs]).counts()["added"] == 3
        assert kb.ingest([notes], collection="notes").counts()["added"] == 1
        yield kb


def top(kb: KnowledgeBase, query: str, mode: str, **kw) -> tuple[str, str]:
    hit = kb.retrieve(query, mode=mode, **kw).hits[0]
    return hit.chunk.source, hit.chunk.section


# --- retrieval ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["bm25", "dense", "hybrid"])
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("试用期最长多久", ("劳动合同法.md", SEC_PROBATION)),
        ("年休假有几天", ("年休假条例.md", SEC_LEAVE)),
        ("经济补偿怎么计算", ("劳动合同法.md", SEC_SEVERANCE)),
        ("加班工资", ("规章/工资支付规定.txt", "")),
    ],
)
def test_each_mode_finds_the_expected_passage(
    kb: KnowledgeBase, query: str, expected: tuple[str, str], mode: str
) -> None:
    assert top(kb, query, mode, collection="hr") == expected


def test_hit_evidence_per_mode(kb: KnowledgeBase) -> None:
    bm25 = kb.retrieve("试用期最长多久", mode="bm25", collection="hr")
    assert bm25.query.terms == ("试用", "试用期", "最长", "多久")
    assert [(h.chunk.section, h.bm25_rank, h.dense_rank) for h in bm25.hits] == [(SEC_PROBATION, 1, None)]
    assert bm25.hits[0].chunk.text == PROBATION
    assert bm25.hits[0].score == bm25.hits[0].bm25_score > 0

    dense = kb.retrieve("试用期最长多久", mode="dense", collection="hr", top_k=10)
    assert len(dense.hits) == CORPUS_CHUNKS  # dense ranks every chunk of the collection
    assert [h.dense_rank for h in dense.hits] == [1, 2, 3, 4]
    assert all(h.bm25_rank is None for h in dense.hits)
    scores = [h.dense_score for h in dense.hits]
    assert scores == sorted(scores, reverse=True) and all(0 < s <= 1 for s in scores)

    hybrid = kb.retrieve("试用期最长多久", mode="hybrid", collection="hr", top_k=10)
    first = hybrid.hits[0]
    assert (first.chunk.section, first.bm25_rank, first.dense_rank) == (SEC_PROBATION, 1, 1)
    assert [h.score for h in hybrid.hits] == sorted((h.score for h in hybrid.hits), reverse=True)
    assert first.score > hybrid.hits[1].score  # the values: test_zscore_fused_scores_by_hand
    assert len(hybrid.hits) == CORPUS_CHUNKS


class OneHot:
    """The query and the probation chunk on axis 0, every other chunk on axis 1: cosines 1, 0, 0, 0 exactly."""

    name = "test/one-hot-2"
    dim = 2

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return np.array([[1.0, 0.0] if PROBATION in t else [0.0, 1.0] for t in texts], np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return np.array([1.0, 0.0], np.float32)


def test_zscore_fused_scores_by_hand(tmp_path: Path, embed_cache_dir: Path, corpus: Path) -> None:
    # Dense cosines 1, 0, 0, 0: mean 1/4, population std √3/4, so z = √3 for the probation chunk and -1/√3 for
    # the rest. BM25 matches the probation chunk only: one candidate has z = 0, and 0 is the floor the other
    # chunks get. The fused scores are √3 and three times -1/√3.
    with KnowledgeBase(make_settings(tmp_path / "idx", embed_cache_dir), embedder=OneHot()) as kb:
        kb.ingest([corpus])
        hits = kb.retrieve("试用期最长多久", mode="hybrid", top_k=10).hits
    assert [(h.chunk.text, h.bm25_rank, h.dense_rank) for h in hits[:1]] == [(PROBATION, 1, 1)]
    assert [h.score for h in hits] == pytest.approx([3**0.5, -(3**-0.5), -(3**-0.5), -(3**-0.5)], rel=1e-6)


def test_rrf_fusion_setting(tmp_path: Path, kb_factory, corpus: Path) -> None:
    kb = kb_factory(tmp_path / "idx", retrieval={"fusion": "rrf"})
    kb.ingest([corpus])
    first = kb.retrieve("试用期最长多久", mode="hybrid", top_k=10).hits[0]
    assert (first.chunk.section, first.bm25_rank, first.dense_rank) == (SEC_PROBATION, 1, 1)
    assert first.score == pytest.approx(2 / 61)  # RRF, k=60: 1/(60+1) from each channel


def test_synonyms_file_lets_colloquial_words_find_statute_words(tmp_path: Path, kb_factory, corpus: Path) -> None:
    plain = kb_factory(tmp_path / "idx")
    plain.ingest([corpus])
    assert plain.retrieve("PTO", mode="bm25").hits == ()  # no chunk says PTO
    synonyms = tmp_path / "synonyms.txt"
    synonyms.write_text("PTO 年休假\n", encoding="utf-8")
    kb = kb_factory(tmp_path / "idx", text={"synonyms": synonyms})  # query-time: the same index
    r = kb.retrieve("PTO", mode="bm25")
    assert "年休假" in r.query.terms
    assert (r.hits[0].chunk.source, r.hits[0].chunk.section) == ("年休假条例.md", SEC_LEAVE)


def test_character_pairs_meet_a_word_the_document_cuts_otherwise(kb: KnowledgeBase) -> None:
    # the question's 年休 is one word to jieba; the rules' 年休假 is cut 休假 / 年休假: only its pair 年休 meets it
    r = kb.retrieve("年休几天", mode="bm25", collection="hr")
    assert (r.query.terms, r.query.pairs) == (("年休", "几天"), ("休几",))
    assert [(h.chunk.source, h.chunk.section) for h in r.hits] == [("年休假条例.md", SEC_LEAVE)]


def test_chunk_context_of_a_hit(kb: KnowledgeBase) -> None:
    hit = kb.retrieve("试用期最长多久", mode="bm25", collection="hr").hits[0]
    ctx = chunk_context(kb.store, hit.chunk.chunk_id, "article", 12000)
    assert (ctx.chunks, ctx.complete) == ((hit.chunk,), True)
    assert ctx.text == "# 劳动合同法\n\n## 第二章 劳动合同的订立\n\n" + hit.chunk.text
    assert chunk_context(kb.store, hit.chunk.chunk_id, "chunk", 1).text == hit.chunk.text
    with pytest.raises(NotFound, match="no chunk 'nope'"):
        chunk_context(kb.store, "nope", "article", 12000)


def test_top_k_limits_the_hits(kb: KnowledgeBase) -> None:
    assert len(kb.retrieve("劳动者", mode="dense", top_k=2).hits) == 2
    assert len(kb.retrieve("劳动者", mode="hybrid", top_k=1).hits) == 1
    assert len(kb.retrieve("劳动者", mode="hybrid", top_k=100).hits) == CORPUS_CHUNKS + 1


@pytest.mark.parametrize("mode", ["bm25", "dense", "hybrid"])
def test_traditional_query_finds_the_same_top_hit(kb: KnowledgeBase, mode: str) -> None:
    simplified = kb.retrieve("试用期最长多久", mode=mode, collection="hr")
    traditional = kb.retrieve("試用期最長多久", mode=mode, collection="hr")
    assert traditional.query.text == "試用期最長多久"  # kept as written
    assert traditional.query.terms == simplified.query.terms == ("试用", "试用期", "最长", "多久")
    assert traditional.hits[0].chunk.chunk_id == simplified.hits[0].chunk.chunk_id
    assert (traditional.hits[0].chunk.source, traditional.hits[0].chunk.section) == ("劳动合同法.md", SEC_PROBATION)


# --- filters -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["bm25", "dense", "hybrid"])
def test_collection_filter(kb: KnowledgeBase, mode: str) -> None:
    notes = kb.retrieve("加班工资", mode=mode, collection="notes", top_k=10).hits
    assert [(h.chunk.collection, h.chunk.source, h.chunk.text) for h in notes] == [("notes", "工资支付规定.txt", WAGE)]
    hr = kb.retrieve("加班工资", mode=mode, collection="hr", top_k=10).hits
    assert {h.chunk.collection for h in hr} == {"hr"}
    everywhere = kb.retrieve("加班工资", mode=mode, top_k=10).hits
    assert {h.chunk.source for h in everywhere[:2]} == {"工资支付规定.txt", "规章/工资支付规定.txt"}


@pytest.mark.parametrize("mode", ["bm25", "dense", "hybrid"])
def test_source_glob_filter(kb: KnowledgeBase, mode: str) -> None:
    hits = kb.retrieve("经济补偿怎么计算", mode=mode, source="劳动合同法*", top_k=10).hits
    assert {h.chunk.source for h in hits} == {"劳动合同法.md"}
    assert hits[0].chunk.section == SEC_SEVERANCE
    assert len(hits) == (1 if mode == "bm25" else 2)
    sub = kb.retrieve("加班工资", mode=mode, source="规章/*", top_k=10).hits
    assert [(h.chunk.collection, h.chunk.source) for h in sub] == [("hr", "规章/工资支付规定.txt")]


@pytest.mark.parametrize("mode", ["bm25", "dense", "hybrid"])
def test_doc_type_filter(kb: KnowledgeBase, mode: str) -> None:
    text = kb.retrieve("加班工资", mode=mode, doc_type="text", top_k=10).hits
    assert sorted((h.chunk.collection, h.chunk.source, h.chunk.doc_type) for h in text) == [
        ("hr", "规章/工资支付规定.txt", "text"),
        ("notes", "工资支付规定.txt", "text"),
    ]
    md = kb.retrieve("年休假有几天", mode=mode, doc_type="markdown", top_k=10).hits
    assert {h.chunk.doc_type for h in md} == {"markdown"}
    assert (md[0].chunk.source, md[0].chunk.section) == ("年休假条例.md", SEC_LEAVE)


@pytest.mark.parametrize("mode", ["bm25", "dense", "hybrid"])
@pytest.mark.parametrize(
    "filters",
    [
        {"collection": "无此集合"},
        {"source": "不存在*"},
        {"doc_type": "pdf"},
        {"collection": "notes", "source": "劳动合同法*"},
    ],
)
def test_a_filter_matching_nothing_gives_no_hits(kb: KnowledgeBase, mode: str, filters: dict) -> None:
    assert kb.retrieve("试用期最长多久", mode=mode, **filters).hits == ()
    if "collection" in filters and filters["collection"] == "无此集合":  # a typo'd collection is an error
        with pytest.raises(NotFound, match="no collection '无此集合' in this knowledge base; available: hr, notes"):
            kb.query("试用期最长多久", mode=mode, **filters)
        return
    answer = kb.query("试用期最长多久", mode=mode, **filters)
    assert (answer.citations, answer.low_confidence) == ((), True)
    assert answer.markdown == (
        "**检索问题 / Query:** 试用期最长多久\n\n未找到相关内容。No matching passages were found in the knowledge base."
    )
    assert answer.note is not None and answer.note.startswith("没有符合过滤条件的段落 / No passage matches the filters")


# --- answers -----------------------------------------------------------------------------------------
def test_answer_has_markers_and_sources(kb: KnowledgeBase) -> None:
    answer = kb.query("  试用期最长多久？ ", mode="bm25", collection="hr")
    assert (answer.query, answer.mode, answer.low_confidence) == ("试用期最长多久？", "bm25", False)
    assert answer.markdown == (
        "**检索问题 / Query:** 试用期最长多久？\n\n"
        f"[1] {PROBATION} ({SEC_PROBATION})\n\n"
        "**来源 / Sources**\n\n"
        f"[1] 劳动合同法.md, {SEC_PROBATION}"
    )
    [c] = answer.citations
    assert (c.n, c.source, c.page, c.section, c.text) == (1, "劳动合同法.md", None, SEC_PROBATION, PROBATION)
    assert c.doc_id == kb.store.find_document("hr", "劳动合同法.md").doc_id

    two = kb.query("经济补偿怎么计算", mode="hybrid", collection="hr", source="劳动合同法*")
    assert two.markdown == (
        "**检索问题 / Query:** 经济补偿怎么计算\n\n"
        f"[1] {SEVERANCE} ({SEC_SEVERANCE})\n\n"
        f"[2] {PROBATION} ({SEC_PROBATION})\n\n"
        "**来源 / Sources**\n\n"
        f"[1] 劳动合同法.md, {SEC_SEVERANCE}\n"
        f"[2] 劳动合同法.md, {SEC_PROBATION}"
    )
    assert [(c.n, c.section) for c in two.citations] == [(1, SEC_SEVERANCE), (2, SEC_PROBATION)]

    plain = kb.query("加班工资", mode="bm25", collection="notes")
    assert plain.markdown.endswith("**来源 / Sources**\n\n[1] 工资支付规定.txt")  # no section: file name only


def test_query_takes_retrieves_options_and_judges_confidence(kb: KnowledgeBase) -> None:
    """``query`` takes exactly ``retrieve``'s options (one ``QueryOptions``) and flags an off-topic question
    ``low_confidence`` as MCP and ``zhiku query`` do (server.min_score, calibrated for the bundled embedder)."""
    options = {"mode": "hybrid", "top_k": 2, "per_source_k": 3, "collection": "hr", "rerank": False}
    r = kb.retrieve("经济补偿怎么计算", **options)
    a = kb.query("经济补偿怎么计算", **options)
    assert [c.chunk_id for c in a.citations] == [h.chunk.chunk_id for h in r.hits]
    assert [(c.source, c.section) for c in a.citations] == [
        ("劳动合同法.md", SEC_SEVERANCE),
        ("规章/工资支付规定.txt", ""),
    ]
    assert a.low_confidence is False
    off = kb.query("今天天气怎么样？", mode="hybrid")
    assert off.low_confidence is True and len(off.citations) > 0


# --- invalid input -----------------------------------------------------------------------------------
EMPTY = "the query is empty: ask a question, e.g. 试用期最长多久"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"query": ""}, EMPTY),
        ({"query": "   \n\t "}, EMPTY),
        (  # nothing to search for: it used to return five passages flagged low-confidence
            {"query": "？？？"},
            "the query '？？？' has no words, only punctuation or symbols: ask a question, e.g. 试用期最长多久",
        ),
        (
            {"query": "…" * 30},
            f"the query '{'…' * 20}…' has no words, only punctuation or symbols: ask a question, e.g. 试用期最长多久",
        ),
        ({"query": "试用期", "top_k": 0}, "top_k must be an integer from 1 to 100, got 0"),
        ({"query": "试用期", "top_k": 101}, "top_k must be an integer from 1 to 100, got 101"),
        ({"query": "试用期", "top_k": True}, "top_k must be an integer from 1 to 100, got True"),
        ({"query": "试用期", "mode": "semantic"}, "unknown search mode 'semantic': use one of bm25, dense, hybrid"),
        ({"query": "试" * 2001}, "the query has 2001 characters; the limit is 2000"),
    ],
)
def test_invalid_queries_are_refused(kb: KnowledgeBase, kwargs: dict, message: str) -> None:
    for call in (kb.retrieve, kb.query):
        with pytest.raises(InvalidInput) as e:
            call(**kwargs)
        assert str(e.value) == message
        assert e.value.code == "INVALID_INPUT"


# --- an index built with another embedder -------------------------------------------------------------
def test_index_from_another_embedder_is_refused_until_rebuilt(kb_factory, corpus: Path, tmp_path: Path, e5) -> None:
    idx = tmp_path / "idx"
    kb = kb_factory(idx)
    kb.ingest([corpus])
    kb.store.set_meta({"embedder": "bge-small-zh/v1.5"})
    kb.close()

    kb = kb_factory(idx)
    hint = (
        f"rebuild it with `zhiku ingest PATH... --index {idx} --force` (re-embeds everything), or use another --index"
    )
    for mode in ("dense", "hybrid"):
        with pytest.raises(IndexMismatch) as e:
            kb.retrieve("试用期最长多久", mode=mode)
        assert str(e.value) == (
            f"index {idx} was built with embedder 'bge-small-zh/v1.5' but the settings use "
            f"{e5.name!r}; vectors from different models cannot be mixed: {hint}"
        )
    with pytest.raises(IndexMismatch):
        kb.query("试用期最长多久")  # the default mode, hybrid
    assert top(kb, "试用期最长多久", "bm25") == ("劳动合同法.md", SEC_PROBATION)  # BM25 needs no vectors

    with pytest.raises(IndexMismatch) as e:
        kb.ingest([corpus])
    assert str(e.value) == (
        f"index {idx} was built differently (embedder: index has 'bge-small-zh/v1.5', "
        f"settings give {e5.name!r}): {hint}"
    )
    with pytest.raises(IndexMismatch):
        kb.ingest([corpus], dry_run=True)
    assert kb.store.get_meta()["embedder"] == "bge-small-zh/v1.5"
    assert len(kb.documents()) == 3

    report = kb.ingest([corpus], force=True)
    assert report.counts() == {"added": 3, "updated": 0, "skipped": 0, "removed": 0, "failed": 0}
    assert (report.chunks_written, report.chunks_embedded) == (CORPUS_CHUNKS, 0)
    assert kb.store.get_meta()["embedder"] == e5.name
    assert kb.stale() == {}
    for mode in ("dense", "hybrid"):
        assert top(kb, "试用期最长多久", mode) == ("劳动合同法.md", SEC_PROBATION)


def test_index_written_by_a_renamed_embedder_is_refused(
    kb_factory, cached_embedder, corpus: Path, tmp_path: Path
) -> None:
    idx = tmp_path / "idx"
    other = kb_factory(idx, embedder=RenamedEmbedder(cached_embedder(), "m3e-base@2023"))
    other.ingest([corpus])
    assert other.store.get_meta()["embedder"] == "m3e-base@2023"
    assert top(other, "试用期最长多久", "hybrid") == ("劳动合同法.md", SEC_PROBATION)
    other.close()

    reader = kb_factory(idx, read_only=True)
    assert reader.stale() == {"embedder": ("m3e-base@2023", reader.embedder.name)}
    with pytest.raises(IndexMismatch, match="built with embedder 'm3e-base@2023'.*--force"):
        reader.retrieve("年休假有几天", mode="hybrid")
    assert top(reader, "年休假有几天", "bm25") == ("年休假条例.md", SEC_LEAVE)


def test_a_dimension_change_is_refused(kb_factory, corpus: Path, tmp_path: Path) -> None:
    idx = tmp_path / "idx"
    kb = kb_factory(idx)
    kb.ingest([corpus])
    kb.store.set_meta({"dim": "768"})
    kb.close()
    kb = kb_factory(idx)
    with pytest.raises(IndexMismatch) as e:
        kb.retrieve("试用期最长多久", mode="dense")
    assert str(e.value) == (
        f"index {idx} holds 768-dimensional vectors but the embedder gives 384; vectors from "
        f"different models cannot be mixed: rebuild it with `zhiku ingest PATH... --index {idx} "
        "--force` (re-embeds everything), or use another --index"
    )
    assert top(kb, "试用期最长多久", "bm25") == ("劳动合同法.md", SEC_PROBATION)


# --- read-only, locked and missing indexes --------------------------------------------------------------
def test_read_only_index_refuses_writes_and_keeps_its_data(kb_factory, corpus: Path, tmp_path: Path) -> None:
    idx = tmp_path / "idx"
    kb_factory(idx).ingest([corpus])
    ro = kb_factory(idx, read_only=True)
    message = f"index {idx} is read-only (opened with read_only=True); open it for writing to change it"
    for write in (lambda: ro.ingest([corpus], force=True), lambda: ro.delete("年休假条例.md")):
        with pytest.raises(ReadOnlyIndex) as e:
            write()
        assert str(e.value) == message
    assert len(ro.documents()) == 3
    assert top(ro, "年休假有几天", "hybrid") == ("年休假条例.md", SEC_LEAVE)


def test_unwritable_index_directory_is_a_clear_error(kb_factory, corpus: Path, tmp_path: Path) -> None:
    idx = tmp_path / "idx"
    kb_factory(idx).ingest([corpus])
    os.chmod(idx / "zhiku.db", stat.S_IRUSR)
    os.chmod(idx, stat.S_IRUSR | stat.S_IXUSR)
    try:
        with permissions_enforced(), pytest.raises(StoreError, match="read-only|cannot"):  # as root too (CI)
            kb_factory(idx).ingest([corpus], force=True)
    finally:
        os.chmod(idx, stat.S_IRWXU)
        os.chmod(idx / "zhiku.db", stat.S_IRUSR | stat.S_IWUSR)


def test_locked_index_is_a_clear_error_and_loses_nothing(kb_factory, corpus: Path, tmp_path: Path) -> None:
    idx = tmp_path / "idx"
    kb_factory(idx).ingest([corpus])
    (corpus / "年休假条例.md").write_text("# 职工带薪年休假条例\n\n第三条 年休假另行规定。\n", encoding="utf-8")
    holder = sqlite3.connect(idx / "zhiku.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer holds the write lock
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(stores, "BUSY_TIMEOUT_S", 0.2)
            kb = kb_factory(idx)
        with pytest.raises(IndexLocked) as e:
            kb.ingest([corpus])
        assert str(e.value) == (f"index {idx} is locked by another writer; wait for it to finish and try again")
        assert e.value.retryable is True
        with pytest.raises(IndexLocked):
            kb.delete("劳动合同法.md")
        assert top(kb, "年休假有几天", "bm25") == ("年休假条例.md", SEC_LEAVE)  # readers are not blocked
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert len(kb.documents()) == 3
    assert kb.retrieve("应休未休", mode="bm25").hits[0].chunk.section == SEC_LEAVE


def test_missing_index_is_index_not_found(kb_factory, tmp_path: Path) -> None:
    idx = tmp_path / "没有索引"
    with pytest.raises(IndexNotFound) as e:
        kb_factory(idx, read_only=True)
    assert str(e.value) == f"no index at {idx}: run `zhiku ingest PATH --index {idx}` first"
    assert isinstance(e.value, NotFound) and e.value.code == "INDEX_NOT_FOUND"
    assert not idx.exists()  # looking does not create it
