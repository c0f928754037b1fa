"""Compaction of the SQLite store's vector file: dead rows reclaimed into the next generation, readers moved to it,
``kill -9`` at each step leaves a usable index, and a forced rebuild with another dim leaves no old file."""

from __future__ import annotations

import json
import signal
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
OLD = ["vectors.3.f32", "vectors.3.i8"]  # generation 0's files
NEW = ["vectors.3.g1.f32", "vectors.3.g1.i8", "vectors.3.g1.ids"]  # after one compaction


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    return tmp_path / "索引"


def _files(index_dir: Path) -> list[str]:
    return sorted(p.name for p in index_dir.glob("vectors.*"))


def _rowids(path: Path) -> list[int]:
    return np.fromfile(path, "<i8").tolist()


def _with_dead_rows(store: SQLiteStore) -> None:
    """Rowids 1-2 LABOR, 3 WAGE, 4 NOTE, 5 LABOR_V2; 1, 2 (replaced) and 3 (deleted) are dead."""
    LABOR.write(store)
    WAGE.write(store)
    NOTE.write(store)
    LABOR_V2.write(store)
    store.delete_document("doc-wage")


def test_compaction_keeps_only_live_rows_and_other_readers_move_to_the_new_file(index_dir: Path) -> None:
    with SQLiteStore(index_dir, compact_dead_fraction=1) as store, SQLiteStore(index_dir, read_only=True) as reader:
        _with_dead_rows(store)
        assert ids(reader.dense_search(Z, 5)) == [LABOR_V2.ids[0], NOTE.ids[0]]
        held = reader.vectors.snap
        assert held is not None and held.path == index_dir / "vectors.3.f32" and held.rows == 5

        report = store.compact()
        assert report.compacted and (report.rows_before, report.rows_after, report.bytes_freed) == (5, 2, 3 * 3 * 4)
        assert _files(index_dir) == NEW
        assert (index_dir / "vectors.3.g1.f32").stat().st_size == 2 * 3 * 4
        assert _rowids(index_dir / "vectors.3.g1.ids") == [4, 5]
        assert ids(store.dense_search(Z, 5)) == [LABOR_V2.ids[0], NOTE.ids[0]]
        assert ids(store.dense_search(Z, 5, Filters(collection="笔记"))) == NOTE.ids
        assert store.document_chunks("doc-labor") == LABOR_V2.chunks
        scores = store.dense_scores(Z, [NOTE.ids[0], WAGE.ids[0], LABOR_V2.ids[0]])  # through the row map
        assert scores.keys() == {NOTE.ids[0], LABOR_V2.ids[0]}
        assert scores[LABOR_V2.ids[0]] == pytest.approx(1.0) and scores[NOTE.ids[0]] == pytest.approx(0.8)

        rowids, _ = held.search(Z, 5, None)  # a search already holding the old snapshot: its file stays mapped
        assert sorted(rowids.tolist()) == [4, 5]
        assert ids(reader.dense_search(Z, 5)) == [LABOR_V2.ids[0], NOTE.ids[0]]
        moved = reader.vectors.snap
        assert moved is not None and moved.path == index_dir / "vectors.3.g1.f32" and moved.rows == 2

        WAGE.write(store)  # rowid 6 goes to row 2 of the new file
        assert (index_dir / "vectors.3.g1.f32").stat().st_size == 3 * 3 * 4
        assert ids(reader.dense_search(Y, 1)) == WAGE.ids
        assert (
            reader.vectors.snap is not None and reader.vectors.snap.path == moved.path and reader.vectors.snap.rows == 3
        )
        assert ids(store.dense_search(Y, 5, Filters(collection="法规"))) == [WAGE.ids[0], LABOR_V2.ids[0]]
        assert not store.compact().compacted  # nothing dead
    with SQLiteStore(index_dir, read_only=True) as fresh:
        assert ids(fresh.dense_search(Y, 5)) == [WAGE.ids[0], NOTE.ids[0], LABOR_V2.ids[0]]


