"""Rank tracking at fusion and rerank: small pure functions over 1-based ranks.

``delta = rank_before − rank_after`` (positive: moved up). A chunk a stage brings in is ``new`` (no invented
delta); one it leaves out is ``dropped``. Tested against hand-computed values in tests/test_tracing.py.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from zhiku.types import Ranking, ScoredId

Status = Literal["up", "down", "same", "new", "dropped"]


@dataclass(frozen=True)
class RankChange:
    """Where one chunk stood before and after a stage (ranks 1-based).

    ``delta = rank_before - rank_after``: positive means it moved up. A chunk the stage brought in is ``new``
    (no ``rank_before``, no delta); one it left out of its output is ``dropped`` (no ``rank_after``).
    """

    chunk_id: str
    rank_before: int | None
    rank_after: int | None
    delta: int | None
    status: Status
    bm25_rank: int | None = None  # fusion only: the chunk's rank in each channel
    dense_rank: int | None = None


@dataclass(frozen=True)
class RankSummary:
    """Counts over a stage's rank changes; ``max_gain``/``max_drop`` are places (both ≥ 0)."""

    moved_up: int
    moved_down: int
    unchanged: int
    new: int
    max_gain: int
    max_drop: int
    dropped: int


def rank_changes(
    before: Mapping[str, int],
    after: Sequence[str],
    channels: tuple[Mapping[str, int], Mapping[str, int]] | None = None,
) -> list[RankChange]:
    """Compare positions: one row per id of ``after`` (in order), then the ids of ``before`` it left out.

    ``before`` maps ids to their 1-based rank going into the stage; ``after`` is the stage's output, best first;
    ``channels`` (fusion) the BM25 and dense ranks each row also carries.
    """
    b, d = channels or ({}, {})
    rows: list[RankChange] = []
    kept = set()
    for pos, cid in enumerate(after, 1):
        kept.add(cid)
        was = before.get(cid)
        if was is None:
            rows.append(RankChange(cid, None, pos, None, "new", b.get(cid), d.get(cid)))
        else:
            delta = was - pos
            status: Status = "up" if delta > 0 else "down" if delta < 0 else "same"
            rows.append(RankChange(cid, was, pos, delta, status, b.get(cid), d.get(cid)))
    for cid, was in sorted(before.items(), key=lambda kv: (kv[1], kv[0])):
        if cid not in kept:
            rows.append(RankChange(cid, was, None, None, "dropped", b.get(cid), d.get(cid)))
    return rows


def fusion_rank_changes(bm25: Sequence[ScoredId], dense: Sequence[ScoredId], fused: Sequence[str]) -> list[RankChange]:
    """Rank changes made by fusing two channels: ``rank_before`` is the chunk's best rank over both."""
    b = {x.chunk_id: x.rank for x in bm25}
    d = {x.chunk_id: x.rank for x in dense}
    best = dict(b)
    for cid, r in d.items():  # one pass per channel: this runs on every traced query
        if cid not in best or r < best[cid]:
            best[cid] = r
    return rank_changes(best, fused, (b, d))


