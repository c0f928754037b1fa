"""The result cache: an LRU with a time-to-live, keyed by (tool, index version, canonical arguments).

The index version (``Store.index_version()``) is bumped by every write and delete, so an ingest or a delete
makes every older entry unreachable without an explicit purge; the TTL bounds how long anything lives, and
the LRU bound how much. Thread-safe: tools run in worker threads.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from cachetools import TTLCache

V = TypeVar("V")
CACHE_TTL_S = 300.0  # seconds an answer is kept (a write empties the cache anyway)


def cache_key(tool: str, index_version: int, args: Mapping[str, Any]) -> str:
    """A stable key: the same arguments in any key order (and ``None`` vs. missing) give the same key."""
    canonical = {k: v for k, v in args.items() if v is not None}
    body = json.dumps(canonical, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return f"{tool}\x00{index_version}\x00{body}"


class ResultCache(Generic[V]):
    """At most ``size`` entries, each valid for ``ttl_s`` seconds; ``size == 0`` or ``ttl_s == 0`` turns it off.

    A ``cachetools.TTLCache`` (least recently used first out when full; an entry expires once ``clock()``
    reaches its insertion time + ``ttl_s``) behind a lock, with hit and miss counts.
    """

    def __init__(self, size: int, ttl_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.size = size
        self.ttl_s = ttl_s
        self._items: TTLCache[str, V] | None = TTLCache(size, ttl_s, timer=clock) if self.enabled else None
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def enabled(self) -> bool:
        return self.size > 0 and self.ttl_s > 0

    def get(self, key: str) -> V | None:
        if self._items is None:
            return None
        with self._lock:
            value = self._items.get(key)
            if value is None:
                self.misses += 1
            else:
                self.hits += 1
            return value

    def put(self, key: str, value: V) -> None:
        if self._items is None:
            return
        with self._lock:
            self._items[key] = value

    def clear(self) -> None:
        if self._items is not None:
            with self._lock:
                self._items.clear()

    def __len__(self) -> int:
        if self._items is None:
            return 0
        with self._lock:
            return len(self._items)
