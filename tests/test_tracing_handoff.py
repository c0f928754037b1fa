"""Traces handed to the trace writer unsealed (``JsonlSink``): written exactly as a trace sealed by its caller,
sealed at once when the caller reads it or the query failed, and drained by ``close``."""

from __future__ import annotations

import json
import threading
import types
from pathlib import Path

import pytest

from test_tracing import HITS_ZETA, designed_kb, hit_ranks, trace_queries
from zhiku.observability import tracing
from zhiku.observability.tracing import TRACE_FILE, JsonlSink, Tracer, read_traces, span

SAMPLED_IN, SAMPLED_OUT = "0000000000000001", "ffffffffffffff00"  # read as a fraction of 2**64: ~0 and ~1


@pytest.mark.parametrize(
    ("trace_id", "kept", "detail"), [(SAMPLED_IN, "sampled", "lean"), (SAMPLED_OUT, None, "sampled-out")]
)
def test_a_handed_off_trace_is_written_as_the_same_line_as_one_sealed_inline(
    kb_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trace_id: str, kept: str | None, detail: str
) -> None:
    kb = designed_kb(kb_factory, tmp_path, answer={"min_score": 0.0})  # confident: the trace id decides the sample
    monkeypatch.setattr(tracing, "_trace_id", lambda: trace_id)
    clock = types.SimpleNamespace(perf_counter=lambda: 5.0, time=lambda: 1_700_000_000.0)  # every timing 0 ms
    monkeypatch.setattr(tracing, "time", clock)
    inline = JsonlSink(tmp_path / "inline.jsonl", background=False)  # sealed and encoded by the caller
    kb.tracer = Tracer([inline], sample=0.1, slow_ms=1e9)
    kb.query("zeta", top_k=3)
    deferred = JsonlSink(tmp_path / "deferred.jsonl", interval_s=60)  # the writer would sleep a minute
    kb.tracer = Tracer([deferred], sample=0.1, slow_ms=1e9)
    kb.query("zeta", top_k=3)
    [queued] = deferred._traces  # handed off unsealed: nothing of it built on the query's thread but its sample
    assert (queued._sealed, queued._decided, not deferred._lines) == (False, kept is not None, True)
    deferred.flush()
    [a] = (tmp_path / "inline.jsonl").read_bytes().splitlines()
    [b] = (tmp_path / "deferred.jsonl").read_bytes().splitlines()
    first, second = json.loads(a), json.loads(b)
    assert list(first) == list(second)
    for field in first:
        assert (field, first[field]) == (field, second[field])
    assert a == b
    assert (first["trace_id"], first["kept"], first["detail"]) == (trace_id, kept, detail)
    [t] = read_traces(tmp_path / "deferred.jsonl")
    assert hit_ranks(t) == HITS_ZETA
    assert ("ranking" in t.stage("bm25").data, "changes" in t.stage("fusion").data, bool(t.labels)) == (
        (kept is not None,) * 3
    )


def test_a_trace_its_caller_reads_or_that_failed_is_sealed_on_the_query_thread(kb_factory, tmp_path: Path) -> None:
    kb = designed_kb(kb_factory, tmp_path, answer={"min_score": 0.0})
    sink = JsonlSink(tmp_path / TRACE_FILE, interval_s=60)
    kb.tracer = Tracer([sink], sample=0.0, slow_ms=1e9)
    with kb.tracer.trace("query", capture=True) as read:  # `zhiku query --verbose`, the dashboard's query page
        kb.retrieve("zeta", top_k=3)
    assert read is not None and read._sealed and (read.kept, read.detail) == ("forced", "lean")
    assert [r["source"] for r in read.stage("bm25").data["ranking"]] == ["a1.md", "b2.md", "c3.md"]  # lean: top_k
    with pytest.raises(RuntimeError), kb.tracer.trace("query") as failed:
        kb.retrieve("zeta", top_k=3)
        raise RuntimeError("after the search")
    assert failed is not None and failed._sealed and (failed.kept, failed.status) == ("error", "error")
    assert (len(sink._traces), len(sink._lines)) == (0, 2)  # both encoded by the caller
    kb.retrieve("zeta", top_k=3)
    assert (len(sink._traces), len(sink._lines)) == (1, 2)  # a trace nobody reads: handed off
    kb.close()
    written = read_traces(tmp_path / TRACE_FILE)
    assert [(t.kept, t.detail, t.status) for t in reversed(written)] == [
        ("forced", "lean", "ok"),
        ("error", "lean", "error"),
        (None, "sampled-out", "ok"),
    ]
    assert "changes" in written[1].stage("fusion").data and written[1].error == "RuntimeError: after the search"


