"""Review fixes to tracing (issue 13): resources a trace sink holds, and what a trace keeps."""

from __future__ import annotations

import threading
from pathlib import Path

from zhiku.observability.tracing import TRACE_FILE, JsonlSink, Tracer, read_traces, span


def writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "zhiku-traces"]


def test_closing_a_tracer_writes_its_queue_and_ends_the_writer_thread(tmp_path: Path) -> None:
    before = len(writer_threads())
    path = tmp_path / TRACE_FILE
    for n in range(3):  # e.g. the dashboard opens a KnowledgeBase (and its tracer) per page action
        tracer = Tracer([JsonlSink(path, interval_s=60)])  # the writer would sleep a minute
        with tracer.trace("query", query=f"问题{n}"):
            with span("parse"):
                pass
        tracer.close()
        assert len(writer_threads()) == before
    assert [t.attrs["query"] for t in read_traces(path)] == ["问题2", "问题1", "问题0"]
    with tracer.trace("query", query="再问"):  # a closed tracer still works: a new writer starts
        pass
    tracer.close()
    assert len(writer_threads()) == before
    assert [t.attrs["query"] for t in read_traces(path)][0] == "再问"


def test_closing_a_knowledge_base_ends_its_trace_writer(kb_factory, corpus: Path, tmp_path: Path) -> None:
    before = len(writer_threads())
    kb = kb_factory(tmp_path / "idx")
    kb.ingest([corpus])
    kb.retrieve("试用期最长多久", top_k=3)
    assert len(writer_threads()) == before + 1
    kb.close()
    assert len(writer_threads()) == before
    assert [t.kind for t in read_traces(tmp_path / "idx" / TRACE_FILE)] == ["query", "ingest"]
