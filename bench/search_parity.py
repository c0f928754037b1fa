"""Nothing observable changes: the hits (chunks, scores, ranks), channel rankings and traces of every dev-set
question, dumped by one checkout and compared with another's.

    PYTHONPATH=<checkout A>/src .venv/bin/python bench/search_parity.py dump --index /tmp/q-idx-copy \
        --queries ../shared/eval --out /tmp/a.jsonl
    PYTHONPATH=<checkout B>/src .venv/bin/python bench/search_parity.py dump ... --out /tmp/b.jsonl
    .venv/bin/python bench/search_parity.py compare /tmp/a.jsonl /tmp/b.jsonl

Each question runs in hybrid, dense and BM25 mode, twice (a second pass finds what the first left in memory),
with tracing on (stage names, statuses, counts and data, not times) and random unit query vectors looked up by
text (bench/search_stages.py's). ``--untraced``: hybrid only, tracing and the clause channel off (the searches
bench/peers.py times). ``dump`` says on stderr how many searches the compiled search core served per set.
``compare`` wants equal ids, ranks and strings and floats within 1e-12 (``--tolerance``: e.g. 1e-6 across a change
of the dense kernel, whose cosines differ from numpy's einsum in the last bits).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from search_stages import open_kb  # noqa: E402
from zhiku.evaluation.datasets import load_dataset  # noqa: E402
from zhiku.observability.tracing import MemorySink, Tracer, ordered_stages  # noqa: E402

SETS = "cmrc2018_dev,meddialog_im_dev,stard_dev,stard_longdoc"


def dump(args: argparse.Namespace) -> None:
    if args.untraced:
        return dump_untraced(args)
    with open(args.out, "w", encoding="utf-8") as out:
        for name in args.sets.split(","):
            queries = [q.text for q in load_dataset(args.queries / name, max_queries=args.max_queries).queries]
            sink = MemorySink()
            with open_kb(args.index / name, queries, Tracer([sink])) as kb:
                for mode in ("hybrid", "dense", "bm25"):
                    for n in range(2):
                        for q in queries:
                            r = kb.retrieve(q, top_k=10, mode=mode)  # type: ignore[arg-type]
                            stages = [
                                (s.name, s.status, s.calls, s.counts, s.data) for s in ordered_stages(sink.traces[-1])
                            ]
                            row = [name, mode, n, q, _hits(r), sink.traces[-1].data, stages]
                            out.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
                _served(name, kb)


def dump_untraced(args: argparse.Namespace) -> None:
    """``--untraced``: hybrid only, tracing and the clause channel off, top 10 from 100 per channel (as
    bench/peers.py runs zhiku), twice; no trace columns."""
    with open(args.out, "w", encoding="utf-8") as out:
        for name in args.sets.split(","):
            queries = [q.text for q in load_dataset(args.queries / name, max_queries=args.max_queries).queries]
            with open_kb(args.index / name, queries, clause_weight=0) as kb:
                for n in range(2):
                    for q in queries:
                        r = kb.retrieve(q, top_k=10, mode="hybrid", per_source_k=100)
                        out.write(json.dumps([name, "hybrid", n, q, _hits(r), {}, []], ensure_ascii=False) + "\n")
                _served(name, kb)


def _served(name: str, kb: Any) -> None:
    """How many searches the compiled search core served (a checkout without it: none)."""
    core = getattr(kb.searcher, "core", None)
    print(json.dumps({"set": name, "core_served": getattr(core, "served", 0)}), file=sys.stderr)


def _hits(r: Any) -> list[Any]:
    hits = [[h.chunk.chunk_id, h.chunk.text, h.chunk.start, h.chunk.end, h.score, h.bm25_rank, h.bm25_score,
             h.dense_rank, h.dense_score, h.fused_rank] for h in r.hits]  # fmt: skip
    return [hits, [[x.chunk_id, x.score, x.rank] for x in r.bm25], [[x.chunk_id, x.score, x.rank] for x in r.dense]]


def same(a: Any, b: Any, tol: float = 1e-12) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= tol
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y, tol) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], tol) for k in a)
    return bool(a == b)


def compare(args: argparse.Namespace) -> None:
    a, b = (Path(p).read_text(encoding="utf-8").splitlines() for p in (args.a, args.b))
    tol = args.tolerance
    differ = [
        json.loads(x)[:4] for x, y in zip(a, b, strict=False) if x != y and not same(json.loads(x), json.loads(y), tol)
    ]
    print(json.dumps({"rows": [len(a), len(b)], "identical": sum(x == y for x, y in zip(a, b, strict=False)),
                      "differ": len(differ), "first": differ[:3]}, ensure_ascii=False))  # fmt: skip
    if differ or len(a) != len(b):
        raise SystemExit(1)


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump")
    d.add_argument("--index", type=Path, required=True, help="ROOT holding ROOT/<set>/zhiku.db (a copy)")
    d.add_argument("--queries", type=Path, required=True, help="ROOT holding the dev sets (ROOT/<set>)")
    d.add_argument("--sets", default=SETS)
    d.add_argument("--max-queries", type=int, default=300)
    d.add_argument("--out", type=Path, required=True)
    d.add_argument("--untraced", action="store_true", help="hybrid only, tracing and the clause channel off (as peers)")
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("--tolerance", type=float, default=1e-12, help="floats equal within this (1e-6: other last bits)")
    args = ap.parse_args()
    dump(args) if args.command == "dump" else compare(args)


if __name__ == "__main__":
    main()
