"""Compaction of the SQLite store's vector file: dead rows reclaimed, readers in this and another process answer
through it, a write past the dead fraction compacts, and a forced rebuild with another dim leaves no old file.
(``kill -9`` during a compaction: test_sqlite_vectors.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from contracts.store_contract import LABOR, LABOR_V2, NOTE, WAGE, ids, make_doc
from zhiku.stores import SQLiteStore
from zhiku.types import Filters

SRC = Path(__file__).resolve().parents[1] / "src"
TESTS = Path(__file__).resolve().parent
Y = np.array([0.0, 1.0, 0.0], np.float32)
Z = np.array([0.0, 0.0, 1.0], np.float32)


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    return tmp_path / "索引"


def _files(index_dir: Path) -> list[str]:
    return sorted(p.name for p in index_dir.glob("vectors.*"))


def _with_dead_rows(store: SQLiteStore) -> None:
    """Rowids 1-2 LABOR, 3 WAGE, 4 NOTE, 5 LABOR_V2; 1, 2 (replaced) and 3 (deleted) are dead."""
    LABOR.write(store)
    WAGE.write(store)
    NOTE.write(store)
    LABOR_V2.write(store)
    store.delete_document("doc-wage")


def test_compaction_keeps_only_live_rows_and_other_readers_follow(index_dir: Path) -> None:
    with SQLiteStore(index_dir, compact_dead_fraction=1) as store, SQLiteStore(index_dir, read_only=True) as reader:
        _with_dead_rows(store)
        assert ids(reader.dense_search(Z, 5)) == [LABOR_V2.ids[0], NOTE.ids[0]]

        report = store.compact()
        assert report.compacted and (report.rows_before, report.rows_after, report.bytes_freed) == (5, 2, 3 * 3 * 4)
        assert ids(store.dense_search(Z, 5)) == [LABOR_V2.ids[0], NOTE.ids[0]]
        assert ids(store.dense_search(Z, 5, Filters(collection="笔记"))) == NOTE.ids
        assert store.document_chunks("doc-labor") == LABOR_V2.chunks
        scores = store.dense_scores(Z, [NOTE.ids[0], WAGE.ids[0], LABOR_V2.ids[0]])
        assert scores.keys() == {NOTE.ids[0], LABOR_V2.ids[0]}
        assert scores[LABOR_V2.ids[0]] == pytest.approx(1.0) and scores[NOTE.ids[0]] == pytest.approx(0.8)
        assert ids(reader.dense_search(Z, 5)) == [LABOR_V2.ids[0], NOTE.ids[0]]

        WAGE.write(store)  # appended after the compacted rows
        assert ids(reader.dense_search(Y, 1)) == WAGE.ids
        assert ids(store.dense_search(Y, 5, Filters(collection="法规"))) == [WAGE.ids[0], LABOR_V2.ids[0]]
        assert not store.compact().compacted  # nothing dead
    with SQLiteStore(index_dir, read_only=True) as fresh:
        assert ids(fresh.dense_search(Y, 5)) == [WAGE.ids[0], NOTE.ids[0], LABOR_V2.ids[0]]


def test_a_write_past_the_dead_fraction_compacts(index_dir: Path) -> None:
    """A write compacts once more than ``compact_dead_fraction`` of the rows are dead, and at least 1,000."""
    many = make_doc(
        "doc-many", "大", "大/多.md", "markdown", [(f"第{i}段。", [f"号{i}"], [1.0, 0.0, 0.0]) for i in range(1200)]
    )
    with SQLiteStore(index_dir, compact_dead_fraction=0.5) as store:
        LABOR.write(store)
        WAGE.write(store)
        LABOR_V2.write(store)
        store.delete_document("doc-wage")  # 3 of 4 rows dead, but fewer than 1,000: left to compact()
        assert store.compact().rows_before == 4
        many.write(store)
        NOTE.write(store)
        store.delete_document("doc-many")  # 1,200 of 1,202 rows dead: this write compacts
        assert not store.compact().compacted
        assert ids(store.dense_search(Z, 5)) == [LABOR_V2.ids[0], NOTE.ids[0]]
    with SQLiteStore(index_dir, compact_dead_fraction=1) as never:
        many.write(never)
        never.delete_document("doc-many")  # past the fraction, but compaction is left to compact()
        report = never.compact()
        assert (report.compacted, report.rows_before, report.rows_after) == (True, 1202, 2)
        assert ids(never.dense_search(Z, 5)) == [LABOR_V2.ids[0], NOTE.ids[0]]


def test_a_forced_rebuild_with_another_dim_leaves_no_file_of_the_old_one(index_dir: Path) -> None:
    four = make_doc("doc-4d", "法规", "法规/新.md", "markdown", [("新文本。", ["新", "文本"], [0.0, 0.0, 0.0, 1.0])])
    with SQLiteStore(index_dir) as store:
        LABOR.write(store)
        WAGE.write(store)
        for doc in store.list_documents():  # what `zhiku ingest --force` does with another embedder
            store.delete_document(doc.doc_id)
        store.set_meta({"dim": ""})
        four.write(store)
        assert _files(index_dir) == [
            "vectors.4.g1.f32",
            "vectors.4.g1.i8",
        ]  # rowid 4 at row 0: nothing kept for rowids 1-3
        assert (index_dir / "vectors.4.g1.f32").stat().st_size == 4 * 4
        assert ids(store.dense_search(np.array([0, 0, 0, 1.0], np.float32), 5)) == four.ids
    with SQLiteStore(index_dir, read_only=True) as reader:
        assert ids(reader.dense_search(np.array([0, 0, 0.6, 0.8], np.float32), 5)) == four.ids


def test_a_lost_generation_file_is_served_from_the_blobs_then_rewritten(index_dir: Path) -> None:
    with SQLiteStore(index_dir, compact_dead_fraction=1) as store:
        _with_dead_rows(store)
        store.compact()
    (index_dir / "vectors.3.g1.f32").unlink()
    with SQLiteStore(index_dir, read_only=True) as reader:  # served from the BLOBs, writing nothing
        assert ids(reader.dense_search(Z, 5)) == [LABOR_V2.ids[0], NOTE.ids[0]]
    assert not (index_dir / "vectors.3.g1.f32").exists()
    with SQLiteStore(index_dir) as store:  # rewritten
        assert ids(store.dense_search(Z, 5)) == [LABOR_V2.ids[0], NOTE.ids[0]]
    assert len(_files(index_dir)) == 3
    with SQLiteStore(index_dir, read_only=True) as reader:
        assert ids(reader.dense_search(Z, 5)) == [LABOR_V2.ids[0], NOTE.ids[0]]


def test_zhiku_compact_reports_what_it_freed_and_refuses_a_missing_index(index_dir: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from zhiku.cli.app import app

    with SQLiteStore(index_dir, compact_dead_fraction=1) as store:
        _with_dead_rows(store)
    runner = CliRunner()
    done = runner.invoke(app, ["compact", "--index", str(index_dir), "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert (report["compacted"], report["rows_before"], report["rows_after"], report["bytes_freed"]) == (True, 5, 2, 36)
    assert report["files_removed"] == 2 and _files(index_dir) == [
        "vectors.3.g1.f32",
        "vectors.3.g1.i8",
        "vectors.3.g1.ids",
    ]
    again = runner.invoke(app, ["compact", "--index", str(index_dir)])
    assert again.exit_code == 0 and again.stdout.startswith("nothing to compact in ")
    missing = runner.invoke(app, ["compact", "--index", str(tmp_path / "无")])
    assert missing.exit_code == 1 and "no index at" in missing.output


def test_another_process_keeps_searching_through_a_compaction(index_dir: Path) -> None:
    with SQLiteStore(index_dir, compact_dead_fraction=1) as store:
        _with_dead_rows(store)
        script = f"""
import sys
sys.path[:0] = [{str(SRC)!r}]
import numpy as np
from zhiku.stores import SQLiteStore
z = np.array([0.0, 0.0, 1.0], np.float32)
with SQLiteStore({str(index_dir)!r}, read_only=True) as reader:
    for line in sys.stdin:
        hits = [h.chunk_id for h in reader.dense_search(z, 5)]
        print(*hits, flush=True)
"""
        child = subprocess.Popen(
            [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert child.stdin is not None and child.stdout is not None
        try:
            child.stdin.write("search\n")
            child.stdin.flush()
            assert child.stdout.readline().split() == [LABOR_V2.ids[0], NOTE.ids[0]]
            assert store.compact().compacted and not (index_dir / "vectors.3.f32").exists()
            child.stdin.write("search\n")
            child.stdin.flush()
            assert child.stdout.readline().split() == [LABOR_V2.ids[0], NOTE.ids[0]]
        finally:
            child.stdin.close()
            assert child.wait(timeout=60) == 0
