"""Splitting one long paragraph (rule 3 of :mod:`zhiku.ingest.chunking`): cuts at sentence ends, else clause
marks, else a space, else hard; consecutive pieces overlap on a boundary."""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence

_CLOSERS = "”’」』）)\\]》】〉\"'"
_SENTENCE_END_RE = re.compile(rf"(?:[。！？；]+|…+|[.!?]+(?=[{_CLOSERS}]*(?:\s|\Z)))[{_CLOSERS}]*")
_LINE_END_RE = re.compile(r"[^\S\n]*\n")
_CLAUSE_END_RE = re.compile(r"[，、：]|[,;:](?=\s)")
_SPACE_RE = re.compile(r"\s")


def _last_in(positions: Sequence[int], lo: int, hi: int) -> int | None:
    """The largest position in ``[lo, hi]``, or None."""
    i = bisect_right(positions, hi)
    if i and positions[i - 1] >= lo:
        return positions[i - 1]
    return None


def _first_in(positions: Sequence[int], lo: int, hi: int) -> int | None:
    """The smallest position in ``[lo, hi)``, or None."""
    i = bisect_left(positions, lo)
    if i < len(positions) and positions[i] < hi:
        return positions[i]
    return None


def _rstrip_to(text: str, start: int, end: int) -> int:
    while end > start and text[end - 1].isspace():
        end -= 1
    return end


def _lstrip_from(text: str, start: int, end: int) -> int:
    while start < end and text[start].isspace():
        start += 1
    return start


def _mid_word(text: str, at: int) -> bool:
    """Whether ``at`` falls inside a Latin word or identifier (``Hika|riPool.createTimeoutException``): a piece
    starting there would open on a broken word, so it starts at the cut instead, without overlap (unless the cut itself
    falls inside a word: a hard cut in a run of Latin text with no space keeps its overlap)."""
    return at > 0 and all(c.isascii() and (c.isalnum() or c in "._") for c in text[at - 1 : at + 1])


def split_long(text: str, start: int, end: int, *, size: int, overlap: int, min_chars: int) -> list[tuple[int, int]]:
    """Split ``text[start:end]`` (stripped) into overlapping pieces of at most ``size`` characters.

    Cuts prefer sentence ends (and line ends), then clause marks, then a space, then ``size``. Each piece
    after the first starts at most ``overlap`` characters before the end of the previous one, on the first
    sentence (else clause, else word) boundary in that window; every piece reaches further than the
    previous one.
    A last piece adding fewer than ``min_chars`` characters is merged into the piece before it.
    """
    sentences = sorted(
        {m.end() for m in _SENTENCE_END_RE.finditer(text, start, end)}
        | {m.start() for m in _LINE_END_RE.finditer(text, start, end)}
    )
    clauses = [m.end() for m in _CLAUSE_END_RE.finditer(text, start, end)]
    pieces: list[tuple[int, int]] = []
    pos = start
    prev_end = -1
    while True:
        if end - pos <= size:
            if pieces and end - prev_end < min_chars:
                pieces[-1] = (pieces[-1][0], end)
            else:
                pieces.append((pos, end))
            return pieces
        limit = pos + size
        floor = max(prev_end, pos)
        lo = max(pos + size // 4, floor + 1)
        cut = _last_in(sentences, lo, limit)
        if cut is None:
            cut = _last_in(clauses, lo, limit)
        if cut is None:
            a, b = _last_in(sentences, floor + 1, limit), _last_in(clauses, floor + 1, limit)
            cut = max(a, b) if a is not None and b is not None else (a if a is not None else b)
        if cut is None:
            space = max(text.rfind(" ", floor + 1, limit), text.rfind("\t", floor + 1, limit))
            cut = space if space > floor else limit
        cut_end = _rstrip_to(text, pos, cut)
        if cut_end <= floor:  # only whitespace past the previous piece: take through the next character
            cut = _lstrip_from(text, limit, end) + 1
            cut_end = cut
        pieces.append((pos, cut_end))
        prev_end = cut_end
        nxt = cut
        if overlap > 0:
            window = cut - overlap
            b = _first_in(sentences, window, cut)
            if b is None:
                b = _first_in(clauses, window, cut)
            if b is None:
                found = _SPACE_RE.search(text, window, cut)
                # a cut inside a word (no boundary in the piece) starts the next piece mid-word anyway: keep the overlap
                clean = _mid_word(text, window) and not _mid_word(text, cut)
                b = found.start() if found is not None else cut if clean else window
            if b > pos:
                nxt = b
        pos = _lstrip_from(text, nxt, end)
