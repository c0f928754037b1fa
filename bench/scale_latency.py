"""The embedded store at 10k / 100k / 1M chunks: build time, size, RSS, open-to-first-answer, query latency, update.

    nice -n 10 .venv/bin/python bench/scale_latency.py --corpus ../shared/corpus/laws \
        --corpus ../shared/eval/cmrc2018_dev --queries ../shared/eval/cmrc2018_dev/queries.jsonl \
        --sizes 10000 100000 --workdir /tmp/zhiku-scale

Chunks are real Chinese sentences (from the given Markdown folders and BEIR corpora) recombined into ~400-character
chunks, 100 chunks per document. Their vectors are RANDOM unit vectors (384-d): the numbers measure latency and
size only, never retrieval quality. Query vectors are random too, so query embedding is excluded by design.

``--dense-only`` builds one-sentence chunks without BM25 tokens (far faster to write): it measures the vector side
(open, dense, RSS, replace) at sizes whose full build does not fit the time here; its BM25 figures mean nothing.

``--dense-search exact int8`` measures each ``store.dense_search`` mode in its own child (same build);
``--compaction`` then deletes every fourth document and times ``compact()``.

Each size is built once into ``--workdir/<size>`` (kept: ``--reuse`` measures an existing build again). The
measurements run in a fresh child process pinned to one core (``sched_setaffinity``, BLAS threads 1): cold open
(page cache as the build left it) to the first hybrid answer, BM25/dense/hybrid p50/p95 through ``Searcher``
(tracing off; wall time, and CPU time, which a loaded machine inflates far less), replacing one 100-chunk
document, and the child's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SENT = re.compile(r"[^。！？\n]+[。！？]?")
DIM = 384
PER_DOC = 100


def searching(searcher: Any) -> Callable[..., Any]:
    """``search(q, top_k=…, mode=…)`` over ``searcher``: one that reads the question into a plan first, or a checkout's
    from before plans (side-by-side runs of two checkouts use this script)."""
    if hasattr(searcher, "read"):
        return lambda q, *, top_k, mode: searcher.search(searcher.read(q, mode), top_k=top_k)
    return searcher.search


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


def make_chunks(sents: list[str], n: int, rng: random.Random) -> list[list[int]]:
    """``n`` chunks of ~400 characters, each a list of sentence indexes."""
    chunks = []
    for _ in range(n):
        parts: list[int] = []
        size = 0
        while size < 400:
            i = rng.randrange(len(sents))
            parts.append(i)
            size += len(sents[i])
        chunks.append(parts)
    return chunks


def document(d: int, texts: list[str], version: int = 0):  # type: ignore[no-untyped-def]
    from zhiku.ingest.pipeline import doc_id_for
    from zhiku.types import Chunk, DocRecord

    source = f"synthetic/{d:06d}.md"
    doc_id = doc_id_for("bench", source)
    chunks = [
        Chunk(f"{doc_id}-{version}-{i}", doc_id, "bench", source, "markdown", "", None, 0, len(t), i, t)
        for i, t in enumerate(texts)
    ]
    return DocRecord(doc_id, "bench", source, source, "markdown", source, "0" * 64, 0, len(chunks), None, 0.0), chunks


def unit_vectors(rng, n: int):  # type: ignore[no-untyped-def]
    import numpy as np

    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def build(
    index: Path, sents: list[str], size: int, budget_s: float = float("inf"), *, dense_only: bool = False
) -> dict[str, float]:
    """Write ``size`` chunks (stopping early, between documents, once ``budget_s`` seconds have passed).

    ``dense_only``: each chunk is one sentence with no BM25 tokens (a fast build for the vector side at 1M;
    BM25 latency on such an index means nothing)."""
    import numpy as np

    from zhiku.stores.sqlite import SQLiteStore
    from zhiku.text import TextProcessor

    rng, vrng = random.Random(size), np.random.default_rng(size)
    tp = TextProcessor()
    t = time.perf_counter()
    sent_tokens = [tp.index_tokens(x) for x in sents]  # a chunk's tokens: its sentences' (segmented once)
    tok_s = time.perf_counter() - t
    write_s = 0.0
    written = 0
    with SQLiteStore(index) as store:
        for d in range(size // PER_DOC):
            if write_s > budget_s:
                break
            parts = (
                [[rng.randrange(len(sents))] for _ in range(PER_DOC)]
                if dense_only
                else make_chunks(sents, PER_DOC, rng)
            )
            texts = ["".join(sents[i] for i in p) for p in parts]
            tokens = [[] if dense_only else [w for i in p for w in sent_tokens[i]] for p in parts]
            doc, chunks = document(d, texts)
            t = time.perf_counter()
            store.write_document(doc, chunks, tokens, unit_vectors(vrng, len(chunks)))
            write_s += time.perf_counter() - t
            written += len(chunks)
    return {
        "built_chunks": written,
        "tokenize_sentences_s": round(tok_s, 1),
        "write_chunks_per_s": round(written / write_s),
    }


def measure(index: Path, queries: list[str], n_docs: int, dense_search: str = "auto") -> dict[str, float]:
    """In a child process on one core: open-to-first-answer, latencies, one update, peak RSS."""
    import numpy as np

    from zhiku.numeric import percentile
    from zhiku.retrieval.search import Searcher
    from zhiku.settings import RetrievalSettings
    from zhiku.stores.sqlite import SQLiteStore
    from zhiku.text import TextProcessor

    class RandomQueryVectors:  # query embedding excluded: a fixed random unit vector per query text
        dim, name = DIM, "random"

        def embed_query(self, text: str) -> np.ndarray:
            v = np.random.default_rng(abs(hash(text)) % 2**32).standard_normal(DIM).astype(np.float32)
            return v / np.linalg.norm(v)

    tp = TextProcessor()
    tp.query_tokens("预热")  # the tokenizer's dictionary, loaded before the clock starts
    t = time.perf_counter()
    store = SQLiteStore(index, dense_search=dense_search)
    searcher = Searcher(store, RandomQueryVectors(), tp, RetrievalSettings())  # type: ignore[arg-type]
    ask = searching(searcher)
    ask(queries[0], top_k=10, mode="hybrid")
    row: dict[str, float] = {"open_to_first_answer_s": round(time.perf_counter() - t, 3)}
    if dense_search == "hnsw":  # wait for the background build: the latencies below are the HNSW index's
        row["hnsw_build_s"] = wait_for_hnsw(store)
    for mode in ("bm25", "dense", "hybrid"):
        lat, cpu = [], []
        for q in queries:
            t, c = time.perf_counter(), time.process_time()
            ask(q, top_k=10, mode=mode)
            lat.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() - c) * 1000)  # CPU time: what the query costs, whatever the load
        row[f"{mode}_p50_ms"] = round(percentile(lat, 50), 1)
        row[f"{mode}_p95_ms"] = round(percentile(lat, 95), 1)
        row[f"{mode}_cpu_p50_ms"] = round(percentile(cpu, 50), 1)
        row[f"{mode}_cpu_p95_ms"] = round(percentile(cpu, 95), 1)
    rng, vrng = random.Random(1), np.random.default_rng(1)
    sents = [q for q in queries if len(q) > 4] * 20
    updates, update_cpu = [], []
    for n in range(5):
        d = rng.randrange(n_docs)
        texts = ["".join(sents[i] for i in p) for p in make_chunks(sents, PER_DOC, rng)]
        doc, chunks = document(d, texts, version=n + 1)
        tokens = [tp.index_tokens(c.text) for c in chunks]
        vectors = unit_vectors(vrng, len(chunks))
        t, c = time.perf_counter(), time.process_time()
        store.write_document(doc, chunks, tokens, vectors)
        updates.append((time.perf_counter() - t) * 1000)
        update_cpu.append((time.process_time() - c) * 1000)
        ask(queries[n], top_k=10, mode="dense")  # the snapshot moves forward with the write
    row["replace_100_chunk_doc_ms_median"] = round(float(np.median(updates)), 1)
    row["replace_cpu_ms_median"] = round(float(np.median(update_cpu)), 1)
    searcher.close()
    store.close()
    row["peak_rss_mb"] = round(peak_rss_mb())
    return row


def peak_rss_mb() -> float:
    """This process's own peak RSS (VmHWM): ``ru_maxrss`` keeps the parent's peak across fork and exec, so a child
    measuring after its parent built a 1M index in memory reported the build's 4.2 GB (seen in stop 25)."""
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def wait_for_hnsw(store) -> float:  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    store.warm()
    while store._ann._building or store._ann._ann is None:  # a bench may look inside: no public wait
        time.sleep(0.5)
    return round(time.perf_counter() - t, 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, action="append", default=[])
    ap.add_argument("--queries", type=Path, required=True)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10000, 100000])
    ap.add_argument("--n-queries", type=int, default=200)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/zhiku-scale"))
    ap.add_argument("--reuse", action="store_true", help="measure existing builds again")
    ap.add_argument("--dense-only", action="store_true", help="one-sentence chunks without BM25 tokens (fast build)")
    ap.add_argument(
        "--build-budget-s", type=float, default=900.0, help="stop a build after this long (then measure it)"
    )
    ap.add_argument(
        "--dense-search",
        nargs="*",
        default=["auto"],
        help="store.dense_search modes to measure (auto exact int8 hnsw; none: build and --compaction only)",
    )
    ap.add_argument("--compaction", action="store_true", help="then delete a quarter of the documents and compact")
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # the child process
    ap.add_argument("--n-docs", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    rng = random.Random(7)
    lines = args.queries.read_text(encoding="utf-8").splitlines()
    queries = rng.sample([json.loads(x)["text"] for x in lines if x.strip()], args.n_queries)
    if args.measure is not None:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        print(json.dumps(measure(args.measure, queries, args.n_docs, (args.dense_search or ["auto"])[0])))
        return
    sents = sentences(args.corpus)
    for size in args.sizes:
        index = args.workdir / str(size)
        row: dict[str, object] = {"chunks": size, "load_avg_1m": round(os.getloadavg()[0], 1)}
        if not (args.reuse and index.is_dir()):
            t = time.perf_counter()
            row.update(build(index, sents, size, args.build_budget_s, dense_only=args.dense_only))
            row["dense_only"] = args.dense_only
            row["build_s"] = round(time.perf_counter() - t, 1)
        row["db_mb"] = round((index / "zhiku.db").stat().st_size / 1e6, 1)
        row["vectors_mb"] = round(sum(p.stat().st_size for p in index.glob("vectors.*.f32")) / 1e6, 1)
        row["codes_mb"] = round(sum(p.stat().st_size for p in index.glob("vectors.*.i8")) / 1e6, 1)
        row["bm25_mb"] = round(sum(p.stat().st_size for p in index.glob("bm25/seg-*.bin")) / 1e6, 1)
        built = int(row.get("built_chunks", size))  # type: ignore[call-overload]
        for mode in args.dense_search:
            print(json.dumps({**row, "dense_search": mode, **child_measure(args, index, built, mode)}), flush=True)
        if args.compaction:
            print(json.dumps({"chunks": size, **compaction(index, built // PER_DOC)}), flush=True)


def child_measure(args: argparse.Namespace, index: Path, built: int, mode: str) -> dict[str, object]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    child = [sys.executable, __file__, "--queries", str(args.queries), "--n-queries", str(args.n_queries)]
    child += ["--measure", str(index), "--n-docs", str(built // PER_DOC), "--dense-search", mode]
    out = subprocess.run(child, env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def compaction(index: Path, n_docs: int) -> dict[str, object]:
    """Delete every fourth document, then ``compact()``: how long, and the vector files before and after."""
    from zhiku.stores.sqlite import SQLiteStore

    def files_mb() -> float:
        return round(sum(p.stat().st_size for p in index.glob("vectors.*")) / 1e6, 1)

    with SQLiteStore(index, compact_dead_fraction=1) as store:
        before = files_mb()
        t = time.perf_counter()
        for d in range(0, n_docs, 4):
            store.delete_document(document(d, [])[0].doc_id)
        deleted_s = time.perf_counter() - t
        report = store.compact()
    return {
        "deleted_docs": len(range(0, n_docs, 4)),
        "delete_s": round(deleted_s, 1),
        "compact_s": round(report.seconds, 2),
        "write_lock_held_s": round(report.locked_seconds, 2),
        "rows": [report.rows_before, report.rows_after],
        "vector_files_mb": [before, files_mb()],
    }


if __name__ == "__main__":
    main()
