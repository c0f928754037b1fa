"""``OPEN`` (one entry per trace open in the process, appended and popped) under concurrent traces: it says how many
are open while they run, whichever thread ends which, and none once all have ended."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from zhiku.observability.records import DATA, OPEN
from zhiku.observability.tracing import TRACE_FILE, JsonlSink, Tracer, span


def test_fifty_concurrent_traces_are_each_counted_open_until_they_end(tmp_path: Path) -> None:
    sink = JsonlSink(tmp_path / TRACE_FILE, interval_s=60)
    tracer = Tracer([sink], sample=0.0)
    n = 50
    all_open, half_ended, counted = threading.Barrier(n), threading.Barrier(n), threading.Barrier(n // 2)
    read = threading.Barrier(n)
    seen: dict[int, tuple[int, int]] = {}

    def client(k: int) -> None:
        with tracer.trace("query", query=f"q{k}") as t:
            assert t is not None
            with span("bm25") as sp:
                sp.ranking([], depth=3)  # candidate detail: sampled out (``sample`` 0)
            t.defer(lambda tr: tr.data.__setitem__("hits", k), DATA)
            all_open.wait(30)  # (timeouts: a bound for a failing run only)
            opened = len(OPEN)
            read.wait(30)  # every one has read it before any ends
            if k % 2 == 0:  # the even half still open once the odd half has ended
                half_ended.wait(30)
                seen[k] = (opened, len(OPEN))
                counted.wait(30)
        if k % 2:
            half_ended.wait(30)
            seen[k] = (opened, -1)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    sink.close()
    assert {k: v[0] for k, v in seen.items()} == dict.fromkeys(range(n), n)  # every one open at once: 50 entries
    assert {v[1] for k, v in seen.items() if k % 2 == 0} == {n // 2}  # the odd half ended: the even half is left
    assert OPEN == []
    lines = [json.loads(x) for x in (tmp_path / TRACE_FILE).read_bytes().splitlines()]
    assert sorted(int(x["attrs"]["query"][1:]) for x in lines) == list(range(n))
    assert {(x["detail"], x["data"]["hits"] == int(x["attrs"]["query"][1:])) for x in lines} == {("sampled-out", True)}


def test_a_trace_ended_on_another_thread_in_its_own_context_leaves_none_open(tmp_path: Path) -> None:
    """Opened on one thread and ended on another (the same context: an async call moved between worker threads)."""
    import contextvars

    sink = JsonlSink(tmp_path / TRACE_FILE, interval_s=60)
    tracer = Tracer([sink], sample=0.0)
    ctx = contextvars.copy_context()
    root = tracer.trace("query", query="moved")
    before = len(OPEN)
    opener = threading.Thread(target=ctx.run, args=(root.__enter__,))
    opener.start()
    opener.join(10)
    during = len(OPEN)
    closer = threading.Thread(target=ctx.run, args=(root.__exit__, None, None, None))
    closer.start()
    closer.join(10)
    sink.close()
    assert (before, during, len(OPEN)) == (0, 1, 0)
    [line] = (tmp_path / TRACE_FILE).read_bytes().splitlines()
    assert json.loads(line)["attrs"] == {"query": "moved"}
