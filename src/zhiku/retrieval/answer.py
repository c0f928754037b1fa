"""Cited answers: Markdown with ``[n]`` markers and a sources list, plus structured citations."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Sequence

from zhiku.cache import memoized
from zhiku.reconstruct import SECTION_SEPARATOR
from zhiku.retrieval.context import split_label
from zhiku.text import ARTICLE_RE, article_numbers
from zhiku.types import Answer, Citation, Hit, SearchMode

LOW_CONFIDENCE_NOTE = (
    "> ⚠️ 低置信度 / Low confidence: 知识库中没有找到与问题足够相关的内容，以下段落可能答非所问。"
    "No passage in the knowledge base matches this question closely: the nearest ones follow, shortened; "
    "they may not answer it, so check them before relying on them."
)
FOREIGN_QUESTION_TIP = (
    "> 提示 / Tip: the passages are in Chinese and the question is not; a question in Chinese (用中文提问) usually matches "
    "them better."
)
CHINESE_QUESTION_TIP = (
    "> 提示 / Tip: 段落是英文的，问题是中文的；用英文提问 (ask in English) 通常匹配得更好。"
    "The passages are in English: a question in English usually matches them better."
)
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
_LATIN = re.compile(r"[A-Za-z]")  # a question in another language, not one of digits only (996)
MAX_CHARS = 12000  # the whole Markdown answer's budget when the caller gives none (the MCP tool's default too)
MIN_SNIPPET = 40  # the shortest snippet a budget shrinks a citation to
SNIPPET_CHARS = 400  # characters of each hit in the Markdown answer before the budget shrinks them
LOW_CONFIDENCE_SNIPPET = 120  # characters of each passage a low-confidence answer shows (the full text: citations)
_SENTENCE_END = re.compile(r"[。！？；!?;…]|\.(?=\s)")
_MARKER = r"(?:[-*+]|\d{1,3}[.)])"  # a Markdown list item's marker: -, *, +, 1., 2)
_LIST_MARKER = re.compile(rf"\s*{_MARKER}\s*")
# a log line (2024-05-20 10:07, [2024-05-20T10:07, nginx's 2024/05/20 10:07): one record, never joined to the next
_LOG_RECORD = re.compile(r"\[?\d{4}([-/])\d{2}\1\d{2}[ T]\d{2}:\d{2}")
_LIST_ITEM = re.compile(rf"{_MARKER}\s")  # a Markdown list item: - x, * x, 1. x, 2) x
_CN_ITEM = re.compile(
    r"\d{1,3}、|[（(][一二三四五六七八九十\d]{1,3}[)）]|[①-⑳]|[一二三四五六七八九十]{1,3}、"
)  # 1、（一）①


def _blocks(text: str) -> list[tuple[str, list[str]]]:
    """``text``'s lines grouped into runs of one kind: ``code`` (one fenced block, its fences included, lines as
    written), ``table`` (Markdown table rows), ``list`` (list items, ``1.``/``-`` or Chinese ``1、``/``（一）``/``①``, or
    timestamped log records, as written, with their indented continuation lines) or ``prose``; blank lines outside code
    dropped."""
    blocks: list[tuple[str, list[str]]] = []
    fenced = blank = False
    for line in text.splitlines():
        s = line.strip()
        opens = not fenced and s.startswith("```")
        if fenced or opens:
            kind, keep = "code", line.rstrip()
            fenced = opens or not s.startswith("```")
        elif not s:
            blank = True
            continue
        elif _LIST_ITEM.match(s) or _CN_ITEM.match(s) or _LOG_RECORD.match(s):
            kind, keep = "list", line.rstrip()
        elif line[:1] in " \t" and not s.startswith("|") and not blank and blocks and blocks[-1][0] == "list":
            kind, keep = "list", line.rstrip()  # an item's indented wrapped line, a record's stack frame: kept with it
        else:
            kind, keep = ("table" if s.startswith("|") else "prose"), s
        blank = False
        if opens or not blocks or blocks[-1][0] != kind:
            blocks.append((kind, []))
        blocks[-1][1].append(keep)
    return blocks


@memoized(2048)  # every answer flattens each passage it cites twice; the same passages come back
def flatten(text: str) -> str:
    """Prose joined onto one line per paragraph run; Markdown table rows, list items and fenced code blocks kept one
    line each, each run set off by blank lines (a table, a list or a code block flattened into one line, ``| | (1) | (2)
    | | --- |…``, ``步骤： 1. 提交 2. 审批`` or ``` ``` \\documentclass{…} %or \\documentclass… ``` ```, is unreadable)."""
    if "\n" not in text:
        return text
    return "\n\n".join(_joined(kind, lines) for kind, lines in _blocks(text))


def _joined(kind: str, lines: list[str]) -> str:
    """One run of ``flatten``: prose on one line; a list without its common indent."""
    if kind == "prose":
        return " ".join(" ".join(lines).split())
    return textwrap.dedent("\n".join(lines)) if kind == "list" else "\n".join(lines)


_FENCE = re.compile(r"(?m)^[ \t]*```")


def _code_spans(text: str) -> list[tuple[int, int]]:
    """Where the fenced code blocks of flattened ``text`` lie: from an opening fence to the end of its closing fence."""
    marks = [m.start() for m in _FENCE.finditer(text)]
    spans = []
    for a, b in zip(marks[::2], [*marks[1::2], len(text)], strict=False):
        end = text.find("\n", b)
        spans.append((a, len(text) if end < 0 or b == len(text) else end))
    return spans


def _after_marker(text: str, at: int) -> bool:
    """Whether ``at`` falls just after a list item's marker (``2.`` of ``2. 审批``: no sentence ends there)."""
    line = text[text.rfind("\n", 0, at) + 1 : at]
    return _LIST_MARKER.fullmatch(line) is not None


