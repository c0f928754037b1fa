"""Where one search's time goes: per-stage and ``KnowledgeBase.retrieve`` p50/p95 on copies of dev-set indexes.

    nice -n 10 .venv/bin/python bench/search_stages.py --index /tmp/q-idx-copy --sets stard_dev,meddialog_im_dev \
        --queries ../shared/eval --stages

``--index ROOT`` holds one index per set (``ROOT/<set>/zhiku.db``; use a copy: opening it may write its vector
and BM25 files). Query vectors are random unit vectors looked up by text (query embedding excluded); tracing off;
hybrid top 10 from 100 candidates per channel (as bench/peers.py). ``cpu_p50``: the process's CPU time per query
(every thread's), which preemption on a loaded machine does not inflate. ``--stages`` also times each stage alone
(parse, the three store calls, fusion, ``Searcher._hits``) on the same queries; ``--in-place`` times the same
calls where a hybrid ``retrieve`` makes them (mean µs per query).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_stacks import LookupEmbedder  # noqa: E402
from zhiku.api import KnowledgeBase  # noqa: E402
from zhiku.evaluation.datasets import load_dataset  # noqa: E402
from zhiku.numeric import percentile  # noqa: E402
from zhiku.observability.tracing import Tracer  # noqa: E402
from zhiku.retrieval.fusion import zscore_fusion  # noqa: E402
from zhiku.retrieval.query import parse_query  # noqa: E402
from zhiku.settings import load_settings, merge  # noqa: E402
from zhiku.types import Filters  # noqa: E402

DEPTH = 100


def open_kb(
    index: Path, queries: list[str], tracer: Tracer | None = None, clause_weight: float | None = None
) -> KnowledgeBase:
    """``index`` with random unit query vectors for ``queries`` (a clause: one fixed by its text); tracing off,
    unless into ``tracer``; ``clause_weight``: ``retrieval.clause_weight`` (None: the default)."""
    retrieval = {} if clause_weight is None else {"clause_weight": clause_weight}
    settings = merge(load_settings(index=index), tracing={"enabled": tracer is not None}, retrieval=retrieval)
    with KnowledgeBase(settings) as probe:  # not read-only: an older schema is upgraded in place
        meta = probe.store.get_meta()
    rng = np.random.default_rng(0)
    raw = rng.standard_normal((len(queries), int(meta["dim"])))
    vectors = {q: (v / np.linalg.norm(v)).astype(np.float32) for q, v in zip(queries, raw, strict=True)}
    embedder = LookupEmbedder(meta["embedder"], vectors)
    return KnowledgeBase(settings, embedder=embedder, tracer=tracer)  # type: ignore[arg-type]


def timed_call(inner: Any, name: str, spent: dict[str, float]) -> Any:
    """``inner`` with its time added to ``spent[name]`` at each call (~0.3 µs a call)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - t

    return call


def summary(times: list[float]) -> dict[str, float]:
    ms = [t * 1000 for t in times]
    return {"p50": round(percentile(ms, 50), 3), "p95": round(percentile(ms, 95), 3)}


