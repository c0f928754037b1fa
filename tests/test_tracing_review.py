"""Review fixes to tracing (issue 13): resources a trace sink holds, and what a trace keeps."""

from __future__ import annotations

import threading
from pathlib import Path

from zhiku.observability.tracing import TRACE_FILE, JsonlSink, Tracer, read_traces, span


def designed_docs(tmp_path: Path) -> Path:
    """The designed index's six documents (tests/test_tracing.py), in ``tmp_path/designed``."""
    from test_tracing import DESIGNED

    docs = tmp_path / "designed"
    docs.mkdir()
    for name, (body, _) in DESIGNED.items():
        (docs / name).write_text(body + "\n", encoding="utf-8")
    return docs


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


WAIT_FOR_CHILD = """
for _ in range(300):  # a child that hangs is killed after ~30 s, and fails the test
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        sys.exit(os.waitstatus_to_exitcode(status))
    time.sleep(0.1)
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
sys.exit("the child hung")
"""


FORK_SCRIPT = """
import os, signal, sys, time
from pathlib import Path
from zhiku.observability.tracing import JsonlSink, Tracer
tracer = Tracer([JsonlSink(Path(sys.argv[1]), interval_s=60)])  # the writer would sleep a minute
with tracer.trace("query", query="parent"):
    pass
pid = os.fork()  # e.g. a multiprocessing pool (fork start method) after the parent answered a query
if pid == 0:
    with tracer.trace("query", query="child"):
        pass
    sys.exit(0)  # interpreter exit flushes the child's queue
"""


