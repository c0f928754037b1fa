"""``refine``: an LLM cleans a chunk's text (broken lines, hyphenation, OCR noise). A guard rejects a cleaned text
that drops or invents content — its length ratio or its character overlap with the original out of bounds — and
the original is indexed instead (the reason is reported). The refined text is what gets embedded and BM25-indexed;
the stored chunk text (what citations quote) stays the original."""

from __future__ import annotations

from collections import Counter

from zhiku.ingest.transforms._util import each_chunk, non_empty, render, require_llm
from zhiku.ingest.transforms.base import DocumentBatch, TransformContext, TransformError
from zhiku.llm.chat import clean_reply


def guard(original: str, refined: str, *, min_ratio: float, max_ratio: float, min_overlap: float) -> str | None:
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
        opts = ctx.options
        bounds = {
            "min_ratio": float(opts.get("refine_min_ratio", 0.7)),
            "max_ratio": float(opts.get("refine_max_ratio", 1.2)),
            "min_overlap": float(opts.get("refine_min_overlap", 0.85)),
        }
        prompt_id = ctx.prompt_id(self.name)

        def step(i: int) -> dict[str, str] | None:
            original = batch.chunks[i].text
            messages = render(ctx, self.name, chunk=original)
            max_tokens = max(64, len(original) * 2)
            cleaned = clean_reply(llm.chat(messages, prompt_id=prompt_id, max_tokens=max_tokens, validate=non_empty))
            why = guard(original, cleaned, **bounds)
            if why is not None:
                raise TransformError(f"refined text rejected, original kept: {why}")
            return {"refined": cleaned} if cleaned != original.strip() else None

        return each_chunk(batch, ctx, self.name, step)
