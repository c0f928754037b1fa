"""Exact dense search in the embedded store's dense index (``stores/_vectors.py``), without embedding or SQLite.

    .venv/bin/python bench/vector_search.py [--sizes 10000 100000] [--dims 384 1024] [--queries 200]

Random unit vectors (latency only: the matrix product and the top-k selection do not depend on the values),
1,000 documents; each query is a random unit vector, top 10, no filter and a collection filter. Prints one JSON
line per (size, dim): the matrix product alone and ``VectorSnapshot.search`` (product + mask + top-k), p50 / p95 ms
(the matrix in memory; the store maps it from ``vectors.<dim>.f32``, which is the same once the pages are cached).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable

import numpy as np

from zhiku.numeric import l2_normalise, percentile
from zhiku.stores._vectors import VectorSnapshot


def timed(fn: Callable[[np.ndarray], object], queries: np.ndarray) -> tuple[float, float]:
    ms = []
    for q in queries:
        t = time.perf_counter()
        fn(q)
        ms.append((time.perf_counter() - t) * 1000)
    return round(percentile(ms, 50), 2), round(percentile(ms, 95), 2)


def measure(size: int, dim: int, n_queries: int, rng: np.random.Generator) -> dict[str, object]:
    matrix = l2_normalise(rng.standard_normal((size, dim), dtype=np.float32), in_place=True)
    live = np.ones(size, bool)
    index = VectorSnapshot(dim, 0, size, matrix, live, size, None)
    in_collection = np.arange(size) % 2 == 1  # the rows a collection filter allows (the store builds it by SQL)
    queries = l2_normalise(rng.standard_normal((n_queries, dim), dtype=np.float32))
    return {
        "chunks": size,
        "dim": dim,
        "product_ms": timed(lambda q: matrix @ q, queries),
        "search_ms": timed(lambda q: index.search(q, 10, None), queries),
        "filtered_ms": timed(lambda q: index.search(q, 10, in_collection), queries),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[10000, 100000])
    ap.add_argument("--dims", type=int, nargs="+", default=[384, 1024])
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    print(json.dumps({"cpus": os.cpu_count(), "load_avg": [round(x, 2) for x in os.getloadavg()]}))
    for size in args.sizes:
        for dim in args.dims:
            print(json.dumps(measure(size, dim, args.queries, rng)), flush=True)


if __name__ == "__main__":
    main()
