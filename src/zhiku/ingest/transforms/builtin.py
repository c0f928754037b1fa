"""The built-in transforms: ``contextual``, ``refine``, ``metadata`` and ``caption``.

- ``contextual``: Anthropic's Contextual Retrieval. Each chunk gets a 50–100-token context written from its
  document (the whole document, or a window around the chunk when it is long), stored apart from the chunk's text
  and prepended to it for embedding and BM25; citations quote the original.
- ``refine``: an LLM cleans a chunk's text (broken lines, hyphenation, OCR noise). A guard rejects a cleaned text
  that drops or invents content (its length ratio or character overlap with the original out of bounds) and the
  original is indexed instead. The refined text is what gets embedded and BM25-indexed; the stored text stays.
- ``metadata``: a title, a one-sentence summary and tags for every chunk and for the document: indexed with the
  chunk (title and tags), returned in results and by ``get_document_summary``; tags filter searches (``--tag``).
- ``caption``: images extracted from PDF and Word files are described by an OpenAI-compatible vision model; the
  description fills ``ImageRef.caption`` (after the document's own caption), so it is indexed with the chunk's
  text and returned with the image over MCP.
"""

from __future__ import annotations

import base64
from collections import Counter
from dataclasses import replace
from string import Template
from typing import Any

from zhiku.ingest.transforms._util import each_chunk, non_empty, render, require_llm, window_around
from zhiku.ingest.transforms.base import ChatService, DocMeta, DocumentBatch, TransformContext, TransformError
from zhiku.llm.cache import json_object_in
from zhiku.llm.chat import clean_reply
from zhiku.types import Chunk, ImageRef

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
    """Why ``refined`` is rejected, or None. Lengths and overlap count non-whitespace characters; overlap is the
    multiset intersection over each side (kept share of the original, and share of the output found in it)."""
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
            why = guard(original, cleaned)
            if why is not None:
                raise TransformError(f"refined text rejected, original kept: {why}")
            return {"refined": cleaned} if cleaned != original.strip() else None

        return each_chunk(batch, ctx, self.name, step)


MAX_TITLE = 80
MAX_SUMMARY = 400
MAX_TAG = 32
MAX_TAGS = 5  # of a document or passage: a few that filter, not an index of every term


def parse_metadata(text: str, max_tags: int) -> dict[str, Any]:
    """``{"title", "summary", "tags"}`` from a reply; ``ValueError`` when it is not that JSON object."""
    value = json_object_in(text)
    title, summary, tags = value.get("title", ""), value.get("summary", ""), value.get("tags", [])
    if not isinstance(title, str) or not isinstance(summary, str):
        raise ValueError(f"title and summary must be strings: {text[:80]!r}")
    if isinstance(tags, str):
        tags = [t for t in tags.replace("，", ",").split(",")]
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ValueError(f"tags must be a list of strings: {text[:80]!r}")
    if not (title.strip() or summary.strip() or tags):
        raise ValueError("title, summary and tags are all empty")
    clean = list(dict.fromkeys(t.strip().lstrip("#")[:MAX_TAG] for t in tags if t.strip()))[:max_tags]
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
            reply = llm.chat(
                messages, prompt_id=prompt_id, max_tokens=300, validate=lambda r: parse_metadata(r, MAX_TAGS)
            )
            return parse_metadata(reply, MAX_TAGS)

        try:
            doc = ask(window_around(batch.doc.text, 0, 0, WINDOW_CHARS), "文档" if zh else "document")
            batch = replace(batch, meta=DocMeta(doc["title"], doc["summary"], doc["tags"]))
        except TransformError as e:
            batch = batch.with_issue(self.name, f"document metadata: {e}", unreached=e.unreached)
        return each_chunk(batch, ctx, self.name, lambda i: ask(batch.chunks[i].text, "文档片段" if zh else "passage"))


MAX_CAPTION = 300
MAX_IMAGE_BYTES = 8 * 1024 * 1024
MAX_IMAGES = 50  # described per document: a scanned catalogue's hundreds of pictures would cost as many calls


def describe(llm: ChatService, ctx: TransformContext, ref: ImageRef, blob: bytes, chunk: Chunk) -> str:
    """The vision model's description of one image (``TransformError`` on failure)."""
    if not blob or len(blob) > MAX_IMAGE_BYTES:
        raise TransformError(f"image {ref.image_id} has no bytes or is over 8 MiB")
    text = Template(ctx.prompt("caption")).safe_substitute(caption=ref.caption, chunk=chunk.text[:300])
    url = f"data:{ref.mime_type};base64,{base64.b64encode(blob).decode('ascii')}"
    content = [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}]
    reply = llm.chat(
        [{"role": "user", "content": content}],
        prompt_id=ctx.prompt_id("caption"),
        max_tokens=200,
        vision=True,
        validate=non_empty,
    )
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
