"""``contextual``: Anthropic's Contextual Retrieval. Each chunk gets a 50–100-token context written from its
document (the whole document, or a window around the chunk when it is long). The context is stored apart from the
chunk's text, prepended to it for embedding and BM25, shown in traces and results; citations quote the original."""

from __future__ import annotations

from zhiku.ingest.transforms._util import each_chunk, non_empty, render, require_llm, window_around
from zhiku.ingest.transforms.base import DocumentBatch, TransformContext
from zhiku.llm.chat import clean_reply

MAX_CONTEXT_CHARS = 400


class Contextual:
    name = "contextual"
    needs_llm = True

    def apply(self, batch: DocumentBatch, ctx: TransformContext) -> DocumentBatch:
        llm = require_llm(ctx, self.name)
        window = int(ctx.options.get("context_window_chars", 6000))
        max_tokens = int(ctx.options.get("context_max_tokens", 150))
        text = batch.doc.text
        prompt_id = ctx.prompt_id(self.name)

        def step(i: int) -> dict[str, str]:
            c = batch.chunks[i]
            document = window_around(text, c.start, c.end, window)
            messages = render(ctx, self.name, document=document, chunk=c.text)
            reply = llm.chat(messages, prompt_id=prompt_id, max_tokens=max_tokens, validate=non_empty)
            return {"context": clean_reply(reply, MAX_CONTEXT_CHARS)}

        return each_chunk(batch, ctx, self.name, step)
