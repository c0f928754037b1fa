import math

import numpy as np
import pytest

from zhiku.evaluation.metrics import hit_at_k, mrr_at_k, ndcg_at_k, recall_at_k
from zhiku.numeric import l2_normalise, percentile

REL = {"d2": 1, "d5": 1}
RANKED = ["d1", "d2", "d3", "d4", "d5", "d6"]


def test_hit_and_mrr():
    assert hit_at_k(RANKED, REL, 1) == 0.0
    assert hit_at_k(RANKED, REL, 2) == 1.0
    assert mrr_at_k(RANKED, REL, 10) == 0.5
    assert mrr_at_k(RANKED, REL, 1) == 0.0


def test_recall():
    assert recall_at_k(RANKED, REL, 2) == 0.5
    assert recall_at_k(RANKED, REL, 5) == 1.0
    assert recall_at_k(RANKED, {}, 5) == 0.0


def test_ndcg_hand_computed():
    dcg = 1 / math.log2(3) + 1 / math.log2(6)
    idcg = 1 / math.log2(2) + 1 / math.log2(3)
    assert math.isclose(ndcg_at_k(RANKED, REL, 10), dcg / idcg)
    assert ndcg_at_k(["d2", "d5"], REL, 10) == 1.0
    assert ndcg_at_k(["x"], REL, 10) == 0.0


def test_ndcg_graded():
    rel = {"a": 2, "b": 1}
    got = ndcg_at_k(["b", "a"], rel, 2)
    assert math.isclose(got, (1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3)))


def test_percentile_interpolates_like_numpy():
    assert percentile([10, 20, 30, 40], 50) == 25.0
    assert math.isclose(percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 95), 9.55)
    with pytest.raises(ValueError, match="percentile of no values"):
        percentile([], 50)  # one percentile for the whole package: nothing has no percentile


def test_one_l2_normaliser_for_matrices_and_vectors():
    m = np.array([[3.0, 4.0], [0.0, 0.0]], np.float64)
    got = l2_normalise(m)
    assert got.dtype == np.float32 and got.tolist() == [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]
    assert l2_normalise(np.array([0.0, 2.0], np.float32)).tolist() == [0.0, 1.0]  # a vector is one row
    own = np.array([[0.0, 5.0]], np.float32)
    assert l2_normalise(own, in_place=True) is own and own.tolist() == [[0.0, 1.0]]
    assert m.tolist() == [[3.0, 4.0], [0.0, 0.0]]  # not in place: the input is untouched
