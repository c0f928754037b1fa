"""Traces: what lands in traces.jsonl for a query, an ingestion run and a failure, what concurrent writers leave
there, what the readers (`zhiku query --verbose`, `zhiku traces`, the dashboard, OpenTelemetry) show, and rank
changes against hand-computed values."""

from __future__ import annotations

import contextvars
import json
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from helpers_kb import SEC_PROBATION
from zhiku.observability.trace import TRACE_FILE, JsonlSink, MemorySink, Trace, ordered_stages, read_traces
from zhiku.observability.tracing import NOOP, Tracer, fusion_changes, mark, rank_changes, span
from zhiku.retrieval.fusion import rrf
from zhiku.retrieval.gate import FairGate
from zhiku.types import Hit, ScoredId

QUERY_STAGES = ["parse", "bm25", "dense", "fusion", "rerank"]


def ids(*names: str) -> list[ScoredId]:
    return [ScoredId(n, 1.0 / i, i) for i, n in enumerate(names, 1)]


def wait_until(cond: Callable[[], bool]) -> None:
    pause = threading.Event()
    for _ in range(10_000):  # a bound for a failing run only (~10 s)
        if cond():
            return
        pause.wait(0.001)
    raise AssertionError("the condition never held")


# ------------------------------------------------------------------------------------ rank changes
def test_rank_changes_hand_computed() -> None:
    got = rank_changes({"a": 1, "b": 2, "c": 3, "d": 4}, ["c", "a", "e", "b"], keep_dropped_within=4)
    assert [(r["chunk_id"], r["rank_before"], r["rank_after"], r["delta"], r["status"]) for r in got["changes"]] == [
        ("c", 3, 1, 2, "up"),
        ("a", 1, 2, -1, "down"),
        ("e", None, 3, None, "new"),  # new at this stage: no invented delta
        ("b", 2, 4, -2, "down"),
        ("d", 4, None, None, "dropped"),
    ]
    assert got["summary"] == {
        "moved_up": 1,
        "moved_down": 2,
        "unchanged": 0,
        "new": 1,
        "max_gain": 2,
        "max_drop": 2,
        "dropped": 1,
    }
    assert rank_changes({"a": 1}, ["a"], keep_dropped_within=1)["summary"]["unchanged"] == 1


def test_fusion_rank_changes_use_the_best_channel_rank() -> None:
    bm25, dense = ids("a", "b", "c"), ids("d", "e", "c")
    # RRF k=60: c = 1/63 + 1/63 = 0.031746; a = d = 1/61 (tie: best rank 1 both, then id); b = e = 1/62
    fused = [cid for cid, _ in rrf([bm25, dense], k=60)]
    assert fused == ["c", "a", "d", "b", "e"]
    counts, data = fusion_changes(bm25, dense, fused[:3], top_k=1)  # dropped rows shown if they stood within 1
    assert counts == {"candidates": 5}
    assert data["changes"] == [
        {"chunk_id": "c", "rank_before": 3, "rank_after": 1, "delta": 2, "status": "up", "bm25_rank": 3, "dense_rank": 3},
        {"chunk_id": "a", "rank_before": 1, "rank_after": 2, "delta": -1, "status": "down", "bm25_rank": 1, "dense_rank": None},
        {"chunk_id": "d", "rank_before": 1, "rank_after": 3, "delta": -2, "status": "down", "bm25_rank": None, "dense_rank": 1},
    ]  # fmt: skip
    assert data["summary"] == {
        "moved_up": 1,
        "moved_down": 2,
        "unchanged": 0,
        "new": 0,
        "max_gain": 2,
        "max_drop": 2,
        "dropped": 2,
    }


# -------------------------------------------------------------------------------------- spans
def test_a_span_outside_a_trace_does_nothing() -> None:
    with span("bm25") as sp:
        sp.set(counts={"candidates": 3}, ranking=[1])
        sp.ranking(ids("a"))
    assert sp is NOOP and not sp.active
    mark("rerank")  # nothing to record into: no error
    with Tracer().trace("query", query="x") as t:  # tracing off
        assert t is None and span("parse") is NOOP


