"""Helpers the built-in transforms share: run a step per chunk (concurrently, one failure per chunk), render
prompts, clean replies."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from string import Template
from typing import Any

from zhiku.ingest.transforms.base import DocumentBatch, TransformContext, TransformError
from zhiku.llm.chat import clean_reply

Step = Callable[[int], Mapping[str, Any] | None]  # chunk index → Enrichment changes (None: nothing to add)


def each_chunk(batch: DocumentBatch, ctx: TransformContext, name: str, step: Step) -> DocumentBatch:
    """``step(i)`` for every chunk, ``ctx.options['concurrency']`` at a time; a ``TransformError`` leaves chunk
    ``i`` as it was and records the reason. Results are applied in chunk order."""

    def run(i: int) -> tuple[int, Mapping[str, Any] | None, TransformError | None]:
        try:
            return i, step(i), None
        except TransformError as e:
            return i, None, e
        finally:
            ctx.on_chunk(name)

    workers = max(1, int(ctx.options.get("concurrency", 4)))
    if workers == 1 or len(batch.chunks) <= 1:
        results = [run(i) for i in range(len(batch.chunks))]
    else:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"zhiku-{name}") as pool:
            results = list(pool.map(run, range(len(batch.chunks))))
    for i, changes, error in results:
        if error is not None:
            batch = batch.with_issue(name, str(error), batch.chunks[i].chunk_id, unreached=error.unreached)
        elif changes:
            batch = batch.enrich(i, **changes)
    return batch


def render(ctx: TransformContext, name: str, **values: object) -> list[dict[str, Any]]:
    """The chat messages of prompt ``name`` with ``values`` filled in."""
    text = Template(ctx.prompt(name)).safe_substitute({k: str(v) for k, v in values.items()})
    return [{"role": "user", "content": text}]


def require_llm(ctx: TransformContext, name: str) -> Any:
    if ctx.llm is None:
        raise TransformError(f"{name} needs an LLM endpoint: set llm.base_url and llm.model (docs/transforms.md)")
    return ctx.llm


def non_empty(text: str) -> None:
    if not clean_reply(text):
        raise ValueError("empty after removing tags and quotes")


def window_around(text: str, start: int, end: int, size: int) -> str:
    """``size`` characters of ``text`` centred on ``text[start:end]`` (the whole text when it is short)."""
    if len(text) <= size:
        return text
    mid = (start + end) // 2
    lo = max(0, min(mid - size // 2, len(text) - size))
    return ("…" if lo else "") + text[lo : lo + size] + ("…" if lo + size < len(text) else "")