def test_a_write_past_the_dead_fraction_compacts(index_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("zhiku.stores._vectors.COMPACT_MIN_DEAD", 0)
    with SQLiteStore(index_dir, compact_dead_fraction=0.5) as store:
        LABOR.write(store)
        WAGE.write(store)
        NOTE.write(store)
        LABOR_V2.write(store)  # 2 of 5 rows dead: 40 %
        assert _files(index_dir) == ["vectors.3.f32", "vectors.3.i8"]
        store.delete_document("doc-wage")  # 3 of 5: 60 %
        assert _files(index_dir) == NEW
        assert _rowids(index_dir / "vectors.3.g1.ids") == [4, 5]
        assert ids(store.dense_search(Z, 5)) == [LABOR_V2.ids[0], NOTE.ids[0]]
    with SQLiteStore(index_dir, compact_dead_fraction=1) as never:
        never.delete_document("doc-note")  # 1 of 2 dead, but compaction is left to compact()
        assert _files(index_dir) == NEW


@pytest.mark.parametrize(
    ("step", "when", "after"),
    [
        ("NewGeneration.append", "before", OLD),  # copying the live rows (temporary files)
        ("NewGeneration.commit", "before", OLD),  # copied, write lock held, files not yet named
        ("NewGeneration.commit", "after", OLD),  # files named, layout not recorded: they are no one's
        ("save_layout", "after", OLD),  # recorded inside the transaction, not committed
        ("remove_files", "before", NEW),  # committed, the old files still there
    ],
)
def test_a_compaction_killed_at_any_step_leaves_a_usable_index(
    index_dir: Path, step: str, when: str, after: list[str]
) -> None:
    with SQLiteStore(index_dir, compact_dead_fraction=1) as store:
        _with_dead_rows(store)
    owner, _, name = step.rpartition(".")
    target = f"c.{owner}" if owner else "c"
    script = f"""
import os, signal, sys
sys.path[:0] = [{str(SRC)!r}]
import zhiku.stores._vectors as c
real = getattr({target}, {name!r})
def die(*args):
    if {when!r} == "after":
        real(*args)
    os.kill(os.getpid(), signal.SIGKILL)
setattr({target}, {name!r}, die)
c.remove_stale_files = lambda *args: []  # the open below must not tidy up before the kill
from zhiku.stores import SQLiteStore
SQLiteStore({str(index_dir)!r}, compact_dead_fraction=1).compact()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr
    left = _files(index_dir)
    assert (any(n.endswith(".tmp") for n in left), "vectors.3.g1.f32" in left) == {
        "append": (True, False),
        "commit": (when == "before", when == "after"),
    }.get(name, (False, True))
    with SQLiteStore(index_dir, read_only=True) as reader:  # usable before any writer tidies up
        assert ids(reader.dense_search(Z, 5)) == [LABOR_V2.ids[0], NOTE.ids[0]]
        assert reader.vectors.snap is not None and reader.vectors.snap.path == index_dir / after[0]
    with SQLiteStore(index_dir) as store:  # a writable open deletes the other generation's files
        assert _files(index_dir) == after
        assert ids(store.dense_search(Z, 5)) == [LABOR_V2.ids[0], NOTE.ids[0]]
        WAGE.write(store)
        assert ids(store.dense_search(Y, 5)) == [WAGE.ids[0], NOTE.ids[0], LABOR_V2.ids[0]]
        assert store.compact().compacted == (after[0] == "vectors.3.f32")
        assert ids(store.dense_search(Y, 5)) == [WAGE.ids[0], NOTE.ids[0], LABOR_V2.ids[0]]


def test_writes_during_the_copy_keep_their_place_in_the_new_file(
    index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zhiku.stores._vectors import VectorIndex

    real = VectorIndex._copy_live

    def copy_then_another_process_writes(self: VectorIndex, plan: object) -> object:
        new = real(self, plan)  # type: ignore[arg-type]
        with SQLiteStore(index_dir) as other:  # the write lock is free while the live rows are copied
            WAGE.write(other)  # rowid 6
            other.delete_document("doc-note")  # rowid 4: copied, now dead
        return new

    monkeypatch.setattr(VectorIndex, "_copy_live", copy_then_another_process_writes)
    with SQLiteStore(index_dir, compact_dead_fraction=1) as store:
        _with_dead_rows(store)
        report = store.compact()
        assert (report.rows_before, report.rows_after) == (6, 3)  # rowids 4, 5 copied; 6 appended
        assert _rowids(index_dir / "vectors.3.g1.ids") == [4, 5]
        assert ids(store.dense_search(Y, 5)) == [WAGE.ids[0], LABOR_V2.ids[0]]
        assert (
            store.vectors.snap is not None
            and store.vectors.snap.layout.dead == 1
            and store.vectors.snap.live_count == 2
        )
    with SQLiteStore(index_dir, read_only=True) as reader:
        assert ids(reader.dense_search(Y, 5)) == [WAGE.ids[0], LABOR_V2.ids[0]]


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
    with SQLiteStore(index_dir, read_only=True) as reader:
        assert ids(reader.dense_search(Z, 5)) == [LABOR_V2.ids[0], NOTE.ids[0]]
        assert reader.vectors.snap is not None and reader.vectors.snap.path is None  # in memory, from the BLOBs
    with SQLiteStore(index_dir) as store:
        assert _files(index_dir) == ["vectors.3.g2.f32", "vectors.3.g2.i8", "vectors.3.g2.ids"]
        assert ids(store.dense_search(Z, 5)) == [LABOR_V2.ids[0], NOTE.ids[0]]


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


def test_another_process_keeps_searching_through_a_compaction_and_then_maps_the_new_file(index_dir: Path) -> None:
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
        print(reader.vectors.snap.path.name, *hits, flush=True)
"""
        child = subprocess.Popen(
            [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert child.stdin is not None and child.stdout is not None
        try:
            child.stdin.write("search\n")
            child.stdin.flush()
            assert child.stdout.readline().split() == ["vectors.3.f32", LABOR_V2.ids[0], NOTE.ids[0]]
            assert store.compact().compacted and not (index_dir / "vectors.3.f32").exists()
            child.stdin.write("search\n")
            child.stdin.flush()
            assert child.stdout.readline().split() == ["vectors.3.g1.f32", LABOR_V2.ids[0], NOTE.ids[0]]
        finally:
            child.stdin.close()
            assert child.wait(timeout=60) == 0
