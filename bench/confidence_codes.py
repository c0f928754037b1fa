"""The low-confidence flag with and without the codes rule (retrieval.confidence.codes_in_first), every dev set.

    .venv/bin/python bench/confidence_codes.py --data ../shared/eval

For each dev set's questions (answerable) and the off-topic questions (tests/data/offtopic), searched as
`query_knowledge_hub` searches, it counts the answers flagged low-confidence by the cosine threshold alone
(before) and with the rule that an answer whose first passage holds every code the question names is not
low (after). The rule must not unflag off-topic questions.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from zhiku.api import KnowledgeBase
from zhiku.embedding.cache import caching_queries
from zhiku.evaluation.datasets import load_dataset
from zhiku.evaluation.runner import index_dataset
from zhiku.retrieval.confidence import judge
from zhiku.settings import load_settings

sys.path.insert(0, str(Path(__file__).resolve().parent))
from confidence import OFFTOPIC, read_offtopic  # noqa: E402
from quality import SETS  # noqa: E402


def flags(kb: KnowledgeBase, collection: str, texts: list[str], min_score: float) -> tuple[int, int]:
    """How many of ``texts`` are flagged low by the cosine alone, and with the codes rule."""
    before = after = 0
    for text in texts:
        with caching_queries(kb.embedder):
            r = kb.retrieve(text, collection=collection)
        c = judge(r, min_score=min_score, normalize=kb.text.normalize)
        before += c.low or (bool(r.hits) and c.score is not None and 0 < min_score and c.score < min_score)
        after += c.low
    return before, after


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=Path("../shared/eval"))
    args = ap.parse_args()
    offtopic = read_offtopic(OFFTOPIC)
    print(f"load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="zhiku-codes-") as tmp:
        for name in SETS:
            data = load_dataset(args.data / name)
            settings = load_settings(index=Path(tmp) / name, tracing={"enabled": False})
            with KnowledgeBase(settings) as kb:
                index_dataset(kb, data, collection=name)
                ans = flags(kb, name, [q.text for q in data.queries], settings.server.min_score)
                off = flags(kb, name, offtopic, settings.server.min_score)
            print(
                f"| {name} | {len(data.queries)} | {ans[0]} | {ans[1]} | {len(offtopic)} | {off[0]} | {off[1]} |",
                flush=True,
            )
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
