"""Issue 11 (retrieval): query-side variants over saved channel rankings (no embedding).

Reads the pickles that ``bench/retrieval_units.py --save`` writes (per question: BM25 and dense rankings over
the variant's index, the gold labels, chunk texts) and re-ranks offline:

- ``zscore`` / ``rrf``: today's fusions (sanity: zscore reproduces the hybrid row);
- ``weights B:D``: z-score fusion with other channel weights;
- ``rm3``: RM3-style pseudo-relevance feedback on BM25 (Lavrenko & Croft 2001; Abdul-Jaleel et al. 2004): the
  top ``fb_docs`` first-pass hybrid chunks give a term distribution (term frequency / length, weighted by the
  chunk's softmax-normalised fused score); the ``fb_terms`` best new terms form a second BM25 query over the same
  index (``SQLiteStore.bm25_search``), interpolated with the original BM25 scores (z-score, weight ``beta``)
  before the usual fusion with dense;
- ``learned``: logistic regression over per-candidate features (both channels' z-scores, reciprocal ranks, and
  whether each channel found it), trained on ONE set's questions and applied to the others.

    PYTHONPATH=src python bench/retrieval_fusion.py --runs /tmp/zr/stard_dev.pkl=stard_dev ... [--rm3]
"""

from __future__ import annotations

import argparse
import math
import pickle
import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from zhiku.retrieval.fusion import rrf, zscore_fusion
from zhiku.stores.sqlite import SQLiteStore
from zhiku.text import TextProcessor
from zhiku.types import ScoredId

WS = re.compile(r"\s+")


def scored(pairs: Sequence[tuple[str, float]]) -> list[ScoredId]:
    return [ScoredId(c, s, n) for n, (c, s) in enumerate(pairs, 1)]


def metrics(
    order: Sequence[str], q: dict[str, Any], chunks: dict[str, tuple[str, str]], longdoc: bool
) -> dict[str, float]:
    if longdoc:
        expected = [(e["source"], WS.sub("", e["contains"])) for e in q["gold"]["expected"]]
        hits = []
        for cid in order[:100]:
            src, text = chunks[cid]
            flat = WS.sub("", text)
            hits.append({i for i, (s, needle) in enumerate(expected) if s == src and needle in flat})
        first = next((n for n, h in enumerate(hits, 1) if h), None)
        seen: set[int] = set()
        dcg = 0.0
        for n, h in enumerate(hits[:10], 1):
            if h - seen:
                dcg += 1 / math.log2(n + 1)
            seen |= h
        ideal = sum(1 / math.log2(r + 1) for r in range(1, min(len(expected), 10) + 1))
        used, b2000 = 0, 0.0
        for cid, h in zip(order, hits, strict=False):
            text = chunks[cid][1]
            if h and used + len(text) <= 2000:  # the whole chunk within budget (a slight underestimate)
                b2000 = 1.0
            used += len(text)
        return {
            "ndcg@10": dcg / ideal,
            "hit@1": float(first == 1),
            "hit@5": float(bool(first and first <= 5)),
            "hit@2000ch~": b2000,
        }
    rel = q["gold"]
    ranked = list(dict.fromkeys(chunks[c][0] for c in order))
    dcg = sum(1 / math.log2(i + 1) for i, d in enumerate(ranked[:10], 1) if d in rel)
    ideal = sum(1 / math.log2(i + 1) for i in range(1, min(len(rel), 10) + 1))
    first = next((i for i, d in enumerate(ranked, 1) if d in rel), None)
    return {"ndcg@10": dcg / ideal, "hit@1": float(first == 1), "hit@5": float(bool(first and first <= 5))}


def average(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(sum(r[k] for r in rows) / len(rows), 4) for k in rows[0]}


# -------------------------------------------------------------------------------------------- RM3


def rm3_terms(
    q: dict[str, Any],
    first: Sequence[tuple[str, float]],
    chunks: dict[str, tuple[str, str]],
    tp: TextProcessor,
    fb_docs: int,
    fb_terms: int,
) -> list[str]:
    top = list(first[:fb_docs])
    if not top:
        return []
    scores = np.array([s for _, s in top])
    w = np.exp(scores - scores.max())
    w /= w.sum()
    weights: Counter[str] = Counter()
    for (cid, _), wd in zip(top, w, strict=False):
        toks = [t for t in tp.index_tokens(chunks[cid][1]) if t not in tp.stopwords and len(t) > 1]
        if not toks:
            continue
        for t, n in Counter(toks).items():
            weights[t] += wd * n / len(toks)
    original = set(q["terms"])
    return [t for t, _ in weights.most_common() if t not in original][:fb_terms]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", nargs="+", required=True, help="PKL=NAME[=INDEXDIR]")
    ap.add_argument("--rm3", action="store_true")
    ap.add_argument("--learned", action="store_true")
    args = ap.parse_args()
    runs = []
    for spec in args.runs:
        parts = spec.split("=")
        runs.append((parts[1], pickle.loads(Path(parts[0]).read_bytes()), Path(parts[2]) if len(parts) > 2 else None))
    tp = TextProcessor()
    for name, run, index in runs:
        baselines(name, run["questions"], run["chunks"])
        if args.rm3 and index is not None:
            run_rm3(name, run["questions"], run["chunks"], index, tp, name.startswith("stard_longdoc"))
    if args.learned:
        learned(runs)


