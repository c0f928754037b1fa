"""BM25 from the postings segments (schema 4) against the FTS5 ranking it replaced, on the dev-set indexes.

    nice -n 10 .venv/bin/python bench/bm25_parity.py --data ../shared/eval --index-root /work/cache/q-idx \
        --sets cmrc2018_dev meddialog_im_dev stard_dev stard_longdoc --workdir /tmp/zhiku-bm25-parity

Each ``--index-root/<set>/zhiku.db`` (an index written before schema 4, still holding its FTS5 table) is copied
into ``--workdir`` (the original is never opened). On the copy, every question's terms (zhiku's
``TextProcessor``) are searched the old way: the FTS5 ``OR`` query ranked by ``bm25()``, frequent terms pruned by
their FTS5 document frequency as before (``BM25_MAX_DF``, ``BM25_MIN_DF``), top 100 by score then chunk id.
Then the copy is opened by ``SQLiteStore`` (upgraded to schema 4, segments saved) and searched again. Reported:
queries whose top 10 / top 100 chunk ids differ, the largest score difference, nDCG@10 of both (BEIR sets:
relevance by source), and p50/p95 per query of both (one thread, warm). ``--out FILE`` saves the new rankings
(chunk ids and scores): ``bench/dense_parity.py --compare A.json B.json`` then compares two checkouts' rankings.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import time
from pathlib import Path

from zhiku.evaluation.datasets import load_dataset
from zhiku.evaluation.metrics import ndcg_at_k
from zhiku.numeric import percentile
from zhiku.stores._sqlite_search import BM25_MAX_DF, BM25_MIN_DF
from zhiku.stores.sqlite import SQLiteStore
from zhiku.text import TextProcessor

DEPTH = 100


def fts_query(terms: list[str]) -> str:
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def old_search(conn: sqlite3.Connection, df: dict[str, int], n: int, terms: list[str]) -> list[tuple[str, float]]:
    """The FTS5 search as zhiku ran it before schema 4 (pruning included)."""
    if len(terms) > 2:
        limit = max(BM25_MAX_DF * n, BM25_MIN_DF)
        rarest = set(sorted(terms, key=lambda t: (df.get(t, 0), t))[:2])
        terms = [t for t in terms if t in rarest or df.get(t, 0) <= limit]
    rows = conn.execute(
        "SELECT c.chunk_id, -bm25(fts) FROM fts JOIN chunks AS c ON c.rowid = fts.rowid WHERE fts MATCH ?",
        (fts_query(terms),),
    ).fetchall()
    return sorted(((cid, float(s)) for cid, s in rows), key=lambda h: (-h[1], h[0]))[:DEPTH]


def run(
    folder: Path, index_root: Path, workdir: Path, tp: TextProcessor
) -> tuple[dict[str, object], list[list[tuple[str, float]]]]:
    data = load_dataset(folder)
    index = workdir / folder.name
    shutil.rmtree(index, ignore_errors=True)
    index.mkdir(parents=True)
    shutil.copy(index_root / folder.name / "zhiku.db", index / "zhiku.db")
    queries = [(q, list(dict.fromkeys(t for t in tp.query_tokens(q.text) if t.strip()))) for q in data.queries]
    conn = sqlite3.connect(index / "zhiku.db")
    conn.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, fts, 'row')")
    df = dict(conn.execute("SELECT term, doc FROM temp.v").fetchall())
    n = conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
    source = dict(conn.execute("SELECT chunk_id, source FROM chunks").fetchall())
    old, old_ms = [], []
    for _, terms in queries:
        t = time.perf_counter()
        old.append(old_search(conn, df, n, terms))
        old_ms.append((time.perf_counter() - t) * 1000)
    conn.close()
    t = time.perf_counter()
    with SQLiteStore(index) as store:  # upgrades the copy to schema 4 and saves its segments
        upgrade_s = time.perf_counter() - t
        store.warm()
        new, new_ms = [], []
        for _, terms in queries:
            t = time.perf_counter()
            new.append([(h.chunk_id, h.score) for h in store.bm25_search(terms, DEPTH)])
            new_ms.append((time.perf_counter() - t) * 1000)
    row: dict[str, object] = {
        "set": folder.name,
        "queries": len(queries),
        "chunks": n,
        "upgrade_s": round(upgrade_s, 2),
    }
    row["changed_top10"] = sum([c for c, _ in a[:10]] != [c for c, _ in b[:10]] for a, b in zip(old, new, strict=True))
    row["changed_top100"] = sum([c for c, _ in a] != [c for c, _ in b] for a, b in zip(old, new, strict=True))
    row["max_score_diff"] = max(
        (abs(x[1] - y[1]) for a, b in zip(old, new, strict=True) for x, y in zip(a, b, strict=False)), default=0.0
    )
    if data.kind == "beir":
        for name, ranked in (("old", old), ("new", new)):
            total = sum(
                ndcg_at_k([source[c] for c, _ in hits], q.relevant, 10)
                for (q, _), hits in zip(queries, ranked, strict=True)
            )
            row[f"ndcg@10_{name}"] = round(total / len(queries), 4)
    for name, lat in (("old", old_ms), ("new", new_ms)):
        row[f"p50_ms_{name}"] = round(percentile(lat, 50), 2)
        row[f"p95_ms_{name}"] = round(percentile(lat, 95), 2)
    return row, new


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--index-root", type=Path, required=True)
    ap.add_argument("--sets", nargs="+", default=["cmrc2018_dev", "meddialog_im_dev", "stard_dev", "stard_longdoc"])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/zhiku-bm25-parity"))
    ap.add_argument(
        "--out", type=Path, help="save the new rankings: compare two checkouts' with dense_parity.py --compare"
    )
    args = ap.parse_args()
    tp = TextProcessor()
    rankings = {}
    for name in args.sets:
        row, rankings[name] = run(args.data / name, args.index_root, args.workdir, tp)
        print(json.dumps(row, ensure_ascii=False), flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps({"queries": sum(map(len, rankings.values())), "sets": rankings}))


if __name__ == "__main__":
    main()
