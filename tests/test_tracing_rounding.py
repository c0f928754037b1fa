"""``rounding.rounded``: the floats ``round(x, n)`` gives, bit for bit (a trace's scores and times are written
rounded; the fast path must never change a line)."""

from __future__ import annotations

import math
import random
import struct
from fractions import Fraction

import numpy as np

from zhiku.observability.rounding import rounded


def same(a: float, b: float) -> bool:
    """Equal floats with the same sign (-0.0 is not 0.0 in a JSON line), or both NaN."""
    return (a == b and math.copysign(1.0, a) == math.copysign(1.0, b)) or (math.isnan(a) and math.isnan(b))


def test_rounded_gives_the_floats_round_gives() -> None:
    rng = random.Random(13)
    values = [rng.uniform(-1.0, 1.0) * 10.0 ** rng.randint(-12, 14) for _ in range(20_000)]
    values += [struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0] for _ in range(5_000)]  # any bits
    for digits in (3, 6):  # exactly on a half (in binary, where one exists), and the floats either side
        for top in (2**31, 2**51, 2**53):  # up to where a product's unit is 2 (the fast path ends at 2**52)
            for _ in range(1_000):
                half = float(Fraction(2 * rng.randint(0, top) + 1, 2 * 10**digits))
                values += [half, math.nextafter(half, 0.0), math.nextafter(half, math.inf), -half]
    values += [0.0, -0.0, 4e-7, 5e-7, 6e-7, -5e-7, -1e-9, 0.0005, 0.0015, 2.675, 1_795_988_105.123456789]
    values += [2.0**52 / 1e6, 2.0**52 / 1e3, 2.0**52, 0.5, 1.5, 2.5, -0.5, math.inf, -math.inf, math.nan]
    for digits in (3, 6):
        got = rounded(values, digits)
        wrong = [(v, g) for v, g in zip(values, got, strict=True) if not same(g, round(v, digits))]
        assert wrong == []
    assert rounded([0.1234565], 6) == [round(0.1234565, 6)] == [0.123456]  # in binary a little below the half
    assert [repr(x) for x in rounded([-1e-9, 0.0000004], 6)] == ["-0.0", "0.0"]


def test_rounded_takes_numpy_scalars_like_round_of_their_float() -> None:
    rng = np.random.default_rng(13)
    scores = list(rng.standard_normal(500).astype(np.float32)) + list(rng.standard_normal(500))
    got = rounded(scores, 6)
    assert all(type(g) is float for g in got)
    assert all(same(g, round(float(s), 6)) for g, s in zip(got, scores, strict=True))
