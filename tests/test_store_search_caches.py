"""What the SQLite store's searches keep between calls (chunk ids by rowid, BM25 query terms and their scores, filter
masks) never shows: after another writer's commit (another connection, another process) every search answers as a
store opened afresh, with the same rows and floats."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from contracts.store_contract import LABOR, NOTE, WAGE, ids, make_doc
from zhiku.stores import SQLiteStore
from zhiku.types import Filters

SRC = Path(__file__).resolve().parents[1] / "src"
TESTS = Path(__file__).resolve().parent
X = np.array([1.0, 0.0, 0.0], np.float32)
# LABOR written again with its two chunks' vectors swapped: the same chunk ids, at new rowids
LABOR_SWAPPED = replace(LABOR, vectors=LABOR.vectors[::-1].copy())


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    return tmp_path / "索引"


def scores(found: dict[str, float]) -> dict[str, float]:
    return {c: round(s, 5) for c, s in found.items()}


def test_dense_scores_follow_a_document_written_again_by_another_connection(index_dir: Path) -> None:
    with SQLiteStore(index_dir) as writer, SQLiteStore(index_dir, read_only=True) as reader:
        LABOR.write(writer)
        WAGE.write(writer)
        assert ids(reader.dense_search(X, 3)) == [LABOR.ids[0], LABOR.ids[1], WAGE.ids[0]]  # rowids remembered
        assert scores(reader.dense_scores(X, LABOR.ids)) == {LABOR.ids[0]: 1.0, LABOR.ids[1]: 0.6}
        LABOR_SWAPPED.write(writer)  # the remembered rowids are dead now
        assert scores(reader.dense_scores(X, LABOR.ids)) == {LABOR.ids[0]: 0.6, LABOR.ids[1]: 1.0}
        assert ids(reader.dense_search(X, 2)) == [LABOR.ids[1], LABOR.ids[0]]
        writer.delete_document("doc-labor")
        assert reader.dense_scores(X, [*LABOR.ids, WAGE.ids[0]]) == {WAGE.ids[0]: 0.0}
        assert ids(reader.dense_search(X, 3)) == WAGE.ids
        assert reader.dense_scores(X, ["no-such-chunk"]) == {}


def test_searches_answer_as_a_fresh_store_after_another_processes_commit(index_dir: Path) -> None:
    with SQLiteStore(index_dir) as writer:
        LABOR.write(writer)
        NOTE.write(writer)
    with SQLiteStore(index_dir, read_only=True) as reader:
        terms = ["劳动者", "会议", "解除"]
        assert ids(reader.bm25_search(terms, 5)) == [NOTE.ids[0], LABOR.ids[0], LABOR.ids[1]]
        assert scores(reader.dense_scores(X, LABOR.ids)) == {LABOR.ids[0]: 1.0, LABOR.ids[1]: 0.6}
        script = (
            f"import sys; sys.path[:0] = [{str(SRC)!r}, {str(TESTS)!r}]\n"
            "from zhiku.stores import SQLiteStore\nfrom contracts.store_contract import WAGE\n"
            "from test_store_search_caches import LABOR_SWAPPED\n"
            f"with SQLiteStore({str(index_dir)!r}) as s: LABOR_SWAPPED.write(s); WAGE.write(s)\n"
        )
        subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
        got = [(h.chunk_id, h.score) for h in reader.bm25_search(terms, 5)]
        assert scores(reader.dense_scores(X, LABOR.ids)) == {LABOR.ids[0]: 0.6, LABOR.ids[1]: 1.0}
    with SQLiteStore(index_dir, read_only=True) as fresh:
        assert got == [(h.chunk_id, h.score) for h in fresh.bm25_search(terms, 5)]  # the same floats
    assert {c for c, _ in got} == {*LABOR.ids, NOTE.ids[0], WAGE.ids[0]}


def test_bm25_scores_reused_from_earlier_queries_are_the_same_floats(index_dir: Path) -> None:
    with SQLiteStore(index_dir) as store:
        for doc in (LABOR, WAGE, NOTE):
            doc.write(store)
        queries = [["劳动者", "支付"], ["支付", "劳动者", "会议"], ["工资"], ["劳动者"], ["劳动者", "支付"]]
        first = [[(h.chunk_id, h.score) for h in store.bm25_search(q, 5)] for q in queries]
        again = [[(h.chunk_id, h.score) for h in store.bm25_search(q, 5)] for q in queries]
        filtered = store.bm25_search(["劳动者", "会议"], 5, Filters(collection="笔记"))
    assert first == again and first[0] == first[-1]
    with SQLiteStore(index_dir, read_only=True) as fresh:  # every term computed anew, in another order
        assert [[(h.chunk_id, h.score) for h in fresh.bm25_search(q, 5)] for q in reversed(queries)] == first[::-1]
    assert ids(filtered) == NOTE.ids


def test_kept_filter_masks_grow_with_another_writers_documents(index_dir: Path) -> None:
    notes = Filters(collection="笔记")
    wage_glob = Filters(source_glob="法规/工资*")
    with SQLiteStore(index_dir) as writer, SQLiteStore(index_dir, read_only=True) as reader:
        LABOR.write(writer)
        NOTE.write(writer)
        assert ids(reader.bm25_search(["劳动者", "会议"], 5, notes)) == NOTE.ids
        assert reader.bm25_search(["劳动者"], 5, wage_glob) == []
        later_note = make_doc(
            "doc-note2",
            "笔记",
            "笔记/周会.md",
            "markdown",
            [("周会讨论劳动者权益。", ["周会", "劳动者"], [1.0, 0.0, 0.0])],
        )
        later_note.write(writer)
        WAGE.write(writer)  # a source the glob matches, written after the glob was first searched
        writer.delete_document("doc-note")
        assert ids(reader.bm25_search(["劳动者", "会议"], 5, notes)) == later_note.ids
        assert ids(reader.dense_search(X, 5, notes)) == later_note.ids
        assert ids(reader.bm25_search(["劳动者"], 5, wage_glob)) == WAGE.ids
        assert ids(reader.dense_search(X, 5, wage_glob)) == WAGE.ids
    with SQLiteStore(index_dir, read_only=True) as fresh:
        assert ids(fresh.bm25_search(["劳动者", "会议"], 5, notes)) == later_note.ids


def test_chunk_ids_follow_another_writers_rows_and_deletions(index_dir: Path) -> None:
    with SQLiteStore(index_dir) as writer, SQLiteStore(index_dir, read_only=True) as reader:
        LABOR.write(writer)
        assert ids(reader.dense_search(X, 2)) == LABOR.ids
        assert ids(reader.dense_search(X, 2)) == LABOR.ids
        WAGE.write(writer)
        writer.delete_document("doc-labor")
        NOTE.write(writer)
        assert ids(reader.dense_search(X, 3)) == sorted([WAGE.ids[0], NOTE.ids[0]])  # both score 0: by chunk id
        reader.warm()
        assert ids(reader.bm25_search(["会议"], 5)) == NOTE.ids and ids(reader.bm25_search(["解除"], 5)) == []


def test_a_fill_after_a_dense_search_gives_what_a_store_that_never_searched_gives(index_dir: Path) -> None:
    """``dense_scores`` right after a ``dense_search`` (filtered or not, of the same question or another, in a buffer
    the caller reuses) gives the cosines a fresh store gives."""
    with SQLiteStore(index_dir) as store:
        for doc in (LABOR, WAGE, NOTE):
            doc.write(store)
    every = [*LABOR.ids, *WAGE.ids, *NOTE.ids]
    y = np.array([0.0, 0.6, 0.8], np.float32)
    with SQLiteStore(index_dir, read_only=True) as fresh:
        want_x, want_y = fresh.dense_scores(X, every), fresh.dense_scores(y, every)
    with SQLiteStore(index_dir, read_only=True) as store:
        assert ids(store.dense_search(X, 1)) == [LABOR.ids[0]]
        assert store.dense_scores(X, every) == want_x
        assert store.dense_scores(y, every) == want_y
        assert ids(store.dense_search(X, 4, Filters(collection="笔记"))) == NOTE.ids
        assert store.dense_scores(X, every) == want_x
        buffer = X.copy()  # a caller that reuses its vector's buffer for the next question
        store.dense_search(buffer, 1)
        buffer[:] = y
        assert store.dense_scores(buffer, every) == want_y
    assert want_x[LABOR.ids[1]] == pytest.approx(0.6) and want_y[NOTE.ids[0]] == pytest.approx(1.0)


def test_best_cosines_over_several_vectors_are_the_highest_of_each_ones(index_dir: Path) -> None:
    from zhiku.errors import InvalidInput
    from zhiku.retrieval.clauses import clause_ranking

    class OneAtATime:  # a store without ``best_dense_scores`` (a plugin's): asked once per vector
        def __init__(self, store: SQLiteStore) -> None:
            self.dense_scores = store.dense_scores

    vectors = [X, np.array([0.0, 0.6, 0.8], np.float32), np.array([0.0, 2.0, 0.0], np.float32)]
    with SQLiteStore(index_dir) as store:
        for doc in (LABOR, WAGE, NOTE):
            doc.write(store)
        every = [*LABOR.ids, *WAGE.ids, *NOTE.ids]
        want = {c: max(store.dense_scores(v, every)[c] for v in vectors) for c in every}
        assert store.best_dense_scores(vectors, every) == want  # the same floats
        assert scores(want) == {LABOR.ids[0]: 1.0, LABOR.ids[1]: 0.8, WAGE.ids[0]: 1.0, NOTE.ids[0]: 1.0}
        assert store.best_dense_scores(vectors, ["no-such-chunk", WAGE.ids[0]]) == {WAGE.ids[0]: want[WAGE.ids[0]]}
        assert store.best_dense_scores([], every) == {} and store.best_dense_scores(vectors, []) == {}
        with pytest.raises(InvalidInput, match="NaN"):
            store.best_dense_scores([X, np.array([np.nan, 0.0, 0.0], np.float32)], every)
        rankings = [store.bm25_search(["劳动者"], 5), store.dense_search(X, 2)]
        ranked = clause_ranking(store, rankings, vectors)
        assert ranked == clause_ranking(OneAtATime(store), rankings, vectors)  # type: ignore[arg-type]
        # every candidate once, by its best cosine, ties by id
        assert ids(ranked) == sorted([LABOR.ids[0], WAGE.ids[0]]) + [LABOR.ids[1]]


def test_a_pinned_search_reads_one_index_version_however_many_commits_land_meanwhile(index_dir: Path) -> None:
    with SQLiteStore(index_dir) as writer, SQLiteStore(index_dir, read_only=True) as reader:
        LABOR.write(writer)
        assert set(ids(reader.bm25_search(["劳动者", "工资"], 5))) == set(LABOR.ids)  # both snapshots at this version
        before = reader.index_version()
        with reader.pinned():
            assert ids(reader.dense_search(X, 3)) == LABOR.ids  # the version is read here, once
            WAGE.write(writer)  # another connection's commit, between two reads of the same search
            with reader.pinned():  # nested: the outer one's version
                assert ids(reader.dense_search(X, 3)) == LABOR.ids
            assert set(ids(reader.bm25_search(["劳动者", "工资"], 5))) == set(LABOR.ids)  # BM25 at that version too
            writer.delete_document("doc-labor")
        assert reader.index_version() == before + 2
        assert ids(reader.dense_search(X, 3)) == WAGE.ids  # out of it: the current version again
        assert ids(reader.bm25_search(["劳动者", "工资"], 5)) == WAGE.ids
        assert reader.get_chunks(LABOR.ids) == []


def test_a_pin_follows_a_snapshot_that_moved_so_both_channels_read_one_version(index_dir: Path) -> None:
    with SQLiteStore(index_dir) as writer, SQLiteStore(index_dir, read_only=True) as reader:
        LABOR.write(writer)
        assert set(ids(reader.bm25_search(["劳动者", "工资"], 5))) == set(
            LABOR.ids
        )  # BM25's snapshot: the first version
        with reader.pinned():
            WAGE.write(writer)
            assert ids(reader.dense_search(X, 3)) == [*LABOR.ids, WAGE.ids[0]]  # the pin's first read: the newest
            LABOR_SWAPPED.write(writer)
            # BM25's snapshot is behind the pin: it moves, to the newest version (older ones are gone), and the
            # pin follows it, so the dense channel moves there too instead of mixing two versions in one search
            assert set(ids(reader.bm25_search(["劳动者", "工资"], 5))) == {*LABOR.ids, *WAGE.ids}
            assert ids(reader.dense_search(X, 3)) == [LABOR.ids[1], LABOR.ids[0], WAGE.ids[0]]
