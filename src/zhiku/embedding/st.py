"""``Embedder`` over any sentence-transformers model: a Hugging Face id or a local folder.

``BAAI/bge-large-zh-v1.5``, ``BAAI/bge-m3``, ``Qwen/Qwen3-Embedding-0.6B``, ``moka-ai/m3e-base``… load through
``sentence_transformers.SentenceTransformer`` on ``device`` (``auto``: CUDA when torch sees one, in fp16 when
``fp16``). Known families get their query/passage prefixes (``zhiku.embedding.prefixes``). The files are checked
against the model manifest before loading, and the fingerprint (``name``) holds the model id, its revision or
weights hash, and whatever changes stored vectors (passage prefix, max length).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from functools import cached_property
from typing import Any, Literal

import numpy as np

from zhiku.embedding.prefixes import Prefixes, resolve_prefixes
from zhiku.errors import EmbeddingError
from zhiku.modelhub.hf import ModelFolder, import_sentence_transformers, resolve_device, resolve_model
from zhiku.modelhub.pinning import HashMemo, Manifest, load_manifest
from zhiku.numeric import l2_normalise


class SentenceTransformerEmbedder:
    """``Embedder`` over a sentence-transformers model; the model loads on first use (thread-safe)."""

    def __init__(
        self,
        model: str,
        *,
        revision: str | None = None,
        device: Literal["auto", "cpu", "cuda"] = "auto",
        batch_size: int = 32,
        fp16: bool = True,
        max_length: int | None = None,
        query_prefix: str | None = None,
        passage_prefix: str | None = None,
        verify: bool = True,
        manifest: Manifest | None = None,
        memo: HashMemo | None = None,
    ) -> None:
        self.model = model
        self.revision = revision
        self.device_setting = device
        self.batch_size = batch_size
        self.fp16 = fp16
        self.max_length = max_length
        self._query_prefix = query_prefix
        self._passage_prefix = passage_prefix
        self.verify = verify
        self.manifest = manifest if manifest is not None else load_manifest()
        self.memo = memo if memo is not None else HashMemo(None)
        self._lock = threading.Lock()

    @cached_property
    def folder(self) -> ModelFolder:
        """The model's files, found (downloaded) and verified; nothing is loaded into memory yet."""
        return resolve_model(
            self.model, revision=self.revision, manifest=self.manifest, memo=self.memo, verify=self.verify
        )

    @cached_property
    def prefixes(self) -> Prefixes:
        return resolve_prefixes(
            self.folder.model_id, self.folder.folder, query=self._query_prefix, passage=self._passage_prefix
        )

    @cached_property
    def name(self) -> str:
        variant = f"passage={self.prefixes.passage!r};max_length={self.max_length}"
        tag = hashlib.sha256(variant.encode("utf-8")).hexdigest()[:8]
        return f"st:{self.folder.fingerprint(self.memo)}/{tag}"

    @property
    def device(self) -> str:
        return str(self._model.device)

    @property
    def _model(self) -> Any:
        with self._lock:  # one load even when the first calls come from several threads
            if "_loaded" not in self.__dict__:
                self.__dict__["_loaded"] = self._load()
            return self.__dict__["_loaded"]

    def _load(self) -> Any:
        st = import_sentence_transformers()
        folder = self.folder
        device = resolve_device(self.device_setting)
        try:
            model = st.SentenceTransformer(str(folder.folder), device=device, local_files_only=True)
        except Exception as e:
            raise EmbeddingError(
                f"cannot load sentence-transformers model {folder.model_id} from {folder.folder}: "
                f"{type(e).__name__}: {e}"
            ) from None
        if device.startswith("cuda") and self.fp16:
            model.half()
        if self.max_length is not None:
            model.max_seq_length = self.max_length
        return model

    @cached_property
    def dim(self) -> int:
        model = self._model
        getter = (
            getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        )  # ST ≥ 6 / older
        size = getter()
        if not size:
            size = int(self._encode(["dim"]).shape[1])
        return int(size)

    def _encode(self, texts: list[str]) -> np.ndarray:
        out = self._model.encode(
            texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        return l2_normalise(np.asarray(out, dtype=np.float32).reshape(len(texts), -1))

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        p = self.prefixes.passage
        return self._encode([p + t for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        row: np.ndarray = self._encode([self.prefixes.query + text])[0]
        return row
