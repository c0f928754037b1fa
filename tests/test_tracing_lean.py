"""A trace without its candidate detail is written straight from its events (``Trace.lean_record``): the same
bytes as the full path (``seal``, ``Stage`` objects, ``ordered_stages``), on traces of every shape the tracer
records, and through the real query and ingestion paths."""

from __future__ import annotations

import copy
import dataclasses
import math
import random
import struct
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from helpers_kb import SEC_PROBATION
from test_tracing import designed_kb
from zhiku.observability.columns import Columns, Rows
from zhiku.observability.records import ALWAYS, DATA, DETAIL, PIECE, STAGES, Trace
from zhiku.observability.rounding import rounded_one
from zhiku.observability.sampling import sampled_in
from zhiku.observability.trace import JsonlSink, encode_line, read_traces
from zhiku.observability.tracing import Tracer, mark, span, waited

NAMES = [*STAGES, "rewrite", "extra", "zz"]  # pipeline stages, and stages the pipeline order does not name


def twin(trace: Trace) -> Trace:
    """A copy of an unsealed trace (``PIECE`` is told by identity: kept)."""
    return copy.deepcopy(trace, {id(PIECE): PIECE})


def full_line(trace: Trace) -> bytes:
    """What ``encode_line`` wrote before the lean path: seal first (a sealed trace never takes it)."""
    return encode_line(trace.seal())


def random_data(rng: random.Random) -> dict[str, Any]:
    values: list[Any] = [
        rng.random() * 10 ** rng.randint(-8, 12),
        rng.randint(-5, 10**12),
        "第三条 " * rng.randint(0, 3),
        None,
        True,
        [rng.random() for _ in range(rng.randint(0, 4))],
        {"nested": [1, 2.5, "x"]},
        Columns({"chunk_id": ["a", "b"], "rank": [1, 2], "score": [0.5, 0.25]}),
        Rows(fields=("rank", "chunk_id"), rows=[(1, "a"), (2, "b")]),
        np.float32(rng.random()),
        np.int64(rng.randint(0, 99)),
    ]
    return {f"k{i}": rng.choice(values) for i in range(rng.randint(0, 3))}


def random_sets(rng: random.Random) -> list[tuple[Any, Any, Any]] | None:
    roll = rng.random()
    if roll < 0.15:
        return None  # a span that set nothing
    if roll < 0.17:
        return PIECE  # the first part of a span whose clock stopped (``_Span.outside``)
    n = 1 if roll < 0.95 else rng.randint(2, 3)  # set more than once: merged
    out = []
    for _ in range(n):
        counts = rng.choice([None, {}, {"candidates": rng.randint(0, 200)}, {"terms": 3, "chunks": 7}])
        status = rng.choice([None, None, "ok", "off", "fallback", "timeout"])
        out.append((counts, status, random_data(rng)))
    return out


def random_events(rng: random.Random, t0: float) -> list[tuple[str, float, float, Any]]:
    events = []
    names = rng.sample(NAMES, rng.randint(0, 7))
    if rng.random() < 0.15 and names:  # a name met twice: merged into one stage
        names.append(rng.choice(names))
    start = t0
    for name in names:
        start = start if rng.random() < 0.1 else start + rng.random() / 1000  # equal starts happen (marks)
        elapsed = rng.choice([0.0, rng.random() / 100, 1e-9])
        events.append((name, start, elapsed, random_sets(rng)))
    rng.shuffle(events)  # appended as spans end, not as they start
    return events


def hits_later(trace: Trace) -> None:  # what ``label_later`` does to a sampled-out trace
    trace.data["hits"] = Rows(fields=("rank", "chunk_id", "score"), rows=[(1, "c1", 0.75), (2, "c2", 1 / 3)])


def stages_later(trace: Trace) -> None:  # deferred work that reads the stages: no lean path
    trace.data["stage_count"] = len(trace.stages)


def drop_later(trace: Trace) -> None:  # candidate detail: dropped from a sampled-out trace
    trace.data["detail"] = [1, 2, 3]


def build(seed: int) -> Trace:
    """A trace of random shape (the same one for the same seed): events, deferred work, sample, kind."""
    rng = random.Random(seed)
    t = Trace(
        rng.choice(["query", "query", "query", "ingest"]),
        f"{rng.getrandbits(64):016x}",
        1_796_000_000 + rng.random() * 1e6,
        {"query": "夫妻债务", "top_k": rng.choice([3, 10, None]), "index": "/tmp/x"},
        detail="lean",
        sample=rng.choice([0.0, 0.0, 0.0, 0.1, 1.0]),
        slow_ms=rng.choice([math.inf, math.inf, 0.0]),
    )
    t._t0 = 1000.0 + rng.random()
    t.elapsed_ms = rng.random() * 50
    t._events = random_events(rng, t._t0)
    for fn, when in [(hits_later, DATA), (drop_later, DETAIL), (stages_later, ALWAYS)]:
        if rng.random() < {DATA: 0.9, DETAIL: 0.9, ALWAYS: 0.05}[when]:
            t._later.append((fn, when))
    if rng.random() < 0.05:
        t.data["bad"] = {1: "an int key: orjson refuses it, json writes it"}
    if rng.random() < 0.05:
        t.stage_failed = True
    t._closed = True  # ended (``_Root``)
    return t