def test_spans_merge_by_name_joins_add_attributes_and_worker_threads_record_into_the_trace() -> None:
    sink = MemorySink()
    tracer = Tracer([sink])
    with tracer.trace("ingest", collection="hr") as t:
        for n in range(3):
            with span("load") as sp:
                sp.set(counts={"documents": 1}, names=[f"d{n}"])
        mark("transform", reason="none")
        with tracer.trace("query", collection="other", extra=1) as joined:  # joins the open trace: its attributes first
            assert joined is t

        def embed() -> None:
            with span("embed"):
                pass

        worker = threading.Thread(target=contextvars.copy_context().run, args=(embed,))
        worker.start()
        worker.join()
    assert span("load") is NOOP  # ended
    [done] = sink.traces
    assert done.kind == "ingest" and done.attrs == {"collection": "hr", "extra": 1}
    load = done.stage("load")
    assert load is not None
    assert (load.calls, load.counts, load.data, load.status) == (
        3,
        {"documents": 3},
        {"names": ["d0", "d1", "d2"]},
        "ok",
    )
    transform = done.stage("transform")
    assert transform is not None and (transform.status, transform.data) == ("off", {"reason": "none"})
    assert [s.name for s in done.stages] == ["load", "transform", "embed"]  # pipeline order
    assert done.elapsed_ms >= load.elapsed_ms >= 0


def test_capture_records_without_sinks() -> None:
    with Tracer().trace("query", capture=True) as t:
        with span("parse"):
            pass
    assert isinstance(t, Trace) and [s.name for s in t.stages] == ["parse"]


# -------------------------------------------------------------------------------- the file
def trace_queries(tracer: Tracer, texts: list[str]) -> None:
    """One query trace per text, its parse stage counting the text's position as ``terms``."""
    for n, text in enumerate(texts):
        with tracer.trace("query", query=text):
            with span("parse") as sp:
                sp.set(counts={"terms": n})


def test_the_trace_file_rotates_and_reads_newest_first(tmp_path: Path) -> None:
    path = tmp_path / TRACE_FILE
    trace_queries(Tracer([JsonlSink(path, max_bytes=600, backups=2)]), [f"问题{n}" for n in range(12)])
    backups = [path.with_name(f"{TRACE_FILE}.{n}") for n in (1, 2, 3)]
    assert path.is_file() and backups[0].is_file() and backups[1].is_file() and not backups[2].exists()
    for f in (path, backups[0]):
        assert f.stat().st_size <= 600
    got = read_traces(path)
    queries = [t.attrs["query"] for t in got]
    assert queries[0] == "问题11" and queries == sorted(queries, key=lambda q: -int(q[2:]))  # newest first
    assert 3 <= len(got) < 12  # the oldest rotated away
    assert got[0].stage("parse").counts == {"terms": 11}  # type: ignore[union-attr]
    with path.open("a", encoding="utf-8") as f:
        f.write("{broken\n")
    assert read_traces(path, limit=2)[0].attrs["query"] == "问题11"
    assert read_traces(path, kind="ingest") == []


def test_read_traces_reads_every_backup_tracing_backups_keeps(tmp_path: Path) -> None:
    path = tmp_path / TRACE_FILE  # tracing.backups may be up to 100: here 11 rotated files, one trace each
    for n in range(12):
        line = json.dumps(Trace("query", f"{n:016x}", 1000.0 - n, {"query": f"q{n}"}).to_json())
        path.with_name(TRACE_FILE + (f".{n}" if n else "")).write_text(line + "\n", encoding="utf-8")
    assert [t.attrs["query"] for t in read_traces(path)] == [f"q{n}" for n in range(12)]  # newest first


