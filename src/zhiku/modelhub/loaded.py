"""``HubModel``: what a sentence-transformers model (embedder or cross-encoder) shares, found and loaded once.

The files come from the Hugging Face hub or a local folder and are checked against the model manifest
(``resolve_model``) before anything loads; the model itself loads on first use, once even when the first calls
come from several threads, on ``device`` (``auto``: CUDA when torch sees one, in fp16 when ``fp16``).
"""

from __future__ import annotations

import threading
from functools import cached_property
from typing import Any, Literal

from zhiku.errors import ZhikuError
from zhiku.modelhub.hf import ModelFolder, import_sentence_transformers, resolve_device, resolve_model
from zhiku.modelhub.pinning import HashMemo, Manifest, load_manifest


class HubModel:
    """Base of ``SentenceTransformerEmbedder`` and ``CrossEncoderReranker``: subclasses say how to construct the
    model from its folder (``_construct``) and which error a failed load raises (``load_error``)."""

    load_error: type[ZhikuError] = ZhikuError
    kind = "model"

    def __init__(
        self,
        model: str,
        *,
        revision: str | None = None,
        device: Literal["auto", "cpu", "cuda"] = "auto",
        batch_size: int = 32,
        fp16: bool = True,
        max_length: int | None = None,
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

    def load(self) -> None:
        _ = self._model

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
            model = self._construct(st, str(folder.folder), device)
        except Exception as e:
            raise self.load_error(
                f"cannot load {self.kind} {folder.model_id} from {folder.folder}: {type(e).__name__}: {e}"
            ) from None
        if device.startswith("cuda") and self.fp16:
            model.half()
        return model

    def _construct(self, st: Any, path: str, device: str) -> Any:
        raise NotImplementedError
