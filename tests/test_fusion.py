import math
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import numpy as np
import pytest

from zhiku.retrieval import fusion, search
from zhiku.retrieval.fusion import ranked, rrf
from zhiku.types import Ranking, ScoredId


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


def test_zscore_fusion_fill_gives_a_missing_candidate_its_exact_score():
    from zhiku.retrieval.fusion import zscore_fusion

    bm25 = ranked([("a", 9.0), ("b", 3.0), ("c", 0.0), ("d", 0.0)])  # mean 3, std sqrt(13.5)
    dense = ranked([("c", 0.9), ("a", 0.7)])  # mean 0.8, std 0.1
    s = 13.5**0.5
    plain = dict(zscore_fusion([bm25, dense]))
    assert math.isclose(plain["b"], 0 / s + (-1.0))  # the dense floor
    assert [i for i, _ in zscore_fusion([bm25, dense])] == ["a", "c", "b", "d"]
    # b's exact cosine is 0.95 (z 1.5), d's is 0.1 (z -7); e is in no ranking (ignored)
    filled = zscore_fusion([bm25, dense], fill=[None, {"b": 0.95, "d": 0.1, "e": 1.0}])
    got = dict(filled)
    assert [i for i, _ in filled] == ["b", "a", "c", "d"]
    assert math.isclose(got["b"], 0 / s + 1.5)
    assert math.isclose(got["a"], 6 / s + (-1.0))
    assert math.isclose(got["c"], -3 / s + 1.0)
    assert math.isclose(got["d"], -3 / s + (-7.0))
    # a fill below the ranking's floor does not move the floor of the candidates left unfilled
    partial = dict(zscore_fusion([bm25, dense], fill=[None, {"d": 0.1}]))
    assert math.isclose(partial["b"], 0 / s + (-1.0))
    with pytest.raises(ValueError, match="1 fill mappings for 2 rankings"):
        zscore_fusion([bm25, dense], fill=[None])


class Angles:
    """Designed cosines to the query (axis 0): probation 1.0, leave rules 0.8, severance 0.6, wage rules 0.35."""

    name = "test/angles-2"
    dim = 2
    COSINES = {"试用期": 1.0, "年休假": 0.8, "经济补偿": 0.6, "货币形式": 0.35}

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        cos = [next(c for key, c in self.COSINES.items() if key in t) for t in texts]
        return np.array([[c, (1 - c * c) ** 0.5] for c in cos], np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return np.array([1.0, 0.0], np.float32)


def test_fill_dense_scores_bm25_only_candidates_by_their_exact_cosine(tmp_path, embed_cache_dir) -> None:
    from helpers_kb import SEC_LEAVE, SEC_PROBATION, SEC_WAGE, make_settings, write_corpus
    from zhiku.api import KnowledgeBase

    docs = write_corpus(tmp_path / "docs")
    found = {}
    for fill in (True, False):
        settings = make_settings(tmp_path / "idx", embed_cache_dir)
        with constant("FILL_DENSE", fill, search), KnowledgeBase(settings, embedder=Angles()) as kb:
            if fill:
                kb.ingest([docs])
            # depth 3: dense finds probation (z √1.5), leave (0), severance (-√1.5); BM25 ranks the wage rules
            # first, the two chunks that say 工资 in passing far below; the wage rules are outside the dense top 3
            r = kb.retrieve("拖欠加班工资", mode="hybrid", top_k=3, per_source_k=3)
            found[fill] = [(h.chunk.section, h.bm25_rank, h.dense_rank, _round(h.dense_score)) for h in r.hits]
            scores = [h.score for h in r.hits]
    bm25 = [x.score for x in r.bm25]
    mean = sum(bm25) / 3
    zb = [(x - mean) / (sum((y - mean) ** 2 for y in bm25) / 3) ** 0.5 for x in bm25]  # wage, then ~0, ~0
    dense_std = (0.08 / 3) ** 0.5
    assert found[False] == [(SEC_PROBATION, None, 1, 1.0), (SEC_WAGE, 1, None, None), (SEC_LEAVE, 3, 2, 0.8)]
    assert scores == pytest.approx([zb[2] + 0.2 / dense_std, zb[0] - 0.2 / dense_std, zb[2]], abs=1e-5)
    # filled: the wage rules' cosine 0.35 (z -2.76) instead of the floor (z -1.22) puts them below the leave rules
    assert found[True] == [(SEC_PROBATION, None, 1, 1.0), (SEC_LEAVE, 3, 2, 0.8), (SEC_WAGE, 1, None, 0.35)]


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 5)


QUESTION = "天气晴朗，心情不错"  # two clauses, no word of the corpus


