"""Tail sampling of a query trace's candidate detail (``tracing.sample``).

Every query writes a trace: stages, timings, counts and the returned hits with their rank in every channel. The
per-candidate detail (each channel's ranked rows, fusion rank changes, chunk labels) is built when the trace is
sealed, so it is decided there, after the query: kept for a trace forced by its caller (``zhiku query --verbose``,
the dashboard's query page), a failed query, a low-confidence answer, a query slower than ``tracing.slow_ms``,
and for the fraction ``tracing.sample`` of the rest, chosen by trace id (the same id always gets the same
answer). A trace without it says ``detail: "sampled-out"``.
"""

from __future__ import annotations

import zlib
from typing import Literal

SAMPLED_OUT = "sampled-out"  # ``Trace.detail`` of a trace written without its candidate detail
Reason = Literal["forced", "error", "low-confidence", "slow", "sampled"]
NOT_SAMPLED = (
    "candidate detail not sampled for this query (tracing.sample): rerun it with `zhiku query --verbose` or on "
    "the dashboard's query page to see every channel's ranking and the fusion rank changes"
)


def sampled_in(trace_id: str, fraction: float) -> bool:
    """Whether the trace ``trace_id`` is in the sample ``fraction`` (0 … 1). A 16-hex-digit id (what the tracer
    makes, uniformly random) is read as a number in [0, 1); another id is hashed (CRC-32). A trace kept at a
    fraction is kept at every larger one."""
    if fraction >= 1.0:
        return True
    if fraction <= 0.0:
        return False
    if len(trace_id) == 16:
        try:  # × 2⁻⁶⁴: the float of n / 2**64 (n rounded to 53 bits, scaled exactly), without a division of ints
            return int(trace_id, 16) * _TO_UNIT < fraction
        except ValueError:
            pass
    return zlib.crc32(trace_id.encode()) / 2**32 < fraction


def keep_reason(
    trace_id: str,
    *,
    kept: Reason | None,
    failed: bool,
    elapsed_ms: float,
    slow_ms: float,
    fraction: float,
) -> Reason | None:
    """Why a trace keeps its candidate detail (``kept``: a reason given while it ran), or None: sampled out."""
    if kept is not None:
        return kept
    if failed:
        return "error"
    if elapsed_ms >= slow_ms:
        return "slow"
    return "sampled" if sampled_in(trace_id, fraction) else None


_TO_UNIT = 2.0**-64
