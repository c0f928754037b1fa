"""The SQLite store's vector file and concurrent reads: another connection's commits seen, the old or the new document
after ``kill -9`` of a writer at any point (a write, a compaction, the BM25 files), readers that do not wait for a
writer, and BM25's pruning of frequent query terms."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from contracts.store_contract import LABOR, LABOR_V2, NOTE, WAGE, Doc, ids, make_doc
from test_sqlite_bm25 import fts5_ranking
from test_sqlite_store import raw
from zhiku.stores import SQLiteStore
from zhiku.types import Filters

SRC = Path(__file__).resolve().parents[1] / "src"
TESTS = Path(__file__).resolve().parent
Y = np.array([0.0, 1.0, 0.0], np.float32)
Z = np.array([0.0, 0.0, 1.0], np.float32)


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    return tmp_path / "索引"


def test_vectors_live_in_a_file_that_only_grows_and_rowids_are_never_reused(index_dir: Path) -> None:
    with SQLiteStore(index_dir) as store:
        LABOR.write(store)
        WAGE.write(store)
        LABOR_V2.write(store)  # replaces LABOR's 2 chunks by 1: tombstones for rowids 1 and 2
        store.delete_document("doc-wage")
        NOTE.write(store)
        assert (index_dir / "vectors.3.f32").stat().st_size == 5 * 3 * 4  # rowids 1..5, each written once
        assert ids(store.dense_search(Z, 5)) == [LABOR_V2.ids[0], NOTE.ids[0]]
        assert ids(store.dense_search(Y, 5, Filters(collection="法规"))) == LABOR_V2.ids


def test_another_connections_commits_are_seen_by_a_reader(index_dir: Path) -> None:
    with SQLiteStore(index_dir) as writer, SQLiteStore(index_dir, read_only=True) as reader:
        LABOR.write(writer)
        WAGE.write(writer)
        assert ids(reader.dense_search(Y, 1)) == WAGE.ids
        writer.delete_document("doc-wage")
        NOTE.write(writer)
        assert ids(reader.dense_search(Y, 3)) == [LABOR.ids[1], NOTE.ids[0], LABOR.ids[0]]


WRITER = """
import sys
sys.path[:0] = [{src!r}, {tests!r}]
from zhiku.stores import SQLiteStore
from contracts.store_contract import LABOR, LABOR_V2, NOTE
store = SQLiteStore({index!r}, compact_dead_fraction=1)
print("ready", flush=True)
while True:  # every step of a write, a deletion and a compaction, until killed
    LABOR_V2.write(store)
    NOTE.write(store)
    store.compact()
    LABOR.write(store)
    store.delete_document("doc-note")
    store.compact()
"""


def _answers_as_its_documents(store: SQLiteStore, docs: list[Doc]) -> None:
    """BM25 ranks as FTS5 did over these documents' rows; dense search and scores are their exact cosines."""
    rows = {c.chunk_id: t for d in docs for c, t in zip(d.chunks, d.tokens, strict=True)}
    terms = ["劳动", "劳动者", "解除", "修订", "会议", "工资"]
    assert ids(store.bm25_search(terms, 8)) == [c for c, _ in fts5_ranking(rows, terms)][:8]
    unit = {c.chunk_id: v / np.linalg.norm(v) for d in docs for c, v in zip(d.chunks, d.vectors, strict=True)}
    small = [c for c in unit if c not in BIG_IDS]
    for q in (Y, Z):
        want = sorted(unit, key=lambda c: (-float(unit[c] @ q), c))[:3]
        assert ids(store.dense_search(q, 3)) == want
        got = store.dense_scores(q, [*small, *LABOR.ids, *LABOR_V2.ids, *NOTE.ids])
        assert got.keys() == set(small)
        assert [got[c] for c in small] == pytest.approx([float(unit[c] @ q) for c in small], abs=1e-6)


# 1,999 rows first: the first write of the loop passes the size that saves BM25's files beside zhiku.db
BIG = make_doc(
    "doc-big", "大", "大/全.md", "markdown", [(f"第{i}段。", ["大", f"号{i}"], [1.0, 0.0, 0.0]) for i in range(1997)]
)
BIG_IDS = set(BIG.ids)