def test_concurrent_writers_leave_each_trace_once_as_a_whole_line(tmp_path: Path) -> None:
    path = tmp_path / TRACE_FILE
    tracers = [Tracer([JsonlSink(path)]) for _ in range(4)]  # four KnowledgeBases (or processes) on one index
    go = threading.Barrier(4)

    def client(n: int) -> None:
        go.wait()
        trace_queries(tracers[n], [f"{n}-{i:03d}" for i in range(100)])

    clients = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for c in clients:
        c.start()
    for c in clients:
        c.join(30)
    lines = path.read_bytes().splitlines()
    queries = [json.loads(line)["attrs"]["query"] for line in lines]  # every line whole JSON
    assert sorted(queries) == sorted(f"{n}-{i:03d}" for n in range(4) for i in range(100))  # all, none twice
    for n in range(4):  # each client's traces in the order it wrote them
        mine = [q for q in queries if q.startswith(f"{n}-")]
        assert mine == sorted(mine)


def test_a_trace_that_cannot_be_written_never_fails_the_query(tmp_path: Path) -> None:
    path = tmp_path / "missing-folder" / TRACE_FILE
    with Tracer([JsonlSink(path)]).trace("query") as t:
        with span("parse"):
            pass
    assert t is not None and t.stage("parse") is not None and not path.exists()


def test_a_forked_child_appends_its_own_traces(tmp_path: Path) -> None:
    path = tmp_path / TRACE_FILE
    tracer = Tracer([JsonlSink(path)])
    trace_queries(tracer, ["parent"])
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        try:
            trace_queries(tracer, ["child"])
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert sorted(t.attrs["query"] for t in read_traces(path)) == ["child", "parent"]


# ------------------------------------------------------------------------- a KnowledgeBase's traces
def test_a_query_trace_has_every_stage_with_ranks_and_labels(kb_factory, corpus: Path, tmp_path: Path) -> None:
    kb = kb_factory(tmp_path / "idx")
    kb.ingest([corpus])
    answer = kb.query("试用期最长多久", top_k=3)
    traces = read_traces(tmp_path / "idx" / TRACE_FILE)
    assert [t.kind for t in traces] == ["query", "ingest"]
    q = traces[0]
    assert [s.name for s in q.stages] == [*QUERY_STAGES, "answer"]
    assert q.attrs["query"] == "试用期最长多久" and q.attrs["mode"] == "hybrid" and q.attrs["top_k"] == 3
    assert q.stage("parse").data["terms"] == ["试用", "试用期", "最长", "多久"]
    assert q.stage("bm25").counts == {"candidates": 1}
    assert q.stage("dense").counts == {"candidates": 4}
    assert (q.stage("rerank").status, q.stage("rerank").data) == ("off", {"reason": "no reranker configured"})
    assert q.stage("answer").counts["citations"] == len(answer.citations) == 3
    fusion = q.stage("fusion")
    assert fusion.counts == {"candidates": 4, "returned": 3}
    assert fusion.data["dense_filled"] == 0  # the dense channel found every chunk: no cosine to fill in
    assert "clause_ranking" not in fusion.data  # one clause: no clause channel
    first = fusion.data["changes"][0]
    assert (first["rank_after"], first["rank_before"], first["bm25_rank"], first["dense_rank"], first["status"]) == (
        1,
        1,
        1,
        1,
        "same",
    )
    assert (first["source"], first["section"]) == ("劳动合同法.md", SEC_PROBATION)
    assert fusion.data["summary"]["dropped"] == 1
    assert q.stage("bm25").data["ranking"][0]["source"] == "劳动合同法.md"
    assert [h["rank"] for h in q.data["hits"]] == [1, 2, 3] and q.data["hits"][0]["section"] == SEC_PROBATION
    for s in q.stages:
        assert s.elapsed_ms >= 0 and s.start_ms >= 0
    line = (tmp_path / "idx" / TRACE_FILE).read_text(encoding="utf-8").splitlines()[-1]
    assert json.loads(line)["stages"][0]["name"] == "parse"  # one JSON line per trace

    kb.query("试用期最长多久，年休假有几天", top_k=3)  # two clauses: the clause channel scores all 4 candidates
    q = read_traces(tmp_path / "idx" / TRACE_FILE)[0]
    assert [s.name for s in q.stages] == ["parse", "bm25", "dense", "clauses", "fusion", "rerank", "answer"]
    assert q.stage("clauses").counts == {"clauses": 2, "embedded": 1}  # the first clause was asked before
    assert q.stage("fusion").counts["clause_candidates"] == 4
    ranking = q.stage("fusion").data["clause_ranking"]
    assert [r["rank"] for r in ranking] == [1, 2, 3, 4] and len({r["chunk_id"] for r in ranking}) == 4
    assert {r["source"] for r in ranking} == {"劳动合同法.md", "年休假条例.md", "规章/工资支付规定.txt"}
    kb.query("试用期最长多久，年休假有几天", top_k=3)  # the clauses' vectors are known
    assert read_traces(tmp_path / "idx" / TRACE_FILE)[0].stage("clauses").counts == {"clauses": 2, "embedded": 0}


