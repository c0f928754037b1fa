"""Searches from many threads at once on one store: throughput and latency, 1 client vs N clients.

    nice -n 10 .venv/bin/python bench/concurrent_search.py --corpus ../shared/corpus/laws \
        --corpus ../shared/eval/cmrc2018_dev --queries ../shared/eval/cmrc2018_dev/queries.jsonl \
        --size 10000 --clients 1 50 --seconds 20 --workdir /tmp/zhiku-conc

Uses only ``SQLiteStore`` and ``Searcher`` (hybrid, tracing off, no answer cache), so the same file measures any
zhiku checkout (``PYTHONPATH=<checkout>/src``): the index is built by that checkout under ``--workdir``. Query
vectors are random unit vectors (query embedding excluded); every query text is different (uncached).
``--tracing`` wraps every search in a query trace as ``KnowledgeBase.retrieve`` does (stages, ranked candidates,
rank changes, hits and chunk labels, ``tracing.detail`` lean), appended to ``<workdir>/traces.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_latency import DIM, build, sentences  # noqa: E402
from zhiku.numeric import percentile  # noqa: E402
from zhiku.retrieval.search import Searcher  # noqa: E402
from zhiku.settings import RetrievalSettings  # noqa: E402
from zhiku.stores.sqlite import SQLiteStore  # noqa: E402
from zhiku.text import TextProcessor  # noqa: E402


class RandomQueryVectors:
    dim, name = DIM, "random"

    def embed_query(self, text: str) -> np.ndarray:
        v = np.random.default_rng(abs(hash(text)) % 2**32).standard_normal(DIM).astype(np.float32)
        return v / np.linalg.norm(v)


def searching(searcher: Searcher) -> Callable[..., Any]:
    """``search(q, top_k=…, mode=…)`` over ``searcher``: one that reads the question into a plan first, or a checkout's
    from before plans (side-by-side runs of two checkouts use this script)."""
    if hasattr(searcher, "read"):
        return lambda q, *, top_k, mode: searcher.search(searcher.read(q, mode), top_k=top_k)
    return searcher.search


def traced(searcher: Searcher, store: SQLiteStore, path: Path, sample: float | None) -> Callable[..., object]:
    """``searcher.search`` inside a query trace, labelled from the store (what ``KnowledgeBase.retrieve`` adds);
    ``sample``: ``tracing.sample`` (a checkout that has it; None: every trace keeps its candidate detail)."""
    from zhiku.observability import tracing as tr

    path.unlink(missing_ok=True)
    tracer = tr.Tracer([tr.JsonlSink(path)], **({} if sample is None else {"sample": sample}))

    def fetch(ids: list[str]) -> dict[str, dict[str, object]]:
        return {c.chunk_id: {"source": c.source, "section": c.section, "page": c.page} for c in store.get_chunks(ids)}

    labels = tr.VersionedLabels(fetch, store.index_version)

    ask = searching(searcher)

    def search(q: str, *, top_k: int, mode: str) -> object:
        with tracer.trace("query", query=q, mode=mode, top_k=top_k) as t:
            r = ask(q, top_k=top_k, mode=mode)
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
    search = searching(searcher) if isinstance(searcher, Searcher) else searcher
    stop = time.perf_counter() + seconds

    def client(n: int) -> None:
        rng = random.Random(n)
        mine = []
        while time.perf_counter() < stop:
            q = rng.choice(queries)
            t = time.perf_counter()
            search(q, top_k=10, mode=mode)
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
        "cpu_ms_per_query": round(cpu * 1000 / max(len(latencies), 1), 2),  # this process, all threads
        "p50_ms": round(percentile(latencies, 50), 1),
        "p95_ms": round(percentile(latencies, 95), 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, action="append", default=[])
    ap.add_argument("--queries", type=Path, required=True)
    ap.add_argument("--size", type=int, default=10000)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 50])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/zhiku-conc"))
    ap.add_argument("--mode", default="hybrid", help="bm25, dense or hybrid")
    ap.add_argument("--dense-search", default=None, help="store.dense_search (a checkout without it: leave it out)")
    ap.add_argument("--max-concurrent", type=int, default=None, help="retrieval.max_concurrent (1024: ungated)")
    ap.add_argument("--tracing", action="store_true", help="trace every search (a checkout with label_later)")
    ap.add_argument("--sample", type=float, default=None, help="with --tracing: tracing.sample (default 1: all detail)")
    args = ap.parse_args()
    import zhiku

    index = args.workdir / str(args.size)
    if not index.is_dir():
        build(index, sentences(args.corpus), args.size)
    lines = args.queries.read_text(encoding="utf-8").splitlines()
    queries = [json.loads(x)["text"] for x in lines if x.strip()]
    tp = TextProcessor()
    kwargs = {} if args.dense_search is None else {"dense_search": args.dense_search}
    with SQLiteStore(index, read_only=True, **kwargs) as store:
        searcher = Searcher(store, RandomQueryVectors(), tp, retrieval_settings(args))  # type: ignore[arg-type]
        searching(searcher)(queries[0], top_k=10, mode="hybrid")
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


if __name__ == "__main__":
    main()
