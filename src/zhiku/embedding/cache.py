"""The persistent embedding cache (embedder fingerprint, SHA-256 of the text) in ``cache_dir``: a rebuilt index
never embeds unchanged text again; a served query is never written to disk."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

import numpy as np

from zhiku.embedding.base import Embedder, Wrapper, embed_queries
from zhiku.errors import ConfigError


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def query_key(text: str) -> str:
    return text_key("\x00query\x00" + text)


class EmbeddingCache:
    """SQLite table ``vectors(model, key, vector)``; safe to share between processes (WAL)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(path), timeout=30, check_same_thread=False, isolation_level=None)
            self._db.execute("pragma journal_mode=wal")
            self._db.execute("pragma synchronous=normal")
            self._db.execute(
                "create table if not exists vectors(model text not null, key text not null, vector blob not null,"
                " primary key (model, key)) without rowid"
            )
        except (sqlite3.DatabaseError, OSError) as e:  # a damaged or foreign file, a folder we cannot write
            raise _unusable(path, "opened", e) from None

    def get_many(self, model: str, keys: Sequence[str], dim: int) -> dict[str, np.ndarray]:
        sql = "select key, vector from vectors where model = ? and key in (select value from json_each(?))"
        with self._lock, self._usable():
            rows = self._db.execute(sql, (model, json.dumps(list(keys)))).fetchall()
        vectors = ((key, np.frombuffer(blob, dtype=np.float32)) for key, blob in rows)
        return {key: vec for key, vec in vectors if vec.shape[0] == dim}

    def put_many(self, model: str, items: Sequence[tuple[str, np.ndarray]]) -> None:
        with self._lock, self._usable():
            self._db.execute("begin")
            self._db.executemany(
                "insert or replace into vectors(model, key, vector) values (?, ?, ?)",
                [(model, key, np.asarray(vec, dtype=np.float32).tobytes()) for key, vec in items],
            )
            self._db.execute("commit")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _usable(self) -> Iterator[None]:
        """A failed read or write (damage past the first page, a full disk) is one error naming the cache."""
        try:
            yield
        except sqlite3.DatabaseError as e:
            if self._db.in_transaction:
                with suppress(sqlite3.Error):
                    self._db.execute("rollback")
            raise _unusable(self.path, "read or written", e) from None


def _unusable(path: Path, failed: str, e: Exception) -> ConfigError:
    return ConfigError(
        f"the embedding cache {path} cannot be {failed} ({e}): it is only a cache — delete the file, or set "
        "cache_dir to a writable folder (or cache_dir: null)"
    )


class CachedEmbedder(Wrapper):
    """Wraps an ``Embedder``: documents are served from the cache when their text was embedded before."""

    def __init__(self, inner: Embedder, cache: EmbeddingCache) -> None:
        self.inner = inner
        self.cache = cache
        self.computed = 0  # documents embedded by the model (cache misses) since creation
        self.cache_queries = False  # see ``caching_queries``

    def _through_cache(
        self, keys: list[str], texts: Sequence[str], compute: Callable[[list[str]], np.ndarray]
    ) -> tuple[np.ndarray, int]:
        """The vectors of ``texts``: cached ones read, the rest computed in one call and stored; and how many."""
        found = self.cache.get_many(self.name, list(dict.fromkeys(keys)), self.dim)
        missing = {k: t for k, t in zip(keys, texts, strict=True) if k not in found}
        if missing:
            vectors = compute(list(missing.values()))
            self.cache.put_many(self.name, list(zip(missing, vectors, strict=True)))
            found.update(zip(missing, vectors, strict=True))
        out = np.array([found[key] for key in keys], np.float32).reshape(len(keys), self.dim)
        return out, len(missing)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        out, computed = self._through_cache([text_key(t) for t in texts], texts, self.inner.embed_documents)
        self.computed += computed
        return out

    def embed_query(self, text: str) -> np.ndarray:
        if not self.cache_queries:
            return self.inner.embed_query(text)
        row: np.ndarray = self.embed_queries([text])[0]
        return row

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        if not self.cache_queries:
            return embed_queries(self.inner, texts)
        out, _ = self._through_cache([query_key(t) for t in texts], texts, lambda t: embed_queries(self.inner, t))
        return out


@contextmanager
def caching_queries(embedder: object) -> Iterator[None]:
    """Within the block, a ``CachedEmbedder`` also caches query vectors (evaluation: a rerun embeds none again)."""
    if not isinstance(embedder, CachedEmbedder) or embedder.cache_queries:
        yield
        return
    embedder.cache_queries = True
    try:
        yield
    finally:
        embedder.cache_queries = False
