"""``FairGate``: at most n threads inside, the rest admitted in arrival order (no wall-clock asserts: the test
waits until each thread is queued, as ``gate.waiting`` says, before starting the next)."""

from __future__ import annotations

import os
import threading

import pytest

from zhiku.retrieval.gate import FairGate
from zhiku.retrieval.search import Searcher
from zhiku.settings import RetrievalSettings


def _wait_until(cond) -> None:
    ev = threading.Event()
    while not cond():
        ev.wait(0.001)


def _free_places(gate: FairGate) -> tuple[int, threading.Thread]:
    """How many new threads find a place at once (each keeps it until the count is done), and the first one that
    queued instead: it goes through once a place is freed (join it then)."""
    release, holders, n = threading.Event(), [], 0
    while True:
        entered = threading.Event()

        def hold(entered: threading.Event = entered) -> None:
            with gate:
                entered.set()
                release.wait()

        t = threading.Thread(target=hold, daemon=True)
        t.start()
        _wait_until(lambda entered=entered: entered.is_set() or gate.waiting == 1)
        if not entered.is_set():
            break
        holders.append(t)
        n += 1
    release.set()
    for held in holders:
        held.join(timeout=30)
    return n, t


@pytest.mark.parametrize("places", [1, 2])
def test_waiters_enter_in_arrival_order_and_never_more_than_n(places: int) -> None:
    """With one place admissions are sequential, so the order is exact; with two, threads admitted together
    may record themselves in either order."""
    gate = FairGate(places)
    inside, most, order = [0], [0], []
    lock = threading.Lock()
    release = threading.Event()

    def worker(n: int) -> None:
        with gate:
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
                order.append(n)
            release.wait()
            with lock:
                inside[0] -= 1

    threads = []
    for n in range(7):
        t = threading.Thread(target=worker, args=(n,))
        t.start()
        threads.append(t)
        if n < places:
            _wait_until(lambda n=n: len(order) == n + 1)  # the first ones go straight in
        else:
            _wait_until(lambda n=n: gate.waiting == n + 1 - places)  # queued behind the earlier ones
    assert order == list(range(places)) and gate.waiting == 7 - places
    release.set()
    for t in threads:
        t.join(timeout=30)
    if places == 1:
        assert order == [0, 1, 2, 3, 4, 5, 6]  # handed over in the order they queued
    else:  # two woken threads race to record themselves: every one got in, never more than two at once
        assert sorted(order) == list(range(7))
    assert most[0] == places and gate.waiting == 0
    free, queued = _free_places(gate)
    queued.join(timeout=30)
    assert (free, gate.waiting, queued.is_alive()) == (places, 0, False)


def test_a_releasing_thread_cannot_take_its_place_back_before_a_waiter() -> None:
    gate = FairGate(1)
    gate.__enter__()
    got, leave = [], threading.Event()

    def waiter() -> None:
        with gate:
            got.append("waiter")
            leave.wait()

    t = threading.Thread(target=waiter)
    t.start()
    _wait_until(lambda: gate.waiting == 1)
    gate.__exit__()  # hands the place over ...
    free, queued = _free_places(gate)  # ... so a newcomer finds it taken
    assert (free, gate.waiting) == (0, 1)
    leave.set()
    t.join(timeout=30)
    queued.join(timeout=30)
    assert got == ["waiter"] and _free_places(gate)[0] == 1


def test_a_gate_needs_a_place_and_searchers_have_one_a_cpu(tmp_path) -> None:
    with pytest.raises(ValueError, match="at least one place"):
        FairGate(0)
    default = Searcher(None, None, None, RetrievalSettings())  # type: ignore[arg-type]
    assert default.gate.places == (os.cpu_count() or 1)
    default.close()


def test_a_search_that_waited_for_a_place_has_a_queue_stage_in_its_trace() -> None:
    from zhiku.observability.trace import MemorySink, ordered_stages
    from zhiku.observability.tracing import Tracer, span

    gate = FairGate(1)
    sink = MemorySink()
    tracer = Tracer([sink])
    gate.__enter__()  # the one place, taken

    def search() -> None:
        with tracer.trace("query", query="waits"):
            with span("parse"):
                pass
            with gate, span("bm25"):
                pass

    waiting = threading.Thread(target=search)
    waiting.start()
    _wait_until(lambda: gate.waiting == 1)
    gate.__exit__()  # hands the place over
    waiting.join()
    with tracer.trace("query", query="free"), gate:
        pass
    waited, free = sink.traces
    queue = waited.stage("queue")
    assert queue is not None and (queue.status, queue.data) == ("ok", {"places": 1, "queued": 1})
    assert [s.name for s in ordered_stages(waited)] == ["parse", "queue", "bm25"]
    assert waited.stage("bm25").start_ms >= queue.start_ms + queue.elapsed_ms - 0.001
    assert free.stage("queue") is None  # a search that found a free place: no stage


@pytest.mark.parametrize("handed_over", [False, True])
def test_a_waiter_that_is_interrupted_leaves_the_line_and_the_gate_keeps_its_places(handed_over: bool) -> None:
    """A search interrupted while it waits (Ctrl-C in a notebook or the CLI) must not take a place with it, nor
    keep one handed to it just as it was interrupted (``handed_over``: the other search leaves first)."""
    import signal
    import sys

    class Interrupted(Exception):
        pass

    gate = FairGate(1)
    gate.__enter__()  # the one place, taken by another search

    def interrupt(signum: int, frame: object) -> None:
        if handed_over:
            gate.__exit__()  # the other search ends and hands its place to the waiter ...
        raise Interrupted  # ... which is interrupted before it goes in

    main = threading.main_thread().ident
    assert threading.get_ident() == main  # a signal interrupts the main thread's wait

    def send() -> None:  # once the main thread is in the line and inside ``Event.wait`` (not on its way there)
        _wait_until(lambda: gate.waiting == 1 and sys._current_frames()[main].f_code.co_name == "wait")
        signal.pthread_kill(main, signal.SIGUSR1)

    previous = signal.signal(signal.SIGUSR1, interrupt)
    try:
        sender = threading.Thread(target=send)
        sender.start()
        with pytest.raises(Interrupted), gate:
            pass
        sender.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert gate.waiting == 0  # out of the line
    if not handed_over:
        free, queued = _free_places(gate)
        assert (free, gate.waiting) == (0, 1)  # the other search still holds the place
        gate.__exit__()  # the other search ends: the newcomer goes in, not the gone waiter
        queued.join(timeout=30)
    free, queued = _free_places(gate)
    queued.join(timeout=30)
    assert (free, gate.waiting) == (1, 0)  # its place is free again
