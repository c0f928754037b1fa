"""``metadata``: a title, a one-sentence summary and tags for every chunk and for the document. They are indexed
with the chunk (title and tags), returned in results and by ``get_document_summary`` (the LLM summary), and tags
can filter searches (``--tag``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from zhiku.ingest.transforms._util import each_chunk, render, require_llm, window_around
from zhiku.ingest.transforms.base import DocMeta, DocumentBatch, TransformContext, TransformError
from zhiku.llm.cache import json_object_in

MAX_TITLE = 80
MAX_SUMMARY = 400
MAX_TAG = 32


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
        max_tags = int(ctx.options.get("max_tags", 5))
        zh = ctx.language == "zh"
        prompt_id = ctx.prompt_id(self.name)

        def ask(text: str, what: str) -> dict[str, Any]:
            messages = render(ctx, self.name, text=text, what=what, max_tags=max_tags)
            reply = llm.chat(
                messages, prompt_id=prompt_id, max_tokens=300, validate=lambda r: parse_metadata(r, max_tags)
            )
            return parse_metadata(reply, max_tags)

        window = int(ctx.options.get("context_window_chars", 6000))
        try:
            doc = ask(window_around(batch.doc.text, 0, 0, window), "文档" if zh else "document")
            batch = replace(batch, meta=DocMeta(doc["title"], doc["summary"], doc["tags"]))
        except TransformError as e:
            batch = batch.with_issue(self.name, f"document metadata: {e}", unreached=e.unreached)
        return each_chunk(batch, ctx, self.name, lambda i: ask(batch.chunks[i].text, "文档片段" if zh else "passage"))