def test_a_forked_child_writes_its_own_traces_once_and_exits(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    path = tmp_path / TRACE_FILE
    subprocess.run([sys.executable, "-c", FORK_SCRIPT + WAIT_FOR_CHILD, str(path)], check=True, timeout=60)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert sorted(json.loads(x)["attrs"]["query"] for x in lines) == ["child", "parent"]  # the parent's once


class BrokenSink:
    """A sink whose close fails (an exporter that cannot reach its collector, a full disk)."""

    def write(self, trace: object) -> None:
        return None

    def close(self) -> None:
        raise OSError("No space left on device")


def test_a_sink_that_fails_to_close_never_fails_closing_the_knowledge_base(
    kb_factory, corpus: Path, tmp_path: Path
) -> None:
    import pytest

    from zhiku.errors import StoreError

    kb = kb_factory(tmp_path / "idx")
    kb.ingest([corpus])
    path = tmp_path / "other.jsonl"
    good = JsonlSink(path, interval_s=60)
    kb.tracer = Tracer([BrokenSink(), good])
    kb.retrieve("试用期最长多久", top_k=3)
    kb.close()  # logs the broken sink, closes the other one and the store
    assert good._thread is None and [t.kind for t in read_traces(path)] == ["query"]
    with pytest.raises(StoreError, match="is closed"):
        kb.store.get_chunks(["x"])


SEALING_FORK_SCRIPT = """
import os, signal, sys, threading, time
from zhiku.observability import records
from zhiku.observability.tracing import MemorySink, Tracer

held, release = threading.Event(), threading.Event()

def seal_slowly():  # another thread sealing a trace at the moment of the fork
    with records._SEALING:
        held.set()
        release.wait()

threading.Thread(target=seal_slowly, daemon=True).start()
held.wait()
pid = os.fork()
if pid == 0:
    sink = MemorySink()
    with Tracer([sink]).trace("query", query="child"):
        pass
    os._exit(0 if [t.attrs["query"] for t in sink.traces] == ["child"] else 1)
release.set()
"""


def test_a_child_forked_while_another_thread_seals_can_seal_its_own_traces() -> None:
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", SEALING_FORK_SCRIPT + WAIT_FOR_CHILD], check=True, timeout=60)


def test_the_rerank_table_of_a_sampled_out_trace_names_each_chunks_source_and_section() -> None:
    from rich.console import Console

    from zhiku.cli.traces import print_trace
    from zhiku.observability.labels import HIT_FIELDS
    from zhiku.observability.trace import Trace

    hit = dict.fromkeys(HIT_FIELDS)
    hits = [
        hit | {"rank": 1, "chunk_id": "c2", "source": "年休假条例.md", "section": "第三条", "fused_rank": 2},
        hit | {"rank": 2, "chunk_id": "c1", "source": "劳动合同法.md", "section": "第十九条", "fused_rank": 1},
    ]
    changes = [
        {"chunk_id": "c2", "rank_before": 2, "rank_after": 1, "delta": 1, "status": "up"},
        {"chunk_id": "c1", "rank_before": 1, "rank_after": 2, "delta": -1, "status": "down"},
    ]
    line = {
        "trace_id": "a" * 16,
        "kind": "query",
        "started_at": 1.0,
        "detail": "sampled-out",  # no chunk labels: the rerank rows are named from the hits
        "data": {"hits": {"fields": list(HIT_FIELDS), "rows": [[h[f] for f in HIT_FIELDS] for h in hits]}},
        "stages": [{"name": "rerank", "data": {"reranker": "llm", "top_m": 20, "changes": changes}}],
    }
    console = Console(record=True, width=200)
    print_trace(console, Trace.from_json(line))
    table = console.export_text().split("rerank (llm, top_m 20)")[1]
    rows = [[cell.strip() for cell in r.split("│")[1:-1]] for r in table.splitlines() if r.startswith("│")]
    assert rows == [
        ["1", "+1", "2", "–", "–", "年休假条例.md", "第三条"],
        ["2", "-1", "1", "–", "–", "劳动合同法.md", "第十九条"],
    ]


def test_embedding_a_questions_clauses_is_a_stage_of_its_trace(kb_factory, tmp_path: Path) -> None:
    from test_tracing import DesignedEmbedder
    from zhiku.observability.tracing import ordered_stages

    docs = designed_docs(tmp_path)
    kb = kb_factory(tmp_path / "idx", embedder=DesignedEmbedder(), retrieval={"fusion": "zscore"})
    kb.ingest([docs])
    kb.retrieve("zeta，alpha", mode="hybrid", top_k=2)  # two clauses: "zeta", "alpha"
    kb.retrieve("zeta，alpha", mode="hybrid", top_k=2)  # their vectors are known
    kb.retrieve("zeta", mode="hybrid", top_k=2)  # one clause: nothing to embed
    kb.close()
    one, again, first = read_traces(tmp_path / "idx" / TRACE_FILE, kind="query")
    names = ["parse", "bm25", "dense", "clauses", "fusion", "rerank"]
    assert [s.name for s in ordered_stages(first)] == [s.name for s in ordered_stages(again)] == names
    assert first.stage("clauses").counts == {"clauses": 2, "embedded": 2}
    assert again.stage("clauses").counts == {"clauses": 2, "embedded": 0}
    assert [s.name for s in ordered_stages(one)] == ["parse", "bm25", "dense", "fusion", "rerank"]


def test_a_clause_the_embedder_fails_on_leaves_a_fallback_clauses_stage(kb_factory, tmp_path: Path) -> None:
    from test_tracing import DesignedEmbedder

    class FailsOnAlpha(DesignedEmbedder):
        def embed_query(self, text: str):  # noqa: ANN201
            if text == "alpha":
                raise RuntimeError("503 from the embedding endpoint")
            return super().embed_query(text)

    docs = designed_docs(tmp_path)
    kb = kb_factory(tmp_path / "idx", embedder=FailsOnAlpha(), retrieval={"fusion": "zscore"})
    kb.ingest([docs])
    assert kb.retrieve("zeta，alpha", mode="hybrid", top_k=2).clauses == ()  # searched without the clause channel
    kb.close()
    stage = read_traces(tmp_path / "idx" / TRACE_FILE, kind="query")[0].stage("clauses")
    assert stage is not None
    assert (stage.status, stage.counts) == (
        "fallback",
        {"clauses": 2, "embedded": 0},
    )  # one call for both: none embedded
    assert stage.data == {"reason": "RuntimeError: 503 from the embedding endpoint"}


def test_read_traces_reads_every_backup_tracing_backups_keeps(tmp_path: Path) -> None:
    import json

    from zhiku.observability.trace import Trace

    path = tmp_path / TRACE_FILE  # tracing.backups may be up to 100: here 11 rotated files, one trace each
    for n in range(12):
        line = json.dumps(Trace("query", f"{n:016x}", 1000.0 - n, {"query": f"q{n}"}).to_json())
        path.with_name(TRACE_FILE + (f".{n}" if n else "")).write_text(line + "\n", encoding="utf-8")
    assert [t.attrs["query"] for t in read_traces(path)] == [f"q{n}" for n in range(12)]  # newest first
