"""Queries back to back on one thread for a while: how many encoded trace lines wait in the ``JsonlSink`` queue
(and the process's peak memory). A query that ends while it is the only one open hands its trace off; past
``hand_off`` waiting, each is encoded by its caller and waits as a line for the writer thread.

    cp -r <q-idx>/stard_dev /tmp/tb-stard
    PYTHONPATH=src nice -n 10 .venv/bin/python bench/trace_backlog.py --index /tmp/tb-stard \\
        --queries ../shared/eval/stard_dev/queries.jsonl --mode bm25 --seconds 20

Query embedding excluded (random unit query vectors, as in tracing_cost.py); traces go to a temporary file.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tracing_cost import copied_index  # noqa: E402
from zhiku.api import KnowledgeBase  # noqa: E402
from zhiku.observability.trace import JsonlSink  # noqa: E402
from zhiku.observability.tracing import Tracer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--queries", type=Path, required=True)
    ap.add_argument("--mode", default="bm25", choices=["bm25", "dense", "hybrid"])
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    settings, embedder, texts = copied_index(args.index, args.queries, 100)
    with tempfile.TemporaryDirectory() as tmp, KnowledgeBase(settings, embedder=embedder, read_only=True) as kb:  # type: ignore[arg-type]
        path = Path(tmp) / "traces.jsonl"
        sink = JsonlSink(path, max_bytes=10**12)
        kb.tracer = Tracer([sink], sample=0.1)
        for q in texts:  # warm
            kb.retrieve(q, mode=args.mode, top_k=10, per_source_k=100)
        sink.flush()
        n, peak, t0 = 0, 0, time.monotonic()
        while time.monotonic() - t0 < args.seconds:
            for q in texts:
                kb.retrieve(q, mode=args.mode, top_k=10, per_source_k=100)
            n, peak = n + len(texts), max(peak, len(sink._lines))
        waiting = len(sink._lines)
        kb.tracer.close()
        written = sum(1 for _ in path.open("rb"))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(
        f"{args.mode}: {n / args.seconds:.0f} queries/s; lines waiting at the end {waiting}, most seen {peak}; "
        f"{written} lines written after close; peak RSS {rss} MB"
    )


if __name__ == "__main__":
    main()
