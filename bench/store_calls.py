"""What one call into the embedded store costs: ``SQLiteStore.bm25_search``, ``dense_search`` and ``dense_scores``.

    PYTHONPATH=<checkout>/src .venv/bin/python bench/store_calls.py --index <copy of an index> \
        --questions ../shared/eval/stard_dev [--n 1200 --warmup 200 --core 1]

Opens a COPY of an index (it is opened for writing, which may upgrade it). For each question (zhiku's query tokens;
a random unit query vector, seeded): ``bm25_search(terms, 100)``, ``dense_search(vector, 100)``, then
``dense_scores(vector, ids)`` of the BM25 hits outside the dense top 100 (z-score fusion's fill), each timed alone
(wall and CPU time), pinned to one core. The first ``--warmup`` questions are not counted. Prints one JSON line:
p50 / p95 ms of each call, wall and CPU, and the fill's median number of ids.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from zhiku.evaluation.datasets import load_dataset
from zhiku.numeric import percentile
from zhiku.stores.sqlite import SQLiteStore
from zhiku.text import TextProcessor


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--index", type=Path, required=True, help="a copy of an index (opened for writing)")
    ap.add_argument("--questions", type=Path, required=True, help="a dev-set folder whose questions are searched")
    ap.add_argument("--n", type=int, default=1200)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--core", type=int, default=1)
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.core})
    texts = [q.text for q in load_dataset(args.questions).queries][: args.n]
    tp = TextProcessor()
    terms = [list(dict.fromkeys(t for t in tp.query_tokens(q) if t.strip())) for q in texts]
    vectors = np.random.default_rng(0).standard_normal((len(texts), 384)).astype(np.float32)
    wall: dict[str, list[float]] = {"bm25": [], "dense": [], "fill": []}
    cpu: dict[str, list[float]] = {k: [] for k in wall}
    filled: list[int] = []

    def timed(key: str, call: Callable[[], Any]) -> Any:
        t, c = time.perf_counter(), time.process_time()
        out = call()
        wall[key].append((time.perf_counter() - t) * 1000)
        cpu[key].append((time.process_time() - c) * 1000)
        return out

    with SQLiteStore(args.index) as store:
        store.warm()
        for i, v in enumerate(vectors):
            bm25 = timed("bm25", lambda: store.bm25_search(terms[i], 100))  # noqa: B023
            dense = timed("dense", lambda: store.dense_search(v, 100))  # noqa: B023
            seen = {h.chunk_id for h in dense}
            missing = [h.chunk_id for h in bm25 if h.chunk_id not in seen]
            timed("fill", lambda: store.dense_scores(v, missing))  # noqa: B023
            filled.append(len(missing))
    row: dict[str, object] = {"index": str(args.index), "questions": len(texts) - args.warmup}
    row["load_avg_1m"] = round(os.getloadavg()[0], 1)
    for key in wall:
        w, c = wall[key][args.warmup :], cpu[key][args.warmup :]
        row[key] = {
            "p50_ms": round(percentile(w, 50), 3),
            "p95_ms": round(percentile(w, 95), 3),
            "cpu_p50_ms": round(percentile(c, 50), 3),
            "cpu_p95_ms": round(percentile(c, 95), 3),
        }
    row["fill_ids_median"] = float(np.median(filled[args.warmup :]))
    print(json.dumps(row))


if __name__ == "__main__":
    main()
