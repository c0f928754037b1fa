"""The compiled search core's dense kernels (``stores/_zcore.c``: ``dots``, ``screen``; ``_vectors.simd_kernels``):
float32 dot products in one documented order of fused multiply-adds (the same floats on every CPU with AVX2 and
FMA, wherever a row lies), exact int8 products and the best rows by them, and a screened search's fill.

They run where the extension is built and the CPU has AVX2 and FMA (every x86-64 CI machine); elsewhere the
numpy path serves and these tests skip (a failure in CI: strict skips)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from zhiku.stores._sqlite_search import SCREEN_FROM, SCREEN_KERNELS_FROM, SQLiteSearch
from zhiku.stores._vector_files import quantise
from zhiku.stores._vectors import dot_rows, simd_kernels


@pytest.fixture(scope="module")
def k() -> Any:
    kernels = simd_kernels()
    if kernels is None:
        pytest.skip("the compiled search core is not built, or this CPU has no AVX2 and FMA")
    return kernels


def _unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    m = rng.standard_normal((n, dim)).astype(np.float32)
    return (m / np.linalg.norm(m, axis=1, keepdims=True)).astype(np.float32)


def _f32(x: Fraction) -> np.float32:
    """``x`` rounded to the nearest float32, ties to even (exactly: no double rounding through float64)."""
    f = np.float32(float(x))
    near = [f, np.nextafter(f, np.float32(np.inf)), np.nextafter(f, np.float32(-np.inf))]
    return min(near, key=lambda c: (abs(Fraction(float(c)) - x), int(c.view(np.uint32)) & 1))


def _documented_dot(row: np.ndarray, q: np.ndarray) -> np.float32:
    """The order ``_zcore.c`` documents, in exact arithmetic: element e fused-multiply-added into lane e mod 32 in
    increasing e; then acc0 + acc1, acc2 + acc3, their sum; then lanes l + (l + 4), + 2, + 1."""
    lanes = [np.float32(0.0)] * 32
    for e, (a, b) in enumerate(zip(row.tolist(), q.tolist(), strict=True)):
        lanes[e % 32] = _f32(Fraction(a) * Fraction(b) + Fraction(float(lanes[e % 32])))

    def add(x: np.float32, y: np.float32) -> np.float32:
        return _f32(Fraction(float(x)) + Fraction(float(y)))

    acc = [lanes[8 * i : 8 * i + 8] for i in range(4)]
    s01 = [add(x, y) for x, y in zip(acc[0], acc[1], strict=True)]
    s23 = [add(x, y) for x, y in zip(acc[2], acc[3], strict=True)]
    s = [add(x, y) for x, y in zip(s01, s23, strict=True)]
    four = [add(s[i], s[i + 4]) for i in range(4)]
    two = [add(four[0], four[2]), add(four[1], four[3])]
    return add(two[0], two[1])


@pytest.mark.parametrize("dim", [1, 7, 8, 31, 33, 48, 100])
def test_dots_follow_the_documented_order_exactly(k: Any, dim: int) -> None:
    """Every float the kernel returns is the documented order's, computed here in exact arithmetic: so it is the
    same on every CPU with AVX2 and FMA (IEEE fused multiply-adds and adds, no other rounding)."""
    rng = np.random.default_rng(dim)
    m, q = _unit_rows(rng, 5, dim), _unit_rows(rng, 1, dim)[0]
    got = np.empty(5, np.float32)
    k.dots(m, q, got)
    assert [float(x) for x in got] == [float(_documented_dot(row, q)) for row in m]


@pytest.mark.parametrize("dim", [1, 8, 33, 384, 1024])
def test_a_rows_cosine_does_not_depend_on_where_it_lies(k: Any, dim: int) -> None:
    """The whole matrix, rows picked by index, rows gathered into a copy: the same float per row (a screened
    search's re-scoring and fill read rows each way); within float32 rounding of the exact cosine."""
    rng = np.random.default_rng(7)
    m, q = _unit_rows(rng, 300, dim), _unit_rows(rng, 1, dim)[0]
    whole = dot_rows(m, q, k)
    rows = np.array([299, 3, 0, 150, 3], np.int64)
    picked = np.empty(rows.size, np.float32)
    k.dots(m, q, picked, rows)
    assert np.array_equal(picked, whole[rows])
    assert np.array_equal(dot_rows(np.ascontiguousarray(m[rows]), q, k), whole[rows])
    exact = m.astype(np.float64) @ q.astype(np.float64)
    assert np.abs(whole - exact).max() < 1e-6
    assert np.abs(dot_rows(m, q, None) - whole).max() < 1e-6  # numpy's einsum (the numpy path without them)


def test_dots_refuse_what_does_not_fit(k: Any) -> None:
    m, q = np.ones((4, 8), np.float32), np.ones(8, np.float32)
    with pytest.raises(ValueError, match="one float per row"):
        k.dots(m, q, np.empty(3, np.float32))
    with pytest.raises(IndexError, match="out of range"):
        k.dots(m, q, np.empty(1, np.float32), np.array([4], np.int64))
    with pytest.raises(ValueError, match="rows of the query's dimension"):
        k.dots(np.ones(12, np.float32), q, np.empty(1, np.float32))


def test_screen_keeps_the_best_live_rows_by_exact_int8_products(k: Any) -> None:
    """The ``want`` best live rows by their codes' int32 dot product with the query's (ties: the lower rows), in
    file order; dead rows never; fewer when fewer are live."""
    rng = np.random.default_rng(11)
    m = _unit_rows(rng, 1000, 384)
    m[10:20] = m[5]  # ties
    codes, qcode = quantise(m), quantise(m[5] * 0.7 + m[900] * 0.3)
    live = np.ones(1000, bool)
    live[[5, 900, 12]] = False
    ints = codes.astype(np.int64) @ qcode.astype(np.int64)
    for want in (1, 8, 50, 400):
        out = np.empty(want, np.int64)
        got = k.screen(codes, qcode, live.view(np.uint8), out)
        best = sorted((i for i in range(1000) if live[i]), key=lambda i: (-int(ints[i]), i))[:want]
        assert got == want and out.tolist() == sorted(best)
    few = np.zeros(1000, bool)
    few[[3, 700]] = True
    out = np.empty(50, np.int64)
    assert k.screen(codes, qcode, few.view(np.uint8), out) == 2 and out[:2].tolist() == [3, 700]


def test_a_screened_searchs_fill_scores_the_rows_it_needs(k: Any) -> None:
    """The core ranks a screened product (cosines at the screened rows, −inf elsewhere); BM25 candidates outside
    the dense top get their exact cosine (``retrieval.fill_dense``) computed then when they were not screened: the
    fused scores are ``zscore_fusion``'s with every such cosine from the kernel."""
    from zhiku.retrieval.fusion import zscore_fusion
    from zhiku.stores import _zcore  # type: ignore[attr-defined]
    from zhiku.types import Ranking

    rng = np.random.default_rng(5)
    n, dim, kd = 400, 48, 20
    m = _unit_rows(rng, n, dim)
    q = _unit_rows(rng, 1, dim)[0]
    exact = dot_rows(m, q, k)
    screened = np.sort(rng.choice(n, 60, replace=False))
    scores = np.full(n, -np.inf, np.float32)
    scores[screened] = exact[screened]
    names = [None] + [f"c{i:04d}" for i in range(1, n + 1)]
    args = (np.ones(n, np.uint8), np.arange(1, n + 1), np.arange(-1, n), np.arange(n + 1, dtype=np.int32), names)
    touched = np.sort(rng.choice(np.arange(1, n + 1), 80, replace=False)).astype(np.int64)
    weights = rng.uniform(0.5, 9.0, touched.size)
    got = _zcore.hybrid(scores, *args, [(touched, weights)], 30, kd, 50, 1.0, 1.0, True, True, None, m, q)
    bm25, dense = Ranking(got[0], got[1]), Ranking(got[3], got[4])
    best = sorted(screened.tolist(), key=lambda i: (-float(exact[i]), i))[:kd]
    assert list(dense.ids) == [names[i + 1] for i in best]
    filled = {c: float(exact[int(c[1:]) - 1]) for c in bm25.ids if c not in dense.ids}
    outside = [c for c in filled if int(c[1:]) - 1 not in set(screened.tolist())]
    assert outside  # (filled from rows the screening did not keep)
    assert [(f[0], f[1]) for f in got[6]] == zscore_fusion([bm25, dense], weights=[1.0, 1.0], fill=[None, filled])
    assert got[7] == len(filled)


@pytest.mark.parametrize(
    "vendor, kernels, rows, dim, mode, screens",
    [
        ("GenuineIntel", True, SCREEN_KERNELS_FROM - 1, 384, "auto", False),
        ("GenuineIntel", True, SCREEN_KERNELS_FROM, 384, "auto", True),
        ("", True, SCREEN_KERNELS_FROM, 1024, "auto", True),  # (a vendor not known: the Intel crossover)
        ("AuthenticAMD", True, 8191, 384, "auto", False),  # (12 MB of float32 rows: 8,192 of 384 floats)
        ("AuthenticAMD", True, 8192, 384, "auto", True),
        ("AuthenticAMD", True, 3071, 1024, "auto", False),
        ("AuthenticAMD", True, 3072, 1024, "auto", True),
        ("AuthenticAMD", True, SCREEN_KERNELS_FROM - 1, 8192, "auto", False),  # (never below the Intel one)
        ("GenuineIntel", False, SCREEN_KERNELS_FROM, 384, "auto", False),
        ("AuthenticAMD", False, SCREEN_FROM, 384, "auto", True),
        ("AuthenticAMD", True, 10, 384, "int8", True),
        ("GenuineIntel", True, SCREEN_FROM, 384, "exact", False),
    ],
)
def test_auto_screens_from_the_cpus_crossover_with_the_kernels(
    monkeypatch: pytest.MonkeyPatch, vendor: str, kernels: bool, rows: int, dim: int, mode: str, screens: bool
) -> None:
    """1,024 rows on Intel CPUs (and any other), 12 MB of float32 rows on AMD ones (bench/RESULTS.md)."""
    monkeypatch.setattr("zhiku.stores._sqlite_search.cpu_vendor", lambda: vendor)
    store = SimpleNamespace(_kernels=object() if kernels else None, dense_mode=mode)
    assert SQLiteSearch._screens(store, SimpleNamespace(rows=rows, dim=dim)) is screens  # type: ignore[arg-type]


def test_the_cpus_vendor_is_read_from_proc_cpuinfo() -> None:
    from zhiku.stores._sqlite_search import cpu_vendor

    try:
        text = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
    except OSError:
        assert cpu_vendor() == ""
        return
    ids = [line.partition(":")[2].strip() for line in text.splitlines() if line.startswith("vendor_id")]
    assert cpu_vendor() == (ids[0] if ids else "")


def test_hnsw_candidates_are_scored_by_the_kernels_as_every_other_dense_product(k: Any, tmp_path: Any) -> None:
    """``store.dense_search: hnsw`` scores its candidates (and the rows written since its build) with the same
    kernel as an exact search and a fill (``dense_scores``): a chunk's cosine is one float whichever way it is
    found."""
    from contracts.store_contract import make_doc
    from zhiku.stores import SQLiteStore

    rng = np.random.default_rng(3)
    dim = 100
    m = _unit_rows(rng, 300, dim)
    items = [(f"第{i}段。", [f"段{i}"], m[i].tolist()) for i in range(300)]
    doc = make_doc("d", "甲", "甲/d.md", "markdown", items)
    with SQLiteStore(tmp_path / "idx") as writer:
        doc.write(writer)
    with SQLiteStore(tmp_path / "idx", dense_search="hnsw") as hnsw, SQLiteStore(tmp_path / "idx") as exact:
        for q in _unit_rows(rng, 10, dim):
            hits = hnsw.dense_search(q, 10)
            assert len(hits) == 10
            filled = hnsw.dense_scores(q, [h.chunk_id for h in hits])
            by_exact = {h.chunk_id: h.score for h in exact.dense_search(q, 300)}
            assert [h.score for h in hits] == [filled[h.chunk_id] for h in hits]
            assert [h.score for h in hits] == [by_exact[h.chunk_id] for h in hits]


def test_an_index_without_codes_is_served_by_the_core_past_the_screening_threshold(
    k: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without int8 codes (an index from before them, opened read-only) nothing screens: the numpy path scores
    every row exactly, and so does the core, which serves that search as it does below the threshold."""
    from contracts.store_contract import make_doc
    from zhiku.stores import SQLiteStore

    rng = np.random.default_rng(4)
    m = _unit_rows(rng, 300, 16)
    items = [(f"第{i}段。", ["段", f"段{i}"], m[i].tolist()) for i in range(300)]
    with SQLiteStore(tmp_path / "idx") as writer:
        make_doc("d", "甲", "甲/d.md", "markdown", items).write(writer)
    (tmp_path / "idx" / "vectors.16.i8").unlink()
    monkeypatch.setattr("zhiku.stores._sqlite_search.screen_kernels_from", lambda dim: 300)
    with SQLiteStore(tmp_path / "idx", read_only=True) as store:
        q = m[7] + 0.3 * m[8]
        got = store.hybrid_core(["段"], q, 10, 20, None)
        assert store._snap is not None and store._snap.codes is None and store._screens(store._snap)
        assert got is not None
        numpy_path = [(h.chunk_id, h.score) for h in store.dense_search(q, 10)]
        assert list(zip(got.dense.ids, got.dense.scores, strict=True)) == numpy_path
