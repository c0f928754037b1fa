"""The SQLite store's BM25 search: the ranking of the FTS5 it replaced (the reference, in float64), the files beside
zhiku.db a cache that a damaged, foreign or lost copy never changes, another connection's commits seen, and the
upgrade of an index written with FTS5. (``kill -9`` of a writer: test_sqlite_vectors.py.)"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from contracts.store_contract import LABOR, LABOR_V2, WAGE, Doc, ids, make_doc
from test_sqlite_store import raw, write_v1_index
from zhiku.stores import SQLiteStore
from zhiku.types import Filters

# tokens as the tokenizer gives them; "hbv-dna", "1.4" and "c++" are what FTS5's unicode61 split into runs
ROWS = [
    ["乙肝", "hbv-dna", "阴性", "dna"],  # (FTS5 also matched "hbv" "dna" as two adjacent tokens: not reproduced)
    ["乙肝", "病毒", "hbv-dna", "定量", "1.4", "版"],
    ["肝功能", "转氨酶", "偏高", "乙肝"],
    ["c++", "版本", "1.4", "发布", "版本"],
    ["会议", "讨论", "预算", "_"],
    ["乙肝", "疫苗", "接种", "乙肝"],
]
QUERIES = [["乙肝"], ["hbv-dna"], ["1.4", "版本"], ["c++", "会议"], ["乙肝", "阴性", "疫苗"], ["dna"], ["%", "预算"]]


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    return tmp_path / "索引"


def corpus_doc(doc_id: str, rows: list[list[str]], first: int = 0) -> Doc:
    return make_doc(
        doc_id,
        "医学",
        f"医学/{doc_id}.md",
        "markdown",
        [(f"第{first + i}段", t, [1.0, float(i)]) for i, t in enumerate(rows)],
    )


def fts5_ranking(rows: dict[str, list[str]], terms: list[str]) -> list[tuple[str, float]]:
    """What the FTS5 table of schema 3 returned for these terms (the reference)."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE f USING fts5 (cid UNINDEXED, tokens, tokenize = 'unicode61 remove_diacritics 0')")
    db.executemany("INSERT INTO f VALUES (?, ?)", [(cid, " ".join(t)) for cid, t in rows.items()])
    query = " OR ".join('"' + t.replace('"', '""') + '"' for t in dict.fromkeys(terms))
    found = db.execute("SELECT cid, -bm25(f) FROM f WHERE f MATCH ?", (query,)).fetchall()
    return sorted(((c, float(s)) for c, s in found), key=lambda h: (-h[1], h[0]))


def big_doc(doc_id: str, n: int, tokens: list[str]) -> Doc:
    """``n`` chunks, each with ``tokens`` and a token of its own: enough rows for the BM25 files beside zhiku.db."""
    items = [(f"{doc_id}第{i}段。", [*tokens, f"{doc_id}{i}"], [1.0, 0.0]) for i in range(n)]
    return make_doc(doc_id, "大", f"大/{doc_id}.md", "markdown", items)


def rows_of(*docs: Doc) -> dict[str, list[str]]:
    return {c.chunk_id: t for d in docs for c, t in zip(d.chunks, d.tokens, strict=True)}


def test_bm25_ranks_exactly_as_fts5_did(index_dir: Path) -> None:
    first, second = corpus_doc("甲", ROWS[:3]), corpus_doc("乙", ROWS[3:], 3)
    chunks = rows_of(first, second)
    with SQLiteStore(index_dir) as store:
        first.write(store)
        second.write(store)
        for terms in QUERIES:
            expected = fts5_ranking(chunks, terms)
            hits = store.bm25_search(terms, 10)
            assert ids(hits) == [c for c, _ in expected], terms
            assert [h.score for h in hits] == pytest.approx([s for _, s in expected], rel=1e-12), terms
        c = first.chunks + second.chunks
        assert ids(store.bm25_search(["乙肝"], 10)) == [c[5].chunk_id, c[2].chunk_id, c[0].chunk_id, c[1].chunk_id]
        assert ids(store.bm25_search(["hbv-dna"], 10)) == [c[0].chunk_id, c[1].chunk_id]
        assert ids(store.bm25_search(["%"], 10)) == []
        store.delete_document("乙")  # N, df and avgdl change with it
        left = {k: v for k, v in chunks.items() if k in first.ids}
        for terms in QUERIES:
            assert ids(store.bm25_search(terms, 10)) == [k for k, _ in fts5_ranking(left, terms)], terms


def test_scores_are_fts5s_bm25_in_float64(index_dir: Path) -> None:
    doc = corpus_doc("词", [["词"] * (i + 1) + ["其他"] * i for i in range(5)])
    expected = fts5_ranking(rows_of(doc), ["词", "其他"])
    with SQLiteStore(index_dir) as store:
        doc.write(store)
        got = [(h.chunk_id, h.score) for h in store.bm25_search(["词", "其他"], 5)]
    assert [c for c, _ in got] == [c for c, _ in expected]
    assert [s for _, s in got] == pytest.approx([s for _, s in expected], rel=1e-12)  # (FTS5's ~3e-6: not float32)