def snippet(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, at a sentence end when one falls in the last 40 %."""
    text = flatten(text)
    if len(text) <= limit:
        return text
    head = text[: max(limit - 1, 1)]
    row_end = head.rfind("\n")
    spans = _code_spans(text)
    code = [a for a, b in spans if a < len(head) < b]
    if code:  # cut inside a code block: whole lines, and the block closed, or the rest of the answer turns to code
        first_line_end = text.find("\n", code[0])
        if row_end > first_line_end:
            return head[:row_end].rstrip() + "\n```\n\n…"
        if code[0] > 0:  # not one whole line of it fits: end before the block
            return head[: code[0]].rstrip() + "\n\n…"
        return head.rstrip() + "…\n```"
    if row_end > 0 and head[row_end + 1 :].startswith("|"):  # cut inside a table row: keep whole rows only
        return head[:row_end].rstrip() + "\n\n…"
    ends = [
        m.end()
        for m in _SENTENCE_END.finditer(head)
        if not any(a < m.end() < b for a, b in spans) and not _after_marker(head, m.end())
    ]
    cut = ends[-1] if ends and ends[-1] >= 0.6 * len(head) else len(head)
    kept = head[:cut].rstrip()
    return kept + ("\n\n…" if kept.rsplit("\n", 1)[-1].startswith("```") else "…")  # "```…" would not close it


def _sentence_starts(text: str) -> list[int]:
    """Where a snippet may start: after a sentence end or a line break, never inside a table but at its header."""
    starts = [0] + [m.end() for m in _SENTENCE_END.finditer(text)] + [m.end() for m in re.finditer(r"\n+", text)]
    rows = [(m.start(), m.end()) for m in re.finditer(r"(?m)^\|.*$", text)]
    headers = {a for a, _ in rows if a < 2 or text[a - 2 : a] == "\n\n"}  # a table's first row follows a blank line
    inside = [(a, b) for a, b in rows if a not in headers] + [(a + 1, b) for a, b in rows if a in headers]
    inside += [(a + 1, b - 1) for a, b in _code_spans(text)]
    starts = [s for s in starts if not _after_marker(text, s)]  # an item starts at its number, not after it
    return sorted({s for s in starts if s < len(text) and not any(a <= s <= b for a, b in inside)})


_TABLE = re.compile(r"(?m)^\|.*\n\|[ :|-]*-[ :|-]*$(?:\n\|.*$)+")  # header, delimiter, rows


def _answering_rows(text: str, limit: int, terms: Sequence[str], normalize: Callable[[str], str]) -> str:
    """``text`` with each table that does not fit in ``limit`` cut to its header and the rows holding the most
    distinct query terms (ORD-4290 in an error-code table: its row, not the first rows up to the limit), a ``…``
    line after it saying rows were left out. A table whose rows all hold as many terms is left whole."""

    def rows_kept(m: re.Match[str]) -> str:
        lines = m.group(0).split("\n")
        scores = [sum(1 for t in terms if t in normalize(row)) for row in lines[2:]]
        if len(m.group(0)) <= limit or max(scores) == min(scores):
            return m.group(0)
        return "\n".join(lines[:2] + [r for r, n in zip(lines[2:], scores, strict=True) if n == max(scores)]) + "\n\n…"

    return _TABLE.sub(rows_kept, text) if len(text) > limit else text


def focused_snippet(text: str, limit: int, terms: Sequence[str], normalize: Callable[[str], str] = str.lower) -> str:
    """A query-biased snippet: the window of whole sentences, at most ``limit`` characters."""
    terms = [t for t in terms if len(t) > 1] or list(terms)
    text = _answering_rows(flatten(text), limit, terms, normalize)
    if len(text) <= limit or not terms:
        return snippet(text, limit)
    best_key, best_start = (-1, -1, 0), 0
    whole = normalize(text)
    same_length = len(whole) == len(text)  # then windows of the normalised text line up with the original
    for start in _sentence_starts(text):
        window = whole[start : start + limit] if same_length else normalize(text[start : start + limit])
        first = min((window.find(t) for t in terms if t in window), default=limit)
        key = (sum(1 for t in terms if t in window), sum(window.count(t) for t in terms), -first)
        if key > best_key:
            best_key, best_start = key, start
    if best_start == 0:
        return snippet(text, limit)
    body = snippet(text[best_start:].lstrip(), max(limit - 1, 1))
    return "…\n\n" + body if body.startswith(("|", "```")) or _LIST_ITEM.match(body) else "…" + body


def exact_articles(hit: Hit, terms: Sequence[str], normalize: Callable[[str], str] = str.lower) -> tuple[str, str]:
    """The text and section to show for ``hit``: of several whole articles, those holding the most query terms."""
    c = hit.chunk
    path, labels = split_label(c.section)
    terms = [t for t in terms if len(t) > 1] or list(terms)
    found = list(ARTICLE_RE.finditer(c.text)) if len(labels) > 1 and terms else []
    if not found or tuple(m.group(1) for m in found) != labels:
        return c.text, c.section
    cuts = [0, *(m.start() for m in found[1:]), len(c.text)]
    parts = [c.text[a:b].strip() for a, b in zip(cuts, cuts[1:], strict=False)]
    scores = [sum(1 for t in terms if t in article_numbers(normalize(p))) for p in parts]  # (第7条: 第七条 asked)
    if max(scores) == 0 or min(scores) == max(scores):
        return c.text, c.section
    keep = [i for i, score in enumerate(scores) if score == max(scores)]
    label = "、".join(labels[i] for i in keep)
    return "\n\n".join(parts[i] for i in keep), f"{path}{SECTION_SEPARATOR}{label}" if path else label


_SHEET_ROWS_RE = re.compile(r"^(?:\| (\d+) \||行：(\d+)$)", re.MULTILINE)  # a sheet's row numbers (loaders/sheets.py)


def place(doc_type: str, page: int, text: str) -> str:
    """``p. 3``; ``sheet 3, rows 12–18`` for a spreadsheet; ``slide 7`` for a deck."""
    if doc_type == "slides":
        return f"slide {page}"
    rows = [int(a or b) for a, b in _SHEET_ROWS_RE.findall(text)] if doc_type == "sheet" else []
    if not rows:
        return f"sheet {page}" if doc_type == "sheet" else f"p. {page}"
    return f"sheet {page}, " + (f"row {rows[0]}" if len(rows) == 1 else f"rows {min(rows)}–{max(rows)}")


_DELIMITER = re.compile(r"[<＜﹤](?=\s*/?\s*document)", re.IGNORECASE)  # <document, </DOCUMENT, ＜/document …
_ATTRIBUTE = str.maketrans({"&": "&amp;", '"': "&quot;", "<": "&lt;", "\n": " ", "\r": " "})


def framed_passage(n: int | None, text: str, source: str, page: str | None, section: str) -> str:
    """``text`` in a ``<document …>`` frame it can neither close nor nest (its ``<document`` tags escaped)."""
    section_ = section.translate(_ATTRIBUTE) or None
    attrs = {"n": n, "source": source.translate(_ATTRIBUTE), "page": page, "section": section_}
    tag = " ".join(f'{k}="{v}"' for k, v in attrs.items() if v is not None)
    return f"<document {tag}>\n{_DELIMITER.sub('&lt;', text)}\n</document>"


def cite(hit: Hit, section: str | None = None) -> str:
    """``source, p. N, section`` for the sources list (``section``: the hit's, or the one shown for it)."""
    c = hit.chunk
    page = None if c.page is None else place(c.doc_type, c.page, c.text)
    return ", ".join([c.source, *filter(None, (page, c.section if section is None else section))])


def _render(
    query: str,
    hits: Sequence[Hit],
    limit: int,
    low_confidence: bool,
    terms: Sequence[str],
    normalize: Callable[[str], str],
    missing: Sequence[str],
    shown: Sequence[tuple[str, str]],
    framed: bool = False,
) -> str:
    """The Markdown with snippets of at most ``limit`` characters; ``missing``: the named articles no hit holds."""
    lines = [f"**检索问题 / Query:** {query}", ""]
    if not hits:
        lines.append("未找到相关内容。No matching passages were found in the knowledge base.")
        return "\n".join(lines)
    if missing:  # a question naming an article that none of the passages holds (劳动合同法第200条)
        lines += [f"> 注意 / Note: {'，'.join(missing)} 不在找到的段落中 / not among the passages found.", ""]
    if low_confidence:  # say so first; the nearest passages follow short, as leads, not as the answer
        lines += [LOW_CONFIDENCE_NOTE, ""]
        chinese = sum(bool(_HAN.search(h.chunk.text)) for h in hits)  # passages in Chinese (the rest: not)
        if _LATIN.search(query) and not _HAN.search(query) and 2 * chinese >= len(hits):
            lines += [FOREIGN_QUESTION_TIP, ""]  # English over Chinese passages scores low even when right
        elif _HAN.search(query) and 2 * chinese < len(hits):
            lines += [CHINESE_QUESTION_TIP, ""]  # and Chinese over English ones
        lines += ["**最接近的段落 / Closest passages**", ""]
        limit = min(limit, LOW_CONFIDENCE_SNIPPET)
    for n, ((whole, section), hit) in enumerate(zip(shown, hits, strict=True), 1):
        text = focused_snippet(whole, limit, terms, normalize)
        if framed:  # where it came from goes into the tag: no document text outside a frame
            c = hit.chunk
            page = None if c.page is None else place(c.doc_type, c.page, c.text)
            lines += [framed_passage(n, text, c.source, page, section), ""]
            continue
        where = f"({section})" if section else ""
        # a table or code block must start and end its own block, or Markdown renders its rows as one paragraph
        head = f"[{n}]\n\n" if text.startswith(("|", "```")) or _LIST_ITEM.match(text) else f"[{n}] "
        last = text.rsplit("\n", 1)[-1]
        tail = f"\n\n{where}" if where and last.startswith(("|", "```")) else f" {where}" if where else ""
        lines.append(head + text + tail)
        lines.append("")
    if framed:
        return "\n".join(lines).rstrip()
    lines.append("**来源 / Sources**")
    lines.append("")
    for n, (hit, (_, section)) in enumerate(zip(hits, shown, strict=True), 1):
        lines.append(f"[{n}] {cite(hit, section)}")
    return "\n".join(lines)


def build_answer(
    query: str,
    mode: SearchMode,
    hits: Sequence[Hit],
    *,
    max_chars: int = MAX_CHARS,
    low_confidence: bool = False,
    terms: Sequence[str] = (),
    normalize: Callable[[str], str] = str.lower,
    missing: Sequence[str] = (),
    budget: int | None = None,
    snippet_chars: int = SNIPPET_CHARS,
    framed: bool = False,
) -> Answer:
    """Markdown + citations, snippets shrunk to fit ``max_chars`` (or ``budget``, with the citations' snippets)."""
    shown = [exact_articles(hit, terms, normalize) for hit in hits]

    def markdown_of(limit: int, most: int) -> str:  # snippets of ``limit`` characters, shrunk to fit ``most``
        markdown = _render(query, hits, limit, low_confidence, terms, normalize, missing, shown, framed)
        while len(markdown) > most and limit > 40:
            limit = max(40, int(limit * 0.8))
            markdown = _render(query, hits, limit, low_confidence, terms, normalize, missing, shown, framed)
        return markdown if len(markdown) <= most else markdown[: most - 1] + "…"

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
            fused_rank=h.fused_rank,
            rerank_score=None if h.rerank_score is None else round(h.rerank_score, 6),
            rerank_sigmoid=None if h.rerank_sigmoid is None else round(h.rerank_sigmoid, 6),
        )
        for n, h in enumerate(hits, 1)
    )
    if budget is None:
        return Answer(query, mode, markdown_of(snippet_chars, max_chars), citations, tuple(hits), low_confidence)
    limit = SNIPPET_CHARS
    while True:
        markdown = markdown_of(limit, budget)
        texts = tuple(
            c.text if len(c.text) <= limit else focused_snippet(c.text, limit, terms, normalize) for c in citations
        )
        if len(markdown) + sum(map(len, texts)) <= budget or limit <= MIN_SNIPPET:
            return Answer(query, mode, markdown, citations, tuple(hits), low_confidence, snippets=texts)
        limit = max(MIN_SNIPPET, int(limit * 0.8))