def test_lean_lines_equal_full_lines_on_random_traces() -> None:
    took = fell_back = 0
    for seed in range(3000):
        lean, full = build(seed), build(seed)
        assert lean.trace_id == full.trace_id and lean._events == full._events
        if seed % 2:  # JsonlSink decides on the query's thread, before it queues the trace
            lean.decide()
        line = encode_line(lean)
        assert line == full_line(full), seed
        if lean._sealed:
            fell_back += 1
            continue
        took += 1  # written without being sealed; sealing it later gives the full path's stages
        assert lean.stages == [] and lean._later == []
        assert [s.to_json() for s in lean.seal().stages] == [s.to_json() for s in full.stages]
        assert lean.data == full.data and encode_line(lean) == line
    assert took > 800 and fell_back > 800  # both paths met often (kept detail, merges, pieces, ALWAYS work)


def test_the_lean_path_is_taken_only_without_detail_and_merges() -> None:
    def trace(events: list[Any], later: list[Any], sample: float = 0.0) -> Trace:
        t = Trace("query", "00000000000000ff", 1.5, {}, sample=sample)
        t._t0, t._events, t._later = 10.0, events, later
        return t

    one = [("bm25", 10.5, 0.25, [({"candidates": 4}, None, {"depth": 100})]), ("parse", 10.1, 0.1, None)]
    lean = trace(list(one), [(hits_later, DATA), (drop_later, DETAIL)]).lean_record()
    assert lean is not None
    assert [(s["name"], s["start_ms"], s["elapsed_ms"], s["counts"]) for s in lean["stages"]] == [
        ("parse", (10.1 - 10.0) * 1000, 0.1 * 1000, {}),
        ("bm25", 500.0, 250.0, {"candidates": 4}),
    ]
    assert "detail" not in lean["data"] and lean["data"]["hits"]["rows"][0] == (1, "c1", 0.75)
    assert trace(list(one), [(drop_later, DETAIL)], sample=1.0).lean_record() is None  # keeps its detail
    assert trace(list(one), [(stages_later, ALWAYS)]).lean_record() is None  # reads the stages
    assert trace([*one, ("bm25", 11.0, 0.1, None)], []).lean_record() is None  # two calls of one stage
    assert trace([("dense", 10.2, 0.1, PIECE), ("dense", 10.4, 0.1, None)], []).lean_record() is None
    assert trace([("fusion", 10.2, 0.1, [(None, None, {}), (None, "off", {})])], []).lean_record() is None
    mapping = trace([("parse", 10.2, 0.1, [(Columns({"a": [1]}), None, {})])], [])  # counts not a dict
    assert mapping.lean_record() is None


def recorded(sample: float, seed: int) -> Trace:
    """A trace recorded by the real tracer: spans, marks, waits, merged calls, a clock stopped for a wait."""
    rng = random.Random(seed)
    got: list[Trace] = []

    class Keep:
        def write(self, trace: Trace) -> None:
            got.append(trace)

    tracer = Tracer([Keep()], sample=sample)
    with tracer.trace("query", query="q", top_k=3) as t:
        assert t is not None
        start = t._t0
        with span("parse") as sp:
            sp.set(counts={"terms": 2}, terms=["a", "b"])
        waited("queue", start, slots=1)
        for _ in range(rng.randint(1, 2)):  # twice: one stage of two calls
            with span("bm25") as sp:
                sp.ranking([], depth=100)
        if rng.random() < 0.5:
            with span("dense") as sp, sp.outside(span("gate")):  # the clock stopped for a wait: two pieces
                pass
        mark("rerank", reason="no reranker configured")
        t.defer(hits_later, DATA)
    return got[0]


@pytest.mark.parametrize("sample", [0.0, 1.0])
def test_traces_from_the_tracer_write_the_same_lines(sample: float) -> None:
    for seed in range(40):
        lean = recorded(sample, seed)
        full = twin(lean)
        assert encode_line(lean) == full_line(full)


def test_queries_and_ingestion_write_the_same_lines_as_the_full_path(kb_factory, tmp_path: Path) -> None:
    kb = designed_kb(kb_factory, tmp_path, tracing={"sample": 0.0})
    pairs: list[tuple[bytes, bytes]] = []

    class Both:
        def write(self, trace: Trace) -> None:
            full = twin(trace)
            pairs.append((encode_line(trace), full_line(full)))

    kb.tracer = Tracer([Both()], sample=0.0)
    for mode in ("bm25", "dense", "hybrid"):
        kb.retrieve("zeta", mode=mode, top_k=3)
        kb.query("zeta", mode=mode, top_k=3)
    kb.retrieve(SEC_PROBATION, top_k=2)
    with pytest.raises(RuntimeError), kb.tracer.trace("query"):
        kb.retrieve("zeta", top_k=3)
        raise RuntimeError("after the search")
    docs = tmp_path / "more"
    docs.mkdir()
    (docs / "g7.md").write_text("# 第七条\n\ngamma delta zeta\n", encoding="utf-8")
    kb.ingest([docs])
    assert len(pairs) == 9 and all(lean == full for lean, full in pairs)


