"""Small-to-big: a matched chunk (one or a few whole units) with the text around it."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from zhiku.cache import Cache, memoized
from zhiku.errors import InvalidInput, NotFound
from zhiku.reconstruct import SECTION_SEPARATOR, reconstruct_markdown
from zhiku.stores.base import Catalogue
from zhiku.text import ARTICLE_RE
from zhiku.types import Chunk, Hit

ContextKind = Literal["chunk", "article", "section"]
CONTEXTS: tuple[ContextKind, ...] = ("chunk", "article", "section")


@dataclass(frozen=True)
class ChunkContext:
    """``text``: the chunks ``chunks`` (in document order, the matched one among them) as Markdown."""

    chunk: Chunk
    context: ContextKind
    chunks: tuple[Chunk, ...]
    text: str
    complete: bool  # False when the budget left out chunks of the context


def check_context(value: str) -> ContextKind:
    if value not in CONTEXTS:
        raise InvalidInput(f"unknown context {value!r}: use one of {', '.join(CONTEXTS)}")
    return value


def chunk_context(store: Catalogue, chunk_id: str, context: str, max_chars: int) -> ChunkContext:
    """Small-to-big for a stored chunk: it with its article (all its pieces) or section, within ``max_chars``."""
    kind = check_context(context)
    found = store.get_chunks([chunk_id])
    if not found:
        raise NotFound(f"no chunk {chunk_id!r} (chunk ids come from query citations)")
    return enclosing(found[0], store.document_chunks(found[0].doc_id) if kind != "chunk" else found, kind, max_chars)


@memoized(8192)  # a pure function of the label, read for every hit and its neighbours
def split_label(section: str) -> tuple[str, tuple[str, ...]]:
    """``("劳动合同法 > 第五章", ("第四十七条", "第四十八条"))`` for ``"劳动合同法 > 第五章 > 第四十七条、第四十八条"``."""
    head, sep, last = section.rpartition(SECTION_SEPARATOR)
    labels = tuple(last.split("、")) if last else ()
    if labels and all(ARTICLE_RE.fullmatch(x) for x in labels):
        return (head if sep else ""), labels
    return section, ()


def _members(chunk: Chunk, doc_chunks: Sequence[Chunk], kind: ContextKind) -> list[Chunk]:
    """The chunks of the context, ordered by distance from ``chunk`` (itself first)."""
    path, labels = split_label(chunk.section)
    same_section = [c for c in doc_chunks if split_label(c.section)[0] == path]
    if kind == "chunk":
        return [chunk]
    if kind == "article" and labels:
        wanted = set(labels)
        same_section = [c for c in same_section if wanted & set(split_label(c.section)[1])]
    elif kind == "article":
        same_section = [c for c in same_section if abs(c.ordinal - chunk.ordinal) <= 1]
    return sorted(same_section, key=lambda c: (abs(c.ordinal - chunk.ordinal), c.ordinal))


def enclosing(chunk: Chunk, doc_chunks: Sequence[Chunk], kind: ContextKind, max_chars: int) -> ChunkContext:
    """The ``kind`` context of ``chunk`` among its document's chunks, nearest chunks first until ``max_chars``."""
    members = _members(chunk, doc_chunks, kind)
    kept: list[Chunk] = []
    used = 0
    for c in members:
        if kept and used + len(c.text) > max_chars:
            continue
        kept.append(c)
        used += len(c.text)
    kept.sort(key=lambda c: c.ordinal)
    text = chunk.text if kind == "chunk" else reconstruct_markdown(kept)
    return ChunkContext(chunk, kind, tuple(kept), text, len(kept) == len(members))


def _article_run(chunk: Chunk, by_ordinal: Mapping[int, Chunk]) -> list[Chunk]:
    """The consecutive chunks holding pieces of ``chunk``'s one article (just ``chunk`` when it is whole)."""
    path, (label,) = split_label(chunk.section)
    run = [chunk]
    for step, side in ((-1, -1), (1, 0)):
        n = chunk.ordinal + step
        while n in by_ordinal:
            other_path, labels = split_label(by_ordinal[n].section)
            if other_path != path or not labels or labels[side] != label:
                break
            run.insert(len(run) if step > 0 else 0, by_ordinal[n])
            if len(labels) > 1:
                break
            n += step
    return run


def _added(pieces: Sequence[Chunk]) -> Iterator[tuple[Chunk, str, bool]]:
    """Each of consecutive chunks of one document with the document text it adds."""
    end: int | None = None
    for c in pieces:
        body = c.text[len(c.text) - (c.end - c.start) :]  # a continued table's repeated header is not document text
        gap = end is not None
        if end is not None and c.start < end:
            body, gap = body[end - c.start :], False
        yield c, body, gap
        end = c.end if end is None else max(end, c.end)


def join_pieces(pieces: Sequence[Chunk]) -> str:
    """The text of consecutive chunks of one document, overlapping characters taken once."""
    out: list[str] = []
    for _, body, gap in _added(pieces):
        if gap:  # rows of one table follow each other on the next line, or it breaks in two
            out.append("\n" if body.startswith("|") and out[-1].rsplit("\n", 1)[-1].startswith("|") else "\n\n")
        out.append(body)
    return "".join(out)


WHOLE_ARTICLES = True  # small-to-big: a hit on a piece of an article cut for length returns the whole article
TABLE_MAX_CHARS = 3000  # a split table longer than this stays in pieces: the whole of it would crowd the answer


