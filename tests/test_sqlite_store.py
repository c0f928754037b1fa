"""SQLite-specific behaviour of ``SQLiteStore`` (the protocol itself is covered by tests/contracts)."""

from __future__ import annotations

import dataclasses
import math
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from contracts.store_contract import LABOR, LABOR_V2, NOTE, WAGE, Doc, ids, make_doc
from zhiku.errors import IndexLocked, IndexMismatch, InvalidInput, NotFound, ReadOnlyIndex, StoreError
from zhiku.settings import Settings, StoreSettings
from zhiku.stores import SQLiteStore, open_store
from zhiku.stores.sqlite import IndexNotFound, query_terms
from zhiku.types import Filters, IngestionRecord

X = np.array([1.0, 0.0, 0.0], np.float32)


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    return tmp_path / "索引"


@pytest.fixture
def store(index_dir: Path):
    with SQLiteStore(index_dir) as s:
        yield s


def raw(index_dir: Path) -> sqlite3.Connection:
    return sqlite3.connect(index_dir / "zhiku.db", isolation_level=None)


# --- file, schema, settings ------------------------------------------------------------------------
def test_one_wal_file_with_schema_version(store: SQLiteStore, index_dir: Path) -> None:
    conn = raw(index_dir)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"meta", "documents", "chunks", "chunk_tokens", "ingestion_history"} <= tables
    meta = store.get_meta()
    assert meta.pop("index_id") != "" and meta == {"index_version": "0", "schema_version": "4"}


def test_open_store_picks_sqlite_from_settings(index_dir: Path) -> None:
    settings = Settings(index=index_dir, store=StoreSettings())
    with pytest.raises(IndexNotFound):
        open_store(settings, read_only=True)
    writer = open_store(settings)
    assert isinstance(writer, SQLiteStore) and not writer.read_only
    LABOR.write(writer)
    reader = open_store(settings, read_only=True)
    assert isinstance(reader, SQLiteStore) and reader.read_only
    assert reader.get_document("doc-labor") == LABOR.record
    reader.close()
    writer.close()


def test_query_terms_are_distinct_and_not_blank() -> None:
    assert query_terms(["劳动", "合同", "劳动", " ", 'a"b']) == ["劳动", "合同", 'a"b']
    assert query_terms([]) == []
    with pytest.raises(InvalidInput):
        query_terms("劳动 合同")


# --- several connections ---------------------------------------------------------------------------
def test_a_second_store_sees_the_first_ones_writes(store: SQLiteStore, index_dir: Path) -> None:
    other = SQLiteStore(index_dir)
    reader = SQLiteStore(index_dir, read_only=True)
    assert other.dense_search(X, 10) == [] and reader.dense_search(X, 10) == []  # vectors now loaded
    LABOR.write(store)
    for s in (other, reader):
        assert ids(s.dense_search(X, 10)) == LABOR.ids
        assert ids(s.bm25_search(["解除"], 10)) == LABOR.ids[:1]
        assert s.index_version() == store.index_version()
    WAGE.write(other)  # other's vectors were current: patched in place
    NOTE.write(store)  # store never loaded vectors: loads them on the next search
    for s in (store, other, reader):
        assert sorted(ids(s.dense_search(X, 10))) == sorted(LABOR.ids + WAGE.ids + NOTE.ids)
    assert store.delete_document("doc-labor")
    LABOR_V2.write(other)  # other's vectors are stale now (store deleted): must reload, not patch
    for s in (store, other, reader):
        assert sorted(ids(s.dense_search(X, 10))) == sorted(LABOR_V2.ids + WAGE.ids + NOTE.ids)
        assert s.get_chunks(LABOR.ids) == []
    other.close()
    reader.close()


