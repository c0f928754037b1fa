"""The retrieval quality table: bm25 / dense / hybrid on the four dev sets, written into bench/RESULTS.md.

    make bench-quality                                   # all sets, all questions, ../shared/eval
    .venv/bin/python bench/quality.py --data ../shared/eval [--sets stard_dev,stard_longdoc] [--modes hybrid]
        [--max-queries 200] [--index-root DIR] [--config zhiku.yaml] [--results bench/RESULTS.md] [--no-write]

BEIR sets (a folder with corpus.jsonl) are indexed one document per corpus entry; `stard_longdoc` (a folder with
`docs/` and `eval.yaml`) has its `docs/` ingested with the configured chunking, then its YAML set (`contains:`
expectations) is run. Every row reports nDCG@10, hit@1, hit@5, MRR@10, hits within the first 2,000 and 4,000
returned characters and recall@100. The data path is an argument: the product never reads it by itself.

Vectors come from the persistent embedding cache (`embedding.cache_dir`; questions too, during evaluation), so
a rerun embeds nothing new. Indexes go to a temporary folder unless --index-root keeps them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from zhiku.api import KnowledgeBase
from zhiku.evaluation.datasets import load_dataset
from zhiku.evaluation.runner import EvalResult, evaluate, index_dataset
from zhiku.mcp.latency import fingerprint
from zhiku.settings import Settings, load_settings

SETS = ("cmrc2018_dev", "meddialog_im_dev", "stard_dev", "stard_longdoc")
MODES = ("bm25", "dense", "hybrid")
COLUMNS = ("ndcg@10", "hit@1", "hit@5", "mrr@10", "hit_chars@2000", "hit_chars@4000", "recall@100")
START, END = "<!-- bench-quality:start -->", "<!-- bench-quality:end -->"
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


@dataclass(frozen=True)
class Row:
    dataset: str
    mode: str
    queries: int
    chunks: int
    metrics: dict[str, float]
    p50_ms: float


def run_set(settings: Settings, folder: Path, modes: list[str], max_queries: int | None) -> tuple[list[Row], str]:
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
        return rows, kb.embedder.name


def machine() -> str:
    f = fingerprint()
    return f"{f['cpu']}, {f['cores']} cores, {platform.system()} {platform.release()}"


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def table(rows: list[Row], header: str) -> str:
    lines = [
        header,
        "",
        "| set | queries | chunks | mode | " + " | ".join(COLUMNS) + " | p50 ms |",
        "|" + "---|" * (len(COLUMNS) + 5),
    ]
    for r in rows:
        cells = [f"{r.metrics[c]:.4f}" for c in COLUMNS]
        lines.append(
            f"| {r.dataset} | {r.queries} | {r.chunks} | {r.mode} | " + " | ".join(cells) + f" | {r.p50_ms:.1f} |"
        )
    return "\n".join(lines) + "\n"


def write_table(path: Path, text: str) -> None:
    """Replace the block between the markers (appended at the end of the file the first time)."""
    current = path.read_text(encoding="utf-8") if path.exists() else ""
    block = f"{START}\n{text}{END}"
    if START in current and END in current:
        head, rest = current.split(START, 1)
        new = head + block + rest.split(END, 1)[1]
    else:
        new = current.rstrip("\n") + "\n\n### Quality table (`make bench-quality`)\n\n" + block + "\n"
    path.write_text(new, encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=Path("../shared/eval"), help="folder holding the dev sets")
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--max-queries", type=int, default=None, help="only the first N questions of each set")
    ap.add_argument("--index-root", type=Path, default=None, help="keep one index per set here (default: temporary)")
    ap.add_argument("--config", type=Path, default=None, help="settings file (e.g. other chunking)")
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    ap.add_argument("--no-write", action="store_true", help="print the table; leave RESULTS.md as it is")
    args = ap.parse_args(argv)
    sets, modes = args.sets.split(","), args.modes.split(",")
    for s in sets:
        if not (args.data / s).is_dir():
            raise SystemExit(f"{args.data / s} not found: pass --data (the folder with {', '.join(SETS)})")
    load_before = os.getloadavg()
    started = time.perf_counter()
    rows: list[Row] = []
    embedder = "?"
    with tempfile.TemporaryDirectory(prefix="zhiku-quality-") as tmp:
        root = args.index_root or Path(tmp)
        for s in sets:
            settings = load_settings(args.config, index=root / s, tracing={"enabled": False})
            got, embedder = run_set(settings, args.data / s, modes, args.max_queries)
            rows += got
    elapsed = time.perf_counter() - started
    load_after = os.getloadavg()
    subset = f"first {args.max_queries} questions of each set" if args.max_queries else "all questions"
    cmd = "python bench/quality.py " + " ".join(argv if argv is not None else sys.argv[1:])
    header = (
        f"`{cmd.strip()}` · {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} · commit {commit()} · "
        f"{subset} · embedder {embedder}, default retrieval settings"
        f"{'' if args.config is None else f' + {args.config}'} · {machine()} · load average "
        f"{load_before[0]:.1f} → {load_after[0]:.1f} · {elapsed / 60:.1f} min"
    )
    text = table(rows, header)
    print(text)
    if args.json is not None:
        args.json.write_text(
            json.dumps([r.__dict__ for r in rows], ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
        )
    if not args.no_write:
        write_table(args.results, text)


if __name__ == "__main__":
    main()
