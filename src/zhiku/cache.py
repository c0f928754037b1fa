"""The one in-process cache: a thread-safe LRU bounded by the total weight of its entries, holding one index version."""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

V = TypeVar("V")


class Cache(Generic[V]):
    """At most ``max_weight`` in total ``weigh(value)`` (1 each by default: an entry count)."""

    def __init__(self, max_weight: int, weigh: Callable[[V], int] = lambda _: 1) -> None:
        self.max_weight, self.weigh = max_weight, weigh
        # the version the entries are of (-1: none yet) and the entries, swapped as one: a get reads them without
        # the lock (an OrderedDict's get and move_to_end are atomic under the GIL)
        self._state: tuple[int, OrderedDict[Hashable, tuple[V, int]]] = (-1, OrderedDict())
        self._weight = 0
        self._lock = threading.Lock()

    @property
    def version(self) -> int:
        return self._state[0]

    def get(self, key: Hashable, version: int = 0) -> V | None:
        held, items = self._state
        got = items.get(key) if version == held else None
        if got is None:
            return None
        try:  # (a try costs nothing; ``suppress`` is three calls)
            items.move_to_end(key)
        except KeyError:  # pushed out meanwhile
            pass
        return got[0]

    def get_many(self, keys: Iterable[Hashable], version: int = 0) -> dict[Hashable, V]:
        """The values of ``keys`` held (of ``version``), in one call."""
        held, items = self._state
        if version != held:
            return {}
        out = {key: got[0] for key in keys if (got := items.get(key)) is not None}
        for key in out:
            try:
                items.move_to_end(key)
            except KeyError:
                pass
        return out

    def put(self, key: Hashable, value: V, version: int = 0) -> None:
        weight = self.weigh(value)
        with self._lock:
            if version > self._state[0]:
                self._state, self._weight = (version, OrderedDict()), 0
            held, items = self._state
            if version != held or weight > self.max_weight:
                return
            old = items.pop(key, None)
            if old is not None:
                self._weight -= old[1]
            items[key] = (value, weight)
            self._weight += weight
            while self._weight > self.max_weight:
                self._weight -= items.popitem(last=False)[1][1]

    def clear(self) -> None:
        """Forget every entry and the version (an index gone back to an older version: another index's past)."""
        with self._lock:
            self._state, self._weight = (-1, OrderedDict()), 0

    def __len__(self) -> int:
        return len(self._state[1])


K = TypeVar("K", bound=Hashable)


class Memo(Generic[K, V]):
    """``fn`` (a pure function of one hashable argument) with its last results kept in ``cache``."""

    def __init__(self, fn: Callable[[K], V], size: int) -> None:
        self.fn, self.cache = fn, Cache[V](size)
        functools.update_wrapper(self, fn)

    def __call__(self, arg: K) -> V:
        got = self.cache.get(arg)
        if got is None:
            got = self.fn(arg)
            self.cache.put(arg, got)
        return got


def memoized(size: int) -> Callable[[Callable[[K], V]], Memo[K, V]]:
    """A decorator: ``fn`` with its last ``size`` results kept (``Memo``)."""
    return lambda fn: Memo(fn, size)
