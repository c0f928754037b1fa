"""Calibrate the low-confidence flag: answerable dev questions vs off-topic questions, signal by signal.

    .venv/bin/python bench/confidence.py --data ../shared/eval [--sets ...] [--max-queries 300]
        [--offtopic tests/data/offtopic/questions.txt] [--index-root DIR] [--signals OUT.json]

Each dev set's corpus is indexed (stard_longdoc: its docs/), then its questions (answerable: the corpus holds
the answer) and every off-topic question (the corpora cannot answer them) are searched the way
`query_knowledge_hub` searches (hybrid, top 5, default settings). For each signal of zhiku.retrieval.confidence
it prints the threshold that flags ≥ 90 % of the off-topic questions (pooled over the sets) and the share of
answerable questions it flags too, plus the best operating points. Questions come from the persistent
embedding cache after the first run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from zhiku.api import KnowledgeBase
from zhiku.embedding.cache import caching_queries
from zhiku.evaluation.datasets import load_dataset
from zhiku.evaluation.runner import index_dataset
from zhiku.retrieval.confidence import SIGNALS, signals_of
from zhiku.settings import load_settings

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quality import SETS  # noqa: E402

OFFTOPIC = Path(__file__).resolve().parent.parent / "tests" / "data" / "offtopic" / "questions.txt"


def read_offtopic(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def collect(settings, folder: Path, max_queries: int | None, offtopic: list[str]) -> list[dict]:  # noqa: ANN001
    data = load_dataset(folder, max_queries=max_queries)
    name = data.name
    rows = []
    with KnowledgeBase(settings) as kb:
        index_dataset(kb, data, collection=name)
        questions = [(q.text, True) for q in data.queries] + [(t, False) for t in offtopic]
        for text, answerable in questions:
            with caching_queries(kb.embedder):
                r = kb.retrieve(text, collection=name)
            s = signals_of(r.hits, r.dense, r.bm25, r.query.terms, kb.text.normalize)
            rows.append({"set": name, "query": text, "answerable": answerable, **s.__dict__})
    return rows


def operating_points(rows: list[dict], signal: str) -> dict:
    """The threshold flagging ≥ 90 % of off-topic questions and what it costs on answerable ones; the threshold
    flagging ≤ 5 % of answerable questions and how many off-topic ones it catches."""
    off = sorted(r[signal] for r in rows if not r["answerable"] and r[signal] is not None)
    ans = sorted(r[signal] for r in rows if r["answerable"] and r[signal] is not None)
    if not off or not ans:
        return {}
    t90 = off[min(len(off) - 1, int(0.9 * len(off)))]  # flag score < t: at least 90 % of off-topic are below
    t90 = t90 + 1e-9
    t5 = ans[int(0.05 * len(ans))]  # at most 5 % of answerable below
    best = max(
        (x for x in sorted(set(off + ans))),
        key=lambda t: sum(v < t for v in off) / len(off) - sum(v < t for v in ans) / len(ans),
    )
    point = {
        "signal": signal,
        "threshold_90": round(t90, 4),
        "answerable_flagged_at_90": round(sum(v < t90 for v in ans) / len(ans), 4),
        "threshold_5": round(t5, 4),
        "offtopic_flagged_at_5": round(sum(v < t5 for v in off) / len(off), 4),
        "youden_threshold": round(best, 4),
        "youden_offtopic": round(sum(v < best for v in off) / len(off), 4),
        "youden_answerable": round(sum(v < best for v in ans) / len(ans), 4),
    }
    return point


def per_set(rows: list[dict], signal: str, threshold: float) -> dict[str, dict[str, float]]:
    out = {}
    for s in sorted({r["set"] for r in rows}):
        mine = [r for r in rows if r["set"] == s and r[signal] is not None]
        off = [r for r in mine if not r["answerable"]]
        ans = [r for r in mine if r["answerable"]]
        out[s] = {
            "offtopic_flagged": round(sum(r[signal] < threshold for r in off) / max(1, len(off)), 4),
            "answerable_flagged": round(sum(r[signal] < threshold for r in ans) / max(1, len(ans)), 4),
            "answerable": len(ans),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=Path("../shared/eval"))
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--max-queries", type=int, default=None)
    ap.add_argument("--offtopic", type=Path, default=OFFTOPIC)
    ap.add_argument("--index-root", type=Path, default=None)
    ap.add_argument("--signals", type=Path, default=None, help="write/read the per-question signals (JSON)")
    args = ap.parse_args()
    if args.signals is not None and args.signals.exists():
        rows = json.loads(args.signals.read_text(encoding="utf-8"))
    else:
        offtopic = read_offtopic(args.offtopic)
        load_before, started = os.getloadavg()[0], time.perf_counter()
        rows = []
        with tempfile.TemporaryDirectory(prefix="zhiku-confidence-") as tmp:
            root = args.index_root or Path(tmp)
            for s in args.sets.split(","):
                settings = load_settings(index=root / s, tracing={"enabled": False})
                rows += collect(settings, args.data / s, args.max_queries, offtopic)
                print(f"{s}: done after {time.perf_counter() - started:.0f}s", file=sys.stderr, flush=True)
        print(f"load {load_before:.1f} → {os.getloadavg()[0]:.1f}", file=sys.stderr)
        if args.signals is not None:
            args.signals.write_text(json.dumps(rows, ensure_ascii=False) + "\n", encoding="utf-8")
    n_off = sum(not r["answerable"] for r in rows)
    print(f"{len(rows) - n_off} answerable, {n_off} off-topic questions ({args.sets}; max {args.max_queries})")
    for signal in SIGNALS:
        point = operating_points(rows, signal)
        print(json.dumps(point, ensure_ascii=False))
        if point:
            print("  per set at threshold_90:", json.dumps(per_set(rows, signal, point["threshold_90"])))
            print("  per set at youden:", json.dumps(per_set(rows, signal, point["youden_threshold"])))


if __name__ == "__main__":
    main()
