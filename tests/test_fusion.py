import math

import pytest

from zhiku.retrieval.fusion import ranked, rrf
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
    for (_, got), (_, want) in zip(fused, expected, strict=False):
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


def test_zscore_fusion_matches_hand_computed_scores():
    from zhiku.retrieval.fusion import zscore_fusion

    bm25 = ranked([("a", 9.0), ("b", 3.0), ("c", 0.0)])  # mean 4, std sqrt(14)
    dense = ranked([("c", 0.9), ("a", 0.7)])  # mean 0.8, std 0.1
    fused = dict(zscore_fusion([bm25, dense]))
    s14 = 14**0.5
    assert math.isclose(fused["a"], 5 / s14 + (-1.0))
    assert math.isclose(fused["b"], -1 / s14 + (-1.0))  # missing from dense: dense's lowest z
    assert math.isclose(fused["c"], -4 / s14 + 1.0)
    assert [i for i, _ in zscore_fusion([bm25, dense])] == ["a", "c", "b"]


def test_zscore_fusion_trusts_a_decisive_channel():
    from zhiku.retrieval.fusion import zscore_fusion

    # BM25 is sure about "x" (far above the rest); dense is flat and ranks "x" only third. RRF sees ranks only:
    # y = 1/62 + 1/61 beats x = 1/61 + 1/63. z-score sees the margins: x = 1.732 + 0.110 beats y = -0.569 + 0.988.
    bm25 = ranked([("x", 30.0), ("y", 2.0), ("z", 1.9), ("w", 1.8)])
    dense = ranked([("y", 0.86), ("z", 0.855), ("x", 0.85), ("w", 0.83)])
    assert [i for i, _ in zscore_fusion([bm25, dense])] == ["x", "y", "z", "w"]
    assert [i for i, _ in rrf([bm25, dense])] == ["y", "x", "z", "w"]


def test_zscore_fusion_degenerate_inputs():
    from zhiku.retrieval.fusion import zscore_fusion

    assert zscore_fusion([[], []]) == []
    one = ranked([("only", 5.0)])
    assert zscore_fusion([one, []]) == [("only", 0.0)]
    with pytest.raises(ValueError, match="1 weights for 2 rankings"):
        zscore_fusion([one, one], weights=[1])