def test_an_ingest_trace_lists_documents_with_statuses_and_reasons(kb_factory, corpus: Path, tmp_path: Path) -> None:
    kb = kb_factory(tmp_path / "idx")
    kb.ingest([corpus])
    (corpus / "空白.md").write_text("   \n", encoding="utf-8")
    kb.ingest([corpus])
    second, first = read_traces(tmp_path / "idx" / TRACE_FILE, kind="ingest")
    assert [s.name for s in first.stages] == ["load", "split", "transform", "tokenise", "embed", "upsert"]
    assert first.stage("load").counts["documents"] == 3 and first.stage("load").calls == 3
    assert first.stage("split").counts == {"documents": 3, "chunks": 4}
    assert first.stage("transform").status == "off"
    assert first.stage("tokenise").counts == {"chunks": 4, "over_window": 0}
    assert first.stage("embed").counts["texts"] == 4 and first.stage("embed").calls == 1  # one call: 4 ≤ batch_chunks
    assert first.stage("upsert").counts == {"documents": 3, "chunks": 4}
    assert {d["status"] for d in first.data["documents"]} == {"added"}
    by_status = {d["status"]: d for d in second.data["documents"]}
    assert by_status["skipped"]["reason"] == "unchanged (same SHA-256)"
    assert by_status["failed"]["source"].endswith("空白.md") and "no text" in by_status["failed"]["reason"]
    assert second.data["counts"] == {"added": 0, "updated": 0, "skipped": 3, "removed": 0, "failed": 1}


def test_tracing_off_writes_nothing(kb_factory, corpus: Path, tmp_path: Path) -> None:
    kb = kb_factory(tmp_path / "idx", tracing={"enabled": False})
    kb.ingest([corpus])
    kb.query("试用期最长多久", mode="bm25")
    assert not (tmp_path / "idx" / TRACE_FILE).exists()


def test_single_channel_modes_mark_the_other_stages_off(kb_factory, corpus: Path, tmp_path: Path) -> None:
    sink = MemorySink()
    kb = kb_factory(tmp_path / "idx")
    kb.ingest([corpus])
    kb.tracer = Tracer([sink])
    kb.retrieve("试用期最长多久", mode="bm25")
    [t] = sink.traces
    assert {s.name: s.status for s in t.stages} == {
        "parse": "ok",
        "bm25": "ok",
        "dense": "off",
        "fusion": "off",
        "rerank": "off",
    }


# ------------------------------------------------------------------- a designed index, exact traces
# Six one-paragraph documents, all five words long. BM25 ("zeta"): the four that hold it, by how often:
# a1 (4×) > b2 (3×) > c3 (2×) > d4 (1×). Dense (DesignedEmbedder): cosine to the query a1 .4, b2 .5, c3 .7,
# d4 .6, e5 .8, f6 .9, so the dense order is f6, e5, c3, d4, b2, a1. RRF (k=60) over both:
# c3 1/63+1/63 = .031746 > a1 1/61+1/66 = .031545 > b2 1/62+1/65 = .031514 > d4 1/64+1/64 = .031250
# > f6 1/61 > e5 1/62; the top 3 are c3, a1, b2.
DESIGNED = {
    "a1.md": ("zeta zeta zeta zeta alpha", 0.4),
    "b2.md": ("zeta zeta zeta bravo bravo", 0.5),
    "c3.md": ("zeta zeta charlie charlie charlie", 0.7),
    "d4.md": ("zeta delta delta delta delta", 0.6),
    "e5.md": ("echo echo echo echo echo", 0.8),
    "f6.md": ("foxtrot foxtrot foxtrot foxtrot foxtrot", 0.9),
}


