"""What tracing on by default costs a question, end to end: ``KnowledgeBase.query`` with the bundled embedder on
an index of examples/laws, tracing on (the default: a trace per question appended to traces.jsonl) against off.

    .venv/bin/python bench/tracing_cost.py [-n 200] [--mode hybrid]

Every question is asked once of each knowledge base (two over the same index, one tracing, one not), in
alternating order, so none is answered from a cache: each is parsed, embedded, searched and answered. The
questions are the openings of the laws' articles. Prints one JSON line: median and mean milliseconds per
question with tracing off and on, and the cost of tracing as a share of the question's time (target ≤ 10 %).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
from pathlib import Path

from zhiku.api import KnowledgeBase
from zhiku.observability.trace import TRACE_FILE
from zhiku.settings import load_settings, merge

LAWS = Path(__file__).resolve().parent.parent / "examples" / "laws"


def questions(n: int) -> list[str]:
    """The first words of each article of the laws (``第N条 …``), distinct, at most ``n``."""
    found: list[str] = []
    for f in sorted(LAWS.glob("*.md")):
        for m in re.finditer(r"第[一二三四五六七八九十百零]+条\s*(\S{6,24}?)[，。；：]", f.read_text(encoding="utf-8")):
            found.append(m.group(1))
    return list(dict.fromkeys(found))[:n]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=200, help="questions (each asked once with tracing on and once off)")
    ap.add_argument("--mode", default="hybrid", choices=["bm25", "dense", "hybrid"])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(index=Path(tmp) / "idx")
        with KnowledgeBase(merge(settings, tracing={"enabled": False})) as kb:
            kb.ingest([LAWS], collection="laws")
        asked = questions(args.n)
        on = KnowledgeBase(merge(settings, tracing={"enabled": True}), read_only=True)
        off = KnowledgeBase(merge(settings, tracing={"enabled": False}), read_only=True)
        times: dict[str, list[float]] = {"on": [], "off": []}
        for kb in (on, off):  # warm-up: models loaded, first searches done (not timed)
            for q in ("劳动合同", "工资", "试用期"):
                kb.query(q, mode=args.mode)
        for n, q in enumerate(asked):
            for name, kb in (("on", on), ("off", off)) if n % 2 else (("off", off), ("on", on)):
                t0 = time.perf_counter()
                kb.query(q, mode=args.mode)
                times[name].append((time.perf_counter() - t0) * 1000)
        lines = (Path(tmp) / "idx" / TRACE_FILE).read_bytes().splitlines()
        on.close()
        off.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    mean = {k: statistics.fmean(v) for k, v in times.items()}
    print(
        json.dumps(
            {
                "questions": len(asked),
                "mode": args.mode,
                "off_median_ms": round(med["off"], 2),
                "on_median_ms": round(med["on"], 2),
                "off_mean_ms": round(mean["off"], 2),
                "on_mean_ms": round(mean["on"], 2),
                "cost_median_pct": round(100 * (med["on"] / med["off"] - 1), 1),
                "cost_mean_pct": round(100 * (mean["on"] / mean["off"] - 1), 1),
                "trace_line_bytes": round(statistics.fmean(map(len, lines))),
            }
        )
    )


if __name__ == "__main__":
    main()
