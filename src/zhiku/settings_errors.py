"""Settings errors a newcomer can act on: where a bad value came from, and what an unknown key was meant to be."""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from zhiku.errors import ConfigError

REFERENCE = "every key: docs/settings.md"
SERVER_ALIASES = ("transport", "host", "port", "token")  # ZHIKU_TRANSPORT, … as short forms of ZHIKU_SERVER__*
log = logging.getLogger("zhiku.settings")

# Keys of older files read under their new name
MOVED = {
    "embedding.timeout": "embedding.timeout_s",
    "rerank.timeout": "rerank.timeout_s",
    "llm.timeout": "llm.timeout_s",
    "judge.timeout": "judge.timeout_s",
    "server.min_score": "answer.min_score",
    "embedding.cache_dir": "cache_dir",
    "chunking.size": "chunking.size_chars",
}
_CACHES = "caches are on unless `cache_dir: null`"
# Keys of older files that are no longer settings: what zhiku does instead (the constant beside the code using it)
FIXED = {
    "store.busy_timeout_s": "a writer waits 5 s for a locked index",
    "store.compact_dead_fraction": "the vector file is rewritten past 25 % deleted rows",
    "store.consistency": "Milvus: Strong",
    "store.analyzer": "Milvus: chosen by the server kind",
    "store.hnsw_m": "Milvus: 16",
    "store.hnsw_ef_construction": "Milvus: 200",
    "store.hnsw_ef": "Milvus: 128",
    "store.timeout_s": "Milvus: 30 s a request",
    "text.t2s": "Traditional characters are always read as Simplified ones too",
    "text.stopwords": "the built-in list",
    "text.synonyms_at": "synonyms expand the question",
    "chunking.overlap": "50 characters",
    "chunking.min_chars": "50 characters",
    "chunking.index_context": "title and section path are always indexed",
    "loaders.ocr_dpi": "150",
    "loaders.pdf_tables": "tables are always detected",
    "loaders.image_min_px": "64 px",
    "loaders.image_min_area": "1 % of the page",
    "ingest.batch_chunks": "128 chunks an embedding call",
    "ingest.workers": "one reader thread",
    "embedding.query_prefix": "the model family's",
    "embedding.passage_prefix": "the model family's",
    "embedding.revision": "the hub's newest files",
    "embedding.device": "CUDA when torch sees a GPU",
    "embedding.fp16": "half precision on a GPU",
    "embedding.max_length": "the model's own",
    "embedding.dimensions": "the model's own size",
    "embedding.max_retries": "5",
    "embedding.concurrency": "4 batches at once",
    "embedding.verify": "model files are always checked",
    "embedding.threads": "2",
    "embedding.cache": _CACHES,
    "retrieval.max_concurrent": "twice the CPU count",
    "retrieval.per_source_k": "100",
    "retrieval.rrf_k": "60",
    "retrieval.fill_dense": "on",
    "retrieval.bm25_weight": "1",
    "retrieval.dense_weight": "1",
    "retrieval.clause_weight": "0.35",
    "retrieval.max_clauses": "8",
    "retrieval.max_query_chars": "2,000",
    "retrieval.whole_articles": "on",
    "retrieval.compiled_core": "removed with the compiled search core",
    "rerank.revision": "the hub's newest files",
    "rerank.top_k": "the query's top_k",
    "rerank.top_m": "20",
    "rerank.device": "CUDA when torch sees a GPU",
    "rerank.fp16": "half precision on a GPU",
    "rerank.batch_size": "32",
    "rerank.max_length": "512 tokens",
    "rerank.max_chars": "600 characters",
    "rerank.verify": "model files are always checked",
    "answer.snippet_chars": "400 characters",
    "answer.max_chars": "12,000 characters; a client passes its own budget as `max_chars`",
    "server.path": "/mcp",
    "server.max_request_bytes": "1 MiB",
    "server.cache_ttl_s": "300 s",
    "server.max_images": "3",
    "server.cache_size": "256 tool answers, kept until the index changes",
    "tracing.max_bytes": "10 MB",
    "tracing.backups": "3",
    "tracing.detail": "every query trace keeps its candidate detail",
    "tracing.sample": "every query trace keeps its candidate detail",
    "tracing.slow_ms": "every query trace keeps its candidate detail",
    "judge.cache": _CACHES,
    "llm.max_retries": "3",
    "llm.concurrency": "4 requests at once",
    "llm.language": "the document's",
    "llm.prompt_version": "an edited prompt is a new cache key",
    "llm.cache": _CACHES,
    "llm.currency": "USD: give `llm.price_input` and `llm.price_output` in US dollars",
    "llm.rewrite_queries": "3",
    "llm.rewrite_timeout": "8 s",
    "transforms.context_window_chars": "6,000",
    "transforms.context_max_tokens": "150",
    "transforms.refine_min_ratio": "0.7",
    "transforms.refine_max_ratio": "1.2",
    "transforms.refine_min_overlap": "0.85",
    "transforms.max_tags": "5",
    "transforms.caption_max_images": "50",
}
GONE_SECTIONS = ("ingest",)
MIGRATIONS = {**{k: f"`{v}`" for k, v in MOVED.items()}, **{k: f"fixed: {v}" for k, v in FIXED.items()}}


