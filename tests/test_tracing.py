"""Traces: rank-change functions against hand-computed values, spans and sinks, and the traces that the
KnowledgeBase writes for queries and ingestion runs."""

from __future__ import annotations

import contextvars
import fcntl
import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from helpers_kb import SEC_PROBATION
from zhiku.observability.tracing import (
    NOOP,
    TRACE_FILE,
    JsonlSink,
    MemorySink,
    RankChange,
    RankSummary,
    Trace,
    Tracer,
    changes_data,
    current,
    fusion_rank_changes,
    mark,
    rank_changes,
    read_traces,
    span,
    summarize_changes,
)
from zhiku.retrieval.fusion import rrf
from zhiku.types import Ranking, ScoredId


def ids(*names: str) -> list[ScoredId]:
    return [ScoredId(n, 1.0 / i, i) for i, n in enumerate(names, 1)]


# ------------------------------------------------------------------------------------ rank changes
def test_rank_changes_hand_computed() -> None:
    before = {"a": 1, "b": 2, "c": 3, "d": 4}
    rows = rank_changes(before, ["c", "a", "e", "b"])
    assert rows == [
        RankChange("c", 3, 1, 2, "up"),
        RankChange("a", 1, 2, -1, "down"),
        RankChange("e", None, 3, None, "new"),  # new at this stage: no invented delta
        RankChange("b", 2, 4, -2, "down"),
        RankChange("d", 4, None, None, "dropped"),
    ]
    assert summarize_changes(rows) == RankSummary(
        moved_up=1, moved_down=2, unchanged=0, new=1, max_gain=2, max_drop=2, dropped=1
    )
    assert summarize_changes(rank_changes({"a": 1}, ["a"])) == RankSummary(0, 0, 1, 0, 0, 0, 0)
    assert summarize_changes([]) == RankSummary(0, 0, 0, 0, 0, 0, 0)


def test_fusion_rank_changes_use_the_best_channel_rank() -> None:
    bm25, dense = ids("a", "b", "c"), ids("d", "e", "c")
    # RRF k=60: c = 1/63 + 1/63 = 0.031746; a = d = 1/61 (tie: best rank 1 both, then id); b = e = 1/62
    fused = [cid for cid, _ in rrf([bm25, dense], k=60)]
    assert fused == ["c", "a", "d", "b", "e"]
    rows = fusion_rank_changes(bm25, dense, fused[:3])
    assert rows == [
        RankChange("c", 3, 1, 2, "up", bm25_rank=3, dense_rank=3),
        RankChange("a", 1, 2, -1, "down", bm25_rank=1, dense_rank=None),
        RankChange("d", 1, 3, -2, "down", bm25_rank=None, dense_rank=1),
        RankChange("b", 2, None, None, "dropped", bm25_rank=2, dense_rank=None),
        RankChange("e", 2, None, None, "dropped", bm25_rank=None, dense_rank=2),
    ]
    data = changes_data(rows, keep_dropped_within=1)  # dropped rows shown only if they stood within the cut
    assert [r["chunk_id"] for r in data["changes"]] == ["c", "a", "d"]
    assert data["summary"] == {
        "moved_up": 1,
        "moved_down": 2,
        "unchanged": 0,
        "new": 0,
        "max_gain": 2,
        "max_drop": 2,
        "dropped": 2,
    }


# -------------------------------------------------------------------------------- spans and sinks
def test_span_outside_a_trace_is_the_shared_no_op() -> None:
    assert current() is None
    with span("bm25") as sp:
        sp.set(counts={"candidates": 3}, ranking=[1])
        sp.ranking(ids("a"))
    assert sp is NOOP and not sp.active
    mark("rerank")  # nothing to record into: no error
    off = Tracer()
    with off.trace("query", query="x") as t:
        assert t is None and span("parse") is NOOP


def test_tracer_records_merges_joins_and_follows_copied_contexts() -> None:
    sink = MemorySink()
    tracer = Tracer([sink])
    with tracer.trace("ingest", collection="hr") as t:
        assert current() is t
        for n in range(3):
            with span("load") as sp:
                sp.set(counts={"documents": 1}, names=[f"d{n}"])
        mark("transform", reason="none")
        with tracer.trace("query", extra=1):  # joins the open trace
            pass

        def embed() -> None:
            with span("embed"):
                pass

        worker = threading.Thread(target=contextvars.copy_context().run, args=(embed,))
        worker.start()
        worker.join()
    assert current() is None
    [done] = sink.traces
    assert done.kind == "ingest" and done.attrs == {"collection": "hr", "extra": 1}
    load = done.stage("load")
    assert (load.calls, load.counts, load.data, load.status) == (
        3,
        {"documents": 3},
        {"names": ["d0", "d1", "d2"]},
        "ok",
    )
    assert done.stage("transform").status == "off" and done.stage("transform").data == {"reason": "none"}
    assert done.stage("embed") is not None  # recorded from the worker thread
    assert done.elapsed_ms >= load.elapsed_ms >= 0