def test_a_locked_index_raises_index_locked_and_keeps_the_data(index_dir: Path) -> None:
    store = SQLiteStore(index_dir, busy_timeout_s=0.1)
    LABOR.write(store)
    blocker = raw(index_dir)
    blocker.execute("BEGIN IMMEDIATE")
    with pytest.raises(IndexLocked, match="locked by another writer; wait for it to finish and try again"):
        LABOR_V2.write(store)
    with pytest.raises(IndexLocked):
        store.delete_document("doc-labor")
    assert ids(store.bm25_search(["解除"], 10)) == LABOR.ids[:1]  # readers are not blocked
    blocker.execute("ROLLBACK")
    blocker.close()
    assert store.document_chunks("doc-labor") == LABOR.chunks
    assert ids(store.dense_search(X, 10)) == LABOR.ids
    LABOR_V2.write(store)
    assert store.document_chunks("doc-labor") == LABOR_V2.chunks
    store.close()


def test_concurrent_searches_from_threads(store: SQLiteStore) -> None:
    LABOR.write(store)
    WAGE.write(store)
    stop = threading.Event()

    def search() -> int:
        n = 0
        while not stop.is_set() or n < 20:
            assert WAGE.ids[0] in ids(store.bm25_search(["工资"], 5))
            assert ids(store.dense_search(X, 1)) == LABOR.ids[:1]
            n += 1
        return n

    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(search) for _ in range(4)]
        for _ in range(10):
            NOTE.write(store)
            store.delete_document("doc-note")
        stop.set()
        assert all(f.result() >= 20 for f in futures)


# --- errors ----------------------------------------------------------------------------------------
def test_read_only_open_of_a_missing_index(index_dir: Path) -> None:
    with pytest.raises(IndexNotFound, match=r"no index at .*索引: run `zhiku ingest PATH --index .*索引` first") as e:
        SQLiteStore(index_dir, read_only=True)
    assert isinstance(e.value, StoreError) and isinstance(e.value, NotFound)
    assert not index_dir.exists()


def test_writes_to_a_read_only_store_raise(store: SQLiteStore, index_dir: Path) -> None:
    LABOR.write(store)
    reader = SQLiteStore(index_dir, read_only=True)
    for write in (
        lambda: WAGE.write(reader),
        lambda: reader.delete_document("doc-labor"),
        lambda: reader.record_ingestion(IngestionRecord("/数据/a.md", "法规", None, None, "failed", "坏文件", 0, 1.0)),
        lambda: reader.set_meta({"embedder": "x"}),
    ):
        with pytest.raises(ReadOnlyIndex, match="read-only"):
            write()
    assert reader.document_chunks("doc-labor") == LABOR.chunks
    assert reader.index_version() == store.index_version()
    reader.close()


def test_a_file_that_is_not_sqlite(index_dir: Path) -> None:
    index_dir.mkdir()
    (index_dir / "zhiku.db").write_bytes("这不是数据库".encode() * 200)
    for read_only in (False, True):
        with pytest.raises(StoreError, match="zhiku.db is not a usable zhiku index"):
            SQLiteStore(index_dir, read_only=read_only)


def test_a_sqlite_file_that_is_not_an_index(index_dir: Path) -> None:
    index_dir.mkdir()
    conn = raw(index_dir)
    conn.execute("CREATE TABLE notes (x)")
    conn.close()
    with pytest.raises(StoreError, match="not a zhiku index"):
        SQLiteStore(index_dir)