class Clauses:
    """Designed vectors: each chunk on its own axis (probation, leave rules, severance, wage rules); the whole
    question leans on probation, its first clause is the wage rules' axis, its second the severance axis."""

    name = "test/clauses-4"
    dim = 4
    AXES = {"试用期": 0, "年休假": 1, "经济补偿": 2, "货币形式": 3}
    QUERIES = {QUESTION: (1.0, 0.8, 0.6, 0.35), "天气晴朗": (0, 0, 0, 1.0), "心情不错": (0, 0, 1.0, 0)}
    asked: list[str] = []

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return np.array([np.eye(4)[next(a for k, a in self.AXES.items() if k in t)] for t in texts], np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        self.asked.append(text)
        v = np.array(self.QUERIES[text], np.float32)
        return v / np.linalg.norm(v)


@contextmanager
def constant(name: str, value: object, *modules: object) -> Iterator[None]:
    """A fixed value of the search (``CLAUSE_WEIGHT``, ``FILL_DENSE``) set otherwise in ``modules`` for a while."""
    with pytest.MonkeyPatch.context() as mp:
        for module in modules:
            mp.setattr(module, name, value)
        yield


def clause_weight(weight: float) -> AbstractContextManager[None]:
    return constant("CLAUSE_WEIGHT", weight, fusion)  # (what `retrieval.fusion: zscore` weighs the clauses)


def _clause_search(tmp_path, cache_dir, query: str, depth: int, top_k: int = 4, clause_weight_=0.35, **retrieval):
    from helpers_kb import make_settings, write_corpus
    from zhiku.api import KnowledgeBase

    settings = make_settings(tmp_path / "idx", cache_dir, retrieval=retrieval)
    embedder = Clauses()
    with clause_weight(clause_weight_), KnowledgeBase(settings, embedder=embedder) as kb:
        if not (tmp_path / "docs").exists():  # the first search of a test builds the index
            kb.ingest([write_corpus(tmp_path / "docs")])
        embedder.asked = []
        r = kb.retrieve(query, mode="hybrid", top_k=top_k, per_source_k=depth)
    return r, embedder.asked


def test_clause_channel_fuses_each_clauses_nearest_chunks(tmp_path, embed_cache_dir) -> None:
    from helpers_kb import SEC_LEAVE, SEC_PROBATION, SEC_SEVERANCE, SEC_WAGE

    # no question word is in the corpus: BM25 finds nothing, the dense z-scores of cosines ∝ (1, 0.8, 0.6, 0.35)
    # are (1.298, 0.467, -0.363, -1.402); the clause channel (best cosine over the clauses: 0, 0, 1, 1) is z
    # (-1, -1, 1, 1)
    dense_z = np.array([1.0, 0.8, 0.6, 0.35])
    dense_z = (dense_z - dense_z.mean()) / dense_z.std()
    clause_z = np.array([-1.0, -1.0, 1.0, 1.0])
    sections = [SEC_PROBATION, SEC_LEAVE, SEC_SEVERANCE, SEC_WAGE]
    for weight, order in ((0.0, [0, 1, 2, 3]), (0.35, [0, 1, 2, 3]), (1.0, [2, 0, 3, 1])):
        r, asked = _clause_search(tmp_path, embed_cache_dir, QUESTION, 4, clause_weight_=weight)
        assert r.bm25 == ()
        assert [h.chunk.section for h in r.hits] == [sections[i] for i in order]
        assert [h.score for h in r.hits] == pytest.approx(list((dense_z + weight * clause_z)[order]), abs=1e-5)
        assert sorted(asked) == sorted([QUESTION] if weight == 0 else [QUESTION, "天气晴朗", "心情不错"])
        assert [(round(x.score, 5), x.rank) for x in r.clauses] == (
            [] if weight == 0 else [(1.0, 1), (1.0, 2), (0.0, 3), (0.0, 4)]
        )


def test_clause_channel_reorders_the_candidates_and_adds_none(tmp_path, embed_cache_dir) -> None:
    from helpers_kb import SEC_LEAVE, SEC_PROBATION

    # depth 2: the dense channel finds probation and leave (cosines ∝ 1, 0.8: z 1, -1); the clause channel scores
    # just those two (best clause cosine 0 and 0: z 0), so however heavy, it cannot bring in the severance or wage
    # rules that the clauses point at
    r, asked = _clause_search(tmp_path, embed_cache_dir, QUESTION, 2, top_k=2, clause_weight_=3.0)
    assert [(h.chunk.section, round(h.score, 4)) for h in r.hits] == [(SEC_PROBATION, 1.0), (SEC_LEAVE, -1.0)]
    assert [(x.chunk_id, x.score) for x in r.clauses] == sorted((h.chunk.chunk_id, 0.0) for h in r.hits)
    assert sorted(asked) == sorted([QUESTION, "天气晴朗", "心情不错"])  # in any order


def test_clause_channel_only_for_several_clauses_in_hybrid_zscore(tmp_path, embed_cache_dir) -> None:
    from helpers_kb import make_settings
    from zhiku.api import KnowledgeBase

    _clause_search(tmp_path, embed_cache_dir, QUESTION, 4)  # builds the index
    r, asked = _clause_search(tmp_path, embed_cache_dir, "天气晴朗", 4)  # one clause: the question alone
    assert (asked, r.clauses) == (["天气晴朗"], ())
    r, asked = _clause_search(tmp_path, embed_cache_dir, QUESTION, 4, fusion="rrf")
    assert (asked, r.clauses) == ([QUESTION], ())
    embedder = Clauses()
    with KnowledgeBase(make_settings(tmp_path / "idx", embed_cache_dir), embedder=embedder) as kb:
        embedder.asked = []
        r = kb.retrieve(QUESTION, mode="dense", top_k=4)
    assert (embedder.asked, r.clauses) == ([QUESTION], ())


def _zscore_reference(rankings, weights, fill):
    """z-score fusion written as its formula, term by term (the oracle of the optimised ``zscore_fusion``)."""
    zs, floors = [], []
    for ranking, extra in zip(rankings, fill, strict=True):
        scores = [x.score for x in ranking]
        mean = sum(scores) / len(scores)
        std = (sum((s - mean) ** 2 for s in scores) / len(scores)) ** 0.5 or 1.0
        z = {x.chunk_id: (x.score - mean) / std for x in ranking}
        floors.append(min(z.values()))
        z.update({i: (s - mean) / std for i, s in (extra or {}).items() if i not in z})
        zs.append(z)
    ids = {x.chunk_id for ranking in rankings for x in ranking}
    fused = {i: sum(w * z.get(i, lo) for z, w, lo in zip(zs, weights, floors, strict=True)) for i in ids}
    return sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))