def test_errors_are_recorded_and_raised() -> None:
    sink = MemorySink()
    with pytest.raises(ValueError, match="坏"):
        with Tracer([sink]).trace("query"):
            with span("parse"):
                raise ValueError("坏查询")
    [t] = sink.traces
    assert (t.status, t.error) == ("error", "ValueError: 坏查询")
    assert t.stage("parse").status == "error" and t.stage("parse").data["error"] == "ValueError: 坏查询"


def test_capture_records_without_sinks() -> None:
    with Tracer().trace("query", capture=True) as t:
        with span("parse"):
            pass
    assert isinstance(t, Trace) and [s.name for s in t.stages] == ["parse"]


def trace_queries(tracer: Tracer, texts: list[str]) -> None:
    """One query trace per text, its parse stage counting the text's position as ``terms``."""
    for n, text in enumerate(texts):
        with tracer.trace("query", query=text):
            with span("parse") as sp:
                sp.set(counts={"terms": n})


def test_jsonl_sink_rotates_and_reads_newest_first(tmp_path: Path) -> None:
    path = tmp_path / TRACE_FILE
    sink = JsonlSink(path, max_bytes=600, backups=2)
    trace_queries(Tracer([sink]), [f"问题{n}" for n in range(12)])
    sink.flush()  # written by the sink's thread
    assert (
        path.is_file() and path.with_name(TRACE_FILE + ".1").is_file() and path.with_name(TRACE_FILE + ".2").is_file()
    )
    assert not path.with_name(TRACE_FILE + ".3").exists()
    for f in (path, path.with_name(TRACE_FILE + ".1")):
        assert f.stat().st_size <= 600
    got = read_traces(path)
    queries = [t.attrs["query"] for t in got]
    assert queries[0] == "问题11" and queries == sorted(queries, key=lambda q: -int(q[2:]))  # newest first
    assert 3 <= len(got) < 12  # the oldest rotated away
    assert got[0].stage("parse").counts == {"terms": 11}
    with path.open("a", encoding="utf-8") as f:
        f.write("{broken\n")
    assert read_traces(path, limit=2)[0].attrs["query"] == "问题11"
    assert read_traces(path, kind="ingest") == []


def test_a_query_does_not_wait_for_the_trace_file(tmp_path: Path) -> None:
    path = tmp_path / TRACE_FILE
    sink = JsonlSink(path)
    tracer = Tracer([sink])
    with path.open("ab") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another process is writing its traces
        with tracer.trace("query", query="问题"):
            with span("parse"):
                pass
        assert path.stat().st_size == 0  # queued, not written: the query returned without the lock
        fcntl.flock(held, fcntl.LOCK_UN)
    assert [t.attrs["query"] for t in read_traces(path)] == ["问题"]  # reading flushes this process's queue


# ------------------------------------------------------------------------------- KnowledgeBase
def test_query_trace_has_every_stage_with_ranks_and_labels(kb_factory, corpus: Path, tmp_path: Path) -> None:
    kb = kb_factory(tmp_path / "idx")
    kb.ingest([corpus])
    answer = kb.query("试用期最长多久", top_k=3)
    traces = read_traces(tmp_path / "idx" / TRACE_FILE)
    assert [t.kind for t in traces] == ["query", "ingest"]
    q = traces[0]
    assert [s.name for s in q.stages] == ["parse", "bm25", "dense", "fusion", "rerank", "answer"]
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

    kb.query("试用期最长多久，年休假有几天", top_k=3)  # two clauses: the clause channel scores all 4 candidates
    q = read_traces(tmp_path / "idx" / TRACE_FILE)[0]
    assert q.stage("fusion").counts["clause_candidates"] == 4
    ranking = q.stage("fusion").data["clause_ranking"]
    assert [r["rank"] for r in ranking] == [1, 2, 3, 4] and len({r["chunk_id"] for r in ranking}) == 4
    assert {r["source"] for r in ranking} == {"劳动合同法.md", "年休假条例.md", "规章/工资支付规定.txt"}
    for s in q.stages:
        assert s.elapsed_ms >= 0 and s.start_ms >= 0
    line = (tmp_path / "idx" / TRACE_FILE).read_text(encoding="utf-8").splitlines()[-1]
    assert json.loads(line)["stages"][0]["name"] == "parse"  # one JSON line per trace


