"""The compiled search core (``stores/_zcore.c``) gives what the numpy path gives: for the same questions on the same
index, every ``Hit`` field, both channel rankings, the clause ranking and the trace (apart from times) are equal
with ``retrieval.compiled_core`` on and off; and the searches it does not serve (a second form of the question,
filters that allow no row, RRF, one channel, switched off) take the numpy path.

The corpus is 160 real statute articles of tests/data/stard_subset (MIT, see its SOURCE.md), three of them twice
under other names (equal BM25 scores and equal vectors: ties, ordered by chunk id on both paths), with a
deterministic character-vector embedder (each character a fixed random direction): real BM25, real vector files.
The extension must be built (``pip install -e .`` builds it where a C compiler is present); CI's strict skips
(``ZHIKU_STRICT_SKIPS=1``) turn the skip below into a failure, so CI proves that it builds."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from helpers_kb import make_settings
from zhiku.api import KnowledgeBase
from zhiku.observability.tracing import MemorySink, Tracer, ordered_stages
from zhiku.settings import Settings, merge
from zhiku.stores import _core
from zhiku.stores._vectors import simd_kernels

STARD = Path(__file__).resolve().parent / "data" / "stard_subset"
DIM = 48
TWICE = 3  # articles written twice (ties)


@functools.cache
def _direction(ch: str) -> np.ndarray:
    return np.random.default_rng(ord(ch)).standard_normal(DIM)


class CharVectors:
    """Each text the sum of its characters' fixed random directions, normalised: similar texts, similar vectors."""

    name = "test/char-vectors-48"
    dim = DIM

    def _vector(self, text: str) -> np.ndarray:
        v = np.sum([_direction(ch) for ch in text] or [np.ones(DIM)], axis=0)
        return (v / np.linalg.norm(v)).astype(np.float32)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return np.array([self._vector(t) for t in texts], np.float32).reshape(-1, DIM)

    def embed_query(self, text: str) -> np.ndarray:
        return self._vector(text)