@pytest.mark.parametrize("columns", [False, True], ids=["ScoredId lists", "Rankings"])
@pytest.mark.parametrize("seed", range(20))
def test_zscore_fusion_equals_its_formula_on_random_rankings_with_ties(seed: int, columns: bool) -> None:
    import random

    from zhiku.retrieval.fusion import zscore_fusion

    rng = random.Random(seed)
    pool = [f"c{n:03d}" for n in range(300)]
    # coarse BM25 scores: many exact ties, broken by id
    bm25 = ranked(sorted(((i, rng.randint(0, 12) / 4) for i in rng.sample(pool, 100)), key=lambda x: -x[1]))
    dense = ranked(sorted(((i, rng.random()) for i in rng.sample(pool, 100)), key=lambda x: -x[1]))
    if columns:  # what the SQLite store returns: the same candidates as columns
        bm25, dense = (Ranking([x.chunk_id for x in r], [x.score for x in r]) for r in (bm25, dense))
    seen = {x.chunk_id for x in dense}
    fill = {x.chunk_id: rng.random() for x in bm25 if x.chunk_id not in seen and rng.random() < 0.7}
    weights = [rng.choice([1.0, 0.7, 2.5]), rng.choice([1.0, 0.3])]
    got = zscore_fusion([bm25, dense], weights=weights, fill=[None, fill])
    want = _zscore_reference([bm25, dense], weights, [None, fill])
    assert [i for i, _ in got] == [i for i, _ in want]
    assert all(abs(a - b) <= 1e-12 for (_, a), (_, b) in zip(got, want, strict=True))
    assert len({s for _, s in got}) < len(got)  # the case exercises ties
    for limit in (0, 1, 5, 10, 20, 37, len(got), len(got) + 5):  # the best `limit`, boundary ties included
        assert zscore_fusion([bm25, dense], weights=weights, fill=[None, fill], limit=limit) == got[:limit]


def test_a_repeated_question_embeds_neither_it_nor_its_clauses(tmp_path, embed_cache_dir) -> None:
    from helpers_kb import make_settings, write_corpus
    from zhiku.api import KnowledgeBase

    embedder = Clauses()
    settings = make_settings(tmp_path / "idx", embed_cache_dir)
    with clause_weight(1.0), KnowledgeBase(settings, embedder=embedder) as kb:
        kb.ingest([write_corpus(tmp_path / "docs")])
        embedder.asked = []
        first = kb.retrieve(QUESTION, mode="hybrid", top_k=4)
        assert sorted(embedder.asked) == sorted([QUESTION, "天气晴朗", "心情不错"])
        embedder.asked = []
        again = kb.retrieve(QUESTION, mode="hybrid", top_k=4)  # the kept vectors: the search runs inline
    assert embedder.asked == []
    assert [(h.chunk.chunk_id, round(h.score, 6)) for h in again.hits] == [
        (h.chunk.chunk_id, round(h.score, 6)) for h in first.hits
    ]
    assert again.clauses == first.clauses


