"""bench/traditional_questions.py's nDCG@10 is ``zhiku eval``'s: each article counted once (its figures are quoted
in docs/DESIGN.md and bench/RESULTS.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "traditional_questions.py"


def test_two_pieces_of_one_relevant_article_count_once() -> None:
    spec = importlib.util.spec_from_file_location("traditional_questions", SCRIPT)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.ndcg10({"a"}, ["a", "a", "b"]) == 1.0
    assert bench.ndcg10({"a", "b"}, ["c", "a", "a", "b"]) == bench.ndcg10({"a", "b"}, ["c", "a", "b"])
    assert bench.ndcg10({"a"}, ["b"] * 3) == 0.0
