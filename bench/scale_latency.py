"""Query latency of the embedded store at 10k and 100k chunks, and tokenisation / write throughput.

    .venv/bin/python bench/scale_latency.py --corpus ../shared/corpus/laws --corpus ../shared/eval/cmrc2018_dev \
        --queries ../shared/eval/meddialog_im_dev/queries.jsonl --sizes 10000 100000

The synthetic chunks are real Chinese sentences (from the given Markdown folders and BEIR corpora) shuffled
into ~400-character chunks. Their vectors are RANDOM unit vectors (embedding 100k chunks with the bundled CPU
model would take ~4 hours): the numbers measure latency and throughput only, never retrieval quality. Query
vectors are real (the bundled embedder, one thread), so query latency includes query embedding.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import tempfile
import time
from pathlib import Path

import numpy as np

from zhiku.embedding import BundledE5Embedder
from zhiku.ingest.pipeline import doc_id_for
from zhiku.numeric import percentile
from zhiku.retrieval.search import Searcher
from zhiku.settings import RetrievalSettings
from zhiku.stores.sqlite import SQLiteStore
from zhiku.text import TextProcessor
from zhiku.types import Chunk, DocRecord

SENT = re.compile(r"[^。！？\n]+[。！？]?")


def sentences(paths: list[Path]) -> list[str]:
    out: list[str] = []
    for p in paths:
        files = sorted(p.glob("*.md")) + sorted(p.glob("corpus.jsonl"))
        for f in files:
            text = f.read_text(encoding="utf-8")
            if f.suffix == ".jsonl":
                text = "\n".join(json.loads(line)["text"] for line in text.splitlines() if line.strip())
            out += [s.strip() for s in SENT.findall(text) if len(s.strip()) >= 8]
    return out


def make_chunks(sents: list[str], n: int, rng: random.Random) -> list[str]:
    chunks = []
    for _ in range(n):
        parts, size = [], 0
        while size < 400:
            s = rng.choice(sents)
            parts.append(s)
            size += len(s)
        chunks.append("".join(parts))
    return chunks


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, action="append", required=True)
    ap.add_argument("--queries", type=Path, required=True)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10000, 100000])
    ap.add_argument("--n-queries", type=int, default=200)
    args = ap.parse_args()
    rng = random.Random(7)
    sents = sentences(args.corpus)
    queries = [
        json.loads(line)["text"] for line in args.queries.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    queries = rng.sample(queries, min(args.n_queries, len(queries)))
    tp = TextProcessor()
    emb = BundledE5Embedder(threads=1)
    emb.embed_query("预热")
    print(f"{len(sents)} source sentences, {len(queries)} queries")
    for size in args.sizes:
        texts = make_chunks(sents, size, rng)
        t = time.perf_counter()
        tokens = [tp.index_tokens(x) for x in texts]
        tok_s = time.perf_counter() - t
        vecs = np.random.default_rng(size).standard_normal((size, 384)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        with tempfile.TemporaryDirectory() as tmp:
            store = SQLiteStore(Path(tmp))
            t = time.perf_counter()
            per_doc = 100
            for d in range(0, size, per_doc):
                source = f"synthetic/{d // per_doc:05d}.md"
                doc_id = doc_id_for("bench", source)
                chunks = [
                    Chunk(
                        chunk_id=f"{doc_id}-{i}",
                        doc_id=doc_id,
                        collection="bench",
                        source=source,
                        doc_type="markdown",
                        section="",
                        page=None,
                        start=0,
                        end=len(texts[i]),
                        ordinal=i - d,
                        text=texts[i],
                    )
                    for i in range(d, min(d + per_doc, size))
                ]
                doc = DocRecord(
                    doc_id, "bench", source, source, "markdown", source, "0" * 64, 0, len(chunks), None, 0.0
                )
                store.write_document(doc, chunks, tokens[d : d + len(chunks)], vecs[d : d + len(chunks)])
            write_s = time.perf_counter() - t
            db_mb = (Path(tmp) / "zhiku.db").stat().st_size / 1e6
            searcher = Searcher(store, emb, tp, RetrievalSettings())
            searcher.search(queries[0], top_k=10)  # loads the vector matrix
            row = {
                "chunks": size,
                "tokenize_chunks_per_s": round(size / tok_s),
                "write_chunks_per_s": round(size / write_s),
                "db_mb": round(db_mb, 1),
            }
            for mode in ("bm25", "dense", "hybrid"):
                lat = []
                for q in queries:
                    t = time.perf_counter()
                    searcher.search(q, top_k=10, mode=mode)
                    lat.append((time.perf_counter() - t) * 1000)
                row[f"{mode}_p50_ms"] = round(percentile(lat, 50), 1)
                row[f"{mode}_p95_ms"] = round(percentile(lat, 95), 1)
            searcher.close()
            store.close()
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
