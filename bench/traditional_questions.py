"""Questions in Traditional characters: nDCG@10 and the share flagged low-confidence, asked as written (Simplified)
and converted to Traditional (OpenCC s2t), over a Simplified corpus (stard_dev) and over the same articles
converted to Traditional (the questions' articles and 400 others), with the dense channel searching the question
as written only (the search before Traditional questions got a Simplified form) and as it does now.

    PYTHONPATH=src .venv/bin/python bench/traditional_questions.py --data ../shared/eval/stard_dev --first 300 \
        --workdir /tmp/zhiku-traditional

Default settings and the bundled embedder (vectors from the persistent embedding cache); indexes in --workdir.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import opencc

from zhiku.api import KnowledgeBase
from zhiku.evaluation.beir import load_beir
from zhiku.evaluation.metrics import ndcg_at_k
from zhiku.settings import load_settings, merge
from zhiku.types import SourceDoc

OTHERS = 400  # articles besides the questions' in the Traditional corpus


def ndcg10(relevant: set[str], sources: list[str]) -> float:
    """nDCG@10 of the hits' articles, each counted once where it first appears (as ``zhiku eval`` ranks them: two
    pieces of one relevant article must not both gain, which took nDCG over 1)."""
    return ndcg_at_k(list(dict.fromkeys(sources)), dict.fromkeys(relevant, 1), 10)


def build(index: Path, docs: list[SourceDoc]) -> None:
    with KnowledgeBase(merge(load_settings(index=index), tracing={"enabled": False})) as kb:
        if not kb.collections():
            kb.ingest_documents(docs, collection="c")


def measure(index: Path, questions: list[tuple[set[str], str]], *, as_written_only: bool) -> dict[str, float]:
    """Mean nDCG@10 and low-confidence share per mode, and the same for the questions converted to Traditional."""
    to_traditional = opencc.OpenCC("s2t").convert
    out: dict[str, list[float]] = {}
    with KnowledgeBase(merge(load_settings(index=index), tracing={"enabled": False})) as kb:
        if as_written_only:
            only: Callable[[str], tuple[str, ...]] = lambda question: (question,)  # noqa: E731
            kb.searcher._forms = only  # type: ignore[method-assign]
        for relevant, text in questions:
            for script, question in (("Simplified", text), ("Traditional", to_traditional(text))):
                for mode in ("dense", "hybrid"):
                    answer = kb.query(question, top_k=10, mode=mode)
                    ranked = [h.chunk.source for h in answer.hits]
                    out.setdefault(f"{script} {mode} nDCG@10", []).append(ndcg10(relevant, ranked))
                    out.setdefault(f"{script} {mode} low", []).append(float(answer.low_confidence))
    return {k: round(float(np.mean(v)), 4) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="a BEIR folder: stard_dev")
    ap.add_argument("--first", type=int, default=300, help="questions (the set's first)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/zhiku-traditional"))
    args = ap.parse_args()
    data = load_beir(args.data, max_queries=args.first)
    questions = [(set(data.qrels.get(qid, {})), text) for qid, text in data.queries.items()]
    to_traditional = opencc.OpenCC("s2t").convert
    simplified = [SourceDoc(source=d.doc_id, doc_type="text", title=d.title, text=d.text) for d in data.corpus]
    needed = set().union(*(r for r, _ in questions))
    others = sorted(d.doc_id for d in data.corpus if d.doc_id not in needed)
    random.Random(1).shuffle(others)
    keep = needed | set(others[:OTHERS])
    traditional = [
        SourceDoc(source=d.source, doc_type="text", title=to_traditional(d.title), text=to_traditional(d.text))
        for d in simplified
        if d.source in keep
    ]
    rows = {}
    for name, docs in (("Simplified corpus", simplified), ("Traditional corpus", traditional)):
        index = args.workdir / name.split()[0].lower()
        build(index, docs)
        for arm in ("as written only", "now"):
            rows[(name, len(docs), arm)] = measure(index, questions, as_written_only=arm != "now")
    for (name, n, arm), figures in rows.items():
        print(json.dumps({"corpus": name, "articles": n, "questions": len(questions), "dense": arm, **figures}))


if __name__ == "__main__":
    main()
