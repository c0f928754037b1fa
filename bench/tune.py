"""`zhiku tune` held out: tuned on half A of each dev set, measured on half B against the defaults.

    make bench-tune                                   # the four sets, ../shared/eval
    python bench/tune.py --data ../shared/eval [--sets stard_dev] [--index-root DIR] [--json]

Half A holds the questions whose ``zlib.crc32(_id)`` is even. `zhiku tune`'s choice on half A (what it would
write: the defaults where it writes nothing) and the defaults each run half B through the whole pipeline
(hybrid nDCG@10 and hit@5, with the 99 % bootstrap interval of the paired difference). Refusal on half B: its
answerable questions, and tests/data/offtopic's questions (written apart from the shipped list tune calibrates on).
Indexes and vectors as in bench/quality.py (the persistent embedding cache).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import zlib
from dataclasses import replace
from pathlib import Path

from zhiku.api import KnowledgeBase
from zhiku.evaluation.datasets import load_dataset
from zhiku.evaluation.runner import evaluate, index_dataset
from zhiku.evaluation.tune import MAX_ANSWERABLE_FLAGGED, MIN_OFFTOPIC_FLAGGED, flagged, gather, interval, tune
from zhiku.settings import load_settings, merge

SETS = ("cmrc2018_dev", "meddialog_im_dev", "stard_dev", "stard_longdoc")
OFFTOPIC = Path(__file__).resolve().parents[1] / "tests" / "data" / "offtopic" / "questions.txt"


def held_out_offtopic() -> list[str]:
    lines = OFFTOPIC.read_text(encoding="utf-8").splitlines()
    return [x.strip() for x in lines if x.strip() and not x.startswith("#")]


def run_set(index: Path, folder: Path) -> dict:
    data = load_dataset(folder)
    half = {q.qid: zlib.crc32(q.qid.encode()) % 2 for q in data.queries}
    a = replace(data, queries=tuple(q for q in data.queries if half[q.qid] == 0))
    b = replace(data, queries=tuple(q for q in data.queries if half[q.qid] == 1))
    settings = load_settings(None, index=index, tracing={"enabled": False})
    with KnowledgeBase(settings) as kb:
        index_dataset(kb, data, collection=data.name)
        chosen = tune(kb, a, collection=data.name)
        before = evaluate(kb, b, mode="hybrid", collection=data.name, keep_hits=0)
        answerable = [c.confidence for c in gather(kb, b.queries, data.name, None)]
        off = [c.confidence for c in gather(kb, held_out_offtopic(), data.name, None)]
    fusion = chosen.write.get("retrieval.fusion", settings.retrieval.fusion)
    min_score = chosen.write.get("answer.min_score", settings.answer.min_score)
    with KnowledgeBase(merge(settings, retrieval={"fusion": fusion})) as kb:
        after = evaluate(kb, b, mode="hybrid", collection=data.name, keep_hits=0)
    row = {"set": data.name, "questions_a": len(a.queries), "questions_b": len(b.queries), "fusion": fusion,
           "min_score": min_score, "not_written": chosen.reasons, "cv_on_a": chosen.metrics}  # fmt: skip
    for m in ("ndcg@10", "hit@5"):
        gains = [y.metrics[m] - x.metrics[m] for x, y in zip(before.records, after.records, strict=True)]
        row[m] = {"default": before.metrics[m], "tuned": after.metrics[m], "ci99": interval(gains)}
    for name, t in (("default", settings.answer.min_score), ("tuned", min_score)):
        row[f"refusal_{name}"] = {"offtopic_flagged": flagged(off, t), "answerable_flagged": flagged(answerable, t)}
    r = row["refusal_tuned"]
    row["holds"] = (
        row["ndcg@10"]["tuned"] >= row["ndcg@10"]["default"]
        and r["offtopic_flagged"] >= MIN_OFFTOPIC_FLAGGED
        and r["answerable_flagged"] <= MAX_ANSWERABLE_FLAGGED
    )
    return row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=Path("../shared/eval"), help="folder holding the dev sets")
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--index-root", type=Path, default=None, help="keep one index per set here (default: temporary)")
    ap.add_argument("--json", action="store_true", help="save the rows for the results page (all four sets only)")
    args = ap.parse_args(argv)
    sets = args.sets.split(",")
    rows = []
    with tempfile.TemporaryDirectory(prefix="zhiku-tune-") as tmp:
        for s in sets:
            rows.append(run_set((args.index_root or Path(tmp)) / s, args.data / s))
            print(rows[-1], file=sys.stderr, flush=True)
    from report import save, tune_table

    print("\n".join(tune_table(rows)))
    if args.json and sets == list(SETS):
        save("tune", rows, "make bench-tune")


if __name__ == "__main__":
    main()
