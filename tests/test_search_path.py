"""The search path's shortcuts change nothing observable: a question's vector is kept (a repeated question is not
embedded again), a fast embedder runs on the caller's thread and a slow one in the dense worker, with the same
hits and the same stages either way (embedding the question is a second call of the dense stage)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from helpers_kb import SEC_LEAVE, SEC_PROBATION, SEC_SEVERANCE, SEC_WAGE, make_settings, write_corpus
from zhiku.api import KnowledgeBase
from zhiku.embedding.base import embed_queries
from zhiku.errors import EmbeddingError, InvalidInput
from zhiku.observability.trace import MemorySink, ordered_stages
from zhiku.observability.tracing import Tracer
from zhiku.retrieval.query import QueryVectors


class Recording:
    """A deterministic 3-d embedder that records which thread embedded each question."""

    name = "test/recording-3"
    dim = 3

    def __init__(self) -> None:
        self.queries: list[tuple[str, str]] = []  # (question, thread name)

    @staticmethod
    def _vector(text: str) -> np.ndarray:
        v = np.array([1.0 + ("试用期" in text), 1.0 + ("年休假" in text), 1.0 + ("工资" in text)], np.float32)
        return v / np.linalg.norm(v)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return np.array([self._vector(t) for t in texts], np.float32).reshape(-1, 3)

    def embed_query(self, text: str) -> np.ndarray:
        self.queries.append((text, threading.current_thread().name))
        return self._vector(text)


def _stages(sink: MemorySink) -> list[tuple[object, ...]]:
    t = sink.traces[-1]
    return [(s.name, s.status, s.counts, s.data) for s in ordered_stages(t)]


def _dense_calls(sink: MemorySink) -> int:
    return next(s.calls for s in sink.traces[-1].stages if s.name == "dense")


def test_a_known_question_is_not_embedded_again_and_finds_the_same_hits_and_trace(
    tmp_path: Path, embed_cache_dir: Path
) -> None:
    embedder, sink = Recording(), MemorySink()
    settings = make_settings(tmp_path / "idx", embed_cache_dir, tracing={"enabled": True})
    with KnowledgeBase(settings, embedder=embedder, tracer=Tracer([sink])) as kb:  # type: ignore[arg-type]
        kb.ingest([write_corpus(tmp_path / "docs")])
        kb.searcher.inline_embed_s = 0.0  # never fast enough: every new question goes to the dense worker
        first = kb.retrieve("试用期最长多久", mode="hybrid", top_k=3)
        traced_first, calls_first = _stages(sink), _dense_calls(sink)
        again = kb.retrieve("试用期最长多久", mode="hybrid", top_k=3)  # its vector is known: no embedding
        traced_again, calls_again = _stages(sink), _dense_calls(sink)
        dense = kb.retrieve("年休假几天", mode="dense", top_k=2)
    assert [q for q, _ in embedder.queries] == ["试用期最长多久", "年休假几天"]
    assert all(thread.startswith("zhiku-dense") for _, thread in embedder.queries)
    assert again.hits == first.hits and (again.bm25, again.dense) == (first.bm25, first.dense)
    assert [h.chunk.section for h in first.hits][0].endswith("第十九条")
    assert traced_again == traced_first and (calls_first, calls_again) == (2, 1)  # embedded in the worker, searched
    assert [s[0] for s in traced_first] == ["parse", "bm25", "dense", "fusion", "rerank"]
    assert dense.hits[0].chunk.section == "职工带薪年休假条例 > 第三条、第五条"


def test_a_fast_embedder_runs_on_the_callers_thread_with_the_same_results(
    tmp_path: Path, embed_cache_dir: Path
) -> None:
    settings = make_settings(tmp_path / "idx", embed_cache_dir, tracing={"enabled": True})
    found = {}
    for limit in (0.0, 1e9):  # never / always fast enough (after the first question has been timed)
        embedder, sink = Recording(), MemorySink()
        with KnowledgeBase(settings, embedder=embedder, tracer=Tracer([sink])) as kb:  # type: ignore[arg-type]
            if limit == 0.0:
                kb.ingest([write_corpus(tmp_path / "docs")])
            kb.searcher.inline_embed_s = limit
            runs = [kb.retrieve(q, mode="hybrid", top_k=3) for q in ("拖欠工资", "试用期最长多久", "年休假几天")]
            found[limit] = ([(r.hits, r.bm25, r.dense) for r in runs], _stages(sink), embedder.queries)
    (slow_runs, slow_trace, slow_threads), (fast_runs, fast_trace, fast_threads) = found[0.0], found[1e9]
    main = threading.current_thread().name
    assert [t.startswith("zhiku-dense") for _, t in slow_threads] == [True] * 3
    assert [t == main for _, t in fast_threads] == [False, True, True]  # the first one timed the embedder
    assert fast_runs == slow_runs and fast_trace == slow_trace
    assert [hits[0].chunk.section for hits, _, _ in fast_runs] == [SEC_WAGE, SEC_PROBATION, SEC_LEAVE]


def test_query_vectors_keep_the_most_recently_used_questions_as_read_only_copies() -> None:
    kept = QueryVectors(2)
    a = np.array([1.0, 0.0], np.float32)
    kept.put("a", a)
    kept.put("b", np.array([0.0, 1.0], np.float32))
    a[0] = 5.0  # the caller's array is not the one kept
    got = kept.get("a")  # a is now the most recently used: c pushes b out
    kept.put("c", np.array([0.6, 0.8], np.float32))
    assert got is not None and got.tolist() == [1.0, 0.0] and not got.flags.writeable
    assert kept.get("b") is None and kept.get("a") is not None and kept.get("c") is not None


class Glitching(Recording):
    """Answers its first question with NaNs (a remote model's bad reply), then as ``Recording``."""

    def embed_query(self, text: str) -> np.ndarray:
        vector = super().embed_query(text)
        return np.full(3, np.nan, np.float32) if len(self.queries) == 1 else vector


def test_a_vector_the_store_refuses_is_not_kept_so_asking_again_embeds_again(
    tmp_path: Path, embed_cache_dir: Path
) -> None:
    embedder = Glitching()
    settings = make_settings(tmp_path / "idx", embed_cache_dir)
    with KnowledgeBase(settings, embedder=embedder) as kb:  # type: ignore[arg-type]
        kb.ingest([write_corpus(tmp_path / "docs")])
        with pytest.raises(InvalidInput, match="NaN or infinite"):
            kb.retrieve("试用期最长多久", mode="dense", top_k=2)
        again = kb.retrieve("试用期最长多久", mode="dense", top_k=2)
    assert [q for q, _ in embedder.queries] == ["试用期最长多久", "试用期最长多久"]
    assert again.hits[0].chunk.section.endswith("第十九条")


def test_query_vectors_keep_only_finite_vectors() -> None:
    kept = QueryVectors(size=3)
    kept.put("坏", np.array([np.nan, 1.0], np.float32))
    kept.put("无穷", np.array([np.inf, 1.0], np.float32))
    kept.put("好", np.array([0.6, 0.8], np.float32))
    assert kept.get("坏") is None and kept.get("无穷") is None
    assert np.array_equal(kept.get("好"), np.array([0.6, 0.8], np.float32))  # type: ignore[arg-type]


def test_a_store_without_document_lookups_returns_top_k_hits(tmp_path: Path, embed_cache_dir: Path) -> None:
    """Small-to-big needs a ``Catalogue``; over a store that is only a ``Retriever`` (a plugin's) the search returns
    ``top_k`` hits, not the spares it keeps for merging pieces."""
    from zhiku.retrieval.search import Searcher

    class OnlyRetriever:  # the Retriever methods of the SQLite store, nothing else
        def __init__(self, store: object) -> None:
            for name in ("bm25_search", "dense_search", "dense_scores", "get_chunks", "index_version"):
                setattr(self, name, getattr(store, name))

    settings = make_settings(tmp_path / "idx", embed_cache_dir)
    with KnowledgeBase(settings, embedder=Recording()) as kb:
        kb.ingest([write_corpus(tmp_path / "docs")])
        full = kb.retrieve("劳动者 工资 试用期", mode="bm25", top_k=5)
        plain = Searcher(OnlyRetriever(kb.store), Recording(), kb.searcher.text, settings.retrieval)  # type: ignore[arg-type]
        try:
            for top_k in (1, 2):
                got = plain.search(plain.read("劳动者 工资 试用期", mode="bm25"), top_k=top_k)
                assert [h.chunk.chunk_id for h in got.hits] == [h.chunk.chunk_id for h in full.hits][:top_k]
        finally:
            plain.close()
    assert len(full.hits) >= 3


def test_a_bm25_search_that_waited_for_the_gate_beside_the_dense_worker_has_the_wait_as_its_queue_stage(
    tmp_path: Path, embed_cache_dir: Path
) -> None:
    """The search path with a slow embedder (BM25 here, the question embedded in the dense worker): BM25's wait
    for a place is the ``queue`` stage, not part of the ``bm25`` stage (as on the inline path)."""
    from zhiku.retrieval.gate import FairGate

    embedding = threading.Event()

    class Held(Recording):
        def embed_query(self, text: str) -> np.ndarray:
            embedding.wait()  # the dense worker waits here until BM25 has had its place
            return super().embed_query(text)

    embedder, sink = Held(), MemorySink()
    settings = make_settings(tmp_path / "idx", embed_cache_dir, tracing={"enabled": True})
    with KnowledgeBase(settings, embedder=embedder, tracer=Tracer([sink])) as kb:  # type: ignore[arg-type]
        embedding.set()
        kb.ingest([write_corpus(tmp_path / "docs")])
        embedding.clear()
        kb.searcher.inline_embed_s = 0.0  # the question goes to the dense worker
        gate = kb.searcher.gate = FairGate(1)
        gate.__enter__()  # another search holds the one place
        found = []
        search = threading.Thread(target=lambda: found.append(kb.retrieve("试用期最长多久", mode="hybrid", top_k=3)))
        search.start()
        ready = threading.Event()
        while gate.waiting != 1:  # BM25 waits for the place
            ready.wait(0.001)
        gate.__exit__()
        with gate:  # our turn comes once BM25 has searched and left the gate
            pass
        embedding.set()  # the dense worker goes on: the gate is free for it and for fusion
        search.join()
    t = sink.traces[-1]
    assert t.kind == "query"
    queue, bm25 = t.stage("queue"), t.stage("bm25")
    assert queue is not None and bm25 is not None
    assert (queue.calls, queue.data) == (1, {"places": 1, "queued": 1})
    assert [s.name for s in ordered_stages(t)] == ["parse", "queue", "bm25", "dense", "fusion", "rerank"]
    assert bm25.start_ms >= queue.start_ms + queue.elapsed_ms - 0.001  # BM25's stage starts when its wait ended
    assert [h.chunk.section for h in found[0].hits][0].endswith("第十九条")


def test_a_question_in_traditional_characters_is_searched_in_both_scripts_and_the_better_form_kept(
    tmp_path: Path, embed_cache_dir: Path
) -> None:
    embedder, sink = Recording(), MemorySink()  # (its vectors see 试用期 in Simplified characters only)
    settings = make_settings(tmp_path / "idx", embed_cache_dir, tracing={"enabled": True})
    with KnowledgeBase(settings, embedder=embedder, tracer=Tracer([sink])) as kb:  # type: ignore[arg-type]
        kb.ingest([write_corpus(tmp_path / "docs")])
        simplified = kb.retrieve("试用期最长多久", mode="hybrid", top_k=3)
        embedder.queries.clear()
        traditional = kb.retrieve("試用期最長多久", mode="hybrid", top_k=3)
        dense = next(s for s in ordered_stages(sink.traces[-1]) if s.name == "dense")
        as_written = kb.store.dense_search(Recording._vector("試用期最長多久"), 100)
        kb.retrieve("試用期最長多久", mode="hybrid", top_k=3)  # both vectors known now: nothing embedded
        kb.retrieve("年休假幾天", mode="dense", top_k=3)  # neither known: both embedded
    # the Simplified form of the first was known (asked before)
    assert [q for q, _ in embedder.queries] == ["試用期最長多久", "年休假幾天", "年休假几天"]
    assert as_written[0].score < simplified.dense[0].score  # the Simplified form's best cosine is the higher
    assert traditional.dense == simplified.dense and traditional.hits == simplified.hits
    assert traditional.bm25 == simplified.bm25  # (BM25 normalises the question anyway)
    assert dense.data["question"] == "simplified"
    assert traditional.hits[0].chunk.section.endswith("第十九条")


class FailsInSimplified(Recording):
    """A remote embedder whose request for the Simplified form of a question fails (its first one answered)."""

    def embed_query(self, text: str) -> np.ndarray:
        if text == "试用期最长多久":
            self.queries.append((text, "failed"))
            raise EmbeddingError("embedding endpoint failed: 503 Service Unavailable")
        return super().embed_query(text)


@pytest.mark.parametrize("inline_embed_s", [1e9, 0.0])  # the caller's thread (after one timed question) / the worker
def test_a_failing_simplified_form_leaves_the_question_searched_as_written(
    tmp_path: Path, embed_cache_dir: Path, inline_embed_s: float
) -> None:
    embedder, sink = FailsInSimplified(), MemorySink()
    settings = make_settings(tmp_path / "idx", embed_cache_dir, tracing={"enabled": True})
    with KnowledgeBase(settings, embedder=embedder, tracer=Tracer([sink])) as kb:  # type: ignore[arg-type]
        kb.ingest([write_corpus(tmp_path / "docs")])
        kb.retrieve("年休假几天", mode="dense", top_k=3)  # timed: the embedder counts as fast or slow from here
        kb.searcher.inline_embed_s = inline_embed_s
        found = kb.retrieve("試用期最長多久", mode="hybrid", top_k=3)
        dense = next(s for s in ordered_stages(sink.traces[-1]) if s.name == "dense")
        as_written = kb.store.dense_search(Recording._vector("試用期最長多久"), 100)
        with pytest.raises(EmbeddingError, match="503"):  # the question in Simplified characters itself still fails
            kb.retrieve("试用期最长多久", mode="hybrid", top_k=3)
    assert [q for q, _ in embedder.queries] == ["年休假几天", "試用期最長多久", "试用期最长多久", "试用期最长多久"]
    assert found.dense == as_written
    assert (dense.status, dense.data["question"]) == ("ok", "as written")
    assert (
        dense.data["reason"]
        == "the Simplified form failed: EmbeddingError: embedding endpoint failed: 503 Service Unavailable"
    )


def test_the_dense_worker_embeds_only_the_form_of_a_question_not_known(tmp_path: Path, embed_cache_dir: Path) -> None:
    embedder = Recording()
    settings = make_settings(tmp_path / "idx", embed_cache_dir)
    with KnowledgeBase(settings, embedder=embedder) as kb:  # type: ignore[arg-type]
        kb.ingest([write_corpus(tmp_path / "docs")])
        kb.searcher.inline_embed_s = 0.0  # never fast enough: a question with a form not known goes to the worker
        simplified = kb.retrieve("试用期最长多久", mode="hybrid", top_k=3)
        traditional = kb.retrieve("試用期最長多久", mode="hybrid", top_k=3)  # its Simplified form is known
    assert [q for q, _ in embedder.queries] == ["试用期最长多久", "試用期最長多久"]
    assert all(thread.startswith("zhiku-dense") for _, thread in embedder.queries)
    assert traditional.dense == simplified.dense and traditional.hits == simplified.hits


class Batching(Recording):
    """An embedder that embeds several questions in one call, as the built-in ones do (one request to a remote
    model); ``fail`` makes a call holding it fail whole, as a remote batch does."""

    def __init__(self, fail: str | None = None) -> None:
        super().__init__()
        self.calls: list[list[str]] = []
        self.fail = fail

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        if self.fail in texts:
            raise EmbeddingError("embedding endpoint failed: 503 Service Unavailable")
        return np.array([self._vector(t) for t in texts], np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        self.calls.append([text])
        if text == self.fail:
            raise EmbeddingError("embedding endpoint failed: 503 Service Unavailable")
        return super().embed_query(text)


def test_a_traditional_questions_two_forms_are_embedded_in_one_call(tmp_path: Path, embed_cache_dir: Path) -> None:
    embedder = Batching()
    with KnowledgeBase(make_settings(tmp_path / "idx", embed_cache_dir), embedder=embedder) as kb:  # type: ignore[arg-type]
        kb.ingest([write_corpus(tmp_path / "docs")])
        found = kb.retrieve("試用期最長多久", mode="dense", top_k=3)
        again = kb.retrieve("試用期最長多久", mode="dense", top_k=3)  # both known: no call
        simplified = kb.retrieve("试用期最长多久", mode="dense", top_k=3)  # known too
    assert embedder.calls == [["試用期最長多久", "试用期最长多久"]]
    assert found.dense == again.dense == simplified.dense


def test_when_the_one_call_fails_each_form_is_embedded_on_its_own(tmp_path: Path, embed_cache_dir: Path) -> None:
    embedder = Batching(fail="试用期最长多久")
    with KnowledgeBase(make_settings(tmp_path / "idx", embed_cache_dir), embedder=embedder) as kb:  # type: ignore[arg-type]
        kb.ingest([write_corpus(tmp_path / "docs")])
        found = kb.retrieve("試用期最長多久", mode="dense", top_k=3)
        as_written = kb.store.dense_search(Recording._vector("試用期最長多久"), 100)
    assert embedder.calls == [["試用期最長多久", "试用期最长多久"], ["試用期最長多久"], ["试用期最长多久"]]
    assert found.dense == as_written  # the Simplified form failed: the question as written stands


def test_a_wrapped_embedder_without_embed_queries_embeds_each_form_once(tmp_path: Path, embed_cache_dir: Path) -> None:
    """A plugin's embedder has no ``embed_queries``; ``build_embedder`` wraps it in the embedding cache (and the
    server in ``FairEmbedder``), whose ``embed_queries`` is one ``embed_query`` per text: no one call to try, so a
    failing Simplified form must not send the question as written (and the failing form) a second time."""
    from zhiku.embedding.cache import CachedEmbedder, EmbeddingCache
    from zhiku.mcp.concurrency import FairEmbedder

    inner = FailsInSimplified()
    embedder = FairEmbedder(CachedEmbedder(inner, EmbeddingCache(tmp_path / "embeddings.sqlite")))  # type: ignore[arg-type]
    with KnowledgeBase(make_settings(tmp_path / "idx", embed_cache_dir), embedder=embedder) as kb:
        kb.ingest([write_corpus(tmp_path / "docs")])
        found = kb.retrieve("試用期最長多久", mode="dense", top_k=3)
        as_written = kb.store.dense_search(Recording._vector("試用期最長多久"), 100)
    assert [q for q, _ in inner.queries] == ["試用期最長多久", "试用期最长多久"]
    assert found.dense == as_written


class OneVectorPerBatch(Batching):
    """A plugin's embedder (4-d) whose ``embed_queries`` answers one vector however many questions it is given."""

    name = "test/one-per-batch-4"
    dim = 4

    @staticmethod
    def _vector(text: str) -> np.ndarray:
        return np.append(Recording._vector(text), np.float32(0.0)).astype(np.float32)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return self._vector(texts[0])[None, :]


def test_a_batch_answering_the_wrong_number_of_vectors_is_a_failed_batch(tmp_path: Path, embed_cache_dir: Path) -> None:
    embedder = OneVectorPerBatch()
    with KnowledgeBase(make_settings(tmp_path / "idx", embed_cache_dir), embedder=embedder) as kb:  # type: ignore[arg-type]
        kb.ingest([write_corpus(tmp_path / "docs")])
        found = kb.retrieve("試用期最長多久", mode="dense", top_k=3)
        simplified = kb.retrieve("试用期最长多久", mode="dense", top_k=3)  # its vector kept from the one call
    assert embedder.calls == [["試用期最長多久", "试用期最长多久"], ["試用期最長多久"], ["试用期最长多久"]]
    assert found.dense == simplified.dense
    with pytest.raises(EmbeddingError, match=r"^embedder answered 1 vectors for 2 questions"):
        embed_queries(embedder, ["試用期最長多久", "试用期最长多久"])  # type: ignore[arg-type]


def test_the_one_calls_time_is_what_decides_whether_the_embedder_is_fast(tmp_path: Path, embed_cache_dir: Path) -> None:
    """A remote model answers a request in the same time for one question or two: a Traditional question's one
    call is timed as the caller's wait for it (not that wait shared between its forms), so a model too slow to
    run inside the gate is not taken for a fast one after a Traditional question."""

    class Remote(Batching):  # every request takes at least 4 ms, however many questions it holds
        def embed_queries(self, texts: list[str]) -> np.ndarray:
            threading.Event().wait(0.004)
            return super().embed_queries(texts)

    embedder = Remote()
    with KnowledgeBase(make_settings(tmp_path / "idx", embed_cache_dir), embedder=embedder) as kb:  # type: ignore[arg-type]
        kb.ingest([write_corpus(tmp_path / "docs")])
        kb.searcher.inline_embed_s = 0.003  # more than half a request, less than a whole one
        kb.retrieve("試用期最長多久", mode="dense", top_k=3)
        kb.retrieve("年休假几天", mode="dense", top_k=3)  # a new question: the embedder was timed at 4 ms or more
    assert embedder.calls == [["試用期最長多久", "试用期最长多久"], ["年休假几天"]]
    assert embedder.queries[-1][0] == "年休假几天" and embedder.queries[-1][1].startswith("zhiku-dense")


def test_an_article_named_in_digits_is_searched_as_statutes_write_it(tmp_path: Path, embed_cache_dir: Path) -> None:
    # 劳动合同法第47条 found 第四十八条、第十七条… and never 第四十七条: the statute spells its numbers
    with KnowledgeBase(make_settings(tmp_path / "idx", embed_cache_dir)) as kb:
        kb.ingest([write_corpus(tmp_path / "docs")])
        found = {mode: kb.retrieve("劳动合同法第47条", mode=mode, top_k=2) for mode in ("bm25", "hybrid")}
        plain = kb.retrieve("劳动合同法第四十七条", mode="hybrid", top_k=2)
    for mode, r in found.items():
        assert r.hits[0].chunk.section == SEC_SEVERANCE, mode
    assert "第四十七条" in found["bm25"].query.terms and "47" in found["bm25"].query.terms
    assert found["hybrid"].dense[0] == plain.dense[0]  # the dense channel kept the spelled form's ranking
    embedder = Recording()
    with KnowledgeBase(make_settings(tmp_path / "idx2", embed_cache_dir), embedder=embedder) as kb:  # type: ignore[arg-type]
        kb.ingest([write_corpus(tmp_path / "docs")])
        kb.retrieve("第 19 条", mode="dense", top_k=1)
        kb.retrieve("试用期", mode="dense", top_k=1)  # no article in digits: one form
        kb.retrieve("第 20 條", mode="dense", top_k=1)  # Traditional: 條 is 条 once Simplified, then spelled
    assert [q for q, _ in embedder.queries] == ["第 19 条", "第十九条", "试用期", "第 20 條", "第二十条"]


def test_a_long_questions_start_is_embedded_all_of_it_searched_by_keywords_and_the_answer_says_so(
    tmp_path: Path, embed_cache_dir: Path
) -> None:
    from zhiku.retrieval.plan import CUT_NOTE
    from zhiku.retrieval.query import MAX_EMBED_CHARS

    question = "关于劳动合同的订立、履行和变更，" * 20 + "职工年休假有几天？"
    embedder = Batching()
    with KnowledgeBase(make_settings(tmp_path / "idx", embed_cache_dir), embedder=embedder) as kb:  # type: ignore[arg-type]
        kb.ingest([write_corpus(tmp_path / "docs")])
        long = kb.query(question, mode="hybrid", top_k=3)
        short = kb.query("职工年休假有几天？", mode="hybrid", top_k=3)
    *asked, last = embedder.calls
    assert (len(question), MAX_EMBED_CHARS) == (329, 256) and asked[0] == [question[:256]]
    assert max(len(t) for call in asked for t in call) == 256 and last == ["职工年休假有几天？"]
    assert "年休假" in long.terms
    assert (long.note, short.note) == (CUT_NOTE.format(256), None)
    assert long.note == "问题较长：前 256 个字符按语义检索，全文按关键词检索 / " + (
        "A long question: its first 256 characters were searched by meaning, all of it by keywords."
    )