class ClausesFailing(Clauses):
    """The embedder fails on one clause (a remote API's hiccup); the question itself embeds fine."""

    def embed_query(self, text: str) -> np.ndarray:
        if text == "心情不错":
            raise RuntimeError("503 from the embedding endpoint")
        return super().embed_query(text)


def test_a_failing_clause_embedding_leaves_the_search_without_the_clause_channel(tmp_path, embed_cache_dir) -> None:
    from helpers_kb import SEC_LEAVE, SEC_PROBATION, SEC_SEVERANCE, SEC_WAGE, make_settings
    from zhiku.api import KnowledgeBase

    _clause_search(tmp_path, embed_cache_dir, QUESTION, 4)  # builds the index
    settings = make_settings(tmp_path / "idx", embed_cache_dir)
    with clause_weight(1.0), KnowledgeBase(settings, embedder=ClausesFailing()) as kb:
        r = kb.retrieve(QUESTION, mode="hybrid", top_k=4, per_source_k=4)
    # the dense order alone (weight 1 with the clauses would put severance first: the test above)
    assert [h.chunk.section for h in r.hits] == [SEC_PROBATION, SEC_LEAVE, SEC_SEVERANCE, SEC_WAGE]
    assert r.clauses == ()


class ClausesBatched(Clauses):
    """The designed vectors, with a batched ``embed_queries`` as the built-in embedders have."""

    batches: list[list[str]] = []

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        self.batches.append(list(texts))
        return np.vstack([super(ClausesBatched, self).embed_query(t) for t in texts])


def test_a_questions_clauses_are_embedded_in_one_call(tmp_path, embed_cache_dir) -> None:
    from helpers_kb import make_settings
    from zhiku.api import KnowledgeBase

    _clause_search(tmp_path, embed_cache_dir, QUESTION, 4)  # builds the index
    expected, _ = _clause_search(tmp_path, embed_cache_dir, QUESTION, 4, clause_weight_=1.0)
    embedder = ClausesBatched()
    embedder.asked, embedder.batches = [], []
    settings = make_settings(tmp_path / "idx", embed_cache_dir)
    with clause_weight(1.0), KnowledgeBase(settings, embedder=embedder) as kb:
        r = kb.retrieve(QUESTION, mode="hybrid", top_k=4, per_source_k=4)
        again = kb.retrieve(QUESTION, mode="hybrid", top_k=4, per_source_k=4)  # kept: nothing embedded
    assert embedder.batches == [["天气晴朗", "心情不错"]]
    assert [h.chunk.chunk_id for h in r.hits] == [h.chunk.chunk_id for h in expected.hits]
    assert [h.chunk.chunk_id for h in again.hits] == [h.chunk.chunk_id for h in expected.hits]


def test_a_ranking_is_an_immutable_sequence_of_scored_ids() -> None:
    r = Ranking(["a", "b", "c"], [3.0, 2.0, 2.0], [7, 9, 4])
    listed = [ScoredId("a", 3.0, 1), ScoredId("b", 2.0, 2), ScoredId("c", 2.0, 3)]
    assert list(r) == listed and r == listed and r == tuple(listed) and len(r) == 3
    assert r[1] == ScoredId("b", 2.0, 2) and r[-1] == ScoredId("c", 2.0, 3)
    assert r[:2] == listed[:2] and isinstance(r[:2], Ranking) and r[:2].rows == (7, 9)  # a prefix keeps its ranks
    assert r[1:] == listed[1:]  # any other slice: items with their ranks in the whole ranking
    assert r != listed[:2] and r != Ranking(["a", "b", "c"], [3.0, 2.0, 1.0]) and Ranking([], []) == ()
    assert r == Ranking(("a", "b", "c"), (3.0, 2.0, 2.0)) and hash(r) == hash(Ranking(["a", "b", "c"], [3.0, 2.0, 2.0]))
    # equal to the tuple a search returned before: the same hash (a dict or set keyed by one finds the other)
    assert hash(r) == hash(tuple(listed)) and {tuple(listed): "found"}[r] == "found" and r in {tuple(listed)}
    assert hash(Ranking([], [])) == hash(())
    with pytest.raises(IndexError):
        r[3]
    with pytest.raises(AttributeError, match="immutable"):
        r.ids = ("x",)  # type: ignore[misc]
    with pytest.raises(ValueError, match="as many scores"):
        Ranking(["a"], [1.0, 2.0])
    import copy
    import pickle

    for again in (pickle.loads(pickle.dumps(r)), copy.deepcopy(r), copy.copy(r)):
        assert again == r and again.rows == (7, 9, 4)