def test_messages_for_bad_writes_and_queries(store: SQLiteStore) -> None:
    LABOR.write(store)
    with pytest.raises(IndexMismatch) as e:
        store.dense_search(np.ones(4, np.float32), 5)
    assert str(e.value) == (
        "index holds 3-dimensional vectors but got 4: the embedder changed; rebuild with `zhiku ingest PATH --force` into a new --index"
    )
    copy = make_doc("doc-copy", "法规", "法规/副本.md", "markdown", [(LABOR.chunks[0].text, ["劳动"], [1.0, 0.0, 0.0])])
    clash = Doc(copy.record, [dataclasses.replace(copy.chunks[0], chunk_id=LABOR.ids[0])], copy.tokens, copy.vectors)
    with pytest.raises(StoreError, match=f"chunk id {LABOR.ids[0]} already belongs to document doc-labor"):
        clash.write(store)
    same_source = make_doc(
        "doc-other", "法规", "法规/劳动合同法.md", "markdown", [("别的内容", ["内容"], [0.0, 1.0, 0.0])]
    )
    with pytest.raises(StoreError, match="already stored as document doc-labor"):
        same_source.write(store)
    with pytest.raises(StoreError, match="NaN"):
        store.write_document(LABOR_V2.record, LABOR_V2.chunks, LABOR_V2.tokens, np.full((1, 3), np.nan, np.float32))
    with pytest.raises(InvalidInput):
        store.set_meta({"index_version": "99"})
    assert store.document_chunks("doc-labor") == LABOR.chunks
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.bm25_search(["劳动"], 5)


def test_dim_meta_can_be_preset_and_blanked_for_a_rebuild(store: SQLiteStore) -> None:
    store.set_meta({"dim": "4"})  # the ingest records the embedder's dim before the first write
    with pytest.raises(IndexMismatch, match="index holds 4-dimensional vectors but got 3"):
        LABOR.write(store)
    store.set_meta({"dim": ""})
    LABOR.write(store)
    assert store.get_meta()["dim"] == "3"
    assert ids(store.dense_search(X, 1)) == LABOR.ids[:1]
    store.delete_document("doc-labor")  # a forced rebuild with another embedder: empty it, blank dim, rewrite
    store.set_meta({"dim": ""})
    wide = make_doc(
        "doc-wide", "法规", "法规/宽.md", "markdown", [("劳动者的权利", ["劳动者", "权利"], [0.0, 0.0, 0.0, 1.0])]
    )
    wide.write(store)
    assert store.get_meta()["dim"] == "4"
    assert ids(store.dense_search(np.array([0.0, 0.0, 0.0, 1.0], np.float32), 5)) == wide.ids


