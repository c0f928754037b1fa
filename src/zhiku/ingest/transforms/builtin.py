"""The built-in transforms: ``contextual``, ``refine``, ``metadata`` and ``caption`` (docs/transforms.md)."""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from string import Template
from typing import Any

from zhiku.ingest.transforms.base import ChatService, DocMeta, DocumentBatch, TransformContext, TransformError
from zhiku.llm import clean_reply, json_object_in
from zhiku.types import Chunk, ImageRef

Step = Callable[[int], Mapping[str, Any] | None]  # chunk index → Enrichment changes (None: nothing to add)


def each_chunk(batch: DocumentBatch, ctx: TransformContext, name: str, step: Step) -> DocumentBatch:
    """``step(i)`` for every chunk, ``concurrency`` at a time, applied in order; a ``TransformError`` records an issue."""

    def run(i: int) -> tuple[Mapping[str, Any] | None, TransformError | None]:
        try:
            return step(i), None
        except TransformError as e:
            return None, e
        finally:
            ctx.on_chunk(name)

    workers = max(1, int(ctx.options.get("concurrency", 4)))
    if workers == 1 or len(batch.chunks) <= 1:
        results = [run(i) for i in range(len(batch.chunks))]
    else:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"zhiku-{name}") as pool:
            results = list(pool.map(run, range(len(batch.chunks))))
    for i, (changes, error) in enumerate(results):
        if error is not None:
            batch = batch.with_issue(name, str(error), batch.chunks[i].chunk_id, unreached=error.unreached)
        elif changes:
            batch = batch.enrich(i, **changes)
    return batch


