"""``Embedder`` over any sentence-transformers model (a Hugging Face id or a folder), checked against the manifest."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import cached_property
from typing import Any

import numpy as np

from zhiku.embedding.base import Prefixes, resolve_prefixes
from zhiku.errors import EmbeddingError
from zhiku.modelhub import HubModel
from zhiku.numeric import l2_normalise


class SentenceTransformerEmbedder(HubModel):
    load_error = EmbeddingError
    kind = "sentence-transformers model"

    @cached_property
    def prefixes(self) -> Prefixes:
        return resolve_prefixes(self.folder.model_id, self.folder.folder)

    @cached_property
    def name(self) -> str:
        variant = f"passage={self.prefixes.passage!r};max_length=None"  # (the model's own; kept: stored vectors)
        tag = hashlib.sha256(variant.encode("utf-8")).hexdigest()[:8]
        return f"st:{self.folder.fingerprint(self.memo)}/{tag}"

    @property
    def device(self) -> str:
        return str(self._model.device)

    def _construct(self, st: Any, path: str, device: str) -> Any:
        return st.SentenceTransformer(path, device=device, local_files_only=True)

    @cached_property
    def dim(self) -> int:
        model = self._model  # sentence-transformers ≥ 6 renamed the getter
        size = (getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension)()
        return int(size or self._encode(["dim"]).shape[1])

    def _encode(self, texts: list[str]) -> np.ndarray:
        out = self._model.encode(
            texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        return l2_normalise(np.asarray(out, dtype=np.float32).reshape(len(texts), -1))

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._encode([self.prefixes.passage + t for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        row: np.ndarray = self._encode([self.prefixes.query + text])[0]
        return row

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode([self.prefixes.query + t for t in texts])
