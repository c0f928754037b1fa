"""The ``Embedder`` protocol, and the query and passage prefixes of known model families."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from zhiku.errors import EmbeddingError
from zhiku.modelhub import hub_id_of


@runtime_checkable
class Embedder(Protocol):
    @property
    def name(self) -> str:
        """Fingerprint of the model (id + revision/weights hash); stored in the index and the embedding cache."""
        ...

    @property
    def dim(self) -> int: ...

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), dim)`` float32, each row L2-normalised."""
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """``(dim,)`` float32, L2-normalised."""
        ...


class Wrapper:
    """An embedder around ``inner``, with its name and dim."""

    inner: Embedder

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dim(self) -> int:
        return self.inner.dim


def embed_queries(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """Several questions in one call of ``embed_queries`` when the embedder has one, else one ``embed_query`` each."""
    batched = getattr(embedder, "embed_queries", None)
    if batched is not None:
        out = np.asarray(batched(texts), dtype=np.float32)
        if out.ndim == 1 and len(texts) == 1:
            out = out.reshape(1, -1)
        if out.ndim != 2 or out.shape[0] != len(texts):  # a reshape would cut a short answer into wrong vectors
            got = out.shape[0] if out.ndim == 2 else f"an array of shape {out.shape} as"
            raise EmbeddingError(
                f"embedder answered {got} vectors for {len(texts)} questions ({embedder.name}): "
                "its embed_queries must return one row per text"
            )
        return out
    return np.vstack([embedder.embed_query(t) for t in texts]) if texts else np.zeros((0, 0), np.float32)


def takes_several_queries(embedder: object) -> bool:
    """Whether ``embed_queries(embedder, texts)`` is one call of the model (the embedder and each it wraps)."""
    while getattr(embedder, "embed_queries", None) is not None:
        inner = getattr(embedder, "inner", None)
        if inner is None:
            return True
        embedder = inner
    return False


# Query and passage prefixes of known embedding-model families (from their model cards; a model trained with one
# loses quality without it). Precedence: the model's own ``prompts`` in ``config_sentence_transformers.json``, then
# ``FAMILIES``, then none (BGE-M3, m3e, all-MiniLM, unknown models).
QWEN3_TASK = "Given a web search query, retrieve relevant passages that answer the query"
BGE_ZH_QUERY = "为这个句子生成表示以用于检索相关文章："
BGE_EN_QUERY = "Represent this sentence for searching relevant passages: "


@dataclass(frozen=True)
class Prefixes:
    query: str = ""
    passage: str = ""
    family: str = "none"  # where they came from: a family name, "model config" or "none"


# (pattern over the lower-cased model id or folder name, prefixes); the first match wins.
FAMILIES: tuple[tuple[re.Pattern[str], Prefixes], ...] = (
    (re.compile(r"(^|/)(multilingual-)?e5-(small|base|large)(-v2)?$"), Prefixes("query: ", "passage: ", "e5")),
    (
        re.compile(r"(^|/)multilingual-e5-large-instruct$"),
        Prefixes(f"Instruct: {QWEN3_TASK}\nQuery: ", "", "e5-instruct"),
    ),
    (re.compile(r"(^|/)bge-(small|base|large)-zh(-v1\.5)?$"), Prefixes(BGE_ZH_QUERY, "", "bge-zh")),
    (re.compile(r"(^|/)bge-(small|base|large)-en(-v1\.5)?$"), Prefixes(BGE_EN_QUERY, "", "bge-en")),
    (re.compile(r"(^|/)qwen3-embedding-"), Prefixes(f"Instruct: {QWEN3_TASK}\nQuery:", "", "qwen3-embedding")),
)


def family_prefixes(model: str) -> Prefixes:
    """The table's prefixes for a model id or folder (``models--ORG--NAME`` cache folders are read as ORG/NAME)."""
    hub = hub_id_of(Path(model.strip()))
    name = (hub[0] if hub else model.strip().rstrip("/")).lower()
    for pattern, prefixes in FAMILIES:
        if pattern.search(name) or pattern.search(name.rsplit("/", 1)[-1]):
            return prefixes
    return Prefixes()


def resolve_prefixes(model: str, folder: Path) -> Prefixes:
    """The ``prompts`` a sentence-transformers folder declares for queries and documents, else the family's."""
    try:
        prompts = json.loads((folder / "config_sentence_transformers.json").read_text(encoding="utf-8")).get("prompts")
    except (OSError, ValueError, AttributeError):
        prompts = None
    if not isinstance(prompts, dict):
        return family_prefixes(model)
    query, passage = prompts.get("query"), prompts.get("document", prompts.get("passage"))
    if not isinstance(query, str) and not isinstance(passage, str):
        return family_prefixes(model)
    return Prefixes(
        query if isinstance(query, str) else "", passage if isinstance(passage, str) else "", "model config"
    )