def test_weighted_terms_scale_each_terms_score_and_term_counts_are_live_chunks(index_dir: Path) -> None:
    doc = corpus_doc("词", [["词"] * (i + 1) + ["其他"] * i for i in range(5)])
    with SQLiteStore(index_dir) as store:
        doc.write(store)
        plain = {h.chunk_id: h.score for h in store.bm25_search(["词"], 5)}
        other = {h.chunk_id: h.score for h in store.bm25_search(["其他"], 5)}
        got = {h.chunk_id: h.score for h in store.bm25_weighted({"词": 0.5, "其他": 2.0, "无": 1.0}, 5)}
        assert store.term_counts(["词", "其他", "无"]) == {"词": 5, "其他": 4, "无": 0}
    assert got == pytest.approx({c: 0.5 * plain[c] + 2.0 * other.get(c, 0.0) for c in plain}, rel=1e-12)


def test_term_counts_are_of_the_live_chunks_at_each_version_asked_again(index_dir: Path) -> None:
    first, second = corpus_doc("甲", [["词", "其他"], ["词"], ["其他"]]), corpus_doc("乙", [["词"], ["词", "词"]], 3)
    with SQLiteStore(index_dir) as store:
        first.write(store)
        second.write(store)
        assert [store.term_counts(["词", "其他"]) for _ in range(2)] == [{"词": 4, "其他": 2}] * 2  # (then kept)
        store.delete_document("乙")
        assert store.term_counts(["词", "其他"]) == {"词": 2, "其他": 2}
        corpus_doc("丙", [["其他"]], 5).write(store)
        assert store.term_counts(["其他", "词"]) == {"其他": 3, "词": 2}


