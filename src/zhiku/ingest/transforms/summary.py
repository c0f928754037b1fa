"""Document summaries without an LLM that fit the document: a statute's chapters with their article ranges, a
report's headings with a line each, else TextRank keywords and the sentences that hold them."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from zhiku.ingest.chunking import outside_fences
from zhiku.ingest.transforms.base import DocMeta
from zhiku.reconstruct import _ARTICLE_LABEL, _ONE_ARTICLE, SECTION_SEPARATOR, outline, reconstruct_markdown
from zhiku.types import Chunk

WINDOW = 5  # co-occurrence window of TextRank (Mihalcea & Tarau 2004)
DAMPING = 0.85
ITERATIONS = 30
_SENTENCE = re.compile(r"[^。！？!?\n]+[。！？!?]?")  # whole sentences: a clause cut at ；joined to another misleads
_ENDED = re.compile(r"[。！？!?.]$")  # a sentence, not a heading, caption, contents line or list item (…；)
# a lone * or _ is markup only at a word's edge (SELECT * FROM, user_id and 2*3 are text)
_MARKUP = re.compile(r"^[#>*\-+\s|]+|\*\*|__|[`|]+|(?<![A-Za-z0-9*_])[*_](?=[^\s*_])|(?<=[^\s*_])[*_](?![A-Za-z0-9*_])")
# a tag ends before the next < and link text before the next [ (x<y is no tag; a line of < is read once), a target at
# its parenthesis with one nested pair (wiki/A_(b))
_TARGET = r"\((?:[^()]|\([^()]*\))*\)"
_HTML_OR_LINK = re.compile(r"!\[[^\[\]]*\]" + _TARGET + r"|<[A-Za-z/!][^<>]*>")
_LINK = re.compile(r"\[([^\[\]]+)\]" + _TARGET)
_ITEM = re.compile(r"\s*(?:[-*+]|\d{1,3}[.)])\s+|\s*(?:\d{1,3}、|[①-⑳])\s*")
_NUMERIC = re.compile(r"^[\d.,%/\-:]+$|^第?[零一二三四五六七八九十百千万两\d]+[年月日个条款项次倍章节]?$")
_LATIN_STOP = re.compile(r"(?<=[.!?])\s+(?=[A-Z\u4e00-\u9fff])")
_LIST_ITEM = re.compile(r"^[（(][一二三四五六七八九十\d]+[)）]|^[一二三四五六七八九十]+、")
_PART = re.compile(r"^第[零一二三四五六七八九十百千〇两\d]+([编章节])")  # a statute's 编, 章, 节: its chapters are 章
_LEADING_ARTICLE = re.compile(r"^第[零一二三四五六七八九十百千〇两\d]+条\s*")
MAX_LINES = 60  # headings listed; the rest counted
LINE_CHARS = 60  # of a heading's first sentence
_EN_STOP = frozenset(
    "the and are for from with that this was were has have had not but its into than then also such which who "
    "what when where how all any can may will shall per via our their they them these those been being of in to on at "
    "by is be or as an it no"
    # Chinese function words that segmentation keeps but a keyword list should not
    " 或者 应当 可以 以上 以下 不得 没有 进行 有关 其他 按照 依照 根据 以及 对于 由于 其中 并且 但是 如果"
    " 我们 你们 他们 它们 这个 那个 这些 那些 一个 什么 自己 这样 那样 因此 所以 因为 然后".split()
)


@dataclass(frozen=True)
class Summary:
    summary: str
    keywords: tuple[str, ...]
    kind: str  # "llm" | "statute" | "outline" | "extractive"


def _paragraphs(text: str) -> list[str]:
    """Paragraphs with wrapped lines joined, each list item one of its own, its marker dropped (（一） and 一、 kept:
    the lead weight reads them); headings, table rows, code blocks, HTML tags and link targets left out."""
    out = []
    for block in re.split(r"\n\s*\n", "".join(text[a:b] for a, b in outside_fences(text))):
        lines = [ln for ln in block.splitlines() if ln.strip() and not ln.lstrip().startswith(("#", "|"))]
        para = ""
        for line in lines:
            item = _ITEM.match(line)
            if (item or _LIST_ITEM.match(line.lstrip())) and para:  # 步骤：1. 提交；2. 审批 read as "提交；2." once
                out.append(para)
                para = ""
            ln = _LINK.sub(r"\1", _HTML_OR_LINK.sub("", line[item.end() if item else 0 :])).strip()
            ln = _MARKUP.sub("", ln).strip()
            if ln:
                para += (" " if para and para[-1].isascii() and ln[:1].isascii() else "") + ln
        if para:
            out.append(para)
    return out


def sentences_of(chunks: Sequence[Chunk]) -> list[str]:
    """The document's sentences, each once; fragments, list headers and (unless nothing else is left) lines without a
    full stop (headings, captions, contents lines) left out."""
    paragraphs = _paragraphs(reconstruct_markdown(chunks))  # the text once: a piece cut mid-sentence is no sentence
    found = (m.group(0).strip() for p in paragraphs for part in _LATIN_STOP.split(p) for m in _SENTENCE.finditer(part))
    seen = list(dict.fromkeys(s for s in found if len(s) >= 12 and not s.endswith(("：", ":"))))
    ended = [s for s in seen if _ENDED.search(s)]
    return ended or seen


def _keep(token: str) -> bool:
    return len(token) >= 2 and not _NUMERIC.match(token) and token.lower() not in _EN_STOP


def textrank(token_lists: Sequence[Sequence[str]]) -> dict[str, float]:
    edges: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for tokens in token_lists:
        for i, a in enumerate(tokens):
            for b in tokens[i + 1 : i + WINDOW]:
                if a != b:
                    edges[a][b] += 1.0
                    edges[b][a] += 1.0
    if not edges:
        return {t: 1.0 for tokens in token_lists for t in tokens}
    score = dict.fromkeys(edges, 1.0)
    out_weight = {n: sum(nbrs.values()) for n, nbrs in edges.items()}
    for _ in range(ITERATIONS):
        score = {
            n: (1 - DAMPING) + DAMPING * sum(w * score[m] / out_weight[m] for m, w in nbrs.items())
            for n, nbrs in edges.items()
        }
    return score


def top_keywords(rank: dict[str, float], n: int) -> tuple[str, ...]:
    """The ``n`` best tokens, a token left out when a kept keyword holds it."""
    ordered = sorted(rank, key=lambda t: (-rank[t], t))[: n * 3]
    kept: list[str] = []
    for t in ordered:
        if any(t in k for k in kept):
            continue
        kept = [k for k in kept if k not in t] + [t]  # a longer keyword replaces the pieces it holds
        if len(kept) == n:
            break
    return tuple(sorted(kept, key=lambda t: -rank[t]))


def extractive_summary(
    chunks: Sequence[Chunk],
    tokenize: Callable[[str], list[str]],
    *,
    n_keywords: int = 8,
    n_sentences: int = 3,
    max_chars: int = 300,
) -> Summary:
    sentences = sentences_of(chunks)
    tokens = [[t for t in tokenize(s) if _keep(t)] for s in sentences]
    rank = textrank(tokens)
    keywords = top_keywords(rank, n_keywords)
    top = set(keywords)
    scored = []
    for i, (sentence, toks) in enumerate(zip(sentences, tokens, strict=True)):
        if not toks:
            continue
        distinct = dict.fromkeys(toks)  # (in the sentence's order: a set's changes from process to process)
        weight = sum(rank[t] for t in distinct if t in top) + 0.1 * sum(rank.get(t, 0.0) for t in distinct)
        lead = (1.3 if i < 3 else 1.0) * (0.5 if _LIST_ITEM.match(sentence) else 1.0)
        scored.append((weight * lead / math.sqrt(len(toks)), i))
    chosen = sorted(i for _, i in sorted(scored, reverse=True)[:n_sentences])
    text = ""
    for i in chosen:
        if text and len(text) + len(sentences[i]) > max_chars:
            break
        gap = " " if text and text[-1].isascii() and sentences[i][:1].isascii() else ""
        text += gap + (sentences[i] if re.search(r"[。！？!?；;.]$", sentences[i]) else sentences[i] + "。")
    if not text and sentences:
        text = sentences[0][:max_chars]
    return Summary(text[:max_chars], keywords, "extractive")


def statute_outline(paths: Sequence[list[str]]) -> list[str]:
    """Each chapter (the whole statute when it has none) with its articles' range: 第二章 总则（第一条—第六条）."""
    groups: dict[str, list[str]] = {}
    for *head, labels in paths:
        if _ARTICLE_LABEL.match(labels):
            parts = [m for x in head if (m := _PART.match(x))]
            chapter = min(parts, key=lambda m: "章编节".index(m[1])).string if parts else (head[0] if head else "")
            groups.setdefault(chapter, []).extend(_ONE_ARTICLE.findall(labels))
    return [f"{c}（{a[0]}{'—' + a[-1] if a[-1] != a[0] else ''}）" for c, a in groups.items()]


