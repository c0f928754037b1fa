"""Hugging Face models for the sentence-transformers embedder and the cross-encoder reranker."""

from __future__ import annotations

import logging
import threading
from contextlib import suppress
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from zhiku.errors import MissingDependency, NotFound, ZhikuError
from zhiku.modelhub.pinning import (
    HashMemo,
    Manifest,
    Verification,
    hub_id_of,
    load_manifest,
    verify_folder,
    weights_digest,
)

log = logging.getLogger(__name__)

INSTALL = "pip install 'zhiku[models]'"
# What a sentence-transformers model needs from a hub repository: not the ONNX/OpenVINO/TF/Flax copies.
IGNORE_PATTERNS = "onnx/* openvino/* *.onnx *.h5 *.msgpack *.ot flax_model* tf_model* rust_model* *.gguf coreml/*"


def import_sentence_transformers() -> Any:
    try:
        import sentence_transformers
    except ImportError as e:
        raise MissingDependency(f"this model provider needs sentence-transformers and torch: {INSTALL} ({e})") from None
    return sentence_transformers


@dataclass(frozen=True)
class ModelFolder:
    model_id: str  # hub id, or the folder's name for a local copy that is not a hub cache snapshot
    folder: Path
    revision: str | None  # hub commit when known
    verification: Verification

    def fingerprint(self, memo: HashMemo) -> str:
        """``ID@REVISION`` for hub snapshots, ``ID@sha256:DIGEST`` (weights) for other local folders."""
        if self.revision:
            return f"{self.model_id}@{self.revision[:12]}"
        return f"{self.model_id}@sha256:{weights_digest(self.folder, memo)[:12]}"


def download(repo_id: str, revision: str | None) -> Path:
    """The local snapshot of ``repo_id`` (downloaded once into the Hugging Face cache; offline: the cache only)."""
    try:
        from huggingface_hub import HfApi, snapshot_download
    except ImportError as e:
        raise MissingDependency(
            f"loading models from the Hugging Face hub needs huggingface_hub: {INSTALL} ({e})"
        ) from None
    ignore = IGNORE_PATTERNS.split()
    # one listing call skips the PyTorch .bin copy when the repo has safetensors (offline or private: the cache's files)
    with suppress(Exception):
        if any(f.endswith(".safetensors") for f in HfApi().list_repo_files(repo_id, revision=revision)):
            ignore.append("*.bin")
    try:
        return Path(snapshot_download(repo_id, revision=revision, ignore_patterns=ignore))
    except Exception as e:
        raise NotFound(
            f"cannot get model {repo_id!r}{f'@{revision}' if revision else ''} from the Hugging Face hub "
            f"or its local cache ({type(e).__name__}: {e}); download it where there is network "
            f"(`huggingface-cli download {repo_id}`) and set the model to its folder"
        ) from None


class HubModel:
    """Base of ``SentenceTransformerEmbedder`` and ``CrossEncoderReranker``."""

    load_error: type[ZhikuError] = ZhikuError
    kind = "model"

    def __init__(
        self, model: str, *, batch_size: int = 32, manifest: Manifest | None = None, memo: HashMemo | None = None
    ) -> None:
        self.model, self.batch_size = model, batch_size
        self.manifest = manifest if manifest is not None else load_manifest()
        self.memo = memo if memo is not None else HashMemo(None)
        self._lock = threading.Lock()

    @cached_property
    def folder(self) -> ModelFolder:
        """The model's files, found (or downloaded) and checked against the manifest; nothing is loaded yet."""
        model = self.model
        local = Path(model).expanduser()
        if local.is_dir():
            folder = local.resolve()
            found = hub_id_of(folder)
            model_id, rev = found if found else (folder.name, None)
            entry = self.manifest.match(folder)
        elif local.exists():
            raise NotFound(f"model path {local} is a file; give the model's folder")
        elif "/" in model.strip("/") and not model.startswith((".", "/", "~")):
            entry = self.manifest.get(model)
            rev = entry.revision if entry is not None and entry.pinned else None
            folder = download(model, rev)
            found = hub_id_of(folder)
            model_id, rev = model, (found[1] if found else rev)
        else:
            raise NotFound(f"model {model!r} is neither a folder on disk nor a Hugging Face id like 'BAAI/bge-m3'")
        check = verify_folder(folder, entry, self.memo)
        if check.status != "ok":
            log.info("model %s (%s) not verified: %s", model_id, folder, check.detail)
        return ModelFolder(model_id, folder, rev, check)

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
        import torch

        folder = self.folder
        device = "cuda" if torch.cuda.is_available() else "cpu"
        try:
            model = self._construct(st, str(folder.folder), device)
        except Exception as e:
            why = f"{type(e).__name__}: {e}"
            raise self.load_error(f"cannot load {self.kind} {folder.model_id} from {folder.folder}: {why}") from None
        if device == "cuda":
            model.half()
        return model

    def _construct(self, st: Any, path: str, device: str) -> Any:
        raise NotImplementedError
