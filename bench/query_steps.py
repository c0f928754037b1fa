"""Where a ``KnowledgeBase.query`` spends its time after the search: the confidence check (``judge``) and the
cited answer (``answer``), beside ``retrieve``, per question (µs, p50), tracing off, query embedding excluded
(random unit vectors under the index's embedder name, as tracing_cost.py). Two passes over the questions: the
first meets each passage for the first time in this process (what a new question costs), the second again (what
a passage that came back costs: the passage caches hold it).

    cp -r <q-idx>/stard_dev /tmp/qs-stard
    for src in /tmp/before/src src; do PYTHONPATH=$src nice -n 5 .venv/bin/python bench/query_steps.py \\
        --index /tmp/qs-stard --queries ../shared/eval/stard_dev/queries.jsonl --n 500; done
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tracing_cost import copied_index  # noqa: E402
from zhiku.api import KnowledgeBase  # noqa: E402
from zhiku.retrieval.confidence import judge  # noqa: E402
from zhiku.settings import merge  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--queries", type=Path, required=True)
    ap.add_argument("--n", type=int, default=500, help="distinct questions")
    ap.add_argument("--mode", default="hybrid", choices=["bm25", "dense", "hybrid"])
    args = ap.parse_args()
    settings, embedder, queries = copied_index(args.index, args.queries, args.n)
    settings = merge(settings, tracing={"enabled": False})
    with KnowledgeBase(settings, embedder=embedder, read_only=True) as kb:  # type: ignore[arg-type]
        kb.retrieve(queries[0], mode=args.mode)  # (loads the vectors and the BM25 snapshot: not a passage cache)
        min_score = kb.settings.server.min_score
        for name in ("first", "again"):
            steps: dict[str, list[float]] = {"retrieve": [], "judge": [], "answer": [], "query": []}
            for q in queries:
                t0 = time.perf_counter()
                r = kb.retrieve(q, mode=args.mode, top_k=10, per_source_k=100)
                t1 = time.perf_counter()
                low = judge(r, min_score=min_score, normalize=kb.text.normalize).low
                t2 = time.perf_counter()
                kb.answer(r, low_confidence=low)
                t3 = time.perf_counter()
                for step, s in zip(steps, (t1 - t0, t2 - t1, t3 - t2, t3 - t0), strict=True):
                    steps[step].append(s * 1e6)
            cells = " · ".join(f"{k} {statistics.median(v):.0f}" for k, v in steps.items())
            print(f"{args.mode} {name} pass, {len(queries)} questions, p50 µs: {cells}")


if __name__ == "__main__":
    main()