@pytest.mark.parametrize("hand_off", [0, 8])  # encoded by the query's thread; by the writer thread
def test_the_sink_writes_the_same_file_as_the_full_path(kb_factory, tmp_path: Path, hand_off: int) -> None:
    kb = designed_kb(kb_factory, tmp_path, tracing={"sample": 0.0})
    lean_sink = JsonlSink(tmp_path / "lean.jsonl", hand_off=hand_off)
    full_sink = JsonlSink(tmp_path / "full.jsonl", hand_off=hand_off)

    class Twin:
        def write(self, trace: Trace) -> None:
            full_sink.write(twin(trace).seal())  # sealed: the full path
            lean_sink.write(trace)

    kb.tracer = Tracer([Twin()], sample=0.0)
    for mode in ["bm25", "dense", "hybrid"] * 4:
        kb.retrieve("zeta", mode=mode, top_k=3)
    lean_sink.close()
    full_sink.close()
    lean = (tmp_path / "lean.jsonl").read_bytes()
    assert lean == (tmp_path / "full.jsonl").read_bytes() and lean.count(b"\n") == 12
    assert [t.detail for t in read_traces(tmp_path / "lean.jsonl")] == ["sampled-out"] * 12


def same(a: float, b: float) -> bool:
    return (a == b and math.copysign(1.0, a) == math.copysign(1.0, b)) or (math.isnan(a) and math.isnan(b))


def test_rounded_one_gives_the_float_round_gives() -> None:
    rng = random.Random(17)
    values = [rng.uniform(-1.0, 1.0) * 10.0 ** rng.randint(-12, 14) for _ in range(10_000)]
    values += [1_796_000_000 + rng.random() * 1e7 for _ in range(5_000)]  # start times
    values += [struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0] for _ in range(3_000)]
    for digits in (3, 6):
        for top in (2**31, 2**51, 2**53):
            for _ in range(500):
                half = float(Fraction(2 * rng.randint(0, top) + 1, 2 * 10**digits))
                values += [half, math.nextafter(half, 0.0), math.nextafter(half, math.inf), -half]
    values += [0.0, -0.0, -1e-9, 5e-7, 2.675, 2.0**52, 2.0**52 / 1e6, math.inf, -math.inf, math.nan]
    for digits in (3, 6):
        assert [v for v in values if not same(rounded_one(v, digits), round(v, digits))] == []


def test_a_joined_trace_keeps_the_outer_attributes_first() -> None:
    got: list[Trace] = []

    class Keep:
        def write(self, trace: Trace) -> None:
            got.append(trace)

    tracer = Tracer([Keep()])
    with tracer.trace("query"), tracer.trace("query", query="q", top_k=3):  # the outer one has none
        pass
    with tracer.trace("query", surface="mcp", top_k=9), tracer.trace("query", query="q", top_k=3):
        pass
    assert [list(t.attrs.items()) for t in got] == [
        [("query", "q"), ("top_k", 3)],
        [("surface", "mcp"), ("top_k", 9), ("query", "q")],
    ]


def test_an_opened_trace_equals_one_made_by_init_field_by_field() -> None:
    for kept in (None, "forced"):
        t = Trace.opened("query", "00f0000000000001", 17.5, {"q": 1}, "lean", kept, 0.1, 250.0)
        made = Trace("query", "00f0000000000001", 17.5, {"q": 1}, detail="lean", kept=kept, sample=0.1, slow_ms=250.0)
        assert [getattr(t, f.name) for f in dataclasses.fields(Trace)] == [
            getattr(made, f.name) for f in dataclasses.fields(Trace)
        ]
    other = Trace.opened("query", "1", 1.0, {}, "lean", None, 1.0, 1.0)
    assert all(getattr(t, f) is not getattr(other, f) for f in ("stages", "data", "labels", "_events", "_later"))


def test_trace_ids_are_the_16_hex_digits_of_the_same_random_draw() -> None:
    from zhiku.observability.tracing import _trace_id

    for seed in range(2000):
        random.seed(seed)
        got = _trace_id()
        random.seed(seed)
        assert got == f"{random.getrandbits(64):016x}"  # zero-padded: ids below 16**15 too


def test_an_id_is_sampled_as_the_fraction_of_2_to_the_64_it_reads_as() -> None:
    rng = random.Random(23)
    draws = [rng.getrandbits(64) for _ in range(20_000)] + [0, 1, 2**64 - 1, 2**53 + 1, 2**63 + 2**10 + 1]
    draws += [(rng.getrandbits(53) << 11) | 0x400 for _ in range(2_000)]  # halfway between two floats: rounded
    for draw in draws:
        exact = draw / 2**64  # the division the sample was read with before
        for fraction in (0.1, 0.5, exact, math.nextafter(exact, 0), math.nextafter(exact, 1), rng.random()):
            expected = fraction >= 1.0 or (fraction > 0.0 and exact < fraction)
            assert sampled_in(f"{draw:016x}", fraction) == expected, (draw, fraction)
