"""Prepare the next items while the caller waits on something else: an ordered, bounded map over helper threads.

The ingest pipeline reads, parses, chunks and tokenises documents here while the calling thread embeds the ones
before. Results come back in the items' order, each as its value or the exception it raised, so one bad file never
stops the batch. At most ``ahead`` items are taken from ``items`` before the caller has used them, so memory stays
bounded however large the batch. Work runs in a copy of the caller's context, so its trace spans land in the
caller's ingestion trace.

``gate``: helper threads start an item only once the gate has been open for ``Gate.grace_s`` (the pipeline opens
it during each embedding call, when the caller's thread waits in the model or the HTTP client without the GIL;
a call answered from the embedding cache is over before the grace ends). When the caller needs an item no helper
has started, it prepares the item itself. Preparing is mostly Python, which holds the GIL, so a helper running it
while the caller also runs Python (writing to the store, reading cached vectors) makes both wait on the GIL
(bench/RESULTS.md, issue 13 — ingest pipeline).
"""

from __future__ import annotations

import contextvars
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")
_WAITING, _RUNNING, _DONE = range(3)


@dataclass(frozen=True)
class Outcome(Generic[T, R]):
    """An item with what preparing it returned, or the exception it raised (``value`` is then None)."""

    item: T
    value: R | None
    error: Exception | None = None


class Gate:
    """Open while the caller waits in a long call; helpers pass once it has been open for ``grace_s``."""

    def __init__(self, grace_s: float = 0.02) -> None:
        self.grace_s = grace_s
        self._open = threading.Event()
        self._since = 0.0

    def __enter__(self) -> Gate:
        self._since = time.monotonic()
        self._open.set()
        return self

    def __exit__(self, *exc: object) -> None:
        self._open.clear()

    def always(self) -> None:
        """Open for good, with no grace (a prefetch without a gate; or to release the helpers when it ends)."""
        self._since = -math.inf
        self._open.set()

    def wait(self) -> None:
        while True:
            self._open.wait()
            left = self._since + self.grace_s - time.monotonic()
            if left <= 0:
                return
            time.sleep(left)  # then look again: the call may be over


def _call(fn: Callable[[T], R], item: T) -> Outcome[T, R]:
    try:
        return Outcome(item, fn(item))
    except Exception as e:  # handed to the caller, in order, with its item
        return Outcome(item, None, e)


class _Slot(Generic[T, R]):
    __slots__ = ("item", "state", "outcome")

    def __init__(self, item: T) -> None:
        self.item = item
        self.state = _WAITING
        self.outcome: Outcome[T, R] | None = None


class _Ahead(Generic[T, R]):
    """The slots between what the caller has taken and ``ahead`` items further, and the helper threads."""

    def __init__(self, items: Iterable[T], fn: Callable[[T], R], ahead: int, gate: Gate) -> None:
        self.source = iter(items)
        self.fn = fn
        self.ahead = ahead
        self.gate = gate
        self.cond = threading.Condition()
        self.slots: deque[_Slot[T, R]] = deque()
        self.exhausted = self.closed = False
        self.failed: Exception | None = None
        self.context = contextvars.copy_context()

    def _fill(self) -> None:  # under the lock
        while not self.exhausted and len(self.slots) < self.ahead:
            try:
                self.slots.append(_Slot(next(self.source)))
            except StopIteration:
                self.exhausted = True
            except Exception as e:  # the items' own iterator failed: the caller raises it after the items before
                self.exhausted, self.failed = True, e

    def _run(self, slot: _Slot[T, R]) -> Outcome[T, R]:
        return self.context.copy().run(_call, self.fn, slot.item)

    def helper(self) -> None:
        while True:
            self.gate.wait()
            with self.cond:
                if self.closed:
                    return
                self._fill()
                slot = next((s for s in self.slots if s.state == _WAITING), None)
                if slot is None:
                    if self.exhausted:
                        return
                    self.cond.wait()  # every slot is taken: until the caller uses one
                    continue
                slot.state = _RUNNING
            outcome = self._run(slot)
            with self.cond:
                slot.outcome, slot.state = outcome, _DONE
                self.cond.notify_all()

    def next(self) -> Outcome[T, R] | None:
        """The next item's outcome (None after the last): a helper's, or computed here if none started it."""
        with self.cond:
            self._fill()
            if not self.slots:
                if self.failed is not None:
                    raise self.failed
                return None
            slot = self.slots[0]
            mine = slot.state == _WAITING
            if mine:
                slot.state = _RUNNING
            else:
                while slot.state != _DONE:
                    self.cond.wait()
        outcome = self._run(slot) if mine else slot.outcome
        with self.cond:
            self.slots.popleft()
            self.cond.notify_all()
        assert outcome is not None
        return outcome

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        self.gate.always()  # wake the helpers waiting for it, so they see ``closed``


def prefetch(
    items: Iterable[T],
    fn: Callable[[T], R],
    *,
    workers: int,
    ahead: int = 0,
    gate: Gate | None = None,
) -> Iterator[Outcome[T, R]]:
    """``fn(item)`` for every item, in order, with ``workers`` helper threads computing up to ``ahead`` items
    (default ``4 × workers``) before the caller takes them, while ``gate`` is open (no gate: always);
    ``workers=0`` computes each item when the caller asks for it. Closing the iterator early (an exception in the
    caller) stops the helpers after the items they are on."""
    if workers <= 0:
        yield from (_call(fn, item) for item in items)
        return
    if gate is None:
        gate = Gate()
        gate.always()
    state: _Ahead[T, R] = _Ahead(items, fn, max(ahead or 4 * workers, 1), gate)
    threads = [threading.Thread(target=state.helper, name=f"zhiku-prepare-{i}", daemon=True) for i in range(workers)]
    for t in threads:
        t.start()
    try:
        while (outcome := state.next()) is not None:
            yield outcome
    finally:
        state.close()
        for t in threads:
            t.join()