def _warn(origin: str, old: str, new: str | None, env: bool) -> None:
    """One warning for a key of an older file; ``env``: the key came from a variable, so name variables."""
    name = env_name(tuple(old.split("."))) if env else old
    if new is not None:
        log.warning(
            "%s: %s is now %s (read as that; rename it)", origin, name, env_name(tuple(new.split("."))) if env else new
        )
    else:
        log.warning("%s: %s is no longer a setting (%s); remove it", origin, name, FIXED[old])


def migrate(data: dict[str, Any], origin: str, *, env: bool = False) -> dict[str, Any]:
    """``data`` (a settings file's or the environment's, nested) with the keys of older files renamed or dropped."""
    out = {name: dict(v) if isinstance(v, dict) else v for name, v in data.items()}
    for old in [*MOVED, *FIXED]:
        section, _, name = old.partition(".")
        part = out.get(section)
        if not isinstance(part, dict) or name not in part:
            continue
        value = part.pop(name)
        new = MOVED.get(old)
        _warn(origin, old, new, env)
        if new is None:
            continue
        head, _, tail = new.rpartition(".")
        target = out.setdefault(head, {}) if head else out
        if isinstance(target, dict):
            target.setdefault(tail, value)
    for section in GONE_SECTIONS:
        if section in out and not out[section]:
            del out[section]
    store = out.get("store")
    if isinstance(store, dict) and store.get("dense_search") == "hnsw":  # HNSW went: int8 screening is the fast path
        store["dense_search"] = "int8"
        log.warning("%s: store.dense_search hnsw is no longer offered; int8 is used (docs/settings.md)", origin)
    return out


def migrate_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``ZHIKU_*`` variables without those of sections that are gone (pydantic-settings never reads them)."""
    out = dict(environ)
    for old in [k for k in FIXED if k.partition(".")[0] in GONE_SECTIONS]:
        name = env_name(tuple(old.split(".")))
        if out.pop(name, None) is not None:
            _warn("the environment", old, None, True)
    return out


def section_model(annotation: Any) -> type[BaseModel] | None:
    """The settings model a field's ``annotation`` is (a section such as ``retrieval``), or None for a value."""
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def env_name(loc: tuple[str, ...]) -> str:
    return "ZHIKU_" + "__".join(loc).upper()


def _has(data: Mapping[str, Any], loc: tuple[str, ...]) -> bool:
    node: Any = data
    for key in loc:
        if not isinstance(node, Mapping) or key not in node:
            return False
        node = node[key]
    return True


