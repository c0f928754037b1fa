"""Cited answers: Markdown with ``[n]`` markers and a sources list, plus structured citations.

zhiku returns evidence, not generated prose: the assistant that called it writes the final answer from
these passages. Every passage carries its citation (source file, page when known, section), and the whole
Markdown stays within a character budget so results never flood the client's context window.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from zhiku.settings import AnswerSettings
from zhiku.types import Answer, Citation, Hit, SearchMode

_SENTENCE_END = re.compile(r"[。！？；!?;…]|\.(?=\s)")


def snippet(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, at a sentence end when one falls in the last 40 %."""
    text = " ".join(text.split()) if "\n" in text else text
    if len(text) <= limit:
        return text
    head = text[: max(limit - 1, 1)]
    ends = [m.end() for m in _SENTENCE_END.finditer(head)]
    cut = ends[-1] if ends and ends[-1] >= 0.6 * len(head) else len(head)
    return head[:cut].rstrip() + "…"


def cite(hit: Hit) -> str:
    """``source, p. N, section`` for the sources list."""
    c = hit.chunk
    parts = [c.source]
    if c.page is not None:
        parts.append(f"p. {c.page}")
    if c.section:
        parts.append(c.section)
    return ", ".join(parts)


def _render(query: str, hits: Sequence[Hit], limit: int, low_confidence: bool) -> str:
    lines = [f"**检索问题 / Query:** {query}", ""]
    if not hits:
        lines.append("未找到相关内容。No matching passages were found in the knowledge base.")
        return "\n".join(lines)
    if low_confidence:
        lines += ["> ⚠️ 低置信度 / Low confidence: the best match scores below the threshold; "
                  "these passages may not answer the question.", ""]
    for n, hit in enumerate(hits, 1):
        where = f" ({hit.chunk.section})" if hit.chunk.section else ""
        lines.append(f"[{n}] {snippet(hit.chunk.text, limit)}{where}")
        lines.append("")
    lines.append("**来源 / Sources**")
    lines.append("")
    for n, hit in enumerate(hits, 1):
        lines.append(f"[{n}] {cite(hit)}")
    return "\n".join(lines)


def build_answer(
    query: str,
    mode: SearchMode,
    hits: Sequence[Hit],
    settings: AnswerSettings,
    *,
    low_confidence: bool = False,
) -> Answer:
    """Markdown + citations for ``hits``; snippets shrink until the Markdown fits ``settings.max_chars``."""
    limit = settings.snippet_chars
    markdown = _render(query, hits, limit, low_confidence)
    while len(markdown) > settings.max_chars and limit > 40:
        limit = max(40, int(limit * 0.8))
        markdown = _render(query, hits, limit, low_confidence)
    if len(markdown) > settings.max_chars:
        markdown = markdown[: settings.max_chars - 1] + "…"
    citations = tuple(
        Citation(
            n=n,
            chunk_id=h.chunk.chunk_id,
            doc_id=h.chunk.doc_id,
            source=h.chunk.source,
            page=h.chunk.page,
            section=h.chunk.section,
            score=round(h.score, 6),
            text=h.chunk.text,
        )
        for n, h in enumerate(hits, 1)
    )
    return Answer(query=query, mode=mode, markdown=markdown, citations=citations, hits=tuple(hits),
                  low_confidence=low_confidence)