def render(ctx: TransformContext, name: str, **values: object) -> list[dict[str, Any]]:
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
    if len(text) <= size:
        return text
    mid = (start + end) // 2
    lo = max(0, min(mid - size // 2, len(text) - size))
    return ("…" if lo else "") + text[lo : lo + size] + ("…" if lo + size < len(text) else "")


MAX_CONTEXT_CHARS = 400
WINDOW_CHARS = 6000  # of a long document around a chunk that an LLM reads: the chunk's neighbourhood, not the book
CONTEXT_TOKENS = 150  # a context is 50–100 tokens: room for a model that runs a little long


class Contextual:
    name = "contextual"
    needs_llm = True

    def apply(self, batch: DocumentBatch, ctx: TransformContext) -> DocumentBatch:
        llm = require_llm(ctx, self.name)
        text = batch.doc.text
        prompt_id = ctx.prompt_id(self.name)

        def step(i: int) -> dict[str, str]:
            c = batch.chunks[i]
            document = window_around(text, c.start, c.end, WINDOW_CHARS)
            messages = render(ctx, self.name, document=document, chunk=c.text)
            reply = llm.chat(messages, prompt_id=prompt_id, max_tokens=CONTEXT_TOKENS, validate=non_empty)
            return {"context": clean_reply(reply, MAX_CONTEXT_CHARS)}

        return each_chunk(batch, ctx, self.name, step)


def guard(
    original: str, refined: str, *, min_ratio: float = 0.7, max_ratio: float = 1.2, min_overlap: float = 0.85
) -> str | None:
    """Why ``refined`` is rejected, or None: its length, or the characters it drops or invents, out of bounds."""
    a = Counter(ch for ch in original if not ch.isspace())
    b = Counter(ch for ch in refined if not ch.isspace())
    na, nb = sum(a.values()), sum(b.values())
    if na == 0:
        return "the original has no text"
    ratio = nb / na
    if not min_ratio <= ratio <= max_ratio:
        return f"length ratio {ratio:.2f} outside [{min_ratio:g}, {max_ratio:g}]"
    common = sum((a & b).values())
    kept, grounded = common / na, common / max(nb, 1)
    if kept < min_overlap:
        return f"keeps {kept:.0%} of the original's characters (< {min_overlap:.0%}): content dropped"
    if grounded < min_overlap:
        return f"only {grounded:.0%} of its characters are in the original (< {min_overlap:.0%}): content invented"
    return None


class Refine:
    name = "refine"
    needs_llm = True

    def apply(self, batch: DocumentBatch, ctx: TransformContext) -> DocumentBatch:
        llm = require_llm(ctx, self.name)
        prompt_id = ctx.prompt_id(self.name)

        def step(i: int) -> dict[str, str] | None:
            original = batch.chunks[i].text
            messages = render(ctx, self.name, chunk=original)
            max_tokens = max(64, len(original) * 2)
            cleaned = clean_reply(llm.chat(messages, prompt_id=prompt_id, max_tokens=max_tokens, validate=non_empty))
            if (why := guard(original, cleaned)) is not None:
                raise TransformError(f"refined text rejected, original kept: {why}")
            return {"refined": cleaned} if cleaned != original.strip() else None

        return each_chunk(batch, ctx, self.name, step)


MAX_TITLE = 80
MAX_SUMMARY = 400
MAX_TAG = 32
MAX_TAGS = 5  # of a document or passage: a few that filter, not an index of every term


def parse_metadata(text: str) -> dict[str, Any]:
    value = json_object_in(text)
    title, summary, tags = value.get("title", ""), value.get("summary", ""), value.get("tags", [])
    if not isinstance(title, str) or not isinstance(summary, str):
        raise ValueError(f"title and summary must be strings: {text[:80]!r}")
    if isinstance(tags, str):
        tags = tags.replace("，", ",").split(",")
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ValueError(f"tags must be a list of strings: {text[:80]!r}")
    if not (title.strip() or summary.strip() or tags):
        raise ValueError("title, summary and tags are all empty")
    clean = list(dict.fromkeys(t.strip().lstrip("#")[:MAX_TAG] for t in tags if t.strip()))[:MAX_TAGS]
    return {"title": title.strip()[:MAX_TITLE], "summary": summary.strip()[:MAX_SUMMARY], "tags": tuple(clean)}


class Metadata:
    name = "metadata"
    needs_llm = True

    def apply(self, batch: DocumentBatch, ctx: TransformContext) -> DocumentBatch:
        llm = require_llm(ctx, self.name)
        zh = ctx.language == "zh"
        prompt_id = ctx.prompt_id(self.name)

        def ask(text: str, what: str) -> dict[str, Any]:
            messages = render(ctx, self.name, text=text, what=what, max_tags=MAX_TAGS)
            return parse_metadata(llm.chat(messages, prompt_id=prompt_id, max_tokens=300, validate=parse_metadata))

        try:
            doc = ask(window_around(batch.doc.text, 0, 0, WINDOW_CHARS), "文档" if zh else "document")
            tags = tuple(dict.fromkeys((*batch.doc.tags, *doc["tags"])))  # the file's own tags stay
            batch = replace(batch, meta=DocMeta(doc["title"], doc["summary"], tags))
        except TransformError as e:
            batch = batch.with_issue(self.name, f"document metadata: {e}", unreached=e.unreached)
        return each_chunk(batch, ctx, self.name, lambda i: ask(batch.chunks[i].text, "文档片段" if zh else "passage"))


MAX_CAPTION = 300
MAX_IMAGE_BYTES = 8 * 1024 * 1024
MAX_IMAGES = 50  # described per document: a scanned catalogue's hundreds of pictures would cost as many calls


def describe(llm: ChatService, ctx: TransformContext, ref: ImageRef, blob: bytes, chunk: Chunk) -> str:
    if not blob or len(blob) > MAX_IMAGE_BYTES:
        raise TransformError(f"image {ref.image_id} has no bytes or is over 8 MiB")
    text = Template(ctx.prompt("caption")).safe_substitute(caption=ref.caption, chunk=chunk.text[:300])
    url = f"data:{ref.mime_type};base64,{base64.b64encode(blob).decode('ascii')}"
    content = [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}]
    messages = [{"role": "user", "content": content}]
    reply = llm.chat(messages, prompt_id=ctx.prompt_id("caption"), max_tokens=200, vision=True, validate=non_empty)
    return clean_reply(reply, MAX_CAPTION)


class Caption:
    name = "caption"
    needs_llm = True

    def apply(self, batch: DocumentBatch, ctx: TransformContext) -> DocumentBatch:
        if not any(c.images for c in batch.chunks):
            return batch
        llm = require_llm(ctx, self.name)
        data = {im.ref.image_id: im.data for im in batch.doc.images}
        done: dict[str, str] = {}  # image id → generated caption ("" when it failed); an image is asked once
        for i, chunk in enumerate(batch.chunks):
            if not chunk.images:
                continue
            refs: list[ImageRef] = []
            for ref in chunk.images:
                if ref.image_id not in done and len(done) < MAX_IMAGES:
                    try:
                        done[ref.image_id] = describe(llm, ctx, ref, data.get(ref.image_id, b""), chunk)
                    except TransformError as e:
                        done[ref.image_id] = ""
                        batch = batch.with_issue(
                            self.name, f"image {ref.image_id}: {e}", chunk.chunk_id, unreached=e.unreached
                        )
                generated = done.get(ref.image_id, "")
                caption = f"{ref.caption} — {generated}" if ref.caption and generated else (generated or ref.caption)
                refs.append(replace(ref, caption=caption))
            batch = batch.with_chunk(i, replace(chunk, images=tuple(refs)))
            ctx.on_chunk(self.name)
        return batch
