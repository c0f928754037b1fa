"""A document's text rebuilt from its stored chunks, and its outline."""

from __future__ import annotations

import re
from collections.abc import Sequence

from zhiku.types import Chunk

SECTION_SEPARATOR = " > "
# An article label that the chunker appends to a section path ("第十九条", "第三条、第四条"; "第三条至第七条" from
# indexes built before chunker 3), not a heading.
_ARTICLE = r"第[零一二三四五六七八九十百千〇两\d]+条"
_ONE_ARTICLE = re.compile(_ARTICLE)
_ARTICLE_LABEL = re.compile(rf"^({_ARTICLE})(?:(?:至|、){_ARTICLE})*$")


def heading_path(chunk: Chunk, gap: int, current: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The headings of a chunk's section, without a trailing article label that the chunker added."""
    parts = tuple(p for p in chunk.section.split(SECTION_SEPARATOR) if p) if chunk.section else ()
    if parts and parts != current:
        m = _ARTICLE_LABEL.match(parts[-1])
        if m and (m.group(1) in chunk.text or gap < len(parts[-1]) + 3):
            parts = parts[:-1]
    return parts


def _indented(text: str) -> str:
    """``text`` with its first line indented like the code block it opens."""
    lines = text.split("\n")
    if not lines[0].startswith(("```", "~~~")):
        return text
    close = next((i for i, ln in enumerate(lines[1:], 1) if ln.lstrip().startswith(lines[0][:3])), None)
    indent = len(lines[close]) - len(lines[close].lstrip(" ")) if close else 0
    if not indent or any(ln.strip() and not ln.startswith(" " * indent) for ln in lines[1:close]):
        return text
    return " " * indent + text


def reconstruct_markdown(chunks: Sequence[Chunk]) -> str:
    """The document as Markdown from its chunks (any order; they are sorted by offset)."""
    out: list[str] = []
    path: tuple[str, ...] = ()
    end: int | None = None
    for c in sorted(chunks, key=lambda c: (c.start, c.ordinal)):
        gap = c.start - (end or 0)
        body = c.text[len(c.text) - (c.end - c.start) :]  # a continued table's repeated header is not document text
        text = body[-gap:] if end is not None and gap < 0 else body  # an overlap is taken once
        new_path = heading_path(c, gap, path)
        if new_path != path:
            keep = 0
            while keep < min(len(path), len(new_path)) and path[keep] == new_path[keep]:
                keep += 1
            headings = [f"{'#' * min(level + 1, 6)} {title}" for level, title in enumerate(new_path) if level >= keep]
            out.append("\n\n".join(([""] if out else []) + headings + [""]) if headings else "\n\n" if out else "")
            path = new_path
        elif end is not None and gap > 0:
            out.append("\n" if gap == 1 else "\n\n")
        out.append(_indented(text) if gap > 1 or end is None else text)
        end = c.end if end is None else max(end, c.end)
    return "".join(out)


def outline(chunks: Sequence[Chunk]) -> list[str]:
    """The distinct section paths of the chunks, in document order."""
    out: list[str] = []
    seen: set[str] = set()
    for c in sorted(chunks, key=lambda c: c.ordinal):
        if not c.section or c.section in seen:
            continue
        seen.add(c.section)
        head, sep, labels = c.section.rpartition(SECTION_SEPARATOR)
        last_head, _, last_labels = out[-1].rpartition(SECTION_SEPARATOR) if out else ("", "", "")
        mine, theirs = labels.split("、"), last_labels.split("、")
        if out and head == last_head and set(mine) & set(theirs) and all(_ONE_ARTICLE.fullmatch(x) for x in mine):
            out[-1] = f"{head}{sep}{'、'.join(dict.fromkeys(theirs + mine))}"
        else:
            out.append(c.section)
    return out