class Laps:
    """``lap(name)``: the time since the previous lap (or creation), recorded under ``name``."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = {}
        self._t = time.perf_counter()

    def start(self) -> None:
        self._t = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.times.setdefault(name, []).append(now - self._t)
        self._t = now


def stages(kb: KnowledgeBase, queries: list[str]) -> dict[str, dict[str, float]]:
    sr, st = kb.searcher, kb.store
    laps = Laps()
    for q in queries:
        v = sr.embedder.embed_query(q)
        laps.start()
        p = parse_query(q, sr.text, max_chars=sr.settings.max_query_chars)
        laps.lap("parse")
        b = st.bm25_search(p.terms, DEPTH, Filters())
        laps.lap("bm25_search")
        d = st.dense_search(v, DEPTH, Filters())
        laps.lap("dense_search")
        seen = {x.chunk_id for x in d}
        f = st.dense_scores(v, [x.chunk_id for x in b if x.chunk_id not in seen])
        laps.lap("dense_scores (fill)")
        zscore_fusion([b, d], weights=[1.0, 1.0], fill=[None, f])
        laps.lap("zscore_fusion")
        sr._hits("hybrid", b, d, v, 10)
        laps.lap("Searcher._hits")
    return {n: summary(t) for n, t in laps.times.items()}


STORE_CALLS = ("bm25_search", "dense_search", "dense_scores", "get_chunks", "document_chunks")
SEARCH_CALLS = ("zscore_fusion", "parse_query", "whole_articles")  # as retrieval/search.py imported them


def in_place(kb: KnowledgeBase, queries: list[str]) -> dict[str, float]:
    """Mean µs per hybrid ``retrieve`` spent in each store call, fusion, small-to-big and parsing, timed where the
    search makes them (each wrapped; a wrapper adds ~0.3 µs a call), and in the whole ``retrieve``."""
    import zhiku.retrieval.search as search

    spent: dict[str, float] = {}
    originals = {name: getattr(search, name) for name in SEARCH_CALLS}

    def timed(inner: Any, name: str) -> Any:
        return timed_call(inner, name, spent)

    for name in STORE_CALLS:
        setattr(kb.store, name, timed(getattr(kb.store, name), name))
    for name, function in originals.items():
        setattr(search, name, timed(function, name))
    try:
        t = time.perf_counter()
        for q in queries:
            kb.retrieve(q, top_k=10, mode="hybrid", per_source_k=DEPTH)
        spent["retrieve (all)"] = time.perf_counter() - t
    finally:
        for name in STORE_CALLS:
            delattr(kb.store, name)  # the class's methods again
        for name, function in originals.items():
            setattr(search, name, function)
    return {n: round(v / len(queries) * 1e6, 1) for n, v in sorted(spent.items(), key=lambda kv: -kv[1])}


def retrieve(kb: KnowledgeBase, queries: list[str], mode: str) -> dict[str, float]:
    """Wall p50/p95 and the process's CPU time per query (all threads: robust to a loaded machine's preemption)."""
    wall, cpu = Laps(), []
    for q in queries:
        c = time.process_time()
        wall.start()
        kb.retrieve(q, top_k=10, mode=mode, per_source_k=DEPTH)  # type: ignore[arg-type]
        wall.lap(mode)
        cpu.append(time.process_time() - c)
    return {**summary(wall.times[mode]), "cpu_p50": summary(cpu)["p50"]}


def index_arguments(sets: str) -> argparse.ArgumentParser:
    """A parser with ``--index``, ``--queries`` and ``--sets`` (default ``sets``)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--index", type=Path, required=True, help="ROOT holding ROOT/<set>/zhiku.db (a copy)")
    ap.add_argument("--queries", type=Path, required=True, help="ROOT holding the dev sets (ROOT/<set>)")
    ap.add_argument("--sets", default=sets)
    return ap


def main() -> None:
    ap = index_arguments("cmrc2018_dev,meddialog_im_dev,stard_dev,stard_longdoc")
    ap.add_argument("--max-queries", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3, help="timed passes over the queries (after one warm pass)")
    ap.add_argument("--stages", action="store_true")
    ap.add_argument("--in-place", action="store_true", help="also µs per hybrid query in each call, timed in place")
    ap.add_argument("--clause-weight", type=float, help="retrieval.clause_weight (default: the setting's; 0: off)")
    args = ap.parse_args()
    import zhiku

    for name in args.sets.split(","):
        queries = [q.text for q in load_dataset(args.queries / name, max_queries=args.max_queries).queries]
        with open_kb(args.index / name, queries, clause_weight=args.clause_weight) as kb:
            retrieve(kb, queries, "hybrid")  # warm
            row: dict[str, Any] = {"set": name, "zhiku": str(Path(zhiku.__file__).parents[2])}
            row["clause_weight"] = kb.settings.retrieval.clause_weight
            row["load_avg_1m"] = round(os.getloadavg()[0], 2)
            row["retrieve_hybrid"] = retrieve(kb, queries * args.rounds, "hybrid")
            row["retrieve_dense"] = retrieve(kb, queries * args.rounds, "dense")
            row["retrieve_bm25"] = retrieve(kb, queries * args.rounds, "bm25")
            if args.stages:
                row["stages"] = stages(kb, queries * args.rounds)
            if args.in_place:
                row["in_place_us"] = in_place(kb, queries * args.rounds)
            print(json.dumps(row, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    main()
