"""Tracing races (issue 13): a write racing ``JsonlSink.close``, what a thread that outlived its query records (a
reranker past ``rerank.timeout``), an idle trace writer, and the dense worker's wait for the search gate. No
wall-clock asserts: threads are ordered by events, and the idle writer's wake-ups are counted."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from test_tracing import DesignedEmbedder, designed_kb
from test_tracing_review import designed_docs
from zhiku.observability import records
from zhiku.observability.records import PIECE, Event
from zhiku.observability.tracing import (
    TRACE_FILE,
    JsonlSink,
    Trace,
    Tracer,
    mark,
    ordered_stages,
    read_traces,
    span,
)
from zhiku.retrieval import search as search_module
from zhiku.retrieval.query import QueryVectors
from zhiku.types import Hit

QUERY_STAGES = ["parse", "bm25", "dense", "fusion", "rerank"]


def wait_until(cond: Callable[[], bool]) -> None:
    pause = threading.Event()
    for _ in range(10_000):  # a bound for a failing run only (~10 s)
        if cond():
            return
        pause.wait(0.001)
    raise AssertionError("the condition never held")


def ids_in(path: Path) -> list[str]:
    return [json.loads(line)["trace_id"] for line in path.read_bytes().splitlines()]


# ------------------------------------------------------------------------------- 1. write racing close
def test_a_write_that_raced_close_is_in_the_file_when_it_returns(tmp_path: Path) -> None:
    """A write that began while the writer thread was alive and queued after ``close``'s last drain used to stay in
    the queue with no thread to write it (and, its sink no longer pending, exit never wrote it either)."""
    path = tmp_path / TRACE_FILE
    sink = JsonlSink(path, interval_s=60)
    deciding, resume = threading.Event(), threading.Event()

    class Racing(Trace):  # its write is held up between its start and the queue, until close has returned
        __slots__ = ()

        def decide(self) -> bool:
            deciding.set()
            resume.wait(10)
            return super().decide()

    sink.write(Trace("query", "first", 1.0))  # starts the writer thread
    writing = threading.Thread(target=sink.write, args=(Racing("query", "late", 2.0),))
    writing.start()
    assert deciding.wait(10)
    sink.close()
    resume.set()
    writing.join(10)
    assert not writing.is_alive()
    assert ids_in(path) == ["first", "late"]  # on disk once its write returned, once each, in start order
    assert (sink._thread, len(sink._traces), len(sink._lines)) == (None, 0, 0)
    sink.write(Trace("query", "after", 3.0))  # a closed sink writes on the caller's thread: no writer again
    assert ids_in(path) == ["first", "late", "after"] and sink._thread is None


def test_traces_written_by_threads_while_the_sink_closes_are_each_written_once_in_order(tmp_path: Path) -> None:
    path = tmp_path / TRACE_FILE
    sink = JsonlSink(path, interval_s=60, hand_off=1_000)
    go = threading.Barrier(5)

    def client(n: int) -> None:
        go.wait()
        for i in range(200):
            sink.write(Trace("query", f"{n}-{i:03d}", n * 1000.0 + i))

    clients = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for c in clients:
        c.start()
    go.wait()
    sink.close()
    for c in clients:
        c.join(30)
    ids = ids_in(path)
    assert sorted(ids) == sorted(f"{n}-{i:03d}" for n in range(4) for i in range(200))  # all, none twice
    for n in range(4):  # each client's traces in the order they started
        mine = [x for x in ids if x.startswith(f"{n}-")]
        assert mine == sorted(mine)


# ---------------------------------------------------------------------- 2. late spans of a reranker
class LateReranker:
    """Answers only after its query gave up on it (``rerank.timeout``), then records into the query's trace: a
    span merged into ``rerank`` (counts, data, deferred data) and a mark of its own."""

    name = "test:late"

    def __init__(self) -> None:
        self.release, self.done = threading.Event(), threading.Event()

    def load(self) -> None:
        return None

    def rerank(self, query: str, hits: Sequence[Hit], top_k: int) -> list[Hit]:
        self.release.wait(10)
        try:
            with span("rerank") as sp:
                sp.set(counts={"late": 1}, late=True)
                sp.later(lambda: ({"late_later": 1}, {"late_later": True}))
            mark("late", status="ok")
        finally:
            self.done.set()
        return list(hits[:top_k])


def late_kb(kb_factory, tmp_path: Path, path: Path):  # noqa: ANN201
    kb = designed_kb(kb_factory, tmp_path, rerank={"timeout_s": 0.05}, answer={"min_score": 0.0})
    kb._reranker = reranker = LateReranker()
    kb.tracer = Tracer([JsonlSink(path, interval_s=60)], sample=1.0)
    return kb, reranker


def assert_fallback_only(t: Trace) -> None:
    assert [s.name for s in ordered_stages(t)] == QUERY_STAGES
    rerank = t.stage("rerank")
    assert rerank is not None and (rerank.status, rerank.calls, rerank.counts) == (
        "fallback",
        1,
        {"candidates": 6, "returned": 3},
    )
    assert rerank.data == {"reason": "timeout after 0.05s", "reranker": "test:late", "top_m": 20, "timeout_s": 0.05}


def test_a_reranker_that_outlived_its_query_adds_nothing_to_its_handed_off_trace(kb_factory, tmp_path: Path) -> None:
    path = tmp_path / "late.jsonl"
    kb, reranker = late_kb(kb_factory, tmp_path, path)
    with records._SEALING:  # the trace writer cannot seal the trace before the reranker has recorded
        r = kb.retrieve("zeta", top_k=3)
        assert r.rerank == "fallback: timeout after 0.05s"
        [queued] = kb.tracer.sinks[0]._traces  # handed to the writer unsealed
        assert not queued._sealed
        reranker.release.set()
        assert reranker.done.wait(10)
    kb.tracer.close()
    [t] = read_traces(path)
    assert_fallback_only(t)


def test_a_reranker_that_outlived_its_query_changes_nothing_in_a_trace_its_caller_sealed(
    kb_factory, tmp_path: Path
) -> None:
    path = tmp_path / "late.jsonl"
    kb, reranker = late_kb(kb_factory, tmp_path, path)
    with kb.tracer.trace("query", capture=True) as t:  # `--verbose`: sealed on the query's thread, then read
        kb.retrieve("zeta", top_k=3)
    assert t is not None and t._sealed
    reranker.release.set()
    assert reranker.done.wait(10)
    assert_fallback_only(t)
    assert (t._events, t._later) == ([], [])  # refused, not kept aside
    kb.tracer.close()
    [written] = read_traces(path)
    assert_fallback_only(written)


# ------------------------------------------------------------------------------- 3. idle wake-ups
def test_an_idle_trace_writer_sleeps_until_a_trace_comes(tmp_path: Path) -> None:
    path = tmp_path / TRACE_FILE
    sink = JsonlSink(path, interval_s=0.05)  # after a trace, looks every 10 ms for 50 ms; before: every 50 ms
    tracer = Tracer([sink])
    with tracer.trace("query", query="一"), span("parse"):
        pass
    sink.flush()
    wait_until(lambda: sink._sleeping)
    before = sink.loops
    threading.Event().wait(0.5)  # no query for ten of its intervals
    assert sink.loops - before <= 2
    with tracer.trace("query", query="二"), span("parse"):  # a write wakes it
        pass
    sink.flush()
    assert [t.attrs["query"] for t in read_traces(path)] == ["二", "一"]
    tracer.close()


# --------------------------------------------------------------------- 4. the dense worker's gate wait
class HeldEmbedder(DesignedEmbedder):
    """Embeds a question only once ``go`` is set (the test orders the threads at the search gate with it)."""

    def __init__(self) -> None:
        self.go = threading.Event()

    def embed_query(self, text: str) -> np.ndarray:
        assert self.go.wait(10)
        return super().embed_query(text)


class RawEvents:
    """A sink that keeps each trace's spans as recorded (before they are merged into stages), then the trace."""

    def __init__(self) -> None:
        self.events: list[list[Event]] = []
        self.traces: list[Trace] = []

    def write(self, trace: Trace) -> None:
        self.events.append(sorted(trace._events, key=lambda e: e[1]))
        self.traces.append(trace.readable())


