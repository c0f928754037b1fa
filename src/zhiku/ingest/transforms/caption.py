"""``caption``: images extracted from PDF and Word files are described by an OpenAI-compatible vision model. The
description fills ``ImageRef.caption`` (after the document's own caption, if any), so it is indexed with the
chunk's text and returned with the image over MCP."""

from __future__ import annotations

import base64
from dataclasses import replace
from string import Template

from zhiku.ingest.transforms._util import non_empty, require_llm
from zhiku.ingest.transforms.base import ChatService, DocumentBatch, TransformContext, TransformError
from zhiku.llm.chat import clean_reply
from zhiku.types import Chunk, ImageRef

MAX_CAPTION = 300
MAX_IMAGE_BYTES = 8 * 1024 * 1024


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
        limit = int(ctx.options.get("caption_max_images", 50))
        done: dict[str, str] = {}  # image id → generated caption ("" when it failed); an image is asked once
        for i, chunk in enumerate(batch.chunks):
            if not chunk.images:
                continue
            refs: list[ImageRef] = []
            for ref in chunk.images:
                if ref.image_id not in done and len(done) < limit:
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
