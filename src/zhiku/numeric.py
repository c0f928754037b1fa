"""The small numeric helpers every layer shares: an L2 normaliser, a top-k, a percentile."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def l2_normalise(m: np.ndarray, *, in_place: bool = False) -> np.ndarray:
    """Rows of ``m`` (along its last axis; a 1-D vector is one row) scaled to unit length, as float32.

    Zero rows stay zero, so a dot product of normalised rows is their cosine. ``in_place`` overwrites ``m`` when it
    is already a writable float32 array (the dense index normalises its freshly loaded matrix this way).
    """
    m = np.asarray(m, np.float32)
    norms = np.linalg.norm(m, axis=-1, keepdims=True)
    norms[norms == 0] = 1.0
    out: np.ndarray = np.divide(m, norms, out=m if in_place else None)
    return out


def best(scores: np.ndarray, k: int) -> np.ndarray:
    """The positions (ascending) of the ``k`` highest ``scores`` (no NaN) and of every score tied with the ``k``-th.
    A large array's ``k``-th is looked for among the scores at least a strided sample's best (a partition costs
    ~6 ns a score)."""
    n = scores.size
    if k >= n or k < 1:
        return np.arange(n if k > 0 else 0)
    pool = None
    step = n // (4 * k)
    if step > 2:  # the sample's j-th best has ~j * step >= 2k scores at least it: almost always k or more
        sample = scores[::step].copy()
        j = sample.size - max(2 * k // step, 16)
        if j > 0:
            sample.partition(j)
            pool = (scores >= sample[j]).nonzero()[0]
    some = scores[pool] if pool is not None and pool.size >= k else scores  # (the k-th best of all is among them)
    part = some.copy()
    part.partition(some.size - k)
    top: np.ndarray = (some >= part[some.size - k]).nonzero()[0]
    return top if pool is None or some is scores else pool[top]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100) of ``values``, interpolating linearly between closest ranks (numpy's default).

    Raises ``ValueError`` on no values: there is no percentile of nothing, and callers say what they show instead.
    """
    if not values:
        raise ValueError("percentile of no values")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return float(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo))