class DesignedEmbedder:
    """Vectors with a chosen cosine to every query: ``c·e0 + √(1−c²)·e_i`` for document i, ``e0`` for a query."""

    name, dim = "designed-8", 8

    def embed_query(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim, dtype=np.float32)
        v[0] = 1.0
        return v

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            [(i, cos)] = [(i, c) for i, (body, c) in enumerate(DESIGNED.values(), 1) if body.split()[-1] in text]
            out[row, 0], out[row, i] = cos, (1 - cos * cos) ** 0.5
        return out


def designed_docs(tmp_path: Path) -> Path:
    docs = tmp_path / "designed"
    docs.mkdir()
    for name, (body, _) in DESIGNED.items():
        (docs / name).write_text(body + "\n", encoding="utf-8")
    return docs


def designed_kb(  # noqa: ANN201
    kb_factory, tmp_path: Path, embedder: object = None, reranker: object = None, **overrides: object
):
    settings: dict[str, object] = {"retrieval": {"fusion": "rrf"}, **overrides}
    kb = kb_factory(tmp_path / "idx", embedder=embedder or DesignedEmbedder(), reranker=reranker, **settings)
    kb.ingest([designed_docs(tmp_path)])
    return kb


def sources(rows: list[dict[str, object]]) -> list[object]:
    return [r["source"] for r in rows]


def test_a_designed_index_trace_has_exact_counts_ranks_and_rank_changes(kb_factory, tmp_path: Path) -> None:
    kb = designed_kb(kb_factory, tmp_path)
    hits = kb.retrieve("zeta", top_k=3).hits
    assert [h.chunk.source for h in hits] == ["c3.md", "a1.md", "b2.md"]
    [q, _] = read_traces(tmp_path / "idx" / TRACE_FILE)
    assert [s.name for s in q.stages] == QUERY_STAGES
    bm25, dense, fusion = q.stage("bm25"), q.stage("dense"), q.stage("fusion")
    assert bm25.counts == {"candidates": 4} and dense.counts == {"candidates": 6}
    assert sources(bm25.data["ranking"]) == ["a1.md", "b2.md", "c3.md", "d4.md"]  # every candidate, labelled
    assert [r["rank"] for r in bm25.data["ranking"]] == [1, 2, 3, 4]
    assert sources(dense.data["ranking"]) == ["f6.md", "e5.md", "c3.md", "d4.md", "b2.md", "a1.md"]
    assert [r["score"] for r in dense.data["ranking"]][:3] == pytest.approx([0.9, 0.8, 0.7], abs=1e-5)
    assert fusion.counts == {"candidates": 6, "returned": 3}
    changes = [
        (r["source"], r["rank_before"], r["rank_after"], r["delta"], r["status"], r["bm25_rank"], r["dense_rank"])
        for r in fusion.data["changes"]
    ]
    assert changes == [
        ("c3.md", 3, 1, 2, "up", 3, 3),
        ("a1.md", 1, 2, -1, "down", 1, 6),
        ("b2.md", 2, 3, -1, "down", 2, 5),
        ("f6.md", 1, None, None, "dropped", None, 1),  # left the top 3: shown (it stood within it)
        ("e5.md", 2, None, None, "dropped", None, 2),  # d4 (best rank 4) is counted, not shown
    ]
    assert fusion.data["summary"] == {
        "moved_up": 1,
        "moved_down": 2,
        "unchanged": 0,
        "new": 0,
        "max_gain": 2,
        "max_drop": 1,
        "dropped": 3,
    }
    assert [(h["rank"], h["source"], h["fused_rank"], h["bm25_rank"], h["dense_rank"]) for h in q.data["hits"]] == [
        (1, "c3.md", 1, 3, 3),
        (2, "a1.md", 2, 1, 6),
        (3, "b2.md", 3, 2, 5),
    ]


