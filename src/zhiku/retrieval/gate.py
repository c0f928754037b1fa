"""``FairGate``: at most ``n`` threads inside at once, the others admitted in the order they came."""

from __future__ import annotations

import threading
import time
from collections import deque

from zhiku.observability.tracing import waited


class FairGate:
    """A FIFO counting gate: ``with gate:`` waits for one of ``n`` places (``n`` ≥ 1)."""

    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError(f"a gate needs at least one place, got {n}")
        self.places = n
        self._free = n
        self._lock = threading.Lock()
        self._waiters: deque[threading.Event] = deque()

    @property
    def waiting(self) -> int:
        """Threads waiting for a place (a measure of load)."""
        return len(self._waiters)

    def __enter__(self) -> FairGate:
        with self._lock:
            if self._free and not self._waiters:
                self._free -= 1
                return self
            turn = threading.Event()
            self._waiters.append(turn)
            queued = len(self._waiters)
        start = time.perf_counter()
        try:
            turn.wait()  # the releasing thread hands its place over: nothing to take here
        except BaseException:  # interrupted (KeyboardInterrupt): a place handed to it would be lost for good
            self._leave(turn)
            raise
        waited("queue", start, places=self.places, queued=queued)  # only a search that waited has the stage
        return self

    def _leave(self, turn: threading.Event) -> None:
        """A waiter gives up: it leaves the line, or passes on the place handed to it meanwhile."""
        with self._lock:
            if turn in self._waiters:
                self._waiters.remove(turn)
                return
        self.__exit__()

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            if self._waiters:
                self._waiters.popleft().set()
            else:
                self._free += 1
