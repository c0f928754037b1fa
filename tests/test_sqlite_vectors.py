"""The SQLite store's vector file and concurrent reads: incremental updates across connections and processes,
old-or-new after ``kill -9`` mid-write, readers that do not wait for a writer."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from contracts.store_contract import LABOR, LABOR_V2, NOTE, WAGE, ids
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


def test_another_connections_commits_are_applied_incrementally(index_dir: Path) -> None:
    with SQLiteStore(index_dir) as writer, SQLiteStore(index_dir, read_only=True) as reader:
        LABOR.write(writer)
        WAGE.write(writer)
        assert ids(reader.dense_search(Y, 1)) == WAGE.ids
        mapped = reader.vectors.snap
        assert mapped is not None and mapped.path == index_dir / "vectors.3.f32"
        writer.delete_document("doc-wage")
        NOTE.write(writer)
        assert ids(reader.dense_search(Y, 3)) == [LABOR.ids[1], NOTE.ids[0], LABOR.ids[0]]
        moved = reader.vectors.snap
        assert moved is not None and moved.version == mapped.version + 2 and moved.top == 4
        assert moved.path == mapped.path  # moved forward on the same file, not reloaded from the BLOBs


def test_a_writer_killed_between_the_vector_file_and_the_commit_leaves_the_old_document(index_dir: Path) -> None:
    with SQLiteStore(index_dir) as store:
        LABOR.write(store)
    script = f"""
import os, signal, sys
sys.path[:0] = [{str(SRC)!r}, {str(TESTS)!r}]
import zhiku.stores.sqlite as sq
import zhiku.stores._vectors as vx
from contracts.store_contract import LABOR_V2
def die(*args):
    real(*args)
    os.kill(os.getpid(), signal.SIGKILL)
real, vx.write_rows = vx.write_rows, die
LABOR_V2.write(sq.SQLiteStore({str(index_dir)!r}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr
    with SQLiteStore(index_dir) as store:
        assert store.document_chunks("doc-labor") == LABOR.chunks
        assert ids(store.dense_search(Z, 5)) == [LABOR.ids[1], LABOR.ids[0]]  # the killed row is no one's
        assert ids(store.dense_search(np.array([1.0, 0.0, 0.0], np.float32), 1)) == LABOR.ids[:1]
        LABOR_V2.write(store)  # overwrites what the killed writer left in the file
        assert ids(store.dense_search(Z, 5)) == LABOR_V2.ids


def test_a_damaged_vector_file_is_rebuilt_from_the_blobs_when_opened_for_writing(index_dir: Path) -> None:
    with SQLiteStore(index_dir) as store:
        LABOR.write(store)
        WAGE.write(store)
    path = index_dir / "vectors.3.f32"
    path.write_bytes(path.read_bytes()[:12])  # as if the tail was lost
    with SQLiteStore(index_dir, read_only=True) as store:  # read-only: served from the BLOBs in memory
        assert ids(store.dense_search(Y, 1)) == WAGE.ids
        assert store.vectors.snap is not None and store.vectors.snap.path is None
    assert path.stat().st_size == 12
    with SQLiteStore(index_dir) as store:  # rewritten from the BLOBs as the next generation
        assert not path.exists() and (index_dir / "vectors.3.g1.f32").stat().st_size == 3 * 3 * 4
        assert np.fromfile(index_dir / "vectors.3.g1.ids", "<i8").tolist() == [1, 2, 3]
        assert ids(store.dense_search(Y, 1)) == WAGE.ids
        assert store.vectors.snap is not None and store.vectors.snap.path == index_dir / "vectors.3.g1.f32"


def test_reads_do_not_wait_for_a_writer_holding_the_lock(index_dir: Path) -> None:
    with SQLiteStore(index_dir) as store:
        LABOR.write(store)
        WAGE.write(store)
        store.warm()  # what the MCP server does at start: the vectors are mapped before the first query
        assert (
            store.vectors.snap is not None
            and store.vectors.snap.path == index_dir / "vectors.3.f32"
            and store.vectors.snap.top == 3
        )
        results: list[list[str]] = []
        with store.db.write():  # a write transaction in progress (holds the store's write lock)
            reader = threading.Thread(
                target=lambda: results.extend(
                    [ids(store.bm25_search(["工资"], 5)), ids(store.dense_search(Y, 1)), [str(store.index_version())]]
                )
            )
            reader.start()
            reader.join(timeout=60)
            assert not reader.is_alive()
        assert results == [WAGE.ids, WAGE.ids, ["2"]]


def test_bm25_max_df_leaves_out_frequent_terms_but_keeps_the_two_rarest(
    index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with SQLiteStore(index_dir) as store:
        for doc in (LABOR, WAGE, NOTE):
            doc.write(store)
    terms = ["劳动者", "工资", "会议"]  # in 3, 1 and 1 of the 4 chunks
    with SQLiteStore(index_dir, read_only=True) as default:  # terms in fewer than 1,000 chunks are always kept
        assert sorted(ids(default.bm25_search(terms, 10))) == sorted(LABOR.ids + WAGE.ids + NOTE.ids)
    monkeypatch.setattr("zhiku.stores._bm25.MIN_DF", 0)
    with SQLiteStore(index_dir, read_only=True, bm25_max_df=1.0) as every:
        assert sorted(ids(every.bm25_search(terms, 10))) == sorted(LABOR.ids + WAGE.ids + NOTE.ids)
    with SQLiteStore(index_dir, read_only=True, bm25_max_df=0.5) as pruned:
        assert sorted(ids(pruned.bm25_search(terms, 10))) == sorted(WAGE.ids + NOTE.ids)
        assert ids(pruned.bm25_search(["劳动者", "工资"], 10))[0] == WAGE.ids[0]  # two terms: both kept
        assert len(pruned.bm25_search(["劳动者", "工资"], 10)) == 3
