import math

import pytest

from zhiku.fusion import ranked, rrf
from zhiku.types import ScoredId


def test_rrf_matches_hand_computed_scores():
    bm25 = ranked([("a", 9.0), ("b", 7.0), ("c", 1.0)])
    dense = ranked([("c", 0.9), ("a", 0.8), ("d", 0.5)])
    fused = rrf([bm25, dense], k=60)
    # a: 1/61 + 1/62, c: 1/63 + 1/61, b: 1/62, d: 1/63
    expected = [
        ("a", 1 / 61 + 1 / 62),
        ("c", 1 / 63 + 1 / 61),
        ("b", 1 / 62),
        ("d", 1 / 63),
    ]
    assert [i for i, _ in fused] == [i for i, _ in expected]
    for (_, got), (_, want) in zip(fused, expected):
        assert math.isclose(got, want, rel_tol=1e-12)


def test_rrf_weights_and_k():
    bm25 = ranked([("x", 1.0), ("y", 0.5)])
    dense = ranked([("y", 0.9), ("x", 0.1)])
    fused = dict(rrf([bm25, dense], k=1, weights=[2.0, 1.0]))
    assert math.isclose(fused["x"], 2 / 2 + 1 / 3)
    assert math.isclose(fused["y"], 2 / 3 + 1 / 2)


def test_rrf_ties_break_by_best_rank_then_id():
    one = [ScoredId("b", 1.0, 1), ScoredId("a", 0.5, 2)]
    two = [ScoredId("a", 1.0, 1), ScoredId("b", 0.5, 2)]
    assert [i for i, _ in rrf([one, two])] == ["a", "b"]


def test_rrf_rejects_bad_arguments():
    with pytest.raises(ValueError, match="k must be"):
        rrf([[]], k=0)
    with pytest.raises(ValueError, match="2 weights for 1 rankings"):
        rrf([[]], weights=[1, 1])


def test_rrf_of_nothing_is_empty():
    assert rrf([[], []]) == []