def test_ingest_trace_lists_documents_with_statuses_and_reasons(kb_factory, corpus: Path, tmp_path: Path) -> None:
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


def test_otel_export_mirrors_the_stages() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from zhiku.observability.otel import OtelSink

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


# ------------------------------------------------------------------------------------------- CLI
def test_cli_verbose_and_traces(
    kb_factory, corpus: Path, tmp_path: Path, embed_cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
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
    out = r.stdout
    for text in (
        "terms: 试用 试用期 最长 多久 · bm25 1 · dense 4 candidates",
        "│ parse ",
        "│ rerank │ off ",
        "ranks: before = best channel rank; Δ = before − after (+ moved up)",
        "fusion: moved_up 0, moved_down 0, unchanged 2, new 0, max_gain 0, max_drop 0, dropped 2",
        "rerank: off (no reranker configured)",
        SEC_PROBATION,
    ):
        assert text in out, text
    [query_trace, _] = read_traces(idx / TRACE_FILE)
    assert query_trace.stage("answer").counts["citations"] == 2  # the CLI's trace includes the answer

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


def test_mcp_hub_query_writes_one_trace_with_the_answer(kb_factory, corpus: Path, tmp_path: Path) -> None:
    from zhiku.mcp.hub import Hub, QueryArgs

    kb = kb_factory(tmp_path / "idx")
    kb.ingest([corpus])
    sink = MemorySink()
    kb.tracer = Tracer([sink])
    result = Hub(kb, kb.settings).query(QueryArgs("试用期最长多久", top_k=2))
    [t] = sink.traces
    assert t.attrs["surface"] == "mcp" and t.attrs["query"] == "试用期最长多久"
    assert [s.name for s in t.stages][-1] == "answer"
    assert t.stage("answer").counts["citations"] == len(result.citations) == 2


def test_the_trace_writer_waits_while_the_hub_serves_a_query_before_its_trace_opens(
    kb_factory: Any, corpus: Path, tmp_path: Path
) -> None:
    """The hub reads the index version (SQLite: the interpreter is released) before the query's trace opens; with no
    trace open the writer took that for a pause between queries and sealed its batch there, and the query waited
    for it. ``OPEN`` (what the writer waits on) now counts the hub's query from its first read, and is empty after."""
    from zhiku.mcp.hub import Hub, QueryArgs
    from zhiku.observability.records import OPEN
    from zhiku.settings import merge

    kb = kb_factory(tmp_path / "idx")
    kb.ingest([corpus])
    kb.tracer = Tracer([MemorySink()])
    hub = Hub(kb, merge(kb.settings, server={"cache_size": 4}))
    seen: list[int] = []
    read = hub.index_version

    def version() -> int:
        seen.append(len(OPEN))
        return read()

    hub.index_version = version  # type: ignore[method-assign]
    before = len(OPEN)
    hub.query(QueryArgs("试用期最长多久", top_k=2))
    assert hub.cached_query(QueryArgs("试用期最长多久", top_k=2)) is not None
    assert seen == [before + 1, before + 1] and len(OPEN) == before


def test_versioned_labels_look_up_each_chunk_once_per_index_version() -> None:
    from zhiku.observability.tracing import VersionedLabels

    calls: list[list[str]] = []
    version = [7]

    def fetch(ids: list[str]) -> dict[str, dict[str, object]]:
        calls.append(list(ids))
        return {i: {"source": f"{i}.md", "v": version[0]} for i in ids if i != "gone"}

    labels = VersionedLabels(fetch, lambda: version[0], max_items=3, recheck_s=0.0)
    assert labels(["a", "b"]) == {"a": {"source": "a.md", "v": 7}, "b": {"source": "b.md", "v": 7}}
    assert labels(["b", "c", "gone"]) == {"b": {"source": "b.md", "v": 7}, "c": {"source": "c.md", "v": 7}}
    assert calls == [["a", "b"], ["c", "gone"]]  # b was known; an id the index lacks is asked again, not invented
    version[0] = 8  # a write: every label is looked up again
    assert labels(["a"]) == {"a": {"source": "a.md", "v": 8}}
    assert calls[-1] == ["a"]
    labels(["b", "c", "d"])  # 4 known > max_items 3: the next call starts afresh
    labels(["a"])
    assert calls[-2:] == [["b", "c", "d"], ["a"]]


def test_trace_labels_read_where_chunks_are_without_decoding_them(
    kb_factory: Any, corpus: Path, tmp_path: Path
) -> None:
    """A traced query labels its ~200 ranked candidates: read with ``get_chunks`` they were decoded (~3× the work)
    and pushed the hits out of the chunk cache. ``chunk_places`` gives what the chunks say, for the ids that
    exist, and keeps nothing."""
    from zhiku.stores.base import places_reader

    kb_factory(tmp_path / "idx").ingest([corpus])
    kb = kb_factory(tmp_path / "idx")  # (its chunk cache empty)
    with kb.store._read() as conn:
        ids = [r[0] for r in conn.execute("SELECT chunk_id FROM chunks ORDER BY rowid DESC")]
    places = kb.store.chunk_places([*ids, "no-such-chunk"])
    assert len(kb.store._chunk_cache._chunks) == 0
    chunks = kb.store.get_chunks(ids)
    assert places == {c.chunk_id: (c.source, c.section, c.page) for c in chunks} and len(places) == len(ids) > 1
    assert places_reader(kb.store) == kb.store.chunk_places
    assert kb.store.chunk_places([]) == {}


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


def designed_kb(kb_factory, tmp_path: Path, **overrides: object):  # noqa: ANN201
    docs = tmp_path / "designed"
    docs.mkdir()
    for name, (body, _) in DESIGNED.items():
        (docs / name).write_text(body + "\n", encoding="utf-8")
    kb = kb_factory(tmp_path / "idx", embedder=DesignedEmbedder(), retrieval={"fusion": "rrf"}, **overrides)
    kb.ingest([docs])
    return kb


def sources(rows: list[dict[str, object]]) -> list[object]:
    return [r["source"] for r in rows]


def test_designed_index_trace_has_exact_counts_ranks_and_rank_changes(kb_factory, tmp_path: Path) -> None:
    kb = designed_kb(kb_factory, tmp_path)
    hits = kb.retrieve("zeta", top_k=3).hits
    assert [h.chunk.source for h in hits] == ["c3.md", "a1.md", "b2.md"]
    kb.close()  # the writer drains on close
    [q, _] = read_traces(tmp_path / "idx" / TRACE_FILE)
    assert q.detail == "lean" and [s.name for s in q.stages] == ["parse", "bm25", "dense", "fusion", "rerank"]
    bm25, dense, fusion = q.stage("bm25"), q.stage("dense"), q.stage("fusion")
    assert bm25.counts == {"candidates": 4} and dense.counts == {"candidates": 6}
    # lean: each channel lists its first top_k (3), with ranks and labels
    assert sources(bm25.data["ranking"]) == ["a1.md", "b2.md", "c3.md"]
    assert [r["rank"] for r in bm25.data["ranking"]] == [1, 2, 3]
    assert sources(dense.data["ranking"]) == ["f6.md", "e5.md", "c3.md"]
    assert [r["score"] for r in dense.data["ranking"]] == pytest.approx([0.9, 0.8, 0.7], abs=1e-5)
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
    assert set(q.labels) == {r["chunk_id"] for r in dense.data["ranking"] + fusion.data["changes"] + q.data["hits"]}


def test_full_detail_lists_every_candidate_and_readers_see_what_was_written(kb_factory, tmp_path: Path) -> None:
    kb = designed_kb(kb_factory, tmp_path)
    memory = MemorySink()
    kb.tracer = Tracer([*kb.tracer.sinks, memory], detail="full")  # the line is encoded before memory reads it
    kb.retrieve("zeta", top_k=3, mode="bm25")
    kb.close()
    [written, _] = read_traces(tmp_path / "idx" / TRACE_FILE)
    [live] = memory.traces
    assert written.detail == live.detail == "full"
    ranking = written.stage("bm25").data["ranking"]
    assert sources(ranking) == ["a1.md", "b2.md", "c3.md", "d4.md"] and written.stage("bm25").counts["candidates"] == 4
    assert {s.name: s.status for s in written.stages}["fusion"] == "off"
    for name in ("parse", "bm25", "dense", "fusion", "rerank"):  # the file holds what the live trace holds
        assert (
            written.stage(name).data == live.stage(name).data and written.stage(name).counts == live.stage(name).counts
        )
    assert written.data["hits"] == live.data["hits"] and sources(written.data["hits"]) == ["a1.md", "b2.md", "c3.md"]


def test_fusion_record_equals_the_rank_change_rows_it_replaces() -> None:
    import random

    from zhiku.observability.rank_changes import fusion_record

    rng = random.Random(13)
    for _ in range(300):
        pool = [f"c{i}" for i in range(rng.randint(0, 30))]
        bm25 = ids(*rng.sample(pool, rng.randint(0, len(pool))))
        dense = ids(*rng.sample(pool, rng.randint(0, len(pool))))
        union = list(dict.fromkeys(x.chunk_id for x in bm25 + dense))
        rng.shuffle(union)
        fused, top_k = union[: rng.randint(0, len(union))] + (["new"] if rng.random() < 0.2 else []), rng.randint(1, 12)
        rows = fusion_rank_changes(bm25, dense, fused)
        want = ({"candidates": len(rows)}, changes_data(rows, keep_dropped_within=top_k))
        assert fusion_record(bm25, dense, fused, top_k) == want
        # the channels as the stores return them (columns, read without a ScoredId per candidate): the same record
        columns = [Ranking([x.chunk_id for x in c], [x.score for x in c]) for c in (bm25, dense)]
        assert fusion_record(columns[0], columns[1], fused, top_k) == want
        assert fusion_record(columns[0], dense, fused, top_k) == want


def test_traces_queued_at_exit_are_written(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / TRACE_FILE
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from zhiku.observability.tracing import JsonlSink, Tracer, span\n"
        "tracer = Tracer([JsonlSink(Path(sys.argv[1]), interval_s=60)])\n"  # the writer would sleep a minute
        "for n in range(50):\n"
        "    with tracer.trace('query', query=f'q{n}'):\n"
        "        with span('parse'):\n"
        "            pass\n"
    )
    subprocess.run([sys.executable, "-c", script, str(path)], check=True, timeout=60)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(x)["attrs"]["query"] for x in lines] == [f"q{n}" for n in range(50)]


