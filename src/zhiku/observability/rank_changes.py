"""Rank changes between stages (fusion, rerank): where each chunk stood before and after, and a summary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from zhiku.types import ScoredId


def rank_changes(
    before: Mapping[str, int],
    after: Sequence[str],
    *,
    keep_dropped_within: int,
    channels: tuple[Mapping[str, int], Mapping[str, int]] | None = None,
) -> dict[str, Any]:
    """What a stage records: ``changes``, one row per id of ``after`` (in order), then the ids of ``before`` it left out
    that stood within ``keep_dropped_within`` (the ones worth a look), and the ``summary`` over all of them."""
    rows: list[dict[str, Any]] = []
    summary = dict.fromkeys(("moved_up", "moved_down", "unchanged", "new", "max_gain", "max_drop", "dropped"), 0)

    def row(cid: str, was: int | None, pos: int | None, delta: int | None, status: str) -> None:
        rows.append({"chunk_id": cid, "rank_before": was, "rank_after": pos, "delta": delta, "status": status})
        if channels is not None:
            rows[-1].update(bm25_rank=channels[0].get(cid), dense_rank=channels[1].get(cid))

    for pos, cid in enumerate(after, 1):
        was = before.get(cid)
        if was is None:
            summary["new"] += 1
            row(cid, None, pos, None, "new")
            continue
        delta = was - pos
        if delta > 0:
            summary["moved_up"] += 1
            summary["max_gain"] = max(summary["max_gain"], delta)
        elif delta < 0:
            summary["moved_down"] += 1
            summary["max_drop"] = max(summary["max_drop"], -delta)
        else:
            summary["unchanged"] += 1
        row(cid, was, pos, delta, "up" if delta > 0 else "down" if delta < 0 else "same")
    kept = set(after)
    for cid, was in sorted(before.items(), key=lambda kv: (kv[1], kv[0])):
        if cid not in kept:
            summary["dropped"] += 1
            if was <= keep_dropped_within:
                row(cid, was, None, None, "dropped")
    return {"changes": rows, "summary": summary}


def fusion_changes(
    bm25: Sequence[ScoredId], dense: Sequence[ScoredId], fused: Sequence[str], top_k: int
) -> tuple[dict[str, int], dict[str, Any]]:
    """The fusion stage's ``counts`` (``candidates``: the chunks any channel found) and its rank changes."""
    b = {x.chunk_id: x.rank for x in bm25}
    d = {x.chunk_id: x.rank for x in dense}
    best = {c: min(r for r in (b.get(c), d.get(c)) if r is not None) for c in b.keys() | d.keys()}
    counts = {"candidates": len(best.keys() | set(fused))}
    return counts, rank_changes(best, fused, keep_dropped_within=top_k, channels=(b, d))
