"""MCP results with what the ingest transforms added: each citation's context, title and tags."""

from __future__ import annotations

from collections.abc import Sequence

from zhiku.api import KnowledgeBase
from zhiku.mcp.models import CitationOut


def enrich_citations(kb: KnowledgeBase, citations: Sequence[CitationOut]) -> list[CitationOut]:
    found = kb.enrichments.chunk_enrichments([c.chunk_id for c in citations])
    out = []
    for c in citations:
        e = found.get(c.chunk_id)
        if e is None:
            out.append(c)
            continue
        update = {
            "context": e.context or None,
            "refined": e.refined or None,
            "title": e.title or None,
            "tags": list(e.tags) or None,
        }
        out.append(c.model_copy(update=update))
    return out