# ------------------------------------------------------------------- tail-sampled candidate detail
HITS_ZETA = [(1, "c3.md", 1, 3, 3), (2, "a1.md", 2, 1, 6), (3, "b2.md", 3, 2, 5)]  # rank, source, fused/bm25/dense


def hit_ranks(t: Trace) -> list[tuple[object, ...]]:
    return [(h["rank"], h["source"], h["fused_rank"], h["bm25_rank"], h["dense_rank"]) for h in t.data["hits"]]


def test_sampled_in_is_a_deterministic_fraction_of_trace_ids() -> None:
    from zhiku.observability.sampling import sampled_in

    spread = [f"{(i << 64) // 1000:016x}" for i in range(1000)]  # ids evenly over [0, 2**64): i/1000
    assert [i for i, t in enumerate(spread) if sampled_in(t, 0.1)] == list(range(100))
    assert sum(sampled_in(t, 0.25) for t in spread) == 250
    assert not any(sampled_in(t, 0.0) for t in spread) and all(sampled_in(t, 1.0) for t in spread)
    other = [f"trace-{i}" for i in range(2000)]  # not 16 hex digits: hashed (CRC-32), the same on every run
    kept = {t for t in other if sampled_in(t, 0.1)}
    assert kept == {t for t in other if sampled_in(t, 0.1)} and 150 <= len(kept) <= 250
    assert kept <= {t for t in other if sampled_in(t, 0.3)}  # kept at 0.1: kept at any larger fraction


