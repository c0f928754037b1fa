"""Compare fusion variants side by side on one BEIR set, from one retrieval pass per query.

    .venv/bin/python bench/fusion_sweep.py ../shared/eval/meddialog_im_dev [--index DIR]

Each query is searched once (BM25 top 100 and dense top 100); every variant then fuses those two
rankings offline, so the numbers differ only by the fusion rule.
"""

from __future__ import annotations

import argparse
import pickle
import tempfile
import time
from pathlib import Path

from zhiku.api import KnowledgeBase
from zhiku.evaluation.beir import load_beir
from zhiku.evaluation.metrics import mrr_at_k, ndcg_at_k, recall_at_k
from zhiku.evaluation.runner import index_dataset
from zhiku.retrieval.fusion import rrf, zscore_fusion
from zhiku.settings import load_settings


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--index", type=Path)
    ap.add_argument("--runs", type=Path, help="cache the per-query channel rankings here (pickle) and reuse them")
    args = ap.parse_args()
    data = load_beir(args.dataset)
    if args.runs and args.runs.exists():
        runs, source_of = pickle.loads(args.runs.read_bytes())
    else:
        runs, source_of = retrieve_all(args, data)
        if args.runs:
            args.runs.write_bytes(pickle.dumps((runs, source_of)))
    report(data, runs, source_of)


def retrieve_all(args: argparse.Namespace, data):  # noqa: ANN001, ANN201
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(index=args.index or Path(tmp))
        with KnowledgeBase(settings) as kb:
            index_dataset(kb, data, collection=data.name)
            runs = []
            t = time.perf_counter()
            for qid, text in data.queries.items():
                r = kb.retrieve(text, top_k=100, mode="hybrid", collection=data.name, per_source_k=100)
                runs.append((qid, list(r.bm25), list(r.dense)))
            print(f"{len(runs)} queries retrieved in {time.perf_counter() - t:.1f}s")
            source_of = {}
            ids = {c for _, b, d in runs for c in [x.chunk_id for x in b] + [x.chunk_id for x in d]}
            for c in kb.store.get_chunks(sorted(ids)):
                source_of[c.chunk_id] = c.source
    return runs, source_of


def report(data, runs, source_of) -> None:  # noqa: ANN001

    def score(fused_ids: list[list[str]]) -> tuple[float, float, float]:
        nd = mrr = rec = 0.0
        for (qid, _, _), chunk_ids in zip(runs, fused_ids, strict=False):
            ranked = list(dict.fromkeys(source_of[c] for c in chunk_ids))
            rel = data.qrels[qid]
            nd += ndcg_at_k(ranked, rel, 10)
            mrr += mrr_at_k(ranked, rel, 10)
            rec += recall_at_k(ranked, rel, 100)
        n = len(runs)
        return nd / n, mrr / n, rec / n

    variants: dict[str, list[list[str]]] = {
        "bm25": [[x.chunk_id for x in b] for _, b, _ in runs],
        "dense": [[x.chunk_id for x in d] for _, _, d in runs],
    }
    for depth in (30, 100):
        for k in (60,):
            for wb, wd in ((1, 1), (0.5, 1), (1, 0.5), (0.7, 1), (1, 0.7)):
                name = f"rrf k={k} depth={depth} w_bm25={wb} w_dense={wd}"
                variants[name] = [
                    [c for c, _ in rrf([b[:depth], d[:depth]], k=k, weights=[wb, wd])] for _, b, d in runs
                ]
    for depth in (30, 100):
        for wb, wd in ((1, 1), (0.7, 1), (1, 0.7)):
            variants[f"zscore depth={depth} w_bm25={wb} w_dense={wd}"] = [
                [c for c, _ in zscore_fusion([b[:depth], d[:depth]], weights=[wb, wd])] for _, b, d in runs
            ]
    for k in (10, 30, 100):
        variants[f"rrf k={k} depth=30 w=1/1"] = [[c for c, _ in rrf([b[:30], d[:30]], k=k)] for _, b, d in runs]
    print(f"| variant ({data.name}, {len(runs)} queries) | nDCG@10 | MRR@10 | Recall@100 |")
    print("| --- | --- | --- | --- |")
    for name, fused in variants.items():
        nd, mrr, rec = score(fused)
        print(f"| {name} | {nd:.4f} | {mrr:.4f} | {rec:.4f} |")


if __name__ == "__main__":
    main()
