"""The retrieval quality table: bm25 / dense / hybrid on the four dev sets.

    make bench-quality                                   # all sets, all questions, ../shared/eval
    python bench/quality.py --data ../shared/eval [--sets stard_dev,stard_longdoc] [--modes hybrid]
        [--max-queries 200] [--index-root DIR] [--config zhiku.yaml] [--json]

BEIR sets (a folder with corpus.jsonl) are indexed one document per corpus entry; `stard_longdoc` (a folder with
`docs/` and `eval.yaml`) has its `docs/` ingested with the configured chunking, then its YAML set (`contains:`
expectations) is run. Every row reports nDCG@10, hit@1, hit@5, MRR@10, hits within the first 2,000 and 4,000
returned characters and recall@100. The data path is an argument: the product never reads it by itself.
``--json`` saves the rows for the results page (all sets and modes, every question only: a partial run is
printed, not saved).

Vectors come from the persistent embedding cache (`embedding.cache_dir`; questions too, during evaluation), so
a rerun embeds nothing new. Indexes go to a temporary folder unless --index-root keeps them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from zhiku.api import KnowledgeBase
from zhiku.evaluation.datasets import load_dataset
from zhiku.evaluation.runner import EvalResult, evaluate, index_dataset
from zhiku.settings import Settings, load_settings

SETS = ("cmrc2018_dev", "meddialog_im_dev", "stard_dev", "stard_longdoc")
MODES = ("bm25", "dense", "hybrid")
COLUMNS = ("ndcg@10", "hit@1", "hit@5", "mrr@10", "hit_chars@2000", "hit_chars@4000", "recall@100")


@dataclass(frozen=True)
class Row:
    dataset: str
    mode: str
    queries: int
    chunks: int
    metrics: dict[str, float]
    p50_ms: float


def run_set(settings: Settings, folder: Path, modes: list[str], max_queries: int | None) -> list[Row]:
    data = load_dataset(folder, max_queries=max_queries)
    name = data.name
    with KnowledgeBase(settings) as kb:
        chunks = index_dataset(kb, data, collection=name).chunks
        rows = []
        for mode in modes:
            started = time.perf_counter()
            r: EvalResult = evaluate(kb, data, mode=mode, k=10, collection=name, keep_hits=0)
            print(f"  {name} {mode}: {time.perf_counter() - started:.0f}s", file=sys.stderr, flush=True)
            rows.append(Row(name, mode, r.queries, chunks, r.metrics, r.latency_ms["p50"]))
        return rows


def table(rows: list[Row]) -> str:
    lines = [
        "| set | queries | chunks | mode | " + " | ".join(COLUMNS) + " | p50 ms |",
        "|" + "---|" * (len(COLUMNS) + 5),
    ]
    for r in rows:
        cells = " | ".join(f"{r.metrics[c]:.4f}" for c in COLUMNS)
        lines.append(f"| {r.dataset} | {r.queries} | {r.chunks} | {r.mode} | {cells} | {r.p50_ms:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=Path("../shared/eval"), help="folder holding the dev sets")
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--max-queries", type=int, default=None, help="only the first N questions of each set")
    ap.add_argument("--index-root", type=Path, default=None, help="keep one index per set here (default: temporary)")
    ap.add_argument("--config", type=Path, default=None, help="settings file (e.g. other chunking)")
    ap.add_argument("--json", action="store_true", help="save the rows for the results page (a full run only)")
    args = ap.parse_args(argv)
    sets, modes = args.sets.split(","), args.modes.split(",")
    for s in sets:
        if not (args.data / s).is_dir():
            raise SystemExit(f"{args.data / s} not found: pass --data (the folder with {', '.join(SETS)})")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="zhiku-quality-") as tmp:
        root = args.index_root or Path(tmp)
        for s in sets:
            settings = load_settings(args.config, index=root / s, tracing={"enabled": False})
            rows += run_set(settings, args.data / s, modes, args.max_queries)
    print(table(rows))
    full = sets == list(SETS) and modes == list(MODES) and args.max_queries is None and args.config is None
    if args.json and full:
        from report import save

        save("quality", [r.__dict__ for r in rows], "make bench-quality")
    elif args.json:
        print("not saved: the results page shows full runs only (every set, mode and question)", file=sys.stderr)


if __name__ == "__main__":
    main()
