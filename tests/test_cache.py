"""The result cache: LRU order, TTL expiry, key canonicalisation, off switch."""

from __future__ import annotations

from zhiku.mcp.cache import ResultCache, cache_key


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_key_is_canonical_and_versioned() -> None:
    a = cache_key("query_knowledge_hub", 7, {"query": "试用期", "top_k": 5, "collection": None})
    b = cache_key("query_knowledge_hub", 7, {"top_k": 5, "query": "试用期"})
    assert a == b == 'query_knowledge_hub\x007\x00{"query":"试用期","top_k":5}'
    assert cache_key("query_knowledge_hub", 8, {"query": "试用期", "top_k": 5}) != a
    assert cache_key("other_tool", 7, {"query": "试用期", "top_k": 5}) != a


def test_lru_evicts_the_least_recently_used() -> None:
    cache: ResultCache[str] = ResultCache(2, 60, clock=Clock())
    cache.put("a", "A")
    cache.put("b", "B")
    assert cache.get("a") == "A"  # a is now the most recent
    cache.put("c", "C")
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == ("A", None, "C")
    assert (len(cache), cache.hits, cache.misses) == (2, 3, 1)


def test_ttl_expires_entries() -> None:
    clock = Clock()
    cache: ResultCache[str] = ResultCache(10, 30, clock=clock)
    cache.put("k", "v")
    clock.now += 29.9
    assert cache.get("k") == "v"
    clock.now += 0.1
    assert cache.get("k") is None and len(cache) == 0


def test_size_or_ttl_zero_turns_it_off() -> None:
    for size, ttl in ((0, 60), (10, 0)):
        cache: ResultCache[str] = ResultCache(size, ttl)
        cache.put("k", "v")
        assert (cache.enabled, cache.get("k"), len(cache)) == (False, None, 0)
