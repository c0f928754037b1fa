"""BM25 tokenisation variants side by side (SQLite FTS5, OR query over distinct terms, top 100).

    .venv/bin/python bench/bm25_tokenization.py ../shared/eval/meddialog_im_dev

No embeddings involved: this isolates how documents and queries are cut into terms.
"""

from __future__ import annotations

import argparse
import sqlite3
from collections.abc import Callable
from pathlib import Path

import rjieba

from zhiku.evaluation.beir import load_beir
from zhiku.evaluation.metrics import ndcg_at_k, recall_at_k
from zhiku.text import TextProcessor

Cut = Callable[[str], list[str]]


def fts_query(terms: list[str]) -> str:
    """An FTS5 query matching any of the distinct ``terms`` (as zhiku's BM25 queried FTS5 up to schema 3)."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in dict.fromkeys(t for t in terms if t.strip()))


def evaluate(data, index_fn: Cut, query_fn: Cut) -> tuple[float, float]:
    db = sqlite3.connect(":memory:")
    db.execute("create virtual table f using fts5(t, tokenize='unicode61 remove_diacritics 0')")
    ids = []
    for i, d in enumerate(data.corpus):
        db.execute(
            "insert into f(rowid, t) values (?, ?)",
            (i, " ".join(index_fn(f"{d.title}\n{d.text}" if d.title else d.text))),
        )
        ids.append(d.doc_id)
    nd = rc = 0.0
    for qid, q in data.queries.items():
        terms = query_fn(q)
        rows = (
            db.execute("select rowid from f where f match ? order by bm25(f) limit 100", (fts_query(terms),)).fetchall()
            if terms
            else []
        )
        ranked = [ids[r[0]] for r in rows]
        nd += ndcg_at_k(ranked, data.qrels[qid], 10)
        rc += recall_at_k(ranked, data.qrels[qid], 100)
    return nd / len(data.queries), rc / len(data.queries)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset", type=Path)
    data = load_beir(ap.parse_args().dataset)
    tp = TextProcessor()
    norm = tp.normalize

    def words(tokens: list[str]) -> list[str]:
        return [t for t in tokens if any(c.isalnum() for c in t)]

    variants: dict[str, tuple[Cut, Cut]] = {
        "docs search-mode, query search-mode − stopwords (zhiku)": (tp.index_tokens, tp.query_tokens),
        "docs search-mode, query precise − stopwords": (
            tp.index_tokens,
            lambda q: [t for t in words(rjieba.cut(norm(q))) if t not in tp.stopwords],
        ),
        "docs search-mode, query precise, no stopword removal": (tp.index_tokens, lambda q: words(rjieba.cut(norm(q)))),
        "docs precise, query precise − stopwords": (
            lambda s: words(rjieba.cut(norm(s))),
            lambda q: [t for t in words(rjieba.cut(norm(q))) if t not in tp.stopwords],
        ),
    }
    print(f"| variant ({data.name}, {len(data.queries)} queries) | nDCG@10 | Recall@100 |")
    print("| --- | --- | --- |")
    for name, (index_fn, query_fn) in variants.items():
        nd, rc = evaluate(data, index_fn, query_fn)
        print(f"| {name} | {nd:.4f} | {rc:.4f} |", flush=True)


if __name__ == "__main__":
    main()
