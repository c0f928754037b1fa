"""Dense search screened by int8 codes (``store.dense_search``): every row ranked by its int8 code, the best
re-scored in float32 (the exact ranking, scores within float error); filters and deletions honoured; an index
whose codes are gone is searched from zhiku.db, and rewritten at a writable open."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from contracts.store_contract import Doc, ids, make_doc
from zhiku.errors import ConfigError
from zhiku.stores import SQLiteStore
from zhiku.types import Filters

DIM = 8
RNG = np.random.default_rng(11)
VECTORS = RNG.standard_normal((300, DIM)).astype(np.float32)
VECTORS /= np.linalg.norm(VECTORS, axis=1, keepdims=True)


def _doc(n: int, collection: str) -> Doc:
    rows = range(100 * n, 100 * n + 100)
    items = [(f"第{i}段。", [f"段{i}"], VECTORS[i].tolist()) for i in rows]
    return make_doc(f"doc-{n}", collection, f"{collection}/{n}.md", "markdown", items)


DOCS = [_doc(0, "甲"), _doc(1, "乙"), _doc(2, "甲")]
CHUNK = [c.chunk_id for d in DOCS for c in d.chunks]  # CHUNK[i] has VECTORS[i]


def _exact(query: np.ndarray, allowed: list[int], k: int = 10) -> set[str]:
    return {c for c, _ in _ranking(query, allowed, k)}


def _ranking(query: np.ndarray, allowed: list[int], k: int = 10) -> list[tuple[str, float]]:
    """The exact top ``k`` (numpy, float64), ties by chunk id."""
    scores = VECTORS[allowed].astype(np.float64) @ query.astype(np.float64)
    return sorted(((CHUNK[a], float(s)) for a, s in zip(allowed, scores, strict=True)), key=lambda h: (-h[1], h[0]))[:k]


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    path = tmp_path / "索引"
    with SQLiteStore(path) as store:
        for doc in DOCS:
            doc.write(store)
    return path


def _corrupt_code(index_dir: Path, row: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Negate one row's int8 code, past the checksums (which catch it: tests/test_integrity.py): only screening
    reads it."""
    monkeypatch.setattr("zhiku.stores._vectors.verify", lambda *args, **kwargs: None)
    codes = np.memmap(index_dir / f"vectors.{DIM}.i8", dtype=np.int8, mode="r+", shape=(300, DIM))
    codes[row] = -codes[row]
    codes.flush()


def test_screening_ranks_by_the_int8_codes_and_scores_the_best_in_float32(
    index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with SQLiteStore(index_dir, dense_search="int8") as store:
        for i in (5, 150, 299):
            hits = store.dense_search(VECTORS[i], 10)
            assert hits[0].chunk_id == CHUNK[i] and hits[0].score == pytest.approx(1.0, abs=1e-5)
            reference = _ranking(VECTORS[i], list(range(300)))
            assert ids(hits) == [c for c, _ in reference]  # the exact order ...
            assert [h.score for h in hits] == pytest.approx([s for _, s in reference], abs=1e-6)  # ... and scores
    _corrupt_code(index_dir, 5, monkeypatch)
    with SQLiteStore(index_dir, dense_search="int8") as screened, SQLiteStore(index_dir, dense_search="exact") as exact:
        assert CHUNK[5] not in ids(screened.dense_search(VECTORS[5], 10))  # its code now points away from it
        assert ids(exact.dense_search(VECTORS[5], 1)) == [CHUNK[5]]


def test_screening_honours_filters_and_never_returns_a_deleted_chunk(index_dir: Path) -> None:
    with SQLiteStore(index_dir, dense_search="int8") as store:
        query = VECTORS[120]  # a chunk of collection 乙
        in_jia = list(range(100)) + list(range(200, 300))
        found = store.dense_search(query, 10, Filters(collection="甲"))
        assert {h.chunk_id for h in found} == _exact(query, in_jia) and CHUNK[120] not in ids(found)
        store.delete_document("doc-1")
        assert {h.chunk_id for h in store.dense_search(query, 10)} == _exact(query, in_jia)
        assert len(store.dense_search(query, 500)) == 200


def test_auto_searches_a_small_index_exactly(index_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _corrupt_code(index_dir, 5, monkeypatch)
    with SQLiteStore(index_dir) as auto:  # 300 rows: below the 10,000 it screens from, exact
        assert ids(auto.dense_search(VECTORS[5], 1)) == [CHUNK[5]]


def test_an_index_without_codes_is_searched_from_the_blobs_and_rewritten_when_opened_for_writing(
    index_dir: Path,
) -> None:
    codes = index_dir / f"vectors.{DIM}.i8"
    codes.unlink()
    with SQLiteStore(index_dir, read_only=True, dense_search="int8") as reader:
        assert ids(reader.dense_search(VECTORS[7], 1)) == [CHUNK[7]]
        assert not codes.exists()
    with SQLiteStore(index_dir, dense_search="int8") as store:
        assert [p.stat().st_size for p in index_dir.glob("vectors.*.i8")] == [300 * DIM]
        assert ids(store.dense_search(VECTORS[7], 1)) == [CHUNK[7]]


def test_int8_without_numkong_is_refused_with_the_fix(index_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("zhiku.stores.sqlite.numkong", lambda: None)
    with pytest.raises(ConfigError, match=r"pip install 'zhiku\[scale\]'"):
        SQLiteStore(index_dir, dense_search="int8")


def test_codes_follow_appends_compaction_and_another_reader(index_dir: Path) -> None:
    extra = make_doc("doc-x", "甲", "甲/x.md", "markdown", [("新增。", ["新增"], (-VECTORS[7]).tolist())])
    with SQLiteStore(index_dir, dense_search="int8", compact_dead_fraction=1) as store:
        with SQLiteStore(index_dir, read_only=True, dense_search="int8") as reader:
            assert ids(reader.dense_search(VECTORS[7], 1)) == [CHUNK[7]]
            extra.write(store)  # row 300: its code appended with it
            store.delete_document("doc-0")
            assert ids(reader.dense_search(-VECTORS[7], 1)) == extra.ids
            assert (index_dir / f"vectors.{DIM}.i8").stat().st_size == 301 * DIM
            assert store.compact().rows_after == 201
            assert ids(reader.dense_search(-VECTORS[7], 1)) == extra.ids  # the new generation's codes
            assert (index_dir / f"vectors.{DIM}.g1.i8").stat().st_size == 201 * DIM
            assert {h.chunk_id for h in reader.dense_search(VECTORS[150], 10)} == _exact(
                VECTORS[150], list(range(100, 300))
            )