def baselines(name: str, qs: dict[str, Any], chunks: dict[str, tuple[str, str]]) -> None:
    longdoc = name.startswith("stard_longdoc")
    variants: list[tuple[str, Callable[[dict[str, Any]], list[str]]]] = [
        ("bm25", lambda q: [c for c, _ in q["bm25"]]),
        ("dense", lambda q: [c for c, _ in q["dense"]]),
        ("zscore 1:1", lambda q: [c for c, _ in zscore_fusion([scored(q["bm25"]), scored(q["dense"])])]),
        ("rrf k60", lambda q: [c for c, _ in rrf([scored(q["bm25"]), scored(q["dense"])])]),
    ]
    for wb in (0.5, 0.75, 1.5):
        variants.append(
            (
                f"zscore {wb}:1",
                lambda q, wb=wb: [
                    c for c, _ in zscore_fusion([scored(q["bm25"]), scored(q["dense"])], weights=[wb, 1])
                ],
            )
        )
    for label, fn in variants:
        rows = [metrics(fn(q), q, chunks, longdoc) for q in qs.values()]
        print(f"{name}\t{label}\t{average(rows)}", flush=True)


def run_rm3(
    name: str,
    qs: dict[str, Any],
    chunks: dict[str, tuple[str, str]],
    index: Path,
    tp: TextProcessor,
    longdoc: bool,
) -> None:
    store = SQLiteStore(index, read_only=True)

    def order(q: dict[str, Any], fb_docs: int, fb_terms: int, beta: float) -> list[str]:
        first = zscore_fusion([scored(q["bm25"]), scored(q["dense"])])
        terms = rm3_terms(q, first, chunks, tp, fb_docs, fb_terms)
        extra = store.bm25_search(terms, 100) if terms else []
        missing = [x.chunk_id for x in extra if x.chunk_id not in chunks]
        chunks.update({c.chunk_id: (c.source, c.text) for c in store.get_chunks(missing)})
        bm = zscore_fusion([scored(q["bm25"]), extra], weights=[1.0, beta])
        return [c for c, _ in zscore_fusion([scored(bm[:100]), scored(q["dense"])])]

    for fb_docs, fb_terms, beta in ((5, 10, 0.5), (10, 10, 0.5), (5, 20, 0.3), (3, 10, 1.0)):
        rows = [metrics(order(q, fb_docs, fb_terms, beta), q, chunks, longdoc) for q in qs.values()]
        print(f"{name}\trm3 docs={fb_docs} terms={fb_terms} beta={beta}\t{average(rows)}", flush=True)


# ---------------------------------------------------------------------------------------- learned


def features(q: dict[str, Any]) -> tuple[list[str], np.ndarray]:
    chans = [q["bm25"], q["dense"]]
    ids = list(dict.fromkeys(c for ch in chans for c, _ in ch))
    cols = []
    for ch in chans:
        if ch:
            s = np.array([x for _, x in ch])
            mean, std = s.mean(), s.std() or 1.0
            z = {c: (x - mean) / std for c, x in ch}
            rank = {c: n for n, (c, _) in enumerate(ch, 1)}
            lo = min(z.values())
        else:
            z, rank, lo = {}, {}, 0.0
        cols.append([z.get(c, lo) for c in ids])
        cols.append([1 / (60 + rank[c]) * 60 if c in rank else 0.0 for c in ids])
        cols.append([1.0 if c in rank else 0.0 for c in ids])
    return ids, np.array(cols, dtype=np.float64).T


def learned(runs: list[tuple[str, dict[str, Any], Path | None]]) -> None:
    from sklearn.linear_model import LogisticRegression  # bench only

    def xy(name: str, run: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        xs, ys = [], []
        for q in run["questions"].values():
            ids, x = features(q)
            y = [_relevant(name, q, run["chunks"], c) for c in ids]
            xs.append(x)
            ys.append(y)
        return np.vstack(xs), np.concatenate(ys)

    for train_name, train, _ in runs:
        x, y = xy(train_name, train)
        model = LogisticRegression(max_iter=1000, class_weight="balanced").fit(x, y)
        print(f"learned on {train_name}: coef {np.round(model.coef_[0], 3).tolist()}")
        for name, run, _ in runs:
            rows = []
            for q in run["questions"].values():
                ids, f = features(q)
                p = model.decision_function(f)
                order = [ids[i] for i in np.argsort(-p, kind="stable")]
                rows.append(metrics(order, q, run["chunks"], name.startswith("stard_longdoc")))
            print(f"{name}\tlearned<{train_name}>\t{average(rows)}", flush=True)


def _relevant(name: str, q: dict[str, Any], chunks: dict[str, tuple[str, str]], cid: str) -> int:
    src, text = chunks[cid]
    if name.startswith("stard_longdoc"):
        flat = WS.sub("", text)
        return int(any(e["source"] == src and WS.sub("", e["contains"]) in flat for e in q["gold"]["expected"]))
    return int(src in q["gold"])


if __name__ == "__main__":
    main()