def _questions() -> list[str]:
    rows = [json.loads(line) for line in (STARD / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
    corpus = [json.loads(line) for line in (STARD / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    return (
        [r["text"] for r in rows[:40]]
        + [
            "第四十七条",  # one form: the article as statutes write it
            "保险诈骗 数额较大",  # two clauses
            "盗窃罪",
            "".join(r["text"] for r in corpus[200:203])[:1500],  # a long one: over a hundred distinct terms
        ]
    )


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, embed_cache_dir: Path) -> Iterator[Settings]:
    if not _core.available():
        pytest.skip("the compiled search core is not built (pip install -e . with a C compiler and Python headers)")
    root = tmp_path_factory.mktemp("zcore")
    rows = [json.loads(line) for line in (STARD / "corpus.jsonl").read_text(encoding="utf-8").splitlines()][:160]
    docs = root / "docs"
    for n, r in enumerate(rows):
        path = docs / ("law" if n % 2 else "rules") / f"{r['_id']}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {r['title']}\n\n{r['text']}\n", encoding="utf-8")
        if n < TWICE:
            (docs / "copies").mkdir(exist_ok=True)
            (docs / "copies" / f"{r['_id']}-copy.md").write_text(f"# {r['title']}\n\n{r['text']}\n", encoding="utf-8")
    settings = make_settings(root / "idx", embed_cache_dir, tracing={"enabled": True})
    with KnowledgeBase(settings, embedder=CharVectors()) as kb:  # type: ignore[arg-type]
        kb.ingest([docs / "law"], collection="law")
        kb.ingest([docs / "rules", docs / "copies"], collection="rules")
    yield settings


def _run(settings: Settings, questions: list[str], core: bool = True, **options: Any) -> tuple[list[Any], int]:
    """Each question's hits, rankings and trace stages (no times), and how many searches the core served."""
    sink = MemorySink()
    with KnowledgeBase(settings, embedder=CharVectors(), tracer=Tracer([sink])) as kb:  # type: ignore[arg-type]
        if not core:
            kb.searcher.core._core = None  # the numpy path
        kb.searcher.inline_embed_s = 1e9  # the embedder is fast: it runs on the caller's thread
        kb.retrieve("热身", mode="dense")  # (the first question is timed in the dense worker)
        served = kb.searcher.core.served
        out = []
        for q in questions:
            r = kb.retrieve(q, **options)
            stages = [(s.name, s.status, s.calls, s.counts, s.data) for s in ordered_stages(sink.traces[-1])]
            out.append((r.hits, tuple(r.bm25), tuple(r.dense), tuple(r.clauses), stages))
        return out, kb.searcher.core.served - served


def _off(settings: Settings, **retrieval: Any) -> Settings:
    return merge(settings, retrieval=retrieval)


@pytest.mark.parametrize("top_k, depth", [(3, 100), (10, 100), (10, 4)])
def test_both_paths_give_the_same_hits_rankings_and_traces(index: Settings, top_k: int, depth: int) -> None:
    questions = _questions()
    core, served = _run(index, questions, top_k=top_k, per_source_k=depth, mode="hybrid")
    numpy_path, none = _run(
        _off(index), core=False, questions=questions, top_k=top_k, per_source_k=depth, mode="hybrid"
    )
    assert (served, none) == (len(questions), 0)  # every question has one form here
    for q, a, b in zip(questions, core, numpy_path, strict=True):
        assert a == b, q  # Hit dataclasses: every field; rankings: ids, scores, ranks; stages: all but times
    hits = [h for a in core for h in a[0]]
    assert any(a[3] for a in core) and any(not a[3] for a in core)  # with and without the clause channel
    if depth == 4:  # candidates outside one channel's top: the other's lowest, or (dense) their filled cosine
        assert any(h.bm25_rank is None for h in hits)
        assert any(h.dense_rank is None and h.dense_score is not None for h in hits)
    stages = {s[0] for a in core for s in a[4]}
    assert {"parse", "bm25", "dense", "clauses", "fusion", "rerank"} <= stages


def test_ties_are_ordered_by_chunk_id_on_both_paths(index: Settings) -> None:
    rows = [json.loads(line) for line in (STARD / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    question = rows[0]["text"][:30]  # an article written twice: both copies score the same in both channels
    core, served = _run(index, [question], top_k=1, per_source_k=1, mode="hybrid")
    numpy_path, _ = _run(_off(index), core=False, questions=[question], top_k=1, per_source_k=1, mode="hybrid")
    assert served == 1 and core == numpy_path
    bm25, dense = core[0][1], core[0][2]
    assert len(bm25) == len(dense) == 1  # of two tied rows at the cut, the smaller chunk id on both paths
    top2, _ = _run(index, [question], top_k=2, per_source_k=2, mode="hybrid")
    ids = [x.chunk_id for x in top2[0][1]]
    assert top2[0][1][0].score == top2[0][1][1].score and ids == sorted(ids) and ids[0] == bm25[0].chunk_id


@pytest.mark.parametrize(
    "question, options, retrieval",
    [
        ("經濟補償怎麼算", {}, {}),  # Traditional characters: a second form
        ("第47条规定了什么", {}, {}),  # an article number in digits: a second form
        ("保险诈骗", {"collection": "nothing"}, {}),  # filters that allow no row
        ("保险诈骗", {"mode": "bm25"}, {}),
        ("保险诈骗", {"mode": "dense"}, {}),
        ("保险诈骗", {}, {"fusion": "rrf"}),
    ],
)
def test_the_searches_the_core_does_not_serve_take_the_numpy_path(
    index: Settings, question: str, options: dict[str, Any], retrieval: dict[str, Any]
) -> None:
    on = merge(index, retrieval=retrieval)
    core, served = _run(on, [question], **options)
    numpy_path, _ = _run(_off(index, **retrieval), core=False, questions=[question], **options)
    assert served == 0 and core == numpy_path


@pytest.mark.parametrize(
    "options",
    [
        {"collection": "law"},
        {"source": "*-copy.md"},
        {"doc_type": "markdown"},
        {"collection": "rules", "source": "A0*"},
    ],
)
def test_filtered_searches_are_served_by_the_core(index: Settings, options: dict[str, Any]) -> None:
    questions = _questions()[:12]
    for depth in (100, 4):
        core, served = _run(index, questions, per_source_k=depth, top_k=5, **options)
        numpy_path, _ = _run(_off(index), core=False, questions=questions, per_source_k=depth, top_k=5, **options)
        assert served == len(questions) and core == numpy_path
    assert any(a[0] for a in core)  # (hits found)


def test_a_tags_filter_is_served_by_the_core(index: Settings) -> None:
    """Tags filter the hits of an unfiltered search (``rewrite.search``): the core serves that search."""
    core, served = _run(index, ["保险诈骗"], tags=["none"])
    numpy_path, _ = _run(_off(index), core=False, questions=["保险诈骗"], tags=["none"])
    assert served == 1 and core == numpy_path


def test_the_switch_takes_the_numpy_path(index: Settings) -> None:
    question = ["保险诈骗 数额较大"]
    _, off = _run(_off(index), core=False, questions=question)
    _, on = _run(index, question)
    assert (off, on) == (0, 1)


def test_int8_screened_searches_are_served_by_the_core_as_the_numpy_path_screens(index: Settings) -> None:
    """With the AVX2/FMA kernels, an int8-screened search (``store.dense_search`` int8 here; auto from 1,024 chunks)
    is served by the core: the same hits, rankings and traces as the numpy path's screened search. At depth 4 the
    screening keeps 100 of the 163 rows, so BM25 candidates outside them get their cosine from the core's fill
    (computed then: the screened product holds only the kept rows)."""
    if simd_kernels() is None:
        pytest.skip("this CPU has no AVX2 and FMA: the core's dense kernels do not run")
    int8 = merge(index, store={"dense_search": "int8"})
    questions = _questions()
    for depth in (100, 4):
        core, served = _run(int8, questions, per_source_k=depth, top_k=5)
        numpy_path, none = _run(_off(int8), core=False, questions=questions, per_source_k=depth, top_k=5)
        assert (served, none) == (len(questions), 0)
        for q, a, b in zip(questions, core, numpy_path, strict=True):
            assert a == b, q
    filled = [h for a in core for h in a[0] if h.dense_rank is None and h.dense_score is not None]
    assert filled  # (depth 4: candidates outside the dense top, their cosine filled)


def test_the_cores_fusion_is_zscore_fusions_float_for_float() -> None:
    """Random channels (scores over six orders of magnitude, ties, a fill): each channel's top k is the best k by
    score then id, and the fused scores and order are ``zscore_fusion``'s exactly (Python's ``sum`` is a
    compensated sum from 3.12 on: the core sums alike)."""
    if not _core.available():
        pytest.skip("the compiled search core is not built (pip install -e . with a C compiler and Python headers)")
    from zhiku.retrieval.fusion import zscore_fusion
    from zhiku.stores import _zcore  # type: ignore[attr-defined]
    from zhiku.types import Ranking

    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(3, 300))
        dense = rng.uniform(-0.2, 0.9, n).astype(np.float32)
        dense[rng.integers(0, n, 3)] = dense[0]  # ties
        names = [None] + [f"c{i:05d}" for i in range(1, n + 1)]
        rows = np.sort(rng.choice(np.arange(1, n + 1), int(rng.integers(1, n + 1)), replace=False)).astype(np.int64)
        weights = rng.uniform(0.01, 30, rows.size) * 10.0 ** rng.integers(-3, 4, rows.size)
        k = int(rng.integers(1, n + 1))
        args = (np.ones(n, np.uint8), np.arange(1, n + 1), np.arange(-1, n), np.arange(n + 1, dtype=np.int32), names)
        got = _zcore.hybrid(dense, *args, [(rows, weights)], k, k, 2 * n, 1.0, 0.7, True, True)
        bm25, dense_top = Ranking(got[0], got[1]), Ranking(got[3], got[4])
        best = sorted(range(n), key=lambda i: (-float(dense[i]), names[i + 1]))[:k]  # by score, ties by id
        assert list(dense_top.ids) == [names[i + 1] for i in best]
        sums: dict[int, float] = {}
        for r, w in zip(rows.tolist(), weights.tolist(), strict=True):
            sums[r] = sums.get(r, 0.0) + w
        assert list(bm25.ids) == [names[r] for r in sorted(sums, key=lambda r: (-sums[r], names[r]))[:k]]
        filled = {c: float(dense[int(c[1:]) - 1]) for c in bm25.ids if c not in dense_top.ids}
        want = zscore_fusion([bm25, dense_top], weights=[1.0, 0.7], fill=[None, filled])
        assert [(f[0], f[1]) for f in got[6]] == want
        assert got[7] == len(filled)


def test_a_fused_hit_is_the_hit_the_dataclass_makes() -> None:
    from dataclasses import fields

    from zhiku.types import Chunk, Hit, fused_hit

    chunk = Chunk("c1", "d1", "hr", "a.md", "md", "第一条", None, 0, 3, 0, "第一条")
    made = fused_hit(chunk, ("c1", 1.5, 2, 3.25, None, 0.5), 4)
    assert made == Hit(chunk, 1.5, 2, 3.25, None, 0.5, fused_rank=4)
    assert list(vars(made)) == [f.name for f in fields(Hit)]  # every field (a new one would be missed here)


def test_the_tops_are_exact_when_the_sampled_floor_is_too_high() -> None:
    """The core floors each channel's pass by a sample of every step-th row; here the sampled rows hold the best
    scores, so too few rows reach the floor and the pass is made again without it: the top 10 stay exact."""
    if not _core.available():
        pytest.skip("the compiled search core is not built (pip install -e . with a C compiler and Python headers)")
    from zhiku.stores import _zcore  # type: ignore[attr-defined]

    n, k = 1000, 10
    dense = np.random.default_rng(3).uniform(0.0, 0.5, n).astype(np.float32)
    dense[::25] = np.linspace(0.9, 0.6, dense[::25].size, dtype=np.float32)  # the sampled rows (step n / 4k)
    names = [None] + [f"c{i:05d}" for i in range(1, n + 1)]
    args = (np.ones(n, np.uint8), np.arange(1, n + 1), np.arange(-1, n), np.arange(n + 1, dtype=np.int32), names)
    weights = dense.astype(np.float64) + 1.0  # BM25 alike: the sampled rows (every 25th touched) sum highest
    got = _zcore.hybrid(dense, *args, [(np.arange(1, n + 1), weights)], k, k, k, 1.0, 1.0, True, True)
    best = [names[i + 1] for i in np.argsort(-dense, kind="stable")[:k]]
    assert list(got[3]) == best and list(got[0]) == best


def test_doctor_says_whether_the_compiled_core_is_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    from zhiku.scaffold.doctor import Check, check_core

    settings = Settings()
    monkeypatch.setattr(_core, "available", lambda: True)
    monkeypatch.setattr("zhiku.stores._vectors.simd_kernels", lambda: object())
    monkeypatch.setattr("zhiku.stores._sqlite_search.cpu_vendor", lambda: "GenuineIntel")
    on = "compiled search core: on (AVX2/FMA dense kernels, int8 screening from 1,024 chunks)"
    assert check_core(settings) == [Check("search", "ok", on)]
    monkeypatch.setattr("zhiku.stores._sqlite_search.cpu_vendor", lambda: "AuthenticAMD")  # (this CPU's crossover)
    amd = "compiled search core: on (AVX2/FMA dense kernels, int8 screening from 8,192 chunks)"
    assert check_core(settings) == [Check("search", "ok", amd)]
    int8 = "compiled search core: on (AVX2/FMA dense kernels, int8 screening at every size)"
    assert check_core(merge(settings, store={"dense_search": "int8"})) == [Check("search", "ok", int8)]
    exact = "compiled search core: on (AVX2/FMA dense kernels, no int8 screening: store.dense_search exact)"
    assert check_core(merge(settings, store={"dense_search": "exact"})) == [Check("search", "ok", exact)]
    assert check_core(merge(settings, store={"kind": "milvus"}))[0].detail == (
        "compiled search core: not used by the milvus store"
    )
    assert check_core(merge(settings, retrieval={"fusion": "rrf"}))[0].detail == (
        "compiled search core: not used with retrieval.fusion rrf"
    )
    assert check_core(merge(settings, store={"dense_search": "hnsw"}))[0].detail == (
        "compiled search core: not used with store.dense_search hnsw (the others use it)"
    )
    monkeypatch.setattr("zhiku.stores._vectors.simd_kernels", lambda: None)  # a CPU without AVX2 or FMA
    assert check_core(settings) == [
        Check("search", "ok", "compiled search core: on (no AVX2/FMA: numpy's dense products)")
    ]
    assert check_core(merge(settings, store={"dense_search": "int8"})) == [
        Check("search", "off", "compiled search core: not used with store.dense_search int8 (no AVX2/FMA)")
    ]
    monkeypatch.setattr(_core, "available", lambda: False)
    (missing,) = check_core(settings)
    assert (missing.status, missing.detail) == (
        "off",
        "compiled search core: not built (numpy path: the same results, slower)",
    )
    assert "C compiler" in (missing.fix or "")


def test_each_store_keeps_its_own_core_index_and_a_closed_store_holds_no_snapshot(
    index: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two stores searched in turn each build their ``CoreIndex`` once (one kept for the whole process made every
    search rebuild it: an argsort and a decode of every chunk id), and a closed store's snapshots are freed."""
    import gc
    import weakref

    from zhiku.stores.sqlite import SQLiteStore

    built: list[int] = []

    class Counted(_core.CoreIndex):
        def __init__(self, *args: Any) -> None:
            built.append(1)
            super().__init__(*args)

    monkeypatch.setattr(_core, "CoreIndex", Counted)
    vector, fusion = CharVectors().embed_query("盗窃罪"), _core.Fusion(1.0, 1.0, True)
    a, b = SQLiteStore(Path(index.index), read_only=True), SQLiteStore(Path(index.index), read_only=True)
    with b:
        for store in (a, b, a, b, a):
            got = store.hybrid_core(["盗窃", "罪"], vector, 10, 10, fusion)
            assert got is not None and got.fused is not None and len(got.fused) == 10
        assert len(built) == 2
        snap = weakref.ref(a._core_kept[0].vectors)
        a.close()
        del a, store
        gc.collect()
        assert snap() is None


def test_a_threads_scratch_is_freed_when_the_thread_ends() -> None:
    """The core's scratch (~12 bytes per rowid) is kept per thread; MCP tool calls run in worker threads that exit
    when idle, so each ended thread's scratch is freed (it leaked: ~46 MiB per thread at 4M rowids)."""
    if not _core.available():
        pytest.skip("the compiled search core is not built (pip install -e . with a C compiler and Python headers)")
    import threading
    import time

    from zhiku.stores import _zcore  # type: ignore[attr-defined]

    n = 50
    names = [None] + [f"c{i:03d}" for i in range(1, n + 1)]
    args = (np.ones(n, np.uint8), np.arange(1, n + 1), np.arange(-1, n), np.arange(n + 1, dtype=np.int32), names)
    terms = [(np.arange(1, n + 1), np.linspace(1.0, 2.0, n))]

    def search() -> tuple[str, ...]:
        got = _zcore.hybrid(np.linspace(0.0, 1.0, n, dtype=np.float32), *args, terms, 3, 3, 3, 1.0, 1.0, True, True)
        return tuple(f[0] for f in got[6])

    assert search() == ("c050", "c049", "c048")  # this thread's scratch made
    before = _zcore.scratches()
    inside: list[int] = []
    threads = [threading.Thread(target=lambda: (search(), inside.append(_zcore.scratches()))) for _ in range(6)]
    for t in threads:
        t.start()
        t.join()
    assert len(inside) == 6 and min(inside) >= before + 1
    for _ in range(500):  # a thread's destructors run just after join() returns
        if _zcore.scratches() == before:
            break
        time.sleep(0.01)
    assert _zcore.scratches() == before


class Refused(CharVectors):
    """Its question vectors have another dimension, or NaNs: the store refuses them."""

    def __init__(self) -> None:
        self.how, self.calls = "", 0

    def embed_query(self, text: str) -> np.ndarray:
        self.calls += 1
        if self.how == "dim":
            return np.ones(DIM + 1, np.float32)
        return np.full(DIM, np.nan, np.float32) if self.how == "nan" else self._vector(text)


@pytest.mark.parametrize("how, error", [("dim", "IndexMismatch"), ("nan", "InvalidInput")])
def test_a_vector_the_store_refuses_is_embedded_once_with_the_numpy_paths_error_and_trace(
    index: Settings, how: str, error: str
) -> None:
    """The core path's embedding is the search's: a refused vector is not embedded again for the numpy path (a
    second request to a remote embedder), and the error and trace are the numpy path's."""
    out = []
    for settings in (index, _off(index)):
        sink, embedder = MemorySink(), Refused()
        with KnowledgeBase(settings, embedder=embedder, tracer=Tracer([sink])) as kb:  # type: ignore[arg-type]
            kb.searcher.inline_embed_s = 1e9
            kb.retrieve("热身", mode="dense")
            embedder.how, before = how, embedder.calls
            with pytest.raises(Exception) as raised:
                kb.retrieve("盗窃罪", mode="hybrid")
            stages = [(s.name, s.status, s.calls, s.counts, s.data) for s in ordered_stages(sink.traces[-1])]
            out.append((type(raised.value).__name__, str(raised.value), embedder.calls - before, stages))
    assert out[0] == out[1]
    assert out[0][0] == error and out[0][2] == 1
    assert [s[0] for s in out[0][3]][:3] == ["parse", "bm25", "dense"] and out[0][3][2][1] == "error"


def test_a_depth_past_the_rows_is_served_like_the_numpy_path(index: Settings) -> None:
    """``per_source_k`` larger than the index (a library caller's): the core ranks every row, as the numpy path does
    (its buffers were sized by the depth: a MemoryError from 2^30, an OverflowError past 2^31)."""
    questions = ["盗窃罪", "保险诈骗 数额较大"]
    for depth in (2**30, 2**31 - 1, 2**40):
        core, served = _run(index, questions, per_source_k=depth, mode="hybrid")
        numpy_path, _ = _run(_off(index), core=False, questions=questions, per_source_k=depth, mode="hybrid")
        assert served == len(questions) and core == numpy_path
