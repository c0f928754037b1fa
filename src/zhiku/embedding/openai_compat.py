"""``Embedder`` over an OpenAI-compatible ``/v1/embeddings`` endpoint; the fingerprint holds the model and the
passage prefix, not the URL: the same model served elsewhere gives the same vectors."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property

import numpy as np

from zhiku.embedding.base import Prefixes, family_prefixes
from zhiku.errors import EmbeddingError
from zhiku.numeric import l2_normalise
from zhiku.openai_http import HttpApiError, OpenAICompatibleClient


class OpenAIEmbedder:
    def __init__(
        self, client: OpenAICompatibleClient, model: str, *, batch_size: int = 32, concurrency: int = 4
    ) -> None:
        self.client, self.model, self.batch_size, self.concurrency = client, model, batch_size, concurrency
        self.prefixes: Prefixes = family_prefixes(model)
        self._dim_lock = threading.Lock()

    @cached_property
    def name(self) -> str:
        tag = hashlib.sha256(f"passage={self.prefixes.passage!r}".encode()).hexdigest()[:8]
        return f"openai:{self.model}/{tag}"

    @property
    def dim(self) -> int:
        with self._dim_lock:
            if "_probed_dim" not in self.__dict__:  # one request tells the model's size
                self.__dict__["_probed_dim"] = int(self._request(["dimension probe"]).shape[1])
            return int(self.__dict__["_probed_dim"])

    def _request(self, texts: list[str]) -> np.ndarray:
        try:
            data = self.client.post("embeddings", {"model": self.model, "input": texts})
        except HttpApiError as e:
            raise EmbeddingError(f"embedding endpoint failed: {e}") from None
        rows = data.get("data")
        if not isinstance(rows, list) or len(rows) != len(texts):
            got = len(rows) if isinstance(rows, list) else type(rows).__name__
            raise EmbeddingError(
                f"embedding endpoint answered {got} vectors for {len(texts)} texts (model {self.model})"
            )
        try:
            ordered = sorted(rows, key=lambda r: int(r.get("index", 0)))
            m = np.asarray([r["embedding"] for r in ordered], dtype=np.float32)
        except (TypeError, KeyError, ValueError, AttributeError) as e:
            raise EmbeddingError(f"embedding endpoint answered malformed vectors ({type(e).__name__}: {e})") from None
        if m.ndim != 2 or m.shape[1] == 0 or not np.isfinite(m).all():
            raise EmbeddingError(
                f"embedding endpoint answered vectors of shape {m.shape} with non-finite values or none"
            )
        return l2_normalise(m)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        p = self.prefixes.passage
        batches = [[p + t for t in texts[i : i + self.batch_size]] for i in range(0, len(texts), self.batch_size)]
        if len(batches) == 1 or self.concurrency == 1:
            parts = [self._request(b) for b in batches]
        else:
            with ThreadPoolExecutor(min(self.concurrency, len(batches)), thread_name_prefix="zhiku-embed") as pool:
                parts = list(pool.map(self._request, batches))
        out = np.vstack(parts)
        self.__dict__.setdefault("_probed_dim", int(out.shape[1]))
        if out.shape[1] != self.dim:
            raise EmbeddingError(f"embedding endpoint changed vector size: {out.shape[1]}, expected {self.dim}")
        return out

    def embed_query(self, text: str) -> np.ndarray:
        row: np.ndarray = self._request([self.prefixes.query + text])[0]
        return row

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._request([self.prefixes.query + t for t in texts])
