"""The retrieval quality table: bm25 / dense / hybrid on the four dev sets.

    make bench-quality                                   # all sets, all questions, ../shared/eval
    make bench-english                                   # the English twins beside the Chinese questions
    python bench/quality.py --data ../shared/eval [--sets stard_dev,stard_longdoc] [--modes hybrid]
        [--max-queries 200] [--index-root DIR] [--config zhiku.yaml] [--json] [--english bench/datasets/english]

BEIR sets (a folder with corpus.jsonl) are indexed one document per corpus entry; `stard_longdoc` (a folder with
`docs/` and `eval.yaml`) has its `docs/` ingested with the configured chunking, then its YAML set (`contains:`
expectations) is run. Every row reports nDCG@10, hit@1, hit@5, MRR@10, hits within the first 2,000 and 4,000
returned characters and recall@100. The data path is an argument: the product never reads it by itself.
``--json`` saves the rows for the results page (all sets and modes, every question only: a partial run is
printed, not saved). ``--english DIR`` runs the English questions of ``DIR/<set>`` beside their Chinese twins (the
same ids, on the same index) instead: hit@5 of each, on all of them and on halves A and B (crc32 of the id even, odd),
and in hybrid mode the shares flagged low_confidence of its questions and of the shipped off-topic questions in its
language (zhiku/data/offtopic_zh.txt, offtopic_en.txt): `answerable_flagged`, `offtopic_flagged` in the JSON rows;
then the reverse: bench/datasets/httpx_docs, Chinese questions over English documents beside their English twins.

Vectors come from the persistent embedding cache (`embedding.cache_dir`; questions too, during evaluation), so
a rerun embeds nothing new. Indexes go to a temporary folder unless --index-root keeps them.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

from zhiku.api import KnowledgeBase
from zhiku.evaluation.datasets import EvalSet, load_dataset
from zhiku.evaluation.runner import EvalResult, evaluate, index_dataset
from zhiku.evaluation.tune import offtopic_questions
from zhiku.settings import Settings, load_settings, merge

SETS = ("cmrc2018_dev", "meddialog_im_dev", "stard_dev", "stard_longdoc")
ENGLISH_SETS = ("cmrc2018_dev", "stard_dev")  # the sets with English twins (bench/datasets/english)
# Chinese questions over English documents, with English twins: a set of the repo's own, run beside ENGLISH_SETS
OWN = Path(__file__).resolve().parent / "datasets"
CROSS_DOCS = "httpx_docs"
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


def run_set(
    settings: Settings, folder: Path, modes: list[str], max_queries: int | None, english: Path | None = None
) -> list[Row]:
    data = load_dataset(folder, max_queries=max_queries)
    name = data.name
    with KnowledgeBase(settings) as kb:
        chunks = index_dataset(kb, data, collection=name).chunks
        rows = []
        for mode in modes:
            for run in twins(data, english / name) if english else [data]:
                started = time.perf_counter()
                r: EvalResult = evaluate(kb, run, mode=mode, k=10, collection=name, keep_hits=0)
                print(f"  {run.name} {mode}: {time.perf_counter() - started:.0f}s", file=sys.stderr, flush=True)
                rows.append(Row(run.name, mode, r.queries, chunks, r.metrics, r.latency_ms["p50"]))
                if english:
                    for half in (0, 1):
                        mine = [q.metrics for q in r.records if zlib.crc32(q.qid.encode()) % 2 == half]
                        means = {c: sum(m[c] for m in mine) / len(mine) for c in COLUMNS}
                        rows.append(Row(f"{run.name} {'AB'[half]}", mode, len(mine), chunks, means, 0.0))
        # hybrid: the shares of its questions and of the shipped off-topic ones flagged low_confidence, asked after
        # every evaluation (asked between two, they change the question vectors the next one finds kept)
        for run in twins(data, english / name) if english and "hybrid" in modes else []:
            flags = flagged(kb, run, name)
            shown = ", ".join(f"{k} A {sum(a) / len(a):.1%} B {sum(b) / len(b):.1%}" for k, (a, b) in flags.items())
            print(f"  {run.name} hybrid: {shown}", file=sys.stderr, flush=True)
            for row in rows:
                if row.mode == "hybrid" and row.dataset.startswith(run.name):
                    half = {run.name: None, f"{run.name} A": 0, f"{run.name} B": 1}[row.dataset]
                    for k, ab in flags.items():
                        got = ab[0] + ab[1] if half is None else ab[half]
                        row.metrics[k] = sum(got) / len(got)
        return rows


def flagged(kb: KnowledgeBase, run: EvalSet, collection: str) -> dict[str, tuple[list[bool], list[bool]]]:
    """Whether each of ``run``'s questions, and each shipped off-topic question in its language, is flagged
    low_confidence: half A's, half B's (crc32 of the id or the question, even or odd)."""
    language = "en" if run.name.endswith(" en") else "zh"
    asked = {"answerable_flagged": [(q.qid, q.text) for q in run.queries]}
    asked["offtopic_flagged"] = [(q, q) for q in offtopic_questions(language)]
    out = {}
    for key, questions in asked.items():
        low = [(zlib.crc32(k.encode()) % 2, kb.query(q, collection=collection).low_confidence) for k, q in questions]
        out[key] = ([x for h, x in low if h == 0], [x for h, x in low if h == 1])
    return out


def twins(data: EvalSet, folder: Path) -> list[EvalSet]:
    """The questions of ``data`` that ``folder/queries.jsonl`` asks in English, as asked in Chinese, then in English."""
    with (folder / "queries.jsonl").open(encoding="utf-8") as f:
        english = {str(r["_id"]): str(r["text"]) for r in map(json.loads, f)}
    zh = tuple(q for q in data.queries if q.qid in english)
    en = tuple(replace(q, text=english[q.qid]) for q in zh)
    return [replace(data, name=f"{data.name} zh", queries=zh), replace(data, name=f"{data.name} en", queries=en)]


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
    ap.add_argument("--english", type=Path, default=None, help="English twins of the sets' questions (DIR/<set>)")
    args = ap.parse_args(argv)
    default = ",".join(ENGLISH_SETS) if args.english and args.sets == ",".join(SETS) else args.sets
    sets, modes = default.split(","), args.modes.split(",")
    for s in sets:
        if not (args.data / s).is_dir():
            raise SystemExit(f"{args.data / s} not found: pass --data (the folder with {', '.join(SETS)})")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="zhiku-quality-") as tmp:
        root = args.index_root or Path(tmp)
        own = [CROSS_DOCS] if args.english and args.sets == ",".join(SETS) else []
        for s in sets + own:
            settings = load_settings(args.config, index=root / s, tracing={"enabled": False})
            if settings.store.kind == "milvus":  # one index per set on one server: collections of its own
                settings = merge(settings, store={"collection_prefix": f"{settings.store.collection_prefix}{s}_"})
            folder, english = (OWN / s, OWN) if s in own else (args.data / s, args.english)
            rows += run_set(settings, folder, modes, args.max_queries, english)
    print(table(rows))
    full = modes == list(MODES) and args.max_queries is None and args.config is None
    name = "english" if args.english else "quality"
    if args.json and full and sets == (list(ENGLISH_SETS) if args.english else list(SETS)):
        from report import save

        command = "make bench-english" if args.english else "make bench-quality"
        save(name, [r.__dict__ for r in rows], command)
    elif args.json:
        print("not saved: the results page shows full runs only (every set, mode and question)", file=sys.stderr)


if __name__ == "__main__":
    main()