def test_a_failed_query_writes_its_error_and_the_stage_it_failed_in(kb_factory, tmp_path: Path) -> None:
    class FailsOnQuestions(DesignedEmbedder):
        def embed_query(self, text: str) -> np.ndarray:
            raise RuntimeError("503 from the embedding endpoint")

    kb = designed_kb(kb_factory, tmp_path, embedder=FailsOnQuestions())
    with pytest.raises(RuntimeError, match="503"):
        kb.retrieve("zeta", top_k=3)
    [q, _] = read_traces(tmp_path / "idx" / TRACE_FILE)
    assert (q.status, q.error) == ("error", "RuntimeError: 503 from the embedding endpoint")
    dense = q.stage("dense")
    assert dense is not None and (dense.status, dense.data["error"]) == ("error", q.error)
    assert q.stage("bm25").status == "ok"  # type: ignore[union-attr]


def test_a_clause_the_embedder_fails_on_leaves_a_fallback_clauses_stage(kb_factory, tmp_path: Path) -> None:
    class FailsOnAlpha(DesignedEmbedder):
        def embed_query(self, text: str) -> np.ndarray:
            if text == "alpha":
                raise RuntimeError("503 from the embedding endpoint")
            return super().embed_query(text)

    kb = designed_kb(kb_factory, tmp_path, embedder=FailsOnAlpha(), retrieval={"fusion": "zscore"})
    assert kb.retrieve("zeta，alpha", mode="hybrid", top_k=2).clauses == ()  # searched without the clause channel
    stage = read_traces(tmp_path / "idx" / TRACE_FILE, kind="query")[0].stage("clauses")
    assert stage is not None and (stage.status, stage.counts) == ("fallback", {"clauses": 2, "embedded": 0})
    assert stage.data == {"reason": "RuntimeError: 503 from the embedding endpoint"}


class LateReranker:
    """Answers only after its query gave up on it (``rerank.timeout``), then records into the query's trace."""

    name = "test:late"

    def __init__(self) -> None:
        self.release, self.done = threading.Event(), threading.Event()

    def load(self) -> None:
        return None

    def rerank(self, query: str, hits: Sequence[Hit], top_k: int) -> list[Hit]:
        self.release.wait(10)
        try:
            with span("rerank") as sp:
                sp.set(counts={"late": 1}, late=True)
            mark("late", status="ok")
        finally:
            self.done.set()
        return list(hits[:top_k])


def test_a_reranker_that_outlived_its_query_adds_nothing_to_its_trace(kb_factory, tmp_path: Path) -> None:
    reranker = LateReranker()
    kb = designed_kb(kb_factory, tmp_path, reranker=reranker, rerank={"timeout_s": 0.05})
    sink = MemorySink()
    kb.tracer = Tracer([sink])
    assert kb.retrieve("zeta", top_k=3).rerank == "fallback: timeout after 0.05s"
    reranker.release.set()
    assert reranker.done.wait(10)
    [t] = sink.traces
    assert [s.name for s in t.stages] == QUERY_STAGES
    rerank = t.stage("rerank")
    assert rerank is not None and (rerank.status, rerank.calls, rerank.counts) == (
        "fallback",
        1,
        {"candidates": 6, "returned": 3},
    )
    assert rerank.data == {"reason": "timeout after 0.05s", "reranker": "test:late", "top_m": 20, "timeout_s": 0.05}


class HeldEmbedder(DesignedEmbedder):
    """Embeds a question only once ``go`` is set, then sets ``done`` (the test orders the threads with them)."""

    def __init__(self) -> None:
        self.go, self.done = threading.Event(), threading.Event()

    def embed_query(self, text: str) -> np.ndarray:
        assert self.go.wait(10)
        vector = super().embed_query(text)
        self.done.set()
        return vector


