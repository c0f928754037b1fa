"""Markdown tables stay tables in answer snippets (CLI and MCP both print ``build_answer``'s Markdown)."""

from __future__ import annotations

from zhiku.retrieval.answer import build_answer, flatten, focused_snippet, snippet
from zhiku.settings import AnswerSettings
from zhiku.types import Chunk, Hit

TABLE = "| | (1) | (2) |\n| --- | --- | --- |\n| 工资 | 0.12 | 0.34 |\n| 工龄 | 0.56 | 0.78 |"
TEXT = f"表 1 回归结果\n{TABLE}\n注：括号内为\n标准误。"


def hit(text: str, section: str = "第三章 > 表 1") -> Hit:
    chunk = Chunk("c1", "d1", "docs", "paper.pdf", "pdf", section, 4, 0, len(text), 0, text)
    return Hit(chunk=chunk, score=1.0)


def test_tables_keep_their_rows_and_prose_is_joined() -> None:
    assert flatten(TEXT) == f"表 1 回归结果\n\n{TABLE}\n\n注：括号内为 标准误。"
    assert snippet(TEXT, 200) == flatten(TEXT)
    cut = snippet(TEXT, 70)  # a cut inside the table keeps whole rows only
    assert cut == "表 1 回归结果\n\n| | (1) | (2) |\n| --- | --- | --- |\n| 工资 | 0.12 | 0.34 |\n\n…"


def test_a_focused_snippet_starts_at_the_table_header_not_mid_table() -> None:
    text = "前言很长的一段话。" * 6 + "\n" + TEXT
    got = focused_snippet(text, 90, ["工龄"])
    assert got.startswith(f"…\n\n{TABLE}\n\n注："), got


def test_the_answer_sets_a_table_off_as_its_own_block() -> None:
    md = build_answer("工龄的系数", "bm25", [hit(TABLE)], AnswerSettings()).markdown
    assert f"[1]\n\n{TABLE}\n\n(第三章 > 表 1)\n\n**来源 / Sources**" in md
    prose = build_answer("q", "bm25", [hit("第一段\n第二段")], AnswerSettings()).markdown
    assert "[1] 第一段 第二段 (第三章 > 表 1)\n" in prose
