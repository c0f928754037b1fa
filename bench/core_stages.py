"""Where a hybrid ``KnowledgeBase.retrieve`` served by the compiled search core spends its time (µs per query).

    /work/main/.venv/bin/python setup.py build_ext --inplace      # (or pip install -e .)
    PYTHONPATH=src nice -n 5 .venv/bin/python bench/core_stages.py --index /tmp/cs/idx \
        --queries ../shared/eval --sets stard_dev,cmrc2018_dev,meddialog_im_dev,stard_longdoc

``--index ROOT``: copies of the dev-set indexes (``ROOT/<set>/zhiku.db``). Random unit query vectors looked up by
text (bench/search_stages.py's ``open_kb``), tracing and the clause channel off, top 10 from 100 per channel (as
bench/peers.py). One warm pass, then ``--passes`` timed passes; each step timed where the search calls it (mean µs
per query: preemption on a loaded machine inflates means, the retrieve p50 less). The store's core call is split
into its phases as it reports them to the trace: BM25 (the terms' scored postings, then the sums and the top in C),
dense (numpy's product, then the top in C) and fusion (the fill, z-scores and the top in C); the C call's own
clock gives the parts inside it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import zhiku.retrieval.core_path as core_path  # noqa: E402
import zhiku.retrieval.search as search  # noqa: E402
from search_stages import index_arguments, open_kb, timed_call  # noqa: E402
from zhiku.evaluation.datasets import load_dataset  # noqa: E402
from zhiku.stores import _core  # noqa: E402


def timed(acc: dict[str, float], owner: Any, attr: str, label: str) -> None:
    """``owner.attr`` replaced by a wrapper adding its time to ``acc[label]`` (~0.3 µs a call)."""
    setattr(owner, attr, timed_call(getattr(owner, attr), label, acc))


def phased(inner: Any, into: list[float]) -> Any:
    """``inner`` (returning a ``CoreResult`` or None) with its reported phase times added to ``into``."""

    def call(*args: Any) -> Any:
        got = inner(*args)
        if got is not None:
            into[:] = [a + b for a, b in zip(into, got.seconds, strict=True)]
        return got

    return call


def one_set(index: Path, queries_root: Path, name: str, passes: int) -> None:
    """One set's table (the module functions it times are put back afterwards)."""
    saved = [(m, a, getattr(m, a)) for m, a in PATCHED]
    try:
        timed_set(index, queries_root, name, passes)
    finally:
        for m, a, f in saved:
            setattr(m, a, f)


PATCHED = [(search, "parse_query"), (search, "named_articles_first"), (core_path, "whole_articles"), (_core, "hybrid")]
PATCHED += [(_core._zcore, "hybrid")] if _core._zcore is not None else []


def timed_set(index: Path, queries_root: Path, name: str, passes: int) -> None:
    qs = [q.text for q in load_dataset(queries_root / name, max_queries=300).queries]
    kb = open_kb(index / name, qs, clause_weight=0)
    acc: dict[str, float] = {}
    phases = {"store": [0.0, 0.0, 0.0], "C": [0.0, 0.0, 0.0]}  # (BM25, dense, fusion): the store's, inside C
    kb.store.hybrid_core = phased(kb.store.hybrid_core, phases["store"])  # type: ignore[attr-defined]
    raw = _core._zcore.hybrid  # type: ignore[union-attr]

    def c_call(*args: Any) -> Any:  # the extension's own clock per phase (the last three of what it returns)
        got = raw(*args)
        phases["C"][:] = [a + b for a, b in zip(phases["C"], got[-3:], strict=True)]
        return got

    _core._zcore.hybrid = c_call  # type: ignore[union-attr]
    timed(acc, search, "parse_query", "parse (segmentation included)")
    timed(acc, kb.store, "hybrid_core", "store.hybrid_core")
    timed(acc, _core, "hybrid", "  of which the C call")
    timed(acc, kb.store, "get_chunks", "get_chunks")
    timed(acc, core_path, "whole_articles", "small-to-big + Hit objects")
    timed(acc, search, "named_articles_first", "named articles")
    searcher = kb.searcher  # its core path, over the wrapped store method
    searcher.core = core_path.CorePath(
        kb.store,
        searcher.settings,
        searcher._embed,
        searcher._bm25,
        searcher._hits,
        searcher._catalogue,
        searcher._runs,
    )
    for q in qs:
        kb.retrieve(q, top_k=10, mode="hybrid", per_source_k=100)
    acc.clear()
    for p in phases.values():
        p[:] = [0.0, 0.0, 0.0]
    served = kb.searcher.core.served
    lat: list[float] = []
    for _ in range(passes):
        for q in qs:
            t = time.perf_counter()
            kb.retrieve(q, top_k=10, mode="hybrid", per_source_k=100)
            lat.append(time.perf_counter() - t)
    n, total = len(lat), sum(lat)
    lat.sort()
    print(
        f"{name}: {kb.searcher.core.served - served} of {n} served by the core; retrieve mean "
        f"{total / n * 1e6:.0f} µs, p50 {lat[n // 2] * 1e6:.0f}, p95 {lat[int(n * 0.95)] * 1e6:.0f}"
    )
    outer = 0.0
    for label, seconds in acc.items():
        print(f"  {label:38s} {seconds / n * 1e6:6.1f}")
        outer += 0.0 if label.startswith("  ") else seconds
    print(f"  {'the rest (api, Searcher, gate, pages)':38s} {(total - outer) / n * 1e6:6.1f}")
    for where, (bm25, dense, fusion) in phases.items():
        print(
            f"  phases ({where}): BM25 {bm25 / n * 1e6:.1f}, dense {dense / n * 1e6:.1f}, fusion {fusion / n * 1e6:.1f}"
        )
    kb.close()


def main() -> None:
    ap = index_arguments("stard_dev,cmrc2018_dev,meddialog_im_dev,stard_longdoc")
    ap.add_argument("--passes", type=int, default=3)
    args = ap.parse_args()
    if not _core.available():
        raise SystemExit("the compiled search core is not built: python setup.py build_ext --inplace")
    for name in args.sets.split(","):
        one_set(args.index, args.queries, name, args.passes)


if __name__ == "__main__":
    main()
