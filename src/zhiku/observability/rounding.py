"""``round(x, n)`` for the floats a trace writes, the same floats several times faster.

CPython's ``round(x, n)`` writes ``x`` as a correctly rounded decimal string and reads it back (~0.8 µs a call):
a sampled-in hybrid trace rounds 20–70 scores. Here ``x · 10ⁿ`` is rounded to an integer ``r`` (half to even, as
``round``) and ``r / 10ⁿ`` is the float nearest that decimal, which is what ``round`` returns, whenever the
product's rounding error cannot change ``r``: ``|x · 10ⁿ|`` below 2³⁰ (so the product is off by at most 2⁻²⁴ of
a unit) and its fraction not within 10⁻⁶ of a half. Any other value (near a half, large, zero, not finite) is given to ``round`` itself.
"""

from __future__ import annotations

from collections.abc import Iterable

_LIMIT = 2.0**30  # |x · 10ⁿ| below it: the product is within 2⁻²⁴ of exact, well inside _NEAR_HALF's margin
_NEAR_HALF = 0.5 - 1e-6  # a fraction this close to ½ (or closer) goes to ``round``


def rounded(values: Iterable[float], digits: int) -> list[float]:
    """``[round(float(v), digits) for v in values]``, the same floats (``digits`` ≥ 0)."""
    scale = 10.0**digits
    out: list[float] = []
    for v in values:
        x = float(v)
        y = x * scale
        if -_LIMIT < y < _LIMIT:
            r = round(y)  # an int, half to even (NaN fails the range test above)
            d = y - r
            if r and -_NEAR_HALF < d < _NEAR_HALF:
                out.append(r / scale)
                continue
        out.append(round(x, digits))  # near a half, large, or rounding to zero (keeps -0.0)
    return out
