"""Query and passage prefixes of known embedding-model families (from their model cards; a model trained with one
loses quality without it). Precedence: the model's own ``prompts`` in ``config_sentence_transformers.json``, then
``FAMILIES``, then none (BGE-M3, m3e, all-MiniLM, unknown models)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

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
    name = model.strip().rstrip("/").lower()
    m = re.search(r"models--([^/]+?)--([^/]+)/snapshots/[^/]+$", name)
    if m:
        name = f"{m[1]}/{m[2]}"
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
