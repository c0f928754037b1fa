"""The committed MCP docs match the server's real schemas."""

from __future__ import annotations

from pathlib import Path

from zhiku.extensions import ToolSpec
from zhiku.mcp import text as mcp_text
from zhiku.mcp.server import tool_reference

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_tool_reference_is_up_to_date() -> None:
    committed = (DOCS / "mcp-tools.md").read_text(encoding="utf-8")
    assert committed == tool_reference(), "run `python -m zhiku.mcp.server --tool-reference > docs/mcp-tools.md`"


def test_descriptions_fit_and_are_bilingual() -> None:
    for name in ("QUERY", "LIST_COLLECTIONS", "DOCUMENT_SUMMARY", "INGEST", "DELETE"):
        t = getattr(mcp_text, name)
        text = ToolSpec(print, name.lower(), t.description, t.when_to_use, t.examples, t.errors).compose()
        assert len(text) <= 2048, name
        assert "示例" in text and "Example" in text and any("\u4e00" <= ch <= "\u9fff" for ch in text), name


def test_connection_guide_names_every_tool() -> None:
    guide = (DOCS / "mcp.md").read_text(encoding="utf-8")
    for tool in (
        "query_knowledge_hub",
        "list_collections",
        "get_document_summary",
        "ingest_documents",
        "delete_document",
    ):
        assert tool in guide
    assert "zhiku serve" in guide and "mcp-tools.md" in guide
