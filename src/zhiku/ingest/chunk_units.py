"""Structural units (rule 4 of :mod:`zhiku.ingest.chunking`): what a chunk is made of.

A section's paragraphs are grouped into units that a chunk holds whole:

- **article**: a paragraph starting with a statute article marker (``第四十七条`` then whitespace), with the
  paragraphs after it up to the next unit start (its ``（一）`` items and further paragraphs);
- **faq**: a question paragraph (``问：``, ``Q:``, ``问题：``, optionally bold) with the answer paragraphs after it;
- **part**: a paragraph opening a top-level numbered part (``一、``) with its following plain paragraphs;
- **table**: a Markdown table with its caption (see :mod:`zhiku.ingest.chunk_tables`);
- **paragraph**: any other paragraph (list items ``（一）``, ``1.``, ``-`` are paragraphs of their own).
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from zhiku.ingest.chunk_tables import table_units
from zhiku.text import ARTICLE_RE
from zhiku.text import NUMERALS as _NUM

_QUESTION_RE = re.compile(r"[ \t\u3000]*(?:\*\*)?(?:问题?\s*\d*\s*[:：]|[Qq]\s*\d*\s*[:：.．])")
_PART_RE = re.compile(rf"[ \t\u3000]*[{_NUM}]+、")
_OPENS_GROUP = ("article", "faq", "part")


@dataclass(frozen=True)
class Unit:
    """``text[start:end]``: whole paragraphs ``parts`` (``(start, end, table_start)``) of one kind."""

    kind: str
    parts: tuple[tuple[int, int, int | None], ...]

    @property
    def start(self) -> int:
        return self.parts[0][0]

    @property
    def end(self) -> int:
        return self.parts[-1][1]


def _kind(text: str, start: int, table: int | None) -> str:
    if ARTICLE_RE.match(text, start) is not None:
        return "article"
    if _QUESTION_RE.match(text, start) is not None:
        return "faq"
    if _PART_RE.match(text, start) is not None:
        return "part"
    return "table" if table == start else "paragraph"


def group_units(text: str, paragraphs: Sequence[tuple[int, int]]) -> list[Unit]:
    """The units of one section's paragraphs, in order (every paragraph belongs to exactly one unit)."""
    units: list[Unit] = []
    for ps, pe, table in table_units(text, paragraphs):
        kind = _kind(text, ps, table)
        if kind in ("paragraph", "table") and units and units[-1].kind in _OPENS_GROUP:
            units[-1] = Unit(units[-1].kind, (*units[-1].parts, (ps, pe, table)))
        else:
            units.append(Unit(kind, ((ps, pe, table),)))
    return units


@dataclass(frozen=True)
class ArticleIndex:
    """Where the statute articles of a document start, for labelling chunks."""

    positions: tuple[int, ...]
    labels: tuple[str, ...]

    @classmethod
    def of(cls, text: str) -> ArticleIndex:
        found = [(m.start(1), m.group(1)) for m in ARTICLE_RE.finditer(text)]
        return cls(tuple(p for p, _ in found), tuple(label for _, label in found))

    def held(self, start: int, end: int, lo: int, hi: int) -> list[str]:
        """Labels of the articles that ``text[start:end]`` holds or continues (articles ``lo``..``hi`` of its
        section): the article ``start`` lies in, then every article starting before ``end``."""
        i = bisect_right(self.positions, start, lo, hi)
        j = bisect_left(self.positions, end, lo, hi)
        return list(self.labels[max(i - 1, lo) : j])

    def bounds(self, start: int, end: int) -> tuple[int, int]:
        """The index range of the articles starting in ``[start, end)``."""
        return bisect_left(self.positions, start), bisect_left(self.positions, end)


def article_label(labels: Sequence[str]) -> str:
    """Exactly the articles a chunk holds: ``"第三条"``, ``"第三条、第四条"``; ``""`` for none."""
    return "、".join(dict.fromkeys(labels))