def test_the_bm25_files_are_a_cache_that_damage_or_loss_never_changes(index_dir: Path) -> None:
    """Past a few thousand rows BM25 keeps files beside zhiku.db (``bm25/``): damaged, emptied, joined by a stray
    file or lost, the searches answer as before, read-only or not."""
    small = [corpus_doc(f"d{i}", [ROWS[(2 * i) % 6], ROWS[(2 * i + 1) % 6]], 2 * i) for i in range(6)]
    docs = [*small, big_doc("大", 2100, ["大文件"])]  # the query's terms in the first rows: in the files
    terms = ["乙肝", "版本", "会议"]
    with SQLiteStore(index_dir) as store:
        for doc in docs:
            doc.write(store)
        expected = [(h.chunk_id, h.score) for h in store.bm25_search(terms, 20)]
    assert [c for c, _ in expected] == [c for c, _ in fts5_ranking(rows_of(*docs), terms)][:20]
    folder = index_dir / "bm25"
    files = sorted(p for p in folder.iterdir() if p.is_file())
    assert files  # (else there is nothing to damage)
    with SQLiteStore(index_dir, read_only=True) as reader:  # read as searched, never mapped: not resident memory
        assert [(h.chunk_id, h.score) for h in reader.bm25_search(terms, 20)] == expected
        assert str(folder) not in Path("/proc/self/maps").read_text(encoding="utf-8")
    for n, path in enumerate(files):
        path.write_bytes(b"not bm25" if n % 2 else path.read_bytes()[: len(path.read_bytes()) // 2])
    (folder / "seg-1-99999.bin").write_bytes(b"")
    with SQLiteStore(index_dir, read_only=True) as reader:
        assert [(h.chunk_id, h.score) for h in reader.bm25_search(terms, 20)] == expected
    with SQLiteStore(index_dir) as writer:
        assert [(h.chunk_id, h.score) for h in writer.bm25_search(terms, 20)] == expected
    shutil.rmtree(folder)
    with SQLiteStore(index_dir, read_only=True) as reader:
        assert [(h.chunk_id, h.score) for h in reader.bm25_search(terms, 20)] == expected
    with SQLiteStore(index_dir) as writer:
        assert [(h.chunk_id, h.score) for h in writer.bm25_search(terms, 20)] == expected
    with SQLiteStore(index_dir, read_only=True) as reader:
        assert [(h.chunk_id, h.score) for h in reader.bm25_search(terms, 20)] == expected


def test_bm25_files_of_another_index_are_ignored(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    with SQLiteStore(a) as store:
        big_doc("甲", 2100, ["乙肝"]).write(store)
    note = corpus_doc("笔记", [["会议", "讨论"]])
    with SQLiteStore(b) as store:
        note.write(store)
        big_doc("乙", 2100, ["预算"]).write(store)
    shutil.rmtree(b / "bm25")
    shutil.copytree(a / "bm25", b / "bm25")  # the right names, another index's content
    for read_only in (True, False):
        with SQLiteStore(b, read_only=read_only) as store:
            assert ids(store.bm25_search(["会议"], 5)) == note.ids
            assert store.bm25_search(["乙肝"], 5) == []
            assert len(store.bm25_search(["预算"], 5000)) == 2100


def test_another_connections_commits_are_seen_by_a_reader(index_dir: Path) -> None:
    with SQLiteStore(index_dir) as writer, SQLiteStore(index_dir, read_only=True) as reader:
        LABOR.write(writer)
        WAGE.write(writer)
        tied = [LABOR.ids[1], LABOR.ids[0], WAGE.ids[0]]  # in every chunk: equal scores, by chunk id
        assert ids(reader.bm25_search(["劳动者"], 5)) == tied
        LABOR_V2.write(writer)
        writer.delete_document("doc-wage")
        assert ids(reader.bm25_search(["劳动者", "工资"], 5)) == []
        assert ids(reader.bm25_search(["劳动"], 5)) == LABOR_V2.ids
        assert ids(reader.bm25_search(["劳动"], 5, Filters(collection="其他"))) == []


# the tables schema 2 added, as that zhiku wrote them (zhiku.stores' own migrations may change; this file may not)
SCHEMA_3 = """
ALTER TABLE documents ADD COLUMN status TEXT NOT NULL DEFAULT 'ready';
ALTER TABLE documents ADD COLUMN needs_ocr_pages TEXT NOT NULL DEFAULT '[]';
ALTER TABLE documents ADD COLUMN ocr_pages TEXT NOT NULL DEFAULT '[]';
ALTER TABLE chunks ADD COLUMN images TEXT NOT NULL DEFAULT '[]';
CREATE TABLE IF NOT EXISTS tombstones (rowid INTEGER PRIMARY KEY, version INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS tombstones_by_version ON tombstones (version);
CREATE INDEX IF NOT EXISTS chunks_by_doc ON chunks (doc_id, ordinal);
CREATE TABLE term_df (term TEXT PRIMARY KEY, df INTEGER NOT NULL) WITHOUT ROWID;
UPDATE meta SET value = '3' WHERE key = 'schema_version';
"""


def test_an_index_written_with_fts5_is_upgraded(index_dir: Path) -> None:
    write_v1_index(index_dir)
    with raw(index_dir) as conn:  # as schema 3 left it: FTS5 plus term_df
        conn.executescript(SCHEMA_3)
    conn.close()
    with SQLiteStore(index_dir) as store:
        assert store.get_meta()["schema_version"] == "4"
        assert ids(store.bm25_search(["解除", "劳动者"], 5)) == LABOR.ids
        WAGE.write(store)
        assert ids(store.bm25_search(["劳动者"], 5)) == [LABOR.ids[1], LABOR.ids[0], WAGE.ids[0]]
    conn = raw(index_dir)
    tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "fts" not in tables and "term_df" not in tables
    assert conn.execute("SELECT rowid, tokens FROM chunk_tokens ORDER BY rowid").fetchall()[:2] == [
        (1, " ".join(LABOR.tokens[0])),
        (2, " ".join(LABOR.tokens[1])),
    ]
    conn.close()


def test_an_index_without_any_term_answers_nothing_then_finds_what_comes(index_dir: Path) -> None:
    blank = make_doc(
        "doc-空", "法规", "法规/空.md", "markdown", [(f"第{i}页", [], [1.0, 0.0]) for i in range(2100)]
    )  # scanned pages without text: rows without a term, past the size that writes the BM25 files
    with SQLiteStore(index_dir) as store:
        blank.write(store)
        assert store.bm25_search(["一"], 5) == []
    with SQLiteStore(index_dir, read_only=True) as store:
        assert store.bm25_search(["一"], 5) == []
    with SQLiteStore(index_dir) as store:
        corpus_doc("甲", ROWS[4:5]).write(store)
        assert len(store.bm25_search(["会议", "预算"], 5)) == 1
    with SQLiteStore(index_dir, read_only=True) as store:
        assert len(store.bm25_search(["会议", "预算"], 5)) == 1


def test_rare_terms_are_scored_only_where_they_are_rare(index_dir: Path) -> None:
    common, two = big_doc("甲", 398, ["预算"]), corpus_doc("乙", [["会议", "年休"], ["会议", "讨论"]])
    with SQLiteStore(index_dir) as store:
        common.write(store)
        two.write(store)  # 400 rows: a rare term (in at most 0.5 % of them) is in at most 2
        assert ids(store.bm25_search(["讨论"], 10, rare=["年休", "预算"])) == two.ids[::-1]  # 预算 is common
        assert store.bm25_search(["讨论"], 10, rare=["年休"])[1].score == store.bm25_search(["年休"], 10)[0].score
        assert ids(store.bm25_search(["讨论"], 10, rare=["会议"])) == two.ids[::-1]  # 会议: in 2 rows
        assert len(store.bm25_search(["讨论", "预算"], 500)) == 399  # a term counts however common
        assert ids(store.bm25_search(["讨论"], 10, rare=["讨论"])) == two.ids[1:]  # once, as a term