# --- the in-memory vectors -------------------------------------------------------------------------
def test_dense_search_matches_brute_force_after_many_writes_and_deletes(index_dir: Path) -> None:
    rng = np.random.default_rng(7)
    store = SQLiteStore(index_dir)
    live: dict[str, tuple[str, np.ndarray, str]] = {}  # chunk id -> (doc id, vector, collection)
    for i in range(60):
        n = int(rng.integers(1, 6))
        vectors = rng.normal(size=(n, 8)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        collection = "甲" if i % 2 else "乙"
        doc = make_doc(
            f"doc-{i % 40}",
            collection,
            f"文件/{i % 40}.md",
            "markdown",
            [(f"第{i}号文件第{j}段", ["文件"], v.tolist()) for j, v in enumerate(vectors)],
        )
        if i % 40 != i:
            live = {k: v for k, v in live.items() if v[0] != doc.record.doc_id}
        doc.write(store)
        live.update({c.chunk_id: (doc.record.doc_id, v, collection) for c, v in zip(doc.chunks, vectors, strict=False)})
        if i % 7 == 3:
            victim = f"doc-{int(rng.integers(0, 40))}"
            store.delete_document(victim)
            live = {k: v for k, v in live.items() if v[0] != victim}
        if i % 10 == 0:
            store.dense_search(np.ones(8, np.float32), 1)  # load the vectors early so later writes patch them
    query = rng.normal(size=8).astype(np.float32)
    query /= np.linalg.norm(query)
    for s in (store, SQLiteStore(index_dir, read_only=True)):
        for collection in (None, "甲"):
            expected = sorted(
                ((float(v @ query), k) for k, (_, v, c) in live.items() if collection in (None, c)),
                key=lambda t: (-t[0], t[1]),
            )[:15]
            hits = s.dense_search(query, 15, Filters(collection=collection))
            assert ids(hits) == [k for _, k in expected]
            assert [h.score for h in hits] == pytest.approx([sc for sc, _ in expected], abs=1e-5)
        s.close()


# --- BM25 against a naive reference scorer ---------------------------------------------------------
CORPUS = [
    ["劳动", "合同", "解除", "劳动者", "用人单位"],
    ["劳动", "合同", "期限", "固定", "劳动", "合同"],
    ["工资", "支付", "劳动者", "按月"],
    ["经济补偿", "解除", "劳动", "合同", "工作", "年限", "计算", "标准"],
    ["试用期", "工资", "不得", "低于", "最低", "工资", "标准"],
    ["会议", "讨论", "预算"],
    ["劳动", "争议", "仲裁", "申请", "时效", "一年"],
    ["加班", "工资", "劳动", "合同", "约定", "支付", "标准", "百分之一百五十", "以上"],
]
QUERIES = [
    ["解除"],
    ["工资", "标准"],
    ["劳动", "合同"],
    ["劳动者", "仲裁", "预算"],
    ["工资", "工资", "加班"],
    ["不存在"],
]


def oracle_bm25(
    corpus: dict[str, list[str]], terms: list[str], k1: float = 1.2, b: float = 0.75
) -> list[tuple[str, float]]:
    """BM25 as FTS5's bm25() computes it: idf = ln((N - n + 0.5) / (n + 0.5)), 1e-6 when not positive."""
    n_docs = len(corpus)
    avgdl = sum(len(toks) for toks in corpus.values()) / n_docs
    scores: dict[str, float] = {}
    for term in dict.fromkeys(terms):
        hits = sum(term in toks for toks in corpus.values())
        idf = math.log((n_docs - hits + 0.5) / (hits + 0.5))
        idf = idf if idf > 0 else 1e-6
        for chunk_id, toks in corpus.items():
            f = toks.count(term)
            if f:
                scores[chunk_id] = scores.get(chunk_id, 0.0) + idf * (f * (k1 + 1)) / (
                    f + k1 * (1 - b + b * len(toks) / avgdl)
                )
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def test_bm25_equals_the_reference_scorer(store: SQLiteStore) -> None:
    first = make_doc(
        "doc-甲", "法规", "法规/甲.md", "markdown", [(f"甲{i}", t, [1.0, 0.0]) for i, t in enumerate(CORPUS[:5])]
    )
    second = make_doc(
        "doc-乙", "法规", "法规/乙.md", "markdown", [(f"乙{i}", t, [0.0, 1.0]) for i, t in enumerate(CORPUS[5:])]
    )
    first.write(store)
    second.write(store)
    corpus = {c.chunk_id: t for doc in (first, second) for c, t in zip(doc.chunks, doc.tokens, strict=False)}

    def check() -> None:
        for terms in QUERIES:
            expected = oracle_bm25(corpus, terms)
            hits = store.bm25_search(terms, 20)
            assert ids(hits) == [k for k, _ in expected], terms
            for hit, (_, score) in zip(hits, expected, strict=False):
                assert abs(hit.score - score) < 1e-6 and hit.score == pytest.approx(score, rel=1e-9), terms

    check()
    assert oracle_bm25(corpus, ["劳动"])[0][1] < 1e-5  # "劳动" is in 5 of 8 chunks: its idf is clamped
    store.delete_document("doc-乙")  # N, n and avgdl change: deleted postings must be gone
    corpus = {c.chunk_id: t for c, t in zip(first.chunks, first.tokens, strict=False)}
    check()
    assert store.bm25_search(["仲裁"], 5) == []


# --- schema upgrades ------------------------------------------------------------------------------
V1_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE documents (
    doc_id TEXT PRIMARY KEY, collection TEXT NOT NULL, source TEXT NOT NULL, path TEXT NOT NULL,
    doc_type TEXT NOT NULL, title TEXT NOT NULL, sha256 TEXT NOT NULL, size INTEGER NOT NULL,
    chunk_count INTEGER NOT NULL, pages INTEGER, ingested_at REAL NOT NULL, chars INTEGER NOT NULL,
    UNIQUE (collection, source));
CREATE TABLE chunks (
    rowid INTEGER PRIMARY KEY, chunk_id TEXT NOT NULL UNIQUE,
    doc_id TEXT NOT NULL REFERENCES documents (doc_id) ON DELETE CASCADE,
    collection TEXT NOT NULL, source TEXT NOT NULL, doc_type TEXT NOT NULL, section TEXT NOT NULL,
    page INTEGER, start INTEGER NOT NULL, "end" INTEGER NOT NULL, ordinal INTEGER NOT NULL,
    text TEXT NOT NULL, vector BLOB NOT NULL);
CREATE VIRTUAL TABLE fts USING fts5 (tokens, tokenize = 'unicode61 remove_diacritics 0');
CREATE TABLE ingestion_history (
    id INTEGER PRIMARY KEY, path TEXT NOT NULL, collection TEXT NOT NULL, sha256 TEXT, size INTEGER,
    status TEXT NOT NULL, error TEXT, chunk_count INTEGER NOT NULL, at REAL NOT NULL);
INSERT INTO meta VALUES ('schema_version', '1'), ('index_version', '1'), ('dim', '3');
"""


def write_v1_index(index_dir: Path) -> None:
    """An index as zhiku 0.1 (schema 1) wrote it, holding LABOR."""
    index_dir.mkdir(parents=True)
    with raw(index_dir) as conn:
        conn.executescript(V1_SCHEMA)
        r = LABOR.record
        conn.execute("INSERT INTO documents VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", (*dataclasses.astuple(r)[:11], 54))
        for i, (c, tokens, vector) in enumerate(zip(LABOR.chunks, LABOR.tokens, LABOR.vectors, strict=False), 1):
            conn.execute(
                "INSERT INTO chunks VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (i, *dataclasses.astuple(c)[:11], vector.tobytes()),
            )
            conn.execute("INSERT INTO fts (rowid, tokens) VALUES (?, ?)", (i, " ".join(tokens)))
    conn.close()


def test_a_schema_1_index_is_upgraded_in_place_and_keeps_its_data(index_dir: Path) -> None:
    write_v1_index(index_dir)
    with pytest.raises(
        IndexMismatch, match=r"schema version 1, older than this zhiku's \(4\): open it for writing once"
    ):
        SQLiteStore(index_dir, read_only=True)
    assert not (index_dir / "vectors.3.f32").exists()
    with SQLiteStore(index_dir) as store:
        assert store.get_meta()["schema_version"] == "4"
        rebuilt = index_dir / "vectors.3.g1.f32"  # written from the BLOBs, as a compaction does
        assert rebuilt.stat().st_size == len(LABOR.chunks) * 3 * 4 and not (index_dir / "vectors.3.f32").exists()
        assert store.get_document("doc-labor") == LABOR.record
        assert store.get_document("doc-labor").status == "ready"
        assert store.document_chunks("doc-labor") == LABOR.chunks
        assert ids(store.bm25_search(["解除"], 5)) == LABOR.ids[:1]
        assert ids(store.dense_search(X, 1)) == LABOR.ids[:1]
    with SQLiteStore(index_dir, read_only=True) as store:
        assert store.document_chunks("doc-labor") == LABOR.chunks


def test_chunk_vectors_are_the_stored_unit_vectors_of_the_live_chunks(store: SQLiteStore) -> None:
    LABOR.write(store)
    WAGE.write(store)
    wage, labor = WAGE.chunks[0].chunk_id, ids(LABOR.chunks)
    assert store.chunk_vectors([wage, "no-such-chunk", labor[1]]).tolist() == [
        pytest.approx([0.6, 0.8, 0.0]),
        pytest.approx([0.0, 1.0, 0.0]),
    ]  # in file order
    LABOR_V2.write(store)  # a document written again: its old chunks are gone
    assert store.chunk_vectors(labor).shape == (0, 3)
