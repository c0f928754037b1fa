"""``round(x, n)`` for the floats a trace writes, the same floats several times faster.

CPython's ``round(x, n)`` writes ``x`` as a correctly rounded decimal string and reads it back (~0.8 µs a call,
on every trace's start time and on each score a sampled-in trace lists). Here ``y = x · 10ⁿ`` is rounded to an
integer ``r`` (half to even, as ``round``) and ``r / 10ⁿ`` is the float nearest that decimal, which is what
``round`` returns. The product is rounded, but rounding to nearest is monotonic and below 2⁵² every ``k + ½`` is
a float, so the rounded product lies on the same side of each half as the exact one: ``r`` is ``round``'s
digits, unless the product lands on a half exactly. That case, ``|y|`` from 2⁵², a value that rounds to zero
(``round`` keeps its sign) and one not finite are given to ``round`` itself.
"""

from __future__ import annotations

from collections.abc import Iterable

_LIMIT = 2.0**52  # below it every k + ½ is a float (and r / 10ⁿ divides an exact integer)


def rounded(values: Iterable[float], digits: int) -> list[float]:
    """``[round(float(v), digits) for v in values]``, the same floats (``digits`` from 0 to 22)."""
    scale = 10.0**digits  # exact up to 10²²
    out: list[float] = []
    for v in values:
        x = float(v)
        y = x * scale
        if -_LIMIT < y < _LIMIT:  # (NaN is not)
            r = round(y)  # an int, half to even
            if r and -0.5 < y - r < 0.5:  # y - r is exact: y and r are within one unit
                out.append(r / scale)
                continue
        out.append(round(x, digits))
    return out


def rounded_one(x: float, digits: int) -> float:
    """``round(x, digits)`` for one float (a trace's start time and duration), by ``rounded``'s rule without its
    list."""
    scale = _SCALES[digits]
    y = x * scale
    if -_LIMIT < y < _LIMIT:
        r = round(y)
        if r and -0.5 < y - r < 0.5:
            return r / scale
    return round(x, digits)


_SCALES = tuple(10.0**n for n in range(23))  # exact: 10ⁿ up to 10²²
