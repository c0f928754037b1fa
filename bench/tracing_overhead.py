"""What tracing costs: a span outside a trace (off), a span inside one (on), and whole queries with tracing
off and on (JSONL sink) on the examples/laws index.

    .venv/bin/python bench/tracing_overhead.py [--queries 300] [--spans 1000000]

BM25 mode is used for the end-to-end numbers so that embedding time (~40 ms a query on 2 cores) does not
hide the difference; hybrid numbers are printed too.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from zhiku.api import KnowledgeBase
from zhiku.observability.tracing import MemorySink, Tracer, span
from zhiku.settings import load_settings, merge

QUERIES = [
    "试用期最长不得超过几个月",
    "女职工产假有多少天",
    "加班工资怎么计算",
    "年休假天数",
    "经济补偿金标准",
    "劳动合同的解除条件",
    "工伤认定",
    "最低工资标准",
    "劳务派遣",
    "竞业限制期限",
]


def per_span_ns(n: int) -> tuple[float, float, float]:
    """(empty loop, span off, span on) in ns per iteration, best of 3."""

    def loop_empty() -> float:
        t = time.perf_counter_ns()
        for _ in range(n):
            pass
        return (time.perf_counter_ns() - t) / n

    def loop_span() -> float:
        t = time.perf_counter_ns()
        for _ in range(n):
            with span("bm25"):
                pass
        return (time.perf_counter_ns() - t) / n

    empty = min(loop_empty() for _ in range(3))
    off = min(loop_span() for _ in range(3))
    with Tracer([MemorySink()]).trace("query"):  # spans merge into one stage: the trace does not grow
        on = min(loop_span() for _ in range(3))
    return empty, off, on


def per_query_ms(kb: KnowledgeBase, mode: str, rounds: int) -> list[float]:
    times = []
    for i in range(rounds):
        q = QUERIES[i % len(QUERIES)]
        t = time.perf_counter()
        kb.query(q, mode=mode, top_k=5)
        times.append((time.perf_counter() - t) * 1000)
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--spans", type=int, default=1_000_000)
    args = ap.parse_args()
    empty, off, on = per_span_ns(args.spans)
    print(
        f"span, {args.spans} iterations: empty loop {empty:.0f} ns · span off {off:.0f} ns "
        f"(+{off - empty:.0f}) · span on {on:.0f} ns (+{on - empty:.0f})"
    )
    with tempfile.TemporaryDirectory() as tmp:
        base = load_settings(index=Path(tmp))
        with KnowledgeBase(merge(base, tracing={"enabled": False})) as kb:
            kb.ingest([Path(__file__).resolve().parent.parent / "examples" / "laws"], collection="laws")
        for mode in ("bm25", "hybrid"):
            rounds = args.queries if mode == "bm25" else max(30, args.queries // 5)
            results = {}
            for enabled in (False, True, False, True):  # interleaved, to even out a busy machine
                with KnowledgeBase(merge(base, tracing={"enabled": enabled}), read_only=True) as kb:
                    per_query_ms(kb, mode, 10)  # warm-up: tokenizer, model, page cache
                    results.setdefault(enabled, []).extend(per_query_ms(kb, mode, rounds))
            lines = (Path(tmp) / "traces.jsonl").read_text(encoding="utf-8").splitlines()
            size = sum(len(x) for x in lines) / max(1, len(lines))
            off_ms, on_ms = statistics.median(results[False]), statistics.median(results[True])
            print(
                f"{mode}: {len(results[False])} queries each · median off {off_ms:.3f} ms · on {on_ms:.3f} ms "
                f"(+{on_ms - off_ms:.3f} ms, {100 * (on_ms - off_ms) / off_ms:+.1f}%) · "
                f"p95 off {statistics.quantiles(results[False], n=20)[-1]:.3f} / on "
                f"{statistics.quantiles(results[True], n=20)[-1]:.3f} ms · trace line ≈ {size / 1024:.1f} KiB"
            )
            (Path(tmp) / "traces.jsonl").unlink()


if __name__ == "__main__":
    main()
