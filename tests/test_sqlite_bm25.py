"""The SQLite store's BM25 index (stores/_bm25.py): the ranking of the FTS5 it replaced, segment files saved,
merged and reused, another process's commits applied incrementally, old-or-new after ``kill -9``, and the upgrade
of an index written with FTS5."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from contracts.store_contract import LABOR, LABOR_V2, NOTE, WAGE, Doc, ids, make_doc
from test_sqlite_store import raw, write_v1_index
from zhiku.stores import SQLiteStore, _bm25
from zhiku.stores._bm25_segment import row_terms
from zhiku.stores._sqlite_schema import MIGRATIONS
from zhiku.types import Filters

SRC = Path(__file__).resolve().parents[1] / "src"
TESTS = Path(__file__).resolve().parent

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


def test_row_terms_split_tokens_into_runs_as_fts5_did_and_keep_their_phrases() -> None:
    assert row_terms("乙肝 hbv-dna 1.4.2 _ %") == (
        ["乙肝", "hbv", "dna", "1", "4", "2", "hbv dna", "1 4", "4 2", "1 4 2"],
        6,
    )
    assert row_terms("劳动 合同 劳动") == (["劳动", "合同", "劳动"], 3)


def test_bm25_ranks_exactly_as_fts5_did(index_dir: Path) -> None:
    first, second = corpus_doc("甲", ROWS[:3]), corpus_doc("乙", ROWS[3:], 3)
    chunks = {c.chunk_id: t for d in (first, second) for c, t in zip(d.chunks, d.tokens, strict=True)}
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


def test_segments_are_saved_merged_and_reused(index_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_bm25, "FLUSH_ROWS", 2)
    monkeypatch.setattr(_bm25, "MERGE_FANIN", 2)
    monkeypatch.setattr(_bm25, "_TIER_UNIT", 1)
    docs = [corpus_doc(f"d{i}", [ROWS[(2 * i) % 6], ROWS[(2 * i + 1) % 6]], 2 * i) for i in range(6)]
    folder = index_dir / "bm25"
    with SQLiteStore(index_dir) as store:
        for doc in docs:
            doc.write(store)
        # rows 1-12 in 2-row segments, merged two by two per tier: 1-8 and 9-12 remain
        assert sorted(p.name for p in folder.iterdir()) == ["seg-1-8.bin", "seg-9-12.bin"]
        expected = ids(store.bm25_search(["乙肝", "版本"], 20))
    with SQLiteStore(index_dir, read_only=True) as reader:
        assert ids(reader.bm25_search(["乙肝", "版本"], 20)) == expected
        snap = reader.bm25.snap
        assert snap is not None and [s.path.name for s in snap.segments if s.path] == ["seg-1-8.bin", "seg-9-12.bin"]
    (folder / "seg-9-12.bin").write_bytes(b"not a segment")  # a damaged file: its rows come from the table
    (folder / "seg-13-99.bin").write_bytes(b"")  # past every rowid: ignored
    with SQLiteStore(index_dir, read_only=True) as reader:
        assert ids(reader.bm25_search(["乙肝", "版本"], 20)) == expected
    with SQLiteStore(index_dir) as writer:  # opening for writing saves what the files lack again
        assert sorted(p.name for p in folder.iterdir()) == ["seg-1-8.bin", "seg-9-12.bin"]
        assert ids(writer.bm25_search(["乙肝", "版本"], 20)) == expected


def test_segments_of_another_index_are_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_bm25, "FLUSH_ROWS", 1)
    a, b = tmp_path / "a", tmp_path / "b"
    with SQLiteStore(a) as store:
        corpus_doc("甲", ROWS).write(store)
    with SQLiteStore(b) as store:
        NOTE.write(store)
    (b / "bm25" / "seg-1-1.bin").unlink()
    (a / "bm25" / "seg-1-6.bin").rename(b / "bm25" / "seg-1-1.bin")  # the right name, another index's content
    with SQLiteStore(b, read_only=True) as store:
        assert ids(store.bm25_search(["会议"], 5)) == NOTE.ids
        assert store.bm25_search(["乙肝"], 5) == []


def test_another_processes_commits_are_applied_incrementally(index_dir: Path) -> None:
    with SQLiteStore(index_dir) as writer, SQLiteStore(index_dir, read_only=True) as reader:
        LABOR.write(writer)
        WAGE.write(writer)
        tied = [LABOR.ids[1], LABOR.ids[0], WAGE.ids[0]]  # in every chunk: equal scores, by chunk id
        assert ids(reader.bm25_search(["劳动者"], 5)) == tied
        before = reader.bm25.snap
        LABOR_V2.write(writer)
        writer.delete_document("doc-wage")
        assert ids(reader.bm25_search(["劳动者", "工资"], 5)) == []
        assert ids(reader.bm25_search(["劳动"], 5)) == LABOR_V2.ids
        after = reader.bm25.snap
        assert before is not None and after is not None
        assert after.version == before.version + 2 and after.top == 4 and after.n_live == 1
        assert after.segments[0] is before.segments[0]  # moved forward, not rebuilt
        assert ids(reader.bm25_search(["劳动"], 5, Filters(collection="其他"))) == []


def test_a_commit_by_another_process_reaches_a_reader_without_reloading(index_dir: Path) -> None:
    with SQLiteStore(index_dir) as writer:
        LABOR.write(writer)
    with SQLiteStore(index_dir, read_only=True) as reader:
        assert ids(reader.bm25_search(["工资", "解除"], 5)) == LABOR.ids[:1]
        before = reader.bm25.snap
        script = (
            f"import sys; sys.path[:0] = [{str(SRC)!r}, {str(TESTS)!r}]\n"
            "from zhiku.stores import SQLiteStore\nfrom contracts.store_contract import WAGE\n"
            f"with SQLiteStore({str(index_dir)!r}) as s: WAGE.write(s)\n"
        )
        subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
        assert ids(reader.bm25_search(["工资", "解除"], 5)) == [LABOR.ids[0], WAGE.ids[0]]  # tied: by chunk id
        after = reader.bm25.snap
        assert before is not None and after is not None and after.top == 3
        assert after.segments[0] is before.segments[0]


KILLED = """
import os, signal, sys
sys.path[:0] = [{src!r}, {tests!r}]
import zhiku.stores.sqlite as sq
import zhiku.stores._vectors as vx
from zhiku.stores import _bm25, _bm25_segment
from contracts.store_contract import LABOR_V2
_bm25.FLUSH_ROWS = 1
def die(*args, **kwargs):
    {before}
    os.kill(os.getpid(), signal.SIGKILL)