def test_the_dense_worker_embeds_while_bm25_waits_for_the_gate_and_the_wait_is_a_queue_stage(
    kb_factory, tmp_path: Path
) -> None:
    embedder = HeldEmbedder()
    embedder.go.set()
    kb = designed_kb(kb_factory, tmp_path, embedder=embedder, retrieval={"fusion": "rrf"})
    embedder.go.clear()
    kb.searcher.gate = FairGate(1)  # one search at a time in its CPU-bound steps
    sink = MemorySink()
    kb.tracer = Tracer([sink])
    kb.searcher.inline_embed_s = 0.0  # a slow embedder: the question is embedded in the dense worker
    gate = kb.searcher.gate
    found: list[object] = []
    with gate:  # another search holds the only place
        query = threading.Thread(target=lambda: found.append(kb.retrieve("zeta", mode="hybrid", top_k=3)))
        query.start()
        wait_until(lambda: gate.waiting == 1)  # BM25 waits ...
        embedder.go.set()
        assert embedder.done.wait(10)  # ... while the worker embeds the question, holding no place
        threading.Event().wait(0.3)  # BM25 waits 0.3 s more
    query.join(10)
    assert len(found) == 1
    [t] = sink.traces
    assert [s.name for s in ordered_stages(t)] == ["parse", "queue", "bm25", "dense", "fusion", "rerank"]
    queue, dense = t.stage("queue"), t.stage("dense")
    assert queue is not None and (queue.calls, queue.data) == (1, {"places": 1, "queued": 1})
    assert dense is not None and (dense.calls, dense.counts) == (2, {"candidates": 6})  # embedded, then searched
    assert queue.elapsed_ms >= 300 and dense.elapsed_ms < 300  # BM25's wait is not the dense stage's time


# ------------------------------------------------------------------------------------ readers
def test_otel_export_mirrors_the_stages() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from zhiku.observability.tracing import OtelSink

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with Tracer([OtelSink(provider)]).trace("query", query="试用期") as t:
        with span("parse") as sp:
            sp.set(counts={"terms": 2})
        mark("rerank")
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"zhiku.query", "parse", "rerank"}
    root = spans["zhiku.query"]
    assert root.attributes["zhiku.query"] == "试用期" and root.attributes["zhiku.trace_id"] == t.trace_id
    assert spans["parse"].parent.span_id == root.context.span_id
    assert spans["parse"].attributes["zhiku.count.terms"] == 2
    assert spans["rerank"].attributes["zhiku.status"] == "off"
    assert root.start_time <= spans["parse"].start_time <= spans["parse"].end_time <= root.end_time