def test_a_sampled_out_trace_keeps_stages_counts_and_hit_ranks_but_no_candidate_rows(
    kb_factory, tmp_path: Path
) -> None:
    kb = designed_kb(kb_factory, tmp_path, tracing={"sample": 0.0})
    kb.retrieve("zeta", top_k=3)
    kb.close()
    [q, _] = read_traces(tmp_path / "idx" / TRACE_FILE)
    assert (q.detail, q.kept, q.labels) == ("sampled-out", None, {})
    assert [s.name for s in q.stages] == ["parse", "bm25", "dense", "fusion", "rerank"]
    assert q.stage("bm25").counts == {"candidates": 4} and q.stage("dense").counts == {"candidates": 6}
    assert q.stage("bm25").data == {"depth": 100} and q.stage("dense").data == {"depth": 100}  # no ranking rows
    fusion = q.stage("fusion")
    assert fusion.counts == {"returned": 3} and "changes" not in fusion.data and fusion.data["method"] == "rrf"
    assert hit_ranks(q) == HITS_ZETA
    line = json.loads((tmp_path / "idx" / TRACE_FILE).read_text(encoding="utf-8").splitlines()[-1])
    assert (line["detail"], line["kept"]) == ("sampled-out", None)


def test_errors_low_confidence_slow_and_forced_traces_keep_their_detail(kb_factory, tmp_path: Path) -> None:
    kb = designed_kb(kb_factory, tmp_path, tracing={"sample": 0.0}, answer={"min_score": 0.95})
    sink = MemorySink()
    kb.tracer = Tracer([sink], sample=0.0, slow_ms=10_000)
    kb.query("zeta", top_k=3)  # best cosine .7 < min_score .95: low confidence
    with kb.tracer.trace("query", capture=True):  # `zhiku query --verbose`, the dashboard's query page
        kb.retrieve("zeta", top_k=3)
    with pytest.raises(RuntimeError), kb.tracer.trace("query"):
        kb.retrieve("zeta", top_k=3)
        raise RuntimeError("after the search")
    kb.settings = kb.settings.model_copy(update={"answer": kb.settings.answer.model_copy(update={"min_score": 0.0})})
    kb.query("zeta", top_k=3)  # confident: sampled out
    kb.tracer = Tracer([sink], sample=0.0, slow_ms=0.0)
    kb.retrieve("zeta", top_k=3)  # slower than 0 ms
    assert [(t.kept, t.detail, t.status) for t in sink.traces] == [
        ("low-confidence", "lean", "ok"),
        ("forced", "lean", "ok"),
        ("error", "lean", "error"),
        (None, "sampled-out", "ok"),
        ("slow", "lean", "ok"),
    ]
    for t in sink.traces:
        assert hit_ranks(t) == HITS_ZETA
        kept = t.kept is not None
        assert ("ranking" in t.stage("bm25").data, "changes" in t.stage("fusion").data, bool(t.labels)) == (kept,) * 3
    assert sources(sink.traces[0].stage("dense").data["ranking"]) == ["f6.md", "e5.md", "c3.md"]


