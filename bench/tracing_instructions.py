"""What a trace costs in instructions and simulated cache misses (valgrind's callgrind): deterministic, so a change
of a few per cent shows on a shared machine where wall-clock arms (tracing_steps.py) swing by ±20 µs.

Each arm runs in its own process under ``valgrind --tool=callgrind --cache-sim=yes`` with instrumentation off
until 100 queries have warmed it twice; the next 100 queries (and the trace writer's flush) are counted. The
estimate of cycles is Ir + 12 × first-level misses + 40 × last-level misses, the last level modelled as a
512 KB cache (the search's data and a trace's code compete there; L3 hits are what a cold trace pays for).
Arms: ``off``, ``open`` (the trace and its spans, dropped unsealed), ``decide``, ``seal``, ``encode`` (as in
tracing_steps.py, sample 0), and a sample (``0``, ``0.1``, ``1``: the JSON-lines sink, what a query pays). The trace
writer's clocks are scaled by 50 (valgrind runs ~50× slower). Needs valgrind and a C compiler.

    cp -r <q-idx>/stard_dev /tmp/ti-stard   # (an index at the current schema: open it for writing once)
    nice -n 5 .venv/bin/python bench/tracing_instructions.py --index /tmp/ti-stard \\
        --queries ../shared/eval/stard_dev/queries.jsonl --src src --src /tmp/before/src --arms off 0 0.1 1
"""

from __future__ import annotations

import argparse
import ctypes
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOGGLE_C = """#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT("measured"); }
"""


def child(args: argparse.Namespace) -> None:
    """The measured process (run under valgrind): warm up, then count 100 queries."""
    sys.path.insert(0, str(HERE))
    from tracing_cost import copied_index
    from tracing_steps import Decide, Encode, Open, Seal
    from zhiku.api import KnowledgeBase
    from zhiku.observability.trace import JsonlSink
    from zhiku.observability.tracing import Tracer
    from zhiku.settings import merge

    toggle = ctypes.CDLL(args.child)
    random.seed(7)  # the same trace ids (and so the same sampled-in traces) in every arm and checkout
    settings, embedder, queries = copied_index(args.index, args.queries, 100)
    settings = merge(settings, tracing={"enabled": False}, answer={"min_score": 0.0})
    kb = KnowledgeBase(settings, embedder=embedder, read_only=True)  # type: ignore[arg-type]
    JsonlSink.POLL_S = 0.5  # the writer's clocks scaled like the program's
    sink = JsonlSink(Path(tempfile.mkdtemp()) / "traces.jsonl", interval_s=10.0)
    steps = {"open": Open, "decide": Decide, "seal": Seal, "encode": Encode}
    if args.arm == "off":
        kb.tracer = Tracer()
    elif args.arm in steps:
        kb.tracer = Tracer([steps[args.arm]()], sample=0.0, slow_ms=1e9)
    else:
        kb.tracer = Tracer([sink], sample=float(args.arm), slow_ms=1e9)
    fn = kb.retrieve if args.call == "retrieve" else kb.query
    for _ in range(2):
        for q in queries:
            fn(q, mode=args.mode, top_k=10, per_source_k=100)
    sink.flush()
    toggle.cg_start()
    for q in queries:
        fn(q, mode=args.mode, top_k=10, per_source_k=100)
    sink.flush()
    toggle.cg_stop()


def measure(src: str, arm: str, args: argparse.Namespace, lib: Path, out: Path) -> dict[str, float]:
    """Per query: instructions, first-level and last-level misses of one arm."""
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve()), "PYTHONHASHSEED": "0"}
    prefix = out / f"cg.{abs(hash((src, arm)))}"
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--cache-sim=yes", "--I1=32768,8,64"]
    cmd += ["--D1=32768,8,64", "--LL=524288,8,64", f"--callgrind-out-file={prefix}.%p", sys.executable]
    cmd += [__file__, "--child", str(lib), "--arm", arm, "--index", str(args.index), "--queries", str(args.queries)]
    cmd += ["--mode", args.mode, "--call", args.call]
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    [dump] = [p for p in out.glob(prefix.name + ".*.1")]  # the dump at cg_stop
    lines = dump.read_text().splitlines()
    events = next(x for x in lines if x.startswith("events:")).split()[1:]
    totals = next(x for x in lines if x.startswith("totals:")).split()[1:]
    e = {k: int(v) / 100 for k, v in zip(events, totals, strict=True)}
    first = e["I1mr"] + e["D1mr"] + e["D1mw"]
    last = e["ILmr"] + e["DLmr"] + e["DLmw"]
    return {"Ir": e["Ir"], "last": last, "cycles": e["Ir"] + 12 * first + 40 * last}


def main() -> None:
    sys.path.insert(0, str(HERE))
    from tracing_steps import query_args

    ap = query_args()
    ap.add_argument("--src", action="append", help="a checkout's src folder (repeat to compare; default: src)")
    ap.add_argument("--arms", nargs="+", default=["off", "0", "0.1", "1"])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--arm", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.call == "mcp":
        ap.error("--call mcp is tracing_steps.py's only: count retrieve or query here")
    if args.child:
        child(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        lib = out / "toggle.so"
        (out / "toggle.c").write_text(TOGGLE_C)
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(out / "toggle.c")], check=True)
        for src in args.src or ["src"]:
            got = {arm: measure(src, arm, args, lib, out) for arm in ["off", *[a for a in args.arms if a != "off"]]}
            off = got["off"]
            cells = [
                f"{arm} Ir {g['Ir'] - off['Ir']:+,.0f} ({(g['Ir'] - off['Ir']) / off['Ir']:+.1%}), "
                f"est. cycles {(g['cycles'] - off['cycles']) / off['cycles']:+.1%}, "
                f"last-level misses {g['last'] - off['last']:+,.0f}"
                for arm, g in got.items()
                if arm != "off"
            ]
            print(f"{args.call} {args.mode} [{src}] off {off['Ir']:,.0f} Ir/query · " + " · ".join(cells))


if __name__ == "__main__":
    main()
