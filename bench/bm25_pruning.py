"""BM25 query-term pruning (``store.bm25_max_df``): quality on every dev set, and speed, against no pruning.

    nice -n 10 .venv/bin/python bench/bm25_pruning.py --sets ../shared/eval/cmrc2018_dev \
        ../shared/eval/meddialog_im_dev ../shared/eval/stard_dev --max-df 1 0.2 0.1 0.05 0.02

Each BEIR passage is one chunk (title + text), indexed with zhiku's tokenizer into a SQLite index under
``--workdir`` (no vectors are needed: BM25 only). Every query runs through ``SQLiteStore.bm25_search`` with
the query terms zhiku's ``TextProcessor`` gives; nDCG@10, Recall@100 and MRR@10 come from
``zhiku.evaluation.metrics``. ``changed`` counts queries whose top 10 differ from the first ``--max-df`` run.
``--min-df 0`` prunes by the fraction alone (the store keeps terms found in fewer than ``BM25_MIN_DF`` chunks).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from zhiku.evaluation.beir import load_beir
from zhiku.evaluation.metrics import mrr_at_k, ndcg_at_k, recall_at_k
from zhiku.numeric import percentile
from zhiku.stores import _sqlite_search
from zhiku.stores.sqlite import SQLiteStore
from zhiku.text import TextProcessor
from zhiku.types import Chunk, DocRecord


def build(index: Path, folder: Path, tp: TextProcessor) -> None:
    if (index / "zhiku.db").is_file():
        return
    data = load_beir(folder)
    with SQLiteStore(index) as store:
        for n, d in enumerate(data.corpus):
            text = f"{d.title}\n{d.text}" if d.title else d.text
            chunk = Chunk(f"c{n}", d.doc_id, "eval", d.doc_id, "text", "", None, 0, len(text), 0, text)
            doc = DocRecord(d.doc_id, "eval", d.doc_id, d.doc_id, "text", d.title, "0" * 64, len(text), 1, None, 0.0)
            store.write_document(doc, [chunk], [tp.index_tokens(text)], np.ones((1, 1), np.float32))


def run(index: Path, folder: Path, tp: TextProcessor, max_df: float) -> tuple[dict[str, float], dict[str, list[str]]]:
    data = load_beir(folder)
    ranked: dict[str, list[str]] = {}
    lat = []
    with SQLiteStore(index, read_only=True, bm25_max_df=max_df) as store:
        doc_of = {c.chunk_id: c.doc_id for c in store.get_chunks([f"c{n}" for n in range(len(data.corpus))])}
        for qid, text in data.queries.items():
            terms = tp.query_tokens(text)
            t = time.perf_counter()
            hits = store.bm25_search(terms, 100)
            lat.append((time.perf_counter() - t) * 1000)
            ranked[qid] = [doc_of[h.chunk_id] for h in hits]
    n = len(data.queries)
    row = {
        "ndcg@10": sum(ndcg_at_k(ranked[q], data.qrels[q], 10) for q in data.queries) / n,
        "recall@100": sum(recall_at_k(ranked[q], data.qrels[q], 100) for q in data.queries) / n,
        "mrr@10": sum(mrr_at_k(ranked[q], data.qrels[q], 10) for q in data.queries) / n,
        "p50_ms": percentile(lat, 50),
        "p95_ms": percentile(lat, 95),
    }
    return row, ranked


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sets", type=Path, nargs="+", required=True)
    ap.add_argument("--max-df", type=float, nargs="+", default=[1.0, 0.2, 0.1, 0.05])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/zhiku-bm25-pruning"))
    ap.add_argument("--min-df", type=int, default=None, help="override BM25_MIN_DF (0: prune by fraction alone)")
    args = ap.parse_args()
    if args.min_df is not None:
        _sqlite_search.BM25_MIN_DF = args.min_df
    tp = TextProcessor()
    for folder in args.sets:
        index = args.workdir / folder.name
        build(index, folder, tp)
        base: dict[str, list[str]] = {}
        for max_df in args.max_df:
            row, ranked = run(index, folder, tp, max_df)
            base = base or ranked
            changed = sum(ranked[q][:10] != base[q][:10] for q in ranked)
            min_df = _sqlite_search.BM25_MIN_DF
            out = {"set": folder.name, "max_df": max_df, "min_df": min_df, **{k: round(v, 4) for k, v in row.items()}}
            print(json.dumps({**out, "changed_top10": changed, "queries": len(ranked)}), flush=True)


if __name__ == "__main__":
    main()