def test_readers_say_a_trace_was_sampled_out(kb_factory, tmp_path: Path, embed_cache_dir: Path) -> None:
    from rich.console import Console

    from zhiku.cli.traces import print_trace
    from zhiku.dashboard.data import DashboardData, channel_rows, detail_note, rank_rows
    from zhiku.observability.sampling import NOT_SAMPLED

    kb = designed_kb(kb_factory, tmp_path, tracing={"sample": 0.0})
    kb.retrieve("zeta", top_k=3)
    kb.close()
    [sampled_out, _] = read_traces(tmp_path / "idx" / TRACE_FILE)
    console = Console(record=True, width=250)
    print_trace(console, sampled_out)
    text = console.export_text()
    assert NOT_SAMPLED in text and "ranks: before" not in text  # the hits table, with each channel's rank
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in text.splitlines() if ".md" in line]
    assert [(r[0], r[1], r[2], r[3], r[5], r[6], r[8]) for r in rows] == [  # n, Δ, before, bm25, dense, cosine, source
        ("1", "", "–", "3", "3", "0.700", "c3.md"),
        ("2", "", "–", "1", "6", "0.400", "a1.md"),
        ("3", "", "–", "2", "5", "0.500", "b2.md"),
    ]
    assert detail_note(sampled_out) == NOT_SAMPLED and channel_rows(sampled_out, "bm25") == []
    assert rank_rows(sampled_out) == []

    dashboard = DashboardData(kb.settings, embedder=DesignedEmbedder())  # the query page forces the detail
    live = dashboard.query("zeta", top_k=3)
    assert (live.kept, detail_note(live)) == ("forced", None)
    assert [r["source"] for r in channel_rows(live, "bm25")] == ["a1.md", "b2.md", "c3.md"]
    assert [(r["after"], r["source"]) for r in rank_rows(live)][:3] == [(1, "c3.md"), (2, "a1.md"), (3, "b2.md")]
    [written, *_] = read_traces(tmp_path / "idx" / TRACE_FILE)
    assert (written.trace_id, written.kept) == (live.trace_id, "forced")
    console = Console(record=True, width=250)
    print_trace(console, written)
    text = console.export_text()
    assert NOT_SAMPLED not in text and "ranks: before" in text