def _table_header(c: Chunk) -> str:
    """The header rows a continued piece of a split table repeats (``""`` for any other chunk)."""
    extra = len(c.text) - (c.end - c.start)
    return c.text[:extra].strip() if extra > 0 and c.text.startswith("|") else ""


def _table_run(chunk: Chunk, by_ordinal: Mapping[int, Chunk]) -> list[Chunk]:
    """The consecutive chunks holding pieces of the table split across ``chunk``."""
    after = by_ordinal.get(chunk.ordinal + 1)
    header = _table_header(chunk) or (_table_header(after) if after is not None else "")
    if not header or header not in chunk.text or (after is not None and after.section != chunk.section):
        return [chunk]
    run, n = [chunk], chunk.ordinal - 1
    while _table_header(run[0]) == header and n in by_ordinal and by_ordinal[n].section == chunk.section:
        if _table_header(by_ordinal[n]) != header and header not in by_ordinal[n].text:
            break
        run.insert(0, by_ordinal[n])
        n -= 1
    n = chunk.ordinal + 1
    while n in by_ordinal and by_ordinal[n].section == chunk.section and _table_header(by_ordinal[n]) == header:
        run.append(by_ordinal[n])
        n += 1
    return run


def _fences(text: str) -> int:
    """How many lines of ``text`` are code fences (an odd count: a block opened or closed in another chunk)."""
    if "```" not in text:  # (no line can be one: most chunks)
        return 0
    return sum(1 for line in text.splitlines() if line.lstrip().startswith("```"))


def _code_run(chunk: Chunk, by_ordinal: Mapping[int, Chunk]) -> list[Chunk]:
    """The consecutive chunks of ``chunk``'s section holding pieces of a fenced code block split across ``chunk``."""
    ordered = [by_ordinal[n] for n in sorted(by_ordinal)]
    inside: dict[int, tuple[bool, bool]] = {}  # ordinal -> (starts inside a block, ends inside one)
    state = False
    for c, body, _ in _added(ordered):
        before = state
        state ^= _fences(body) % 2 == 1
        inside[c.ordinal] = (before, state)
    run = [chunk]
    while inside[run[0].ordinal][0] and (prev := by_ordinal.get(run[0].ordinal - 1)) and prev.section == chunk.section:
        run.insert(0, prev)
    while inside[run[-1].ordinal][1] and (nxt := by_ordinal.get(run[-1].ordinal + 1)) and nxt.section == chunk.section:
        run.append(nxt)
    return run


def _whole(c: Chunk, by_ordinal: Callable[[], Mapping[int, Chunk]]) -> list[Chunk]:
    """The pieces ``c`` is one of: of its one article cut for length, of a table split between rows or of a fenced code
    block split between lines (the whole of either up to ``TABLE_MAX_CHARS``); just ``c`` otherwise."""
    if len(split_label(c.section)[1]) == 1:  # one article (not none, nor several whole ones): its pieces?
        return _article_run(c, by_ordinal())
    if _fences(c.text):  # a piece of a code block split between chunks (or the end of one and the start of another)
        run = _code_run(c, by_ordinal())
        if len(run) > 1 and sum(len(x.text) for x in run) <= TABLE_MAX_CHARS:
            return run
    if c.text.startswith("|") or "\n|" in c.text:  # a table (piece)
        run = _table_run(c, by_ordinal())
        if sum(len(x.text) for x in run) <= TABLE_MAX_CHARS:
            return run
    return [c]


RUNS_CHARS = 8_000_000  # what small-to-big's memo may hold (a store's chunk cache: a 10k-chunk corpus whole)
RUN_WEIGHT = 256


class Runs(Cache[tuple[Chunk, Chunk, tuple[str, ...]]]):
    """``whole_articles``' memo: by chunk object (its ``id``), the chunk, its whole article (the chunk itself when it is
    whole) and the ids of the pieces inside it; each entry weighs its text's characters and ``RUN_WEIGHT``."""

    def __init__(self, budget: int = RUNS_CHARS) -> None:
        super().__init__(budget, lambda run: RUN_WEIGHT + len(run[1].text))


def whole_articles(
    hits: Iterable[Hit],
    doc_chunks: Callable[[str], Sequence[Chunk]],
    *,
    limit: int | None = None,
    runs: Runs | None = None,
) -> list[Hit]:
    """Small-to-big for articles cut for length, tables split between rows and code blocks split between lines."""
    out: list[Hit] = []
    shown: set[str] = set()  # chunk ids already returned inside a whole article or table
    ordinals: dict[str, dict[int, Chunk]] = {}  # a document's chunks by ordinal, read and made once per document

    def by_ordinal(doc_id: str) -> dict[int, Chunk]:
        if doc_id not in ordinals:
            ordinals[doc_id] = {c.ordinal: c for c in doc_chunks(doc_id)}
        return ordinals[doc_id]

    if limit is not None and limit < 1:
        return out
    for h in hits:
        c = h.chunk
        if c.chunk_id in shown:
            continue
        kept = runs.get(id(c)) if runs is not None else None
        if kept is not None and kept[0] is c:
            whole, pieces = kept[1], kept[2]
        else:
            run = _whole(c, functools.partial(by_ordinal, c.doc_id))
            whole, pieces = c, ()
            if len(run) > 1:
                whole = replace(c, text=join_pieces(run), start=run[0].start, end=run[-1].end)
                pieces = tuple(x.chunk_id for x in run)
            if runs is not None:
                runs.put(id(c), (c, whole, pieces))
        if pieces:
            shown.update(pieces)
            h = replace(h, chunk=whole)
        out.append(h)
        if len(out) == limit:
            break
    return out