def test_close_writes_handed_off_traces_and_back_to_back_queries_encode_their_own(tmp_path: Path) -> None:
    path = tmp_path / TRACE_FILE
    sink = JsonlSink(path, interval_s=60, hand_off=2)
    tracer = Tracer([sink])
    trace_queries(tracer, [f"q{n}" for n in range(5)])
    assert (len(sink._traces), len(sink._lines)) == (2, 3)  # two wait unsealed; the next three encoded here
    assert not path.exists() or path.stat().st_size == 0
    tracer.close()
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    assert [(x["attrs"]["query"], x["stages"][0]["counts"]) for x in lines] == [
        (f"q{n}", {"terms": n}) for n in range(5)
    ]  # in the order they started
    assert (len(sink._traces), len(sink._lines), sink._thread) == (0, 0, None)


def test_a_trace_that_ends_while_another_query_runs_is_encoded_by_its_caller(tmp_path: Path) -> None:
    path = tmp_path / TRACE_FILE
    sink = JsonlSink(path, interval_s=60)
    tracer = Tracer([sink])
    with tracer.trace("query", query="outer"):  # another client's query, still running
        done = threading.Event()

        def inner() -> None:
            with tracer.trace("query", query="inner"), span("parse"):
                pass
            done.set()

        threading.Thread(target=inner).start()
        assert done.wait(10)
        assert (len(sink._traces), len(sink._lines)) == (0, 1)  # no pause coming: encoded on its own thread
    assert (len(sink._traces), len(sink._lines)) == (1, 1)  # the last one open: handed to the writer
    tracer.close()
    assert [t.attrs["query"] for t in read_traces(path)] == ["inner", "outer"]  # newest start first


def test_ranking_columns_of_a_ranking_equal_those_of_its_items() -> None:
    from zhiku.observability.tracing import ranking_columns
    from zhiku.types import Ranking

    ranking = Ranking([f"c{n}" for n in range(30)], [1.0 / (n + 3) for n in range(30)], list(range(30)))
    for limit in (0, 10, 50):
        columns = ranking_columns(ranking, limit)
        assert columns == ranking_columns(list(ranking), limit)
        assert columns.cols["rank"] == list(range(1, min(limit, 30) + 1))
    assert ranking_columns(ranking, 2).cols == {"chunk_id": ["c0", "c1"], "rank": [1, 2], "score": [0.333333, 0.25]}


def test_a_batch_of_lines_is_written_while_queries_keep_running_without_a_pause(tmp_path: Path) -> None:
    """Under concurrent clients some query is always open: the writer must not wait for a pause (or for
    ``interval_s``) while a batch of encoded lines piles up."""
    path = tmp_path / TRACE_FILE
    appended = threading.Event()

    class Sink(JsonlSink):
        BATCH = 4

        def _append(self, lines: list[bytes]) -> None:
            super()._append(lines)
            appended.set()

    sink = Sink(path, interval_s=3600)  # no write for the time that passed
    tracer = Tracer([sink])
    with tracer.trace("query", query="outer"):  # another client's query, running all along
        clients = threading.Thread(target=trace_queries, args=(tracer, [f"q{n}" for n in range(Sink.BATCH)]))
        clients.start()
        clients.join()
        assert appended.wait(10)  # a bound for a failing run only: the batch is written at once
        assert [json.loads(x)["attrs"]["query"] for x in path.read_bytes().splitlines()] == ["q0", "q1", "q2", "q3"]
    tracer.close()
    assert [t.attrs["query"] for t in read_traces(path)] == ["q3", "q2", "q1", "q0", "outer"]


def test_a_trace_ended_in_another_context_is_not_left_open(tmp_path: Path) -> None:
    """``OPEN`` lists the traces open in the process: one left there for good would make every later trace wait
    for a pause that never comes (and be encoded by its caller)."""
    from zhiku.observability.records import OPEN

    tracer = Tracer([JsonlSink(tmp_path / TRACE_FILE, interval_s=60)])
    root = tracer.trace("query", query="elsewhere")
    entered = threading.Event()
    threading.Thread(target=lambda: (root.__enter__(), entered.set())).start()
    assert entered.wait(10)
    assert len(OPEN) == 1
    with pytest.raises(ValueError, match="different Context"):  # its context variable was set in the other thread
        root.__exit__(None, None, None)
    assert not OPEN
    tracer.close()