store = sq.SQLiteStore({index!r})
real, {target} = {target}, die
LABOR_V2.write(store)
"""


@pytest.mark.parametrize(
    ("target", "before", "version", "left"),
    [
        ("vx.write_rows", "real(*args)", "old", "seg-1-2.bin"),  # killed before COMMIT
        ("_bm25.save_segments", "pass", "new", "seg-1-2.bin"),  # after COMMIT, before the segment is saved
        ("_bm25_segment.os.replace", "pass", "new", ".tmp"),  # writing the segment: its temporary file is left
        ("_bm25_segment.os.replace", "open(args[1], 'wb').write(b'half')", "new", "seg-3-3.bin"),  # a torn file
    ],
)
def test_a_killed_writer_leaves_the_old_or_the_new_document(
    index_dir: Path, monkeypatch: pytest.MonkeyPatch, target: str, before: str, version: str, left: str
) -> None:
    monkeypatch.setattr(_bm25, "FLUSH_ROWS", 1)
    with SQLiteStore(index_dir) as store:
        LABOR.write(store)
    script = KILLED.format(src=str(SRC), tests=str(TESTS), before=before, target=target, index=str(index_dir))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert any(p.name.endswith(left) for p in (index_dir / "bm25").iterdir())
    doc = LABOR if version == "old" else LABOR_V2
    with SQLiteStore(index_dir, read_only=True) as store:
        assert store.document_chunks("doc-labor") == doc.chunks
        rows = dict(zip(doc.ids, doc.tokens, strict=True))
        terms = ["劳动", "劳动者", "解除", "修订"]
        assert ids(store.bm25_search(terms, 5)) == [c for c, _ in fts5_ranking(rows, terms)]
    with SQLiteStore(index_dir) as store:  # a writer removes what the killed one left and saves the rest
        names = sorted(p.name for p in (index_dir / "bm25").iterdir())
        assert names == ["seg-1-2.bin", "seg-3-3.bin"] if version == "new" else ["seg-1-2.bin"]
        NOTE.write(store)
        rows.update(zip(NOTE.ids, NOTE.tokens, strict=True))
        assert ids(store.bm25_search([*terms, "会议"], 5)) == [c for c, _ in fts5_ranking(rows, [*terms, "会议"])]


def test_an_index_written_with_fts5_is_upgraded(index_dir: Path) -> None:
    write_v1_index(index_dir)
    with raw(index_dir) as conn:  # as schema 3 left it: FTS5 plus term_df
        conn.executescript(
            MIGRATIONS[1]
            + MIGRATIONS[2]
            + """;CREATE TABLE term_df (term TEXT PRIMARY KEY, df INTEGER NOT NULL) WITHOUT ROWID;
            UPDATE meta SET value = '3' WHERE key = 'schema_version';"""
        )
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


def test_scores_are_fts5s_bm25_in_float64() -> None:
    rows = {f"c{i}": ["词"] * (i + 1) + ["其他"] * i for i in range(5)}
    expected = fts5_ranking(rows, ["词", "其他"])
    seg = _bm25.build(1, 5, [(i + 1, " ".join(t)) for i, t in enumerate(rows.values())])
    live = np.ones(6, bool)
    live[0] = False
    doclen = np.concatenate([[0.0], seg.doclen.astype(np.float64)])
    snap = _bm25.BM25Snapshot.of(1, 5, [seg], live, doclen)
    rowids, scores = snap.search(["词", "其他"], 5, None)
    got = sorted(
        ((f"c{r - 1}", s) for r, s in zip(rowids.tolist(), scores.tolist(), strict=True)), key=lambda h: (-h[1], h[0])
    )
    assert [c for c, _ in got] == [c for c, _ in expected]
    assert [s for _, s in got] == pytest.approx([s for _, s in expected], rel=1e-12)  # (FTS5's ~3e-6: not float32)


def test_warm_loads_the_bm25_segments(index_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_bm25, "FLUSH_ROWS", 2)
    with SQLiteStore(index_dir) as store:
        LABOR.write(store)
        WAGE.write(store)
    with SQLiteStore(index_dir, read_only=True) as store:
        assert store.bm25.snap is None
        store.warm()  # what the MCP server does at start
        snap = store.bm25.snap
        assert snap is not None and snap.top == 3 and snap.n_live == 3
        assert [s.path.name if s.path else None for s in snap.segments] == ["seg-1-2.bin", None]  # row 3: table
        assert ids(store.bm25_search(["工资"], 5)) == WAGE.ids
        assert store.bm25.snap is snap


def test_an_index_without_any_term_saves_and_loads_empty_segments(
    index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_bm25, "FLUSH_ROWS", 2)
    blank = make_doc("doc-空", "法规", "法规/空.md", "markdown", [("一", [], [1.0, 0.0]), ("二", [], [0.0, 1.0])])
    with SQLiteStore(index_dir) as store:
        blank.write(store)
        assert sorted(p.name for p in (index_dir / "bm25").iterdir()) == ["seg-1-2.bin"]
    with SQLiteStore(index_dir, read_only=True) as store:
        assert store.bm25_search(["一"], 5) == []
        snap = store.bm25.snap
        assert snap is not None and snap.avgdl == 1.0 and [s.path is not None for s in snap.segments] == [True]