def fusion_record(
    bm25: Sequence[ScoredId], dense: Sequence[ScoredId], fused: Sequence[str], top_k: int
) -> tuple[dict[str, int], dict[str, Any]]:
    """The fusion stage's ``counts`` (``candidates``: the chunks either channel found) and its data, equal to
    ``changes_data(fusion_rank_changes(bm25, dense, fused), keep_dropped_within=top_k)`` but without a row object
    per candidate: only the rows it shows are built (the channels are best first, as every channel returns them)."""
    b, d = _ranks(bm25), _ranks(dense)
    kept = set(fused)
    rows: list[dict[str, Any]] = []
    up = down = same = new = gain = drop = 0
    for pos, cid in enumerate(fused, 1):
        rb, rd = b.get(cid), d.get(cid)
        was = rb if rd is None else rd if rb is None else min(rb, rd)
        if was is None:
            new += 1
            rows.append(_fused_row(cid, None, pos, None, "new", rb, rd))
            continue
        delta = was - pos
        if delta > 0:
            up, gain = up + 1, max(gain, delta)
        elif delta < 0:
            down, drop = down + 1, max(drop, -delta)
        else:
            same += 1
        rows.append(_fused_row(cid, was, pos, delta, "up" if delta > 0 else "down" if delta < 0 else "same", rb, rd))
    left: dict[str, int] = {}  # dropped chunks that stood within top_k in either channel: their best rank
    for channel in (bm25, dense):
        for cid, rank in _within(channel, top_k):
            if cid not in kept and rank < left.get(cid, top_k + 1):
                left[cid] = rank
    rows.extend(
        _fused_row(cid, was, None, None, "dropped", b.get(cid), d.get(cid))
        for cid, was in sorted(left.items(), key=lambda kv: (kv[1], kv[0]))
    )
    candidates = len(b.keys() | d.keys())
    dropped = candidates - (len(fused) - new)
    summary = dict(zip(_SUMMARY, (up, down, same, new, gain, drop, dropped), strict=True))  # asdict: ~10× slower
    return {"candidates": len(fused) + dropped}, {"changes": rows, "summary": summary}


def _ranks(channel: Sequence[ScoredId]) -> dict[str, int]:
    """Each candidate's rank; a ``Ranking``'s from its columns (its ranks are its positions), without a ``ScoredId``
    per candidate (~10× faster over a channel of 100)."""
    if type(channel) is Ranking:
        return dict(zip(channel.ids, range(1, len(channel.ids) + 1), strict=True))
    return {x.chunk_id: x.rank for x in channel}


def _within(channel: Sequence[ScoredId], top_k: int) -> Iterable[tuple[str, int]]:
    """The candidates ranked within ``top_k`` (a channel is best first), with their rank."""
    if type(channel) is Ranking:
        return zip(channel.ids[:top_k], range(1, top_k + 1), strict=False)  # fewer than top_k: all
    return ((x.chunk_id, x.rank) for x in itertools.takewhile(lambda x: x.rank <= top_k, channel))


def _fused_row(
    cid: str, before: int | None, after: int | None, delta: int | None, status: str, rb: int | None, rd: int | None
) -> dict[str, Any]:
    return {
        "chunk_id": cid,
        "rank_before": before,
        "rank_after": after,
        "delta": delta,
        "status": status,
        "bm25_rank": rb,
        "dense_rank": rd,
    }


def summarize_changes(changes: Iterable[RankChange]) -> RankSummary:
    rows = list(changes)
    deltas = [c.delta for c in rows if c.delta is not None]
    return RankSummary(
        moved_up=sum(1 for c in rows if c.status == "up"),
        moved_down=sum(1 for c in rows if c.status == "down"),
        unchanged=sum(1 for c in rows if c.status == "same"),
        new=sum(1 for c in rows if c.status == "new"),
        max_gain=max([d for d in deltas if d > 0], default=0),
        max_drop=max([-d for d in deltas if d < 0], default=0),
        dropped=sum(1 for c in rows if c.status == "dropped"),
    )


def changes_data(changes: Sequence[RankChange], *, keep_dropped_within: int) -> dict[str, Any]:
    """What a stage records: every kept row, the dropped rows that stood within ``keep_dropped_within``
    before the stage (the ones worth a look), and the summary over all rows."""
    shown = [
        _row(c)
        for c in changes
        if c.status != "dropped" or (c.rank_before is not None and c.rank_before <= keep_dropped_within)
    ]
    return {"changes": shown, "summary": asdict(summarize_changes(changes))}


def _row(c: RankChange) -> dict[str, Any]:
    """``asdict(c)`` without its deep copy (every field is a str, an int or None): ~10× faster per row."""
    return {f: getattr(c, f) for f in _FIELDS}


_FIELDS = tuple(f.name for f in fields(RankChange))
_SUMMARY = tuple(f.name for f in fields(RankSummary))
