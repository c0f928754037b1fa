"""Questions from many threads at once on one index: throughput and latency, 1 client against N clients.

    make bench-concurrency                         # 10k chunks, 1 and 50 clients, 20 s each
    python bench/concurrent_search.py --corpus DIR --queries queries.jsonl [--size 10000] [--clients 1 50]
        [--seconds 20] [--compare OTHER_CHECKOUT/src] [--json]

The index is bench/scale.py's (real Chinese sentences, random unit vectors), built by the checkout measured.
Every client asks hybrid top-10 questions through ``KnowledgeBase.retrieve`` (tracing off) with random query
vectors: query embedding is excluded. ``--compare SRC`` measures another checkout (its ``src`` folder) the same
way in the same run, interleaved with this one, each in its own process.
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

<<<<<<< HEAD
    def embed_query(self, text: str) -> np.ndarray:
        v = np.random.default_rng(abs(hash(text)) % 2**32).standard_normal(DIM).astype(np.float32)
        return v / np.linalg.norm(v)


def traced(searcher: Searcher, store: SQLiteStore, path: Path, sample: float | None) -> Callable[..., object]:
    """``searcher.search`` inside a query trace, labelled from the store (what ``KnowledgeBase.retrieve`` adds);
    ``sample``: ``tracing.sample`` (a checkout that has it; None: every trace keeps its candidate detail)."""
    from zhiku.observability import tracing as tr

    path.unlink(missing_ok=True)
    tracer = tr.Tracer([tr.JsonlSink(path)], **({} if sample is None else {"sample": sample}))

    def fetch(ids: list[str]) -> dict[str, dict[str, object]]:
        return {c.chunk_id: {"source": c.source, "section": c.section, "page": c.page} for c in store.get_chunks(ids)}

    labels = tr.VersionedLabels(fetch, store.index_version)

    def search(q: str, *, top_k: int, mode: str) -> object:
        with tracer.trace("query", query=q, mode=mode, top_k=top_k) as t:
            r = searcher.search(searcher.read(q, mode), top_k=top_k)
            if t is not None and hasattr(tr, "label_later"):
                tr.label_later(t, r.hits, labels)
            elif t is not None:  # a checkout from before label_later: rows and labels built here
                t.data["hits"] = tr.hit_rows(r.hits)
                tr.label_chunks(t, labels)
        return r

    return search


def load(
    searcher: Searcher | Callable[..., object],
    queries: list[str],
    clients: int,
    seconds: float,
    mode: str = "hybrid",
) -> dict[str, float]:
    latencies: list[float] = []
    lock = threading.Lock()
    if isinstance(searcher, Searcher):

        def search(q: str, *, top_k: int, mode: str) -> object:
            return searcher.search(searcher.read(q, mode), top_k=top_k)

    else:
        search = searcher
=======
    latencies: list[float] = []
    lock = threading.Lock()
>>>>>>> words
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


def child(args: argparse.Namespace) -> None:
    """In a process that imports the checkout measured: build the index if needed, then one load per client count."""
    sys.path.insert(0, str(HERE.parent))
    from scale import build, open_kb, questions, sentences

    index = args.workdir / str(args.size)
    if not index.is_dir():
        build(index, sentences(args.corpus), args.size)
    queries = questions(args.queries, 10**9)
    with open_kb(index, read_only=True) as kb:
        kb.retrieve(queries[0], top_k=10, mode="hybrid")
        print(json.dumps(load(kb, queries, args.child_clients, args.seconds)))


def run(args: argparse.Namespace, src: Path, label: str, clients: int) -> dict[str, Any]:
    cmd = [sys.executable, str(HERE), "--queries", str(args.queries), "--size", str(args.size)]
    cmd += [f"--corpus={c}" for c in args.corpus]
    cmd += ["--seconds", str(args.seconds), "--workdir", str(args.workdir / label), "--child-clients", str(clients)]
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    return {"checkout": label, "chunks": args.size, **json.loads(out.stdout.strip().splitlines()[-1])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, action="append", default=[])
    ap.add_argument("--queries", type=Path, required=True)
    ap.add_argument("--size", type=int, default=10000)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 50])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/zhiku-concurrency"))
    ap.add_argument("--compare", type=Path, help="another checkout's src folder, measured in the same run")
    ap.add_argument("--json", action="store_true", help="also save the rows for the results page")
    ap.add_argument("--child-clients", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_clients:
        child(args)
        return
    checkouts = {"this": SRC, **({"compared": args.compare.resolve()} if args.compare else {})}
    rows = []
    for clients in args.clients:
        for label, src in checkouts.items():
            rows.append(run(args, src, label, clients))
            print(json.dumps(rows[-1]), flush=True)
    if args.json:
        from report import save

<<<<<<< HEAD
    index = args.workdir / str(args.size)
    if not index.is_dir():
        build(index, sentences(args.corpus), args.size)
    lines = args.queries.read_text(encoding="utf-8").splitlines()
    queries = [json.loads(x)["text"] for x in lines if x.strip()]
    tp = TextProcessor()
    kwargs = {} if args.dense_search is None else {"dense_search": args.dense_search}
    with SQLiteStore(index, read_only=True, **kwargs) as store:
        searcher = Searcher(store, RandomQueryVectors(), tp, retrieval_settings(args))  # type: ignore[arg-type]
        searcher.search(searcher.read(queries[0], "hybrid"), top_k=10)
        search = traced(searcher, store, args.workdir / "traces.jsonl", args.sample) if args.tracing else searcher
        for clients in args.clients:
            row = {"zhiku": str(Path(zhiku.__file__).parents[2]), "load_avg_1m": round(os.getloadavg()[0], 1)}
            row.update(mode=args.mode, dense_search=args.dense_search or "default", max_concurrent=args.max_concurrent)
            row.update(tracing=args.tracing, sample=args.sample)
            print(json.dumps({**row, **load(search, queries, clients, args.seconds, args.mode)}), flush=True)
        if args.tracing:  # the trace writer seals what it holds (labels read from the store) before the store closes
            from zhiku.observability import trace as trace_module

            getattr(trace_module, "flush_traces", lambda: None)()
        searcher.close()


def retrieval_settings(args: argparse.Namespace) -> RetrievalSettings:
    """``retrieval.max_concurrent`` from ``--max-concurrent`` on checkouts that have it (0: the default)."""
    if args.max_concurrent is None:
        return RetrievalSettings()
    return RetrievalSettings(max_concurrent=args.max_concurrent)  # type: ignore[call-arg]
=======
        save("concurrency", rows, "make bench-concurrency")
>>>>>>> words


if __name__ == "__main__":
    main()