def test_a_writer_killed_at_any_point_leaves_the_old_or_the_new_document(tmp_path: Path) -> None:
    """``kill -9`` at spread-out moments of a loop that replaces, adds, deletes and compacts: every time the index
    opens read-only and answers as exactly one version of each document, and a writer then goes on."""
    base = tmp_path / "base"
    with SQLiteStore(base) as store:
        BIG.write(store)
        LABOR.write(store)
    for n, delay in enumerate((0.0, 0.006, 0.02, 0.05)):
        index_dir = tmp_path / f"run{n}"
        shutil.copytree(base, index_dir)
        script = WRITER.format(src=str(SRC), tests=str(TESTS), index=str(index_dir))
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        threading.Event().wait(delay)
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=60) == -signal.SIGKILL, child.stderr.read() if child.stderr else ""
        with SQLiteStore(index_dir, read_only=True) as reader:  # before any writer tidies up
            labor = reader.document_chunks("doc-labor")
            assert labor in (LABOR.chunks, LABOR_V2.chunks), n
            note = reader.document_chunks("doc-note")
            assert note in ([], NOTE.chunks), n
            docs = [BIG, LABOR if labor == LABOR.chunks else LABOR_V2, *([NOTE] if note else [])]
            _answers_as_its_documents(reader, docs)
        with SQLiteStore(index_dir) as writer:
            _answers_as_its_documents(writer, docs)
            WAGE.write(writer)
            _answers_as_its_documents(writer, [*docs, WAGE])
            writer.compact()
            _answers_as_its_documents(writer, [*docs, WAGE])
        with SQLiteStore(index_dir, read_only=True) as reader:
            _answers_as_its_documents(reader, [*docs, WAGE])


def test_a_damaged_vector_file_is_rebuilt_from_the_blobs_when_opened_for_writing(index_dir: Path) -> None:
    with SQLiteStore(index_dir) as store:
        LABOR.write(store)
        WAGE.write(store)
    path = index_dir / "vectors.3.f32"
    path.write_bytes(path.read_bytes()[:12])  # as if the tail was lost
    with SQLiteStore(index_dir, read_only=True) as store:  # read-only: served from the BLOBs in memory
        _answers_as_its_documents(store, [LABOR, WAGE])
    assert path.stat().st_size == 12  # a reader writes nothing
    with SQLiteStore(index_dir) as store:  # rewritten from the BLOBs
        _answers_as_its_documents(store, [LABOR, WAGE])
    with SQLiteStore(index_dir, read_only=True) as store:
        _answers_as_its_documents(store, [LABOR, WAGE])


def test_reads_do_not_wait_for_a_writer_holding_the_lock(index_dir: Path) -> None:
    with SQLiteStore(index_dir) as store:
        LABOR.write(store)
        WAGE.write(store)
        store.warm()  # what the MCP server does at start: the vectors are mapped before the first query
        holder = raw(index_dir)
        holder.execute("BEGIN IMMEDIATE")  # another process's write transaction in progress
        try:  # and this store's own writer waits behind it, holding the store's write lock
            writing = threading.Thread(target=NOTE.write, args=(store,))
            writing.start()
            threading.Event().wait(0.05)
            results: list[list[str]] = []
            reader = threading.Thread(
                target=lambda: results.extend(
                    [ids(store.bm25_search(["工资"], 5)), ids(store.dense_search(Y, 1)), [str(store.index_version())]]
                )
            )
            reader.start()
            reader.join(timeout=60)
            assert not reader.is_alive() and writing.is_alive()
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        writing.join(timeout=60)
        assert results == [WAGE.ids, WAGE.ids, ["2"]]
        assert ids(store.bm25_search(["会议"], 5)) == NOTE.ids and store.index_version() == 3


def test_bm25_max_df_leaves_out_frequent_terms_but_keeps_the_two_rarest(index_dir: Path) -> None:
    common = make_doc(  # 劳动者 in 1,203 of the 1,204 chunks: past max_df and past 1,000 chunks
        "doc-common",
        "大",
        "大/常见.md",
        "markdown",
        [(f"第{i}段。", ["劳动者", f"号{i}"], [1.0, 0.0, 0.0]) for i in range(1200)],
    )
    with SQLiteStore(index_dir) as store:
        for doc in (LABOR, WAGE, NOTE, common):
            doc.write(store)
    terms = ["劳动者", "工资", "会议"]
    everything = {*LABOR.ids, *WAGE.ids, *NOTE.ids, *common.ids}
    with SQLiteStore(index_dir, read_only=True, bm25_max_df=1.0) as every:
        assert {h.chunk_id for h in every.bm25_search(terms, 5000)} == everything
    for pruned in (SQLiteStore(index_dir, read_only=True, bm25_max_df=0.5), SQLiteStore(index_dir, read_only=True)):
        with pruned:  # (0.5: the default)
            assert sorted(ids(pruned.bm25_search(terms, 5000))) == sorted(WAGE.ids + NOTE.ids)
            assert ids(pruned.bm25_search(["劳动者", "工资"], 5000))[0] == WAGE.ids[0]  # two terms: both kept
            assert len(pruned.bm25_search(["劳动者", "工资"], 5000)) == 1203
