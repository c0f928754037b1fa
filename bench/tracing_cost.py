"""What a trace costs a query, per mode, on one index: wall time (p50/p95), the query thread's CPU and the whole
process's CPU (the trace writer thread included) per query, tracing off and on, interleaved.

    nice -n 10 .venv/bin/python bench/tracing_cost.py                        # examples/laws, built in a temp dir
    cp -r <q-idx>/stard_dev /tmp/tc-stard && \\
    nice -n 10 .venv/bin/python bench/tracing_cost.py --index /tmp/tc-stard \\
        --queries ../shared/eval/stard_dev/queries.jsonl                      # an index built beforehand (a copy)

Query embedding is excluded: query vectors are looked up (the bundled embedder's own vectors for examples/laws,
embedded once; random unit vectors under the index's embedder name for ``--index``). ``retrieve`` and ``query``
(retrieve + answer) are timed in bm25, dense and hybrid mode with ``top_k`` 10 and ``per_source_k`` 100, tracing
off and on at each ``--samples`` value (``tracing.sample``: the checkout's default, and 1.0: every trace keeps its
candidate detail). A round flushes the trace writer before its clock stops, so the CPU the writer spends is counted in its round; "GC"
is the time the garbage collector ran, per query.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_stacks import LookupEmbedder  # noqa: E402
from tracing_overhead import QUERIES  # noqa: E402
from zhiku.api import KnowledgeBase  # noqa: E402
from zhiku.numeric import percentile  # noqa: E402
from zhiku.observability.trace import flush_traces  # noqa: E402
from zhiku.settings import Settings, load_settings, merge  # noqa: E402

MODES = ("bm25", "dense", "hybrid")


def laws_index(tmp: Path) -> tuple[Settings, LookupEmbedder, list[str]]:
    settings = load_settings(index=tmp)
    with KnowledgeBase(merge(settings, tracing={"enabled": False})) as kb:
        kb.ingest([Path(__file__).resolve().parent.parent / "examples" / "laws"], collection="laws")
        vectors = {q: kb.embedder.embed_query(q) for q in QUERIES}
        name = kb.embedder.name
    return settings, LookupEmbedder(name, vectors), list(QUERIES)


def copied_index(index: Path, queries: Path, n: int) -> tuple[Settings, LookupEmbedder, list[str]]:
    settings = load_settings(index=index)
    with KnowledgeBase(merge(settings, tracing={"enabled": False}), read_only=True) as kb:
        meta = kb.store.get_meta()
    texts = [json.loads(line)["text"] for line in queries.read_text(encoding="utf-8").splitlines() if line.strip()]
    texts = list(dict.fromkeys(texts))[:n]
    rng = np.random.default_rng(0)
    raw = rng.standard_normal((len(texts), int(meta["dim"]))).astype(np.float32)
    vectors = {q: v / np.linalg.norm(v) for q, v in zip(texts, raw, strict=True)}
    return settings, LookupEmbedder(meta["embedder"], vectors), texts


def one_round(kb: KnowledgeBase, call: str, mode: str, queries: list[str], pause_s: float = 0.0) -> dict[str, Any]:
    fn = kb.retrieve if call == "retrieve" else kb.query
    walls = []
    collecting = [0.0, 0.0]  # garbage collection: since when, seconds in all

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collecting[0] = time.perf_counter()
        else:
            collecting[1] += time.perf_counter() - collecting[0]

    gc.callbacks.append(on_gc)
    thread0, proc0 = time.thread_time(), time.process_time()
    for q in queries:
        t = time.perf_counter()
        fn(q, mode=mode, top_k=10, per_source_k=100)
        walls.append((time.perf_counter() - t) * 1000)
        if pause_s:  # a client that reads its answer before it asks again: the process is idle meanwhile
            time.sleep(pause_s)
    thread = time.thread_time() - thread0
    flush_traces()  # the writer's share of this round's CPU
    proc = time.process_time() - proc0
    gc.callbacks.remove(on_gc)
    return {"walls": walls, "thread_ms": thread * 1000, "proc_ms": proc * 1000, "gc_ms": collecting[1] * 1000}


def arms(detail: str, samples: list[str]) -> dict[str, dict[str, Any]]:
    """The tracing settings compared: off, then on with each ``tracing.sample`` ("default": the checkout's)."""
    on = {"enabled": True, **({"detail": detail} if detail else {})}
    out: dict[str, dict[str, Any]] = {"off": {"enabled": False}}
    for sample in samples:
        out[f"on {sample}"] = on if sample == "default" else {**on, "sample": float(sample)}
    return out


def measure(
    settings: Settings, embedder: LookupEmbedder, queries: list[str], call: str, mode: str, rounds: int, **how: Any
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for _ in range(rounds):
        for arm, tracing in how["arms"].items():  # interleaved, to even out a busy machine
            s = merge(settings, tracing=tracing)
            with KnowledgeBase(s, embedder=embedder, read_only=True) as kb:  # type: ignore[arg-type]
                one_round(kb, call, mode, queries[: min(20, len(queries))])  # warm-up
                r = one_round(kb, call, mode, queries, how.get("pause_s", 0.0))
            acc = out.setdefault(arm, {"walls": [], "thread_ms": 0.0, "proc_ms": 0.0, "gc_ms": 0.0, "n": 0})
            acc["gc_ms"] += r["gc_ms"]
            acc["walls"] += r["walls"]
            acc["thread_ms"] += r["thread_ms"]
            acc["proc_ms"] += r["proc_ms"]
            acc["n"] += len(queries)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--index", type=Path, help="a built index (a copy: traces are written into it)")
    ap.add_argument("--queries", type=Path, help="queries.jsonl for --index")
    ap.add_argument("-n", type=int, default=300, help="queries per round (--index)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--calls", nargs="+", default=["retrieve", "query"], choices=["retrieve", "query"])
    ap.add_argument("--detail", default="", help="tracing.detail (lean, full; a checkout that has it)")
    ap.add_argument(
        "--samples",
        nargs="+",
        default=["default", "1.0"],
        help="tracing.sample values to compare with tracing off ('default': the checkout's; a checkout that has it)",
    )
    ap.add_argument(
        "--min-score",
        type=float,
        help="answer.min_score: 0 for --index, whose random query vectors make every answer low-confidence (a "
        "low-confidence answer keeps its trace's candidate detail whatever tracing.sample says)",
    )
    ap.add_argument(
        "--pause-ms",
        type=float,
        default=0.0,
        help="idle time after each query (a client reading its answer; 0: queries back to back, the CPU-bound case)",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.index:
            settings, embedder, queries = copied_index(args.index, args.queries, args.n)
            if args.min_score is not None:
                settings = merge(settings, answer={"min_score": args.min_score})
            where = str(args.index)
        else:
            settings, embedder, queries = laws_index(Path(tmp))
            queries = queries * 10
            where = "examples/laws"
        print(
            f"{where}: {len(queries)} queries a round × {args.rounds} rounds, tracing.detail {args.detail or 'default'}, "
            f"pause {args.pause_ms:g} ms, load {os.getloadavg()[0]:.1f}"
        )
        for call in args.calls:
            for mode in args.modes:
                how = {"arms": arms(args.detail, args.samples), "pause_s": args.pause_ms / 1000}
                r = measure(settings, embedder, queries, call, mode, args.rounds, **how)
                off = r.pop("off")
                for arm, on in r.items():
                    print(f"{call:8} {mode:6} {arm:11} " + compare(off, on), flush=True)


def compare(off: dict[str, Any], on: dict[str, Any]) -> str:
    mean = [sum(x["walls"]) / len(x["walls"]) for x in (off, on)]
    p50 = [percentile(x["walls"], 50) for x in (off, on)]
    p95 = [percentile(x["walls"], 95) for x in (off, on)]
    th = [x["thread_ms"] / x["n"] for x in (off, on)]
    pr = [x["proc_ms"] / x["n"] for x in (off, on)]
    gcs = [1000 * x["gc_ms"] / x["n"] for x in (off, on)]
    return (
        f"wall mean {mean[0]:.3f} → {mean[1]:.3f} ms ({100 * (mean[1] / mean[0] - 1):+.1f}%) · "
        f"wall p50 {p50[0]:.3f} → {p50[1]:.3f} ms ({100 * (p50[1] / p50[0] - 1):+.1f}%) · "
        f"p95 {p95[0]:.3f} → {p95[1]:.3f} · query-thread CPU {th[0]:.3f} → {th[1]:.3f} ms "
        f"({100 * (th[1] / th[0] - 1):+.1f}%) · process CPU {pr[0]:.3f} → {pr[1]:.3f} ms "
        f"({100 * (pr[1] / pr[0] - 1):+.1f}%) · GC {gcs[0]:.0f} → {gcs[1]:.0f} µs · process CPU less GC "
        f"{100 * ((pr[1] - gcs[1] / 1000) / (pr[0] - gcs[0] / 1000) - 1):+.1f}% · load {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
