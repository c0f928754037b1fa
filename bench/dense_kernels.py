"""The dense product three ways, side by side on one core: numpy's einsum (the numpy path without the compiled
core), the core's AVX2/FMA kernel (``_zcore.dots``) and int8 screening (``_zcore.screen``, then the kernel on the
best ``screen_width`` rows), over vector files of several sizes; and, on real dev-set vectors, how often screening
changes a dense top k.

    .venv/bin/python bench/dense_kernels.py [--sizes 1024,2048,4096,8192,16384,32768] [--queries 300]
        [--peers /tmp/peers-sN]    # also: real vectors (bench/peers.py's inputs.pkl of each set in that workdir)

Timings: random unit rows (latency does not depend on what the vectors mean), mapped from a file as the store
maps them, one query after another (each a row of another random matrix), p50/p95 in µs. The crossovers chosen
from this (``_sqlite_search.screen_kernels_from``: 1,024 rows on the Intel box, 12 MB of rows on the AMD one) are
where screening's p95 is clearly below the exact kernel's.
Real vectors: every question of each set, screened top k (k 100 and 10: a hybrid search's depth and a dense
search's top_k) against the exact one: how many questions get another set of rows, and the time of each way.
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from zhiku.numeric import percentile  # noqa: E402
from zhiku.stores._vector_files import quantise  # noqa: E402
from zhiku.stores._vectors import screen_width, simd_kernels  # noqa: E402

DIM = 384


def unit_rows(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    m = rng.standard_normal((n, dim)).astype(np.float32)
    return (m / np.linalg.norm(m, axis=1, keepdims=True)).astype(np.float32)


def ways(k: object, m: np.ndarray, codes: np.ndarray, depth: int) -> dict[str, object]:
    n = m.shape[0]
    live = np.ones(n, np.uint8)
    want = screen_width(depth, n)

    def einsum(u: np.ndarray) -> None:
        np.einsum("ij,j->i", m, u)

    def kernel(u: np.ndarray) -> None:
        k.dots(m, u, np.empty(n, np.float32))  # type: ignore[attr-defined]

    def screened(u: np.ndarray) -> None:
        rows = np.empty(want, np.int64)
        got = k.screen(codes, quantise(u), live, rows)  # type: ignore[attr-defined]
        k.dots(m, u, np.empty(got, np.float32), rows[:got])  # type: ignore[attr-defined]

    return {"einsum": einsum, "kernel": kernel, f"int8 → {want}": screened}


def timed(f: object, queries: np.ndarray) -> tuple[float, float]:
    times = []
    for u in queries:
        t = time.perf_counter()
        f(u)  # type: ignore[operator]
        times.append((time.perf_counter() - t) * 1e6)
    return percentile(times, 50), percentile(times, 95)


def synthetic(k: object, sizes: list[int], nq: int) -> None:
    rng = np.random.default_rng(13)
    queries = unit_rows(rng, nq)
    print(
        "| rows | MB (float32) | "
        + " | ".join(["einsum p50/p95 µs", "kernel p50/p95 µs", "int8 screened p50/p95 µs"])
        + " |"
    )
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            m0 = unit_rows(rng, n)
            path = Path(tmp) / f"v{n}.f32"
            m0.tofile(path)
            quantise(m0).tofile(Path(tmp) / f"v{n}.i8")
            m = np.memmap(path, dtype="<f4", mode="r", shape=(n, DIM))
            codes = np.memmap(Path(tmp) / f"v{n}.i8", dtype=np.int8, mode="r", shape=(n, DIM))
            rows = np.asarray(m).view(np.ndarray)
            cells = []
            for f in ways(k, rows, np.asarray(codes).view(np.ndarray), 100).values():
                timed(f, queries[:20])  # warm
                p50, p95 = timed(f, queries)
                cells.append(f"{p50:.0f} / {p95:.0f}")
            print(f"| {n:,} | {n * DIM * 4 / 1e6:.1f} | " + " | ".join(cells) + " |", flush=True)


def real(k: object, workdir: Path) -> None:
    print("\n| set | rows | k | screened rows | questions whose top k differs | exact p50 µs | screened p50 µs |")
    print("|---|---|---|---|---|---|---|")
    for pkl in sorted(workdir.glob("*/inputs.pkl")):
        corpus, queries = pickle.loads(pkl.read_bytes())
        m = np.ascontiguousarray(corpus.vectors, np.float32)
        m /= np.linalg.norm(m, axis=1, keepdims=True)
        n, codes, live = m.shape[0], quantise(m), np.ones(m.shape[0], np.uint8)
        units = [(q.vector / np.linalg.norm(q.vector)).astype(np.float32) for q in queries]
        for depth in (100, 10):
            want, differ, te, ts = screen_width(depth, n), 0, [], []
            for u in units:
                t = time.perf_counter()
                exact = np.empty(n, np.float32)
                k.dots(m, u, exact)  # type: ignore[attr-defined]
                te.append(time.perf_counter() - t)
                t = time.perf_counter()
                rows = np.empty(want, np.int64)
                got = k.screen(codes, quantise(u), live, rows)  # type: ignore[attr-defined]
                scores = np.empty(got, np.float32)
                k.dots(m, u, scores, rows[:got])  # type: ignore[attr-defined]
                ts.append(time.perf_counter() - t)
                best = set(np.lexsort((np.arange(n), -exact))[:depth].tolist())
                differ += best != set(rows[:got][np.lexsort((rows[:got], -scores))][:depth].tolist())
            print(
                f"| {pkl.parent.name} | {n:,} | {depth} | {want} | {differ} of {len(units)} | "
                f"{np.median(te) * 1e6:.0f} | {np.median(ts) * 1e6:.0f} |",
                flush=True,
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1024,2048,4096,8192,16384,32768")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--peers", type=Path, help="a bench/peers.py workdir: <set>/inputs.pkl (real vectors)")
    args = ap.parse_args()
    k = simd_kernels()
    if k is None:
        raise SystemExit("the compiled core's kernels do not run here (not built, or no AVX2 and FMA)")
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    print(f"load average {os.getloadavg()[0]:.2f}, one core, {DIM}-d")
    synthetic(k, [int(s) for s in args.sizes.split(",") if s], args.queries)
    if args.peers:
        real(k, args.peers)


if __name__ == "__main__":
    main()
