"""The one in-process cache (``zhiku.cache``): least recently used out first by weight, one index version at a
time, off at 0; and the MCP result cache's keys."""

from __future__ import annotations

import threading

from zhiku.cache import Cache, memoized
from zhiku.mcp.hub import cache_key


def test_key_is_canonical() -> None:
    a = cache_key("query_knowledge_hub", {"query": "试用期", "top_k": 5, "collection": None})
    b = cache_key("query_knowledge_hub", {"top_k": 5, "query": "试用期"})
    assert a == b == 'query_knowledge_hub\x00{"query":"试用期","top_k":5}'
    assert cache_key("other_tool", {"query": "试用期", "top_k": 5}) != a


def test_the_least_recently_used_go_first_by_weight() -> None:
    cache: Cache[str] = Cache(5, weigh=len)
    cache.put("a", "AA")
    cache.put("b", "BB")
    assert cache.get("a") == "AA"  # a is now the most recent
    cache.put("c", "CC")  # 6 > 5: b goes
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == ("AA", None, "CC")
    assert len(cache) == 2
    cache.put("a", "A")  # replaced: weighs 1 now
    cache.put("d", "DD")
    assert (cache.get("a"), cache.get("c"), cache.get("d")) == ("A", "CC", "DD")
    cache.put("big", "BIGGER")  # heavier than the whole cache: not kept, nothing pushed out
    assert (cache.get("big"), len(cache)) == (None, 3)


def test_it_holds_one_index_version() -> None:
    cache: Cache[str] = Cache(10)
    cache.put("k", "v5", version=5)
    assert (cache.get("k", 5), cache.get("k", 6), cache.get("k", 4)) == ("v5", None, None)
    cache.put("old", "v4", version=4)  # a reader behind another's commit: not kept
    assert (cache.get("old", 4), cache.get("old", 5), cache.version) == (None, None, 5)
    cache.put("new", "v6", version=6)  # a newer version empties it first
    assert (cache.get("k", 5), cache.get("k", 6), cache.get("new", 6), len(cache)) == (None, None, "v6", 1)
    cache.clear()  # (an index gone back to an older version)
    cache.put("k", "v2", version=2)
    assert (cache.get("k", 2), cache.version) == ("v2", 2)


def test_size_zero_keeps_nothing() -> None:
    cache: Cache[str] = Cache(0)
    cache.put("k", "v")
    assert (cache.get("k"), len(cache)) == (None, 0)


def test_threads_share_it_within_its_bound() -> None:
    cache: Cache[int] = Cache(100)

    def client(n: int) -> None:
        for i in range(2_000):
            cache.put((n, i), i)
            got = cache.get((n, i))
            assert got in (i, None)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(cache) == 100


def test_memoized_calls_the_function_once_per_argument_kept() -> None:
    calls: list[str] = []

    @memoized(2)
    def upper(text: str) -> str:
        calls.append(text)
        return text.upper()

    assert [upper("a"), upper("b"), upper("a"), upper("c"), upper("b")] == ["A", "B", "A", "C", "B"]
    assert calls == ["a", "b", "c", "b"]  # b was the least recently used when c came
