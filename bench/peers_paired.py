"""zhiku and the fastest peer (bm25s + numpy + RRF) timed side by side in one process, their queries interleaved.

    .venv-peers/bin/python bench/peers_paired.py --workdir /tmp/zhiku-peers [--sets stard_dev,cmrc2018_dev]
        [--stacks zhiku,bm25s] [--latency-queries 500] [--rounds 3]

bench/peers.py times each stack in its own child, one after the other: its latency pass of a stack lasts a few
seconds, so what the machine does meanwhile (a neighbour's job on a shared box, the Milvus Lite server it leaves
behind) moves one stack's p95 and not the other's. Here both stacks are built in one child pinned to one core from
the same inputs (``--workdir/<set>/inputs.pkl``, written by a bench/peers.py run), warmed by the scored pass of
bench/peers.py (every question, top 100), and then each question of the latency pass (top 10, the same questions
as bench/peers.py) goes to both stacks back to back, in an order drawn per question (seeded), for ``--rounds``
passes: both see the same machine at the same moments. Query embedding is excluded, as in bench/peers.py.
Reported per set: each stack's p50 / p95 (ms, wall time) and the first stack's p95 divided by each other's, per
round.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_stacks import fresh, make_stack  # noqa: E402
from peers import DEPTH, THREADS_1, check_tokens, pinned_inputs, timed_questions  # noqa: E402
from zhiku.numeric import percentile  # noqa: E402


def paired(work: Path, keys: list[str], latency_queries: int, rounds: int) -> list[dict[str, list[float]]]:
    """Each round's latencies (ms) per stack, the stacks' searches of one question back to back."""
    corpus, queries = pinned_inputs(work)
    check_tokens(queries)
    stacks = {k: make_stack(k, queries) for k in keys}
    for k, stack in stacks.items():
        stack.build(corpus, fresh(work / "paired" / k))
        for q in queries:  # the scored pass of bench/peers.py: it warms every stack
            stack.search(q, DEPTH)
    timed = timed_questions(queries, latency_queries)
    rng = random.Random(13)
    out = []
    for _ in range(rounds):
        got: dict[str, list[float]] = {k: [] for k in keys}
        for q in timed:
            order = keys[:]
            rng.shuffle(order)
            for k in order:
                t = time.perf_counter()
                stacks[k].search(q, 10)
                got[k].append((time.perf_counter() - t) * 1000)
        out.append(got)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, required=True, help="a bench/peers.py workdir: <set>/inputs.pkl")
    ap.add_argument("--sets", default="stard_dev,cmrc2018_dev,meddialog_im_dev")
    ap.add_argument("--stacks", default="zhiku,bm25s", help="the first is the one the others are compared with")
    ap.add_argument("--latency-queries", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    for var, value in THREADS_1.items():
        os.environ.setdefault(var, value)
    keys = [k for k in args.stacks.split(",") if k]
    print(f"load average {os.getloadavg()[0]:.2f}; stacks {', '.join(keys)}; p50 / p95 ms per round")
    print("| set | round | " + " | ".join(keys) + f" | {keys[0]}'s p95 ÷ theirs |")
    print("|---|---|" + "---|" * len(keys) + "---|")
    for name in [s for s in args.sets.split(",") if s]:
        work = args.workdir / name
        if not (work / "inputs.pkl").exists():
            raise SystemExit(f"{work / 'inputs.pkl'} not found: run bench/peers.py with this --workdir first")
        for n, got in enumerate(paired(work, keys, args.latency_queries, args.rounds), 1):
            p95 = {k: percentile(v, 95) for k, v in got.items()}
            cells = [f"{percentile(v, 50):.2f} / {p95[k]:.2f}" for k, v in got.items()]
            ratios = ", ".join(f"{p95[keys[0]] / p95[k]:.2f}" for k in keys[1:])
            print(f"| {name} | {n} | " + " | ".join(cells) + f" | {ratios} |", flush=True)


if __name__ == "__main__":
    main()