@dataclass(frozen=True)
class Origins:
    """The layers of one ``load_settings`` call, highest precedence first: flags, environment, file."""

    path: Path
    file: Mapping[str, Any]
    env: Mapping[str, str]
    flags: Mapping[str, Any]

    def of(self, loc: tuple[str, ...]) -> str:
        """Where the value at ``loc`` came from, as words that follow the value ("from ZHIKU_X", "in zhiku.yaml")."""
        if _has(self.flags, loc):
            return "from the command line"
        if len(loc) == 2 and loc[0] == "server" and loc[1] in SERVER_ALIASES and f"ZHIKU_{loc[1].upper()}" in self.env:
            return f"from ZHIKU_{loc[1].upper()}"
        for n in range(len(loc), 0, -1):  # a whole section may come as JSON in ZHIKU_SECTION
            if env_name(loc[:n]) in self.env:
                return f"from {env_name(loc[:n])}"
        if _has(self.file, loc):
            return f"in {self.path}"
        return f"set it in {self.path} or {env_name(loc)}"


def _fields_at(model: type[BaseModel], parent: tuple[str, ...]) -> list[str]:
    for key in parent:
        field = model.model_fields.get(key)
        section = section_model(field.annotation if field is not None else None)
        if section is None:
            return []
        model = section
    return list(model.model_fields)


def _unknown(model: type[BaseModel], loc: tuple[str, ...], origin: str) -> str:
    close = difflib.get_close_matches(loc[-1], _fields_at(model, loc[:-1]), n=1, cutoff=0.6)
    from_env = origin.startswith("from ZHIKU_")
    where = "" if origin.startswith("set it") else origin
    hint = ""
    if close:
        meant = (*loc[:-1], close[0])
        hint = f"did you mean {env_name(meant) if from_env else '.'.join(meant)}? "
    return f"unknown setting {'.'.join(loc)} {where}".rstrip() + f" ({hint}{REFERENCE})"


def explain(e: ValidationError, model: type[BaseModel], origins: Origins | None) -> str:
    """One line for all of a validation's errors: each key, what is wrong, the value and where it came from."""
    parts = []
    for err in e.errors():
        loc = tuple(str(x) for x in err["loc"])
        origin = origins.of(loc) if origins is not None else f"set it in zhiku.yaml or {env_name(loc)}"
        if err["type"] == "extra_forbidden":
            parts.append(_unknown(model, loc, origin))
            continue
        sep = "; " if origin.startswith("set it") else " "
        parts.append(f"{'.'.join(loc)}: {err['msg']} (got {err.get('input')!r}{sep}{origin})")
    return "invalid settings: " + "; ".join(parts)


def check_env_names(model: type[BaseModel], environ: Mapping[str, str]) -> None:
    """Refuse ``ZHIKU_SECTION__KEY`` variables whose section does not exist, and ``ZHIKU_SECTION_KEY`` (one underscore)
    ones that name a real key: pydantic-settings ignores both, so the setting silently stays as it was."""
    sections = [name for name, f in model.model_fields.items() if section_model(f.annotation) is not None]
    for name in sorted(environ):
        if not name.startswith("ZHIKU_"):
            continue
        rest = name[len("ZHIKU_") :].lower()
        head, nested, _ = rest.partition("__")
        if nested and head not in model.model_fields:
            close = difflib.get_close_matches(head, sections, n=1, cutoff=0.6)
            meant = f"did you mean ZHIKU_{close[0].upper()}__{name.split('__', 1)[1]}? " if close else ""
            raise ConfigError(
                f"invalid settings: unknown setting section {head!r} in {name} ({meant}sections: "
                f"{', '.join(sections)}; {REFERENCE})"
            )
        if nested:
            continue
        for section in sections:
            key = rest[len(section) + 1 :]
            if rest.startswith(section + "_") and key != "api_key" and key in _fields_at(model, (section,)):
                raise ConfigError(
                    f"invalid settings: {name} is not read: a key inside a section takes two underscores, "
                    f"{env_name((section, key))} ({REFERENCE})"
                )
