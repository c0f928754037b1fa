"""Where a sampled-out trace's cost goes: process CPU per query with sinks that stop after each step, against
tracing off, medians of interleaved (shuffled) 100-query runs on a built index (a copy: traces are written
into it).

    cp -r <q-idx>/stard_dev /tmp/ts-stard
    PYTHONPATH=src nice -n 10 .venv/bin/python bench/tracing_steps.py --index /tmp/ts-stard \\
        --queries ../shared/eval/stard_dev/queries.jsonl --mode bm25 --reps 30

With ``--pause-ms`` every query is followed by a pause and the arms alternate query by query: the wall time and
the query thread's CPU a caller waits for when the process is idle between queries (the trace writer's CPU is
then not told apart per arm). Arms: ``off``; ``open`` (the trace and its spans, then dropped unsealed); ``seal`` (+ stages and hit tuples);
``encode`` (+ the JSON line, thrown away); ``jsonl`` (+ the background writer: what a query pays), all with
``tracing.sample`` 0 (every trace sampled out); ``jsonl 0.1`` and ``jsonl 1`` (the default sample, every trace
with its candidate detail). Query embedding excluded (random unit query vectors, as in tracing_cost.py). ``--call``: ``retrieve``, ``query``
(``KnowledgeBase.query``: retrieve + answer) or ``mcp`` (``Hub.query``: what ``query_knowledge_hub`` runs for a call, its
result cache off, in the server's mode; the transport and the SDK's own work not included). Each
figure is printed as the median over reps and as the minimum (the quietest rep: steadier on a shared machine).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tracing_cost import copied_index  # noqa: E402
from zhiku.api import KnowledgeBase  # noqa: E402
from zhiku.observability.trace import JsonlSink, Trace, encode_line  # noqa: E402
from zhiku.observability.tracing import Tracer  # noqa: E402
from zhiku.settings import merge  # noqa: E402


class Open:
    def write(self, trace: Trace) -> None:
        trace._later.clear()  # drop it unsealed (no reference cycle left for the garbage collector)


class Decide:
    def write(self, trace: Trace) -> None:
        trace.decide()  # what JsonlSink does on the query's thread before it queues the trace
        trace._later.clear()


class Seal:
    def write(self, trace: Trace) -> None:
        trace.seal()


class Encode:
    def write(self, trace: Trace) -> None:
        encode_line(trace)


def query_args() -> argparse.ArgumentParser:
    """The options every tracing bench takes: the index, its questions, the mode and the call."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--queries", type=Path, required=True)
    ap.add_argument("--mode", default="bm25", choices=["bm25", "dense", "hybrid"])
    ap.add_argument("--call", default="retrieve", choices=["retrieve", "query", "mcp"])
    return ap


def main() -> None:
    ap = query_args()
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--arms", nargs="+", help="the arms to run (default: all)")
    ap.add_argument("--pause-ms", type=float, default=0.0, help="idle time after each query (0: back to back)")
    args = ap.parse_args()
    settings, embedder, queries = copied_index(args.index, args.queries, 100)
    settings = merge(settings, tracing={"enabled": False}, answer={"min_score": 0.0})
    with tempfile.TemporaryDirectory() as tmp, KnowledgeBase(settings, embedder=embedder, read_only=True) as kb:  # type: ignore[arg-type]
        jsonl = JsonlSink(Path(tmp) / "traces.jsonl")
        never = {"sample": 0.0, "slow_ms": 1e9}
        arms: dict[str, Tracer] = {
            "off": Tracer(),
            "open": Tracer([Open()], **never),
            "decide": Tracer([Decide()], **never),
            "seal": Tracer([Seal()], **never),
            "encode": Tracer([Encode()], **never),
            "jsonl": Tracer([jsonl], **never),
            "jsonl 0.1": Tracer([jsonl], sample=0.1, slow_ms=1e9),
            "jsonl 1": Tracer([jsonl], sample=1.0, slow_ms=1e9),
        }
        arms = {k: v for k, v in arms.items() if k == "off" or not args.arms or k in args.arms}
        fn: Any = kb.retrieve if args.call == "retrieve" else kb.query
        if args.call == "mcp":  # what query_knowledge_hub runs per call (its result cache off), in the server's mode
            from zhiku.mcp.hub import Hub, QueryArgs

            hub = Hub(kb, merge(kb.settings, server={"cache_size": 0}))

            def fn(q: str, **_: Any) -> Any:
                return hub.query(QueryArgs(q, top_k=10))

        for q in queries:
            fn(q, mode=args.mode, top_k=10, per_source_k=100)
        got: dict[str, list[float]] = {k: [] for k in arms}
        mine: dict[str, list[float]] = {k: [] for k in arms}  # the query thread's CPU
        wall: dict[str, list[float]] = {k: [] for k in arms}  # what a caller waits for
        rng = random.Random(0)
        for _ in range(args.reps):
            if args.pause_ms:
                paced(kb, fn, arms, queries, args, rng, (wall, mine))
                continue
            order = list(arms)
            rng.shuffle(order)
            for arm in order:
                kb.tracer = arms[arm]
                t, th, waited = time.process_time(), time.thread_time(), 0.0
                for q in queries:
                    w = time.perf_counter()
                    fn(q, mode=args.mode, top_k=10, per_source_k=100)
                    waited += time.perf_counter() - w
                wall[arm].append(waited / len(queries) * 1e6)
                mine[arm].append((time.thread_time() - th) / len(queries) * 1e6)
                jsonl.flush()
                got[arm].append((time.process_time() - t) / len(queries) * 1e6)
        jsonl.flush()
    for what, by_arm in (("process CPU", got), ("query-thread CPU", mine), ("wall", wall)):
        if not by_arm["off"]:  # paced: the writer's CPU cannot be told apart per arm
            continue
        load = open("/proc/loadavg").read().split()[0]
        pause = f", pause {args.pause_ms:g} ms" if args.pause_ms else ""
        for stat, pick in (("", statistics.median), (" (min over reps)", min)):  # min: the quietest rep of each arm
            base = pick(by_arm["off"])
            cells = [f"{k} {pick(v):.0f} µs ({pick(v) - base:+.0f})" for k, v in by_arm.items()]
            print(f"{args.call} {args.mode}{pause}, {what}{stat}: " + " · ".join(cells) + f" · load {load}")


def paced(kb: Any, fn: Any, arms: dict[str, Tracer], queries: list[str], args: Any, rng: Any, out: Any) -> None:
    """One rep with a pause after every query, the arms alternating query by query (in a shuffled order each
    time), so that every arm meets the same machine: the wall time and query-thread CPU a caller waits for."""
    wall, mine = out
    sums = {arm: [0.0, 0.0] for arm in arms}
    for q in queries:
        order = list(arms)
        rng.shuffle(order)
        for arm in order:
            kb.tracer = arms[arm]
            w, th = time.perf_counter(), time.thread_time()
            fn(q, mode=args.mode, top_k=10, per_source_k=100)
            sums[arm][0] += time.perf_counter() - w
            sums[arm][1] += time.thread_time() - th
            time.sleep(args.pause_ms / 1000)
    for arm, (waited, cpu) in sums.items():
        wall[arm].append(waited / len(queries) * 1e6)
        mine[arm].append(cpu / len(queries) * 1e6)


if __name__ == "__main__":
    main()