def headings_outline(paths: Sequence[list[str]], chunks: Sequence[Chunk], flat: bool = False) -> list[str]:
    """Each heading, indented by its level (``flat``: not), with the first sentence of its text."""
    first: dict[tuple[str, str], Chunk] = {}  # (the path above, a label) -> the first chunk there
    for c in sorted(chunks, key=lambda c: c.ordinal):
        head, _, labels = c.section.rpartition(SECTION_SEPARATOR)
        for label in labels.split("、"):  # (``outline`` joins the labels of neighbouring articles)
            first.setdefault((head, label), c)
    lines, top = [], min(map(len, paths), default=0)
    for path in paths[:MAX_LINES]:
        label = path[-1].split("、")[0]
        found = first.get((SECTION_SEPARATOR.join(path[:-1]), label))
        said = _paragraphs(found.text) if found is not None else []
        said = [p for p in said if p.startswith(label)] or said  # the article's own paragraph, not a preamble
        line = _LEADING_ARTICLE.sub("", _SENTENCE.findall(said[0])[0]) if said else ""
        line = line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 1] + "…"
        indent = "" if flat else "  " * (len(path) - top)
        lines.append(f"{indent}- {path[-1]}" + (f"：{line}" if line else ""))
    return lines + ([f"- … {len(paths) - MAX_LINES} more"] if len(paths) > MAX_LINES else [])


def document_summary(chunks: Sequence[Chunk], meta: DocMeta | None, tokenize: Callable[[str], list[str]]) -> Summary:
    if meta is not None and meta.summary:
        return Summary(meta.summary, meta.tags, meta.kind)
    found = extractive_summary(chunks, tokenize)
    paths = [p.split(SECTION_SEPARATOR) for p in outline(chunks)]
    if statute := statute_outline(paths):
        if len(statute) == 1:  # no chapters: what each article says
            statute += headings_outline([p for p in paths if _ARTICLE_LABEL.match(p[-1])], chunks, flat=True)
        return Summary("\n".join(statute), found.keywords, "statute")
    if len(paths) > 1:
        return Summary("\n".join(headings_outline(paths, chunks)), found.keywords, "outline")
    return found