def test_cli_verbose_and_traces(kb_factory, corpus: Path, tmp_path: Path, embed_cache_dir: Path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from zhiku.cli.app import app

    idx = tmp_path / "idx"
    kb_factory(idx).ingest([corpus])
    for key in [k for k in os.environ if k.startswith("ZHIKU_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("ZHIKU_CACHE_DIR", str(embed_cache_dir))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()

    def cli(*args: object):  # noqa: ANN202
        return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)

    r = cli("query", "试用期最长多久", "-c", "hr", "--index", idx, "-k", "2", "--verbose")
    assert r.exit_code == 0, r.output
    for text in (
        "terms: 试用 试用期 最长 多久 · bm25 1 · dense 4 candidates",
        "│ parse ",
        "│ rerank │ off ",
        "ranks: before = best channel rank; Δ = before − after (+ moved up)",
        "fusion: moved_up 0, moved_down 0, unchanged 2, new 0, max_gain 0, max_drop 0, dropped 2",
        "rerank: off (no reranker configured)",
        SEC_PROBATION,
    ):
        assert text in r.stdout, text
    [query_trace, _] = read_traces(idx / TRACE_FILE)
    assert query_trace.stage("answer").counts["citations"] == 2  # type: ignore[union-attr]

    listing = cli("traces", "--index", idx)
    assert listing.exit_code == 0 and query_trace.trace_id in listing.stdout and "ingest" in listing.stdout
    one = cli("traces", "--index", idx, "--id", query_trace.trace_id)
    assert one.exit_code == 0 and "query " + query_trace.trace_id in one.stdout and "│ fusion " in one.stdout
    as_json = json.loads(cli("traces", "--index", idx, "--kind", "ingest", "--json").stdout)
    assert [t["kind"] for t in as_json["traces"]] == ["ingest"]
    missing = cli("traces", "--index", idx, "--id", "nope")
    assert missing.exit_code == 1 and missing.stderr.startswith("error: no trace 'nope' in ")

    quiet = cli("query", "试用期最长多久", "-c", "hr", "--index", idx, "--verbose", "--mode", "bm25")
    assert "│ dense  │ off " in quiet.stdout  # single-channel: the other channel and fusion are marked off


def test_the_dashboard_and_the_cli_read_a_queries_rankings(kb_factory, tmp_path: Path) -> None:
    from rich.console import Console

    from zhiku.cli.traces import print_trace
    from zhiku.dashboard.data import DashboardData, channel_rows, rank_rows

    kb = designed_kb(kb_factory, tmp_path)
    live = DashboardData(kb.settings, embedder=DesignedEmbedder()).query("zeta", top_k=3)
    assert [r["source"] for r in channel_rows(live, "bm25")] == ["a1.md", "b2.md", "c3.md", "d4.md"]
    assert [(r["after"], r["source"]) for r in rank_rows(live)][:3] == [(1, "c3.md"), (2, "a1.md"), (3, "b2.md")]
    [written, _] = read_traces(tmp_path / "idx" / TRACE_FILE)
    assert written.trace_id == live.trace_id and rank_rows(written) == rank_rows(live)
    console = Console(record=True, width=250)
    print_trace(console, written)
    text = console.export_text()
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in text.splitlines() if ".md" in line]
    assert [(r[0], r[1], r[2], r[3], r[5], r[8]) for r in rows][:3] == [  # n, Δ, before, bm25, dense, source
        ("1", "+2", "3", "3", "3", "c3.md"),
        ("2", "-1", "1", "1", "6", "a1.md"),
        ("3", "-1", "2", "2", "5", "b2.md"),
    ]


def test_an_mcp_query_writes_one_trace_with_the_answer(kb_factory, corpus: Path, tmp_path: Path) -> None:
    from zhiku.mcp.hub import Hub, QueryArgs

    kb = kb_factory(tmp_path / "idx")
    kb.ingest([corpus])
    sink = MemorySink()
    kb.tracer = Tracer([sink])
    result = Hub(kb, kb.settings).query(QueryArgs("试用期最长多久", top_k=2))
    [t] = sink.traces
    assert t.attrs["surface"] == "mcp" and t.attrs["query"] == "试用期最长多久"
    assert [s.name for s in t.stages][-1] == "answer"
    assert t.stage("answer").counts["citations"] == len(result.citations) == 2  # type: ignore[union-attr]


def test_lines_of_older_versions_read_as_rows_with_their_labels(tmp_path: Path) -> None:
    path = tmp_path / TRACE_FILE
    old = {
        "trace_id": "00f0000000000001",
        "kind": "query",
        "started_at": 17.5,
        "attrs": {},
        "data": {"hits": {"fields": ["rank", "chunk_id"], "rows": [[1, "c1"]]}},
        "labels": {"c1": {"source": "a.md", "section": "第一条"}},
        "stages": [{"name": "bm25", "data": {"ranking": {"cols": {"chunk_id": ["c1"], "rank": [1], "score": [0.5]}}}}],
    }
    path.write_text(json.dumps(old) + "\n", encoding="utf-8")
    [t] = read_traces(path)
    assert t.data["hits"] == [{"source": "a.md", "section": "第一条", "rank": 1, "chunk_id": "c1"}]
    assert t.stage("bm25").data["ranking"] == [  # type: ignore[union-attr]
        {"source": "a.md", "section": "第一条", "chunk_id": "c1", "rank": 1, "score": 0.5}
    ]