def test_the_dense_workers_wait_for_the_gate_is_a_queue_stage_not_dense_time(kb_factory, tmp_path: Path) -> None:
    embedder = HeldEmbedder()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(search_module, "MAX_CONCURRENT", 1)  # one search at a time
        kb = kb_factory(tmp_path / "idx", embedder=embedder, retrieval={"fusion": "rrf"})
        gate = kb.searcher._gate  # (the searcher is built now, with its one place)
    embedder.go.set()
    kb.ingest([designed_docs(tmp_path)])
    embedder.go.clear()
    sink = RawEvents()
    kb.tracer = Tracer([sink])
    kb.searcher.inline_embed_s = 0.0  # a slow embedder: the question is embedded in the dense worker
    found: list[object] = []
    with gate:  # another search holds the only place
        query = threading.Thread(target=lambda: found.append(kb.retrieve("zeta", mode="hybrid", top_k=3)))
        query.start()
        wait_until(lambda: len(gate._waiters) == 1)  # BM25 waits first ...
        embedder.go.set()
        wait_until(lambda: len(gate._waiters) == 2)  # ... then the worker, its question embedded
    query.join(10)
    assert len(found) == 1
    [t], [events] = sink.traces, sink.events
    assert [s.name for s in ordered_stages(t)] == ["parse", "queue", "bm25", "dense", "fusion", "rerank"]
    queue, dense = t.stage("queue"), t.stage("dense")
    assert queue is not None and (queue.calls, queue.data) == (2, {"places": 1, "queued": 2})
    assert dense is not None and (dense.calls, dense.counts) == (1, {"candidates": 6})
    [embedding, search] = [e for e in events if e[0] == "dense"]  # the stage's clock stopped while it waited
    [worker_wait] = [e for e in events if e[0] == "queue" and e[3] == [(None, None, {"places": 1, "queued": 2})]]
    assert embedding[3] is PIECE
    assert embedding[1] + embedding[2] <= worker_wait[1]  # the embedding ended before the wait began
    assert worker_wait[1] + worker_wait[2] <= search[1]  # the search began after it ended
    assert dense.start_ms == (embedding[1] - t._t0) * 1000
    assert dense.elapsed_ms == (embedding[2] * 1000) + (search[2] * 1000)  # the embedding and the search only
    kb.tracer, kb.searcher._vectors = Tracer(), QueryVectors()  # tracing off, the question not known: no span to stop
    off = kb.retrieve("zeta", mode="hybrid", top_k=3)
    assert off.hits == found[0].hits and len(sink.events) == 1
