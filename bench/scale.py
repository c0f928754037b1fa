"""Latency, memory and update time of the embedded store by index size: one JSON line per size.

    make bench-scale SIZES=10000,100000           # the corpus and questions come from EVAL_DATA and CORPUS
    python bench/scale.py --corpus DIR [--corpus DIR] --queries queries.jsonl --sizes 10000,100000
        [--compare OTHER_CHECKOUT/src] [--json]

Chunks are real Chinese sentences (from Markdown folders and BEIR corpora) recombined into ~400-character chunks,
100 per document; their vectors are random unit vectors (384-d), so the figures measure latency and size, never
quality. Query vectors are random too: query embedding is excluded. Each size is built into ``--workdir``
(``--reuse`` measures an existing build again); the measurements run in a child process pinned to one core:
open to the first hybrid answer, bm25/dense/hybrid p50/p95 through ``KnowledgeBase.retrieve`` (top 10, tracing
off), replacing one 100-chunk document (median of 5), and the child's peak RSS.
``--compare SRC`` builds and measures another checkout (its ``src`` folder) the same way in the same run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

SENT = re.compile(r"[^。！？\n]+[。！？]?")
DIM = 384
PER_DOC = 100
SRC = Path(__file__).resolve().parent.parent / "src"


class RandomQueryVectors:
    """An embedder whose query vectors are random unit vectors fixed by the text (no model, no embedding time)."""

    name, dim = "random-unit-384", DIM

    def embed_query(self, text: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
        return v / np.linalg.norm(v)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.embed_query(t) for t in texts]) if texts else np.zeros((0, DIM), np.float32)


def open_kb(index: Path, read_only: bool = False, embedder: RandomQueryVectors | None = None) -> Any:
    from zhiku.api import KnowledgeBase
    from zhiku.settings import load_settings

    settings = load_settings(None, index=index, tracing={"enabled": False})
    return KnowledgeBase(settings, read_only=read_only, embedder=embedder or RandomQueryVectors())  # type: ignore[arg-type]


def sentences(paths: list[Path]) -> list[str]:
    out: list[str] = []
    for p in paths:
        for f in sorted(p.glob("*.md")) + sorted(p.glob("corpus.jsonl")):
            text = f.read_text(encoding="utf-8")
            if f.suffix == ".jsonl":
                text = "\n".join(json.loads(line)["text"] for line in text.splitlines() if line.strip())
            out += [s.strip() for s in SENT.findall(text) if len(s.strip()) >= 8]
    return out


def questions(path: Path, n: int) -> list[str]:
    lines = [json.loads(x)["text"] for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    return random.Random(7).sample(lines, min(n, len(lines)))


def make_chunks(sents: list[str], n: int, rng: random.Random) -> list[list[int]]:
    """``n`` chunks of ~400 characters, each a list of sentence indexes."""
    chunks = []
    for _ in range(n):
        parts: list[int] = []
        while sum(len(sents[i]) for i in parts) < 400:
            parts.append(rng.randrange(len(sents)))
        chunks.append(parts)
    return chunks


def document(d: int, texts: list[str], version: int = 0) -> tuple[Any, list[Any]]:
    try:
        from zhiku.ingest.pipeline import doc_id_for
    except ImportError:  # a checkout measured with --compare from before the move
        from zhiku.ingest.prepare import doc_id_for  # type: ignore[no-redef]
    from zhiku.types import Chunk, DocRecord

    source = f"synthetic/{d:06d}.md"
    doc_id = doc_id_for("bench", source)
    chunks = [
        Chunk(
            chunk_id=f"{doc_id}-{version}-{i}",
            doc_id=doc_id,
            collection="bench",
            source=source,
            doc_type="markdown",
            section="",
            page=None,
            start=0,
            end=len(t),
            ordinal=i,
            text=t,
        )
        for i, t in enumerate(texts)
    ]
    doc = DocRecord(
        doc_id=doc_id,
        collection="bench",
        source=source,
        path=source,
        doc_type="markdown",
        title=source,
        sha256=f"{version:064d}",
        size=0,
        chunk_count=len(chunks),
        pages=None,
        ingested_at=0.0,
    )
    return doc, chunks


def unit_vectors(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def build(index: Path, sents: list[str], size: int) -> int:
    """Write ``size`` chunks into a fresh index; how many were written."""
    rng, vrng = random.Random(size), np.random.default_rng(size)
    shutil.rmtree(index, ignore_errors=True)
    with open_kb(index) as kb:
        sent_tokens = [kb.text.index_tokens(x) for x in sents]  # a chunk's tokens: its sentences' (segmented once)
        for d in range(size // PER_DOC):
            parts = make_chunks(sents, PER_DOC, rng)
            doc, chunks = document(d, ["".join(sents[i] for i in p) for p in parts])
            tokens = [[w for i in p for w in sent_tokens[i]] for p in parts]
            kb.store.write_document(doc, chunks, tokens, unit_vectors(vrng, len(chunks)))
    return size // PER_DOC * PER_DOC


def percentile(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 1)


def measure(index: Path, queries: list[str], n_docs: int) -> dict[str, Any]:
    """In this (child) process: open to first answer, latencies per mode, replacing a document, peak RSS."""
    from zhiku.text import TextProcessor

    TextProcessor().query_tokens("预热")  # the tokenizer's dictionary, loaded before the clock starts
    t = time.perf_counter()
    kb = open_kb(index)
    kb.retrieve(queries[0], top_k=10, mode="hybrid")
    row: dict[str, Any] = {"open_to_first_answer_s": round(time.perf_counter() - t, 3)}
    for mode in ("bm25", "dense", "hybrid"):
        lat = []
        for q in queries:
            t = time.perf_counter()
            kb.retrieve(q, top_k=10, mode=mode)
            lat.append((time.perf_counter() - t) * 1000)
        row[f"{mode}_p50_ms"], row[f"{mode}_p95_ms"] = percentile(lat, 50), percentile(lat, 95)
    rng, vrng = random.Random(1), np.random.default_rng(1)
    sents = [q for q in queries if len(q) > 4]
    updates = []
    for n in range(5):
        texts = ["".join(sents[i] for i in p) for p in make_chunks(sents, PER_DOC, rng)]
        doc, chunks = document(rng.randrange(n_docs), texts, n + 1)
        tokens = [kb.text.index_tokens(c.text) for c in chunks]
        vectors = unit_vectors(vrng, len(chunks))
        t = time.perf_counter()
        kb.store.write_document(doc, chunks, tokens, vectors)
        updates.append((time.perf_counter() - t) * 1000)
        kb.retrieve(queries[n], top_k=10, mode="dense")  # the next search sees the new version
    row["replace_doc_ms"] = percentile(updates, 50)
    kb.close()
    row["peak_rss_mb"] = round(peak_rss_mb())
    return row


def peak_rss_mb() -> float:
    """This process's own peak (VmHWM; ``ru_maxrss`` would carry the parent's peak across fork and exec)."""
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(src: Path, args: argparse.Namespace, *extra: str) -> dict[str, Any]:
    """Run this script on the checkout whose source folder is ``src``; the last JSON line it prints."""
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    cmd = [sys.executable, __file__, "--queries", str(args.queries), "--n-queries", str(args.n_queries)]
    cmd += [f"--corpus={c}" for c in args.corpus]
    out = subprocess.run([*cmd, *extra], env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, action="append", default=[])
    ap.add_argument("--queries", type=Path, required=True)
    ap.add_argument("--sizes", default="10000,100000", help="chunk counts, comma-separated")
    ap.add_argument("--n-queries", type=int, default=200)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/zhiku-scale"))
    ap.add_argument("--reuse", action="store_true", help="measure existing builds again")
    ap.add_argument("--compare", type=Path, help="another checkout's src folder, measured in the same run")
    ap.add_argument("--json", action="store_true", help="also save the rows for the results page")
    ap.add_argument("--build", type=Path, help=argparse.SUPPRESS)  # the child processes
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, default=PER_DOC, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build is not None:
        print(json.dumps({"built": build(args.build, sentences(args.corpus), args.size)}))
        return
    if args.measure is not None:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        print(json.dumps(measure(args.measure, questions(args.queries, args.n_queries), args.size // PER_DOC)))
        return
    checkouts = {"this": SRC, **({"compared": args.compare.resolve()} if args.compare else {})}
    rows = []
    for size in [int(x) for x in args.sizes.split(",")]:
        for label, src in checkouts.items():
            index = args.workdir / label / str(size)
            row: dict[str, Any] = {"checkout": label, "chunks": size}
            if not (args.reuse and index.is_dir()):
                t = time.perf_counter()
                child(src, args, "--build", str(index), "--size", str(size))
                row["build_s"] = round(time.perf_counter() - t, 1)
            row.update(child(src, args, "--measure", str(index), "--size", str(size)))
            row["index_mb"] = round(sum(p.stat().st_size for p in index.rglob("*") if p.is_file()) / 1e6, 1)
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.json:
        from report import compare_arg, save

        save("scale", rows, f"make bench-scale SIZES={args.sizes}{compare_arg(args.compare)}")


if __name__ == "__main__":
    main()
