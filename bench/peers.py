"""zhiku side by side with the stacks people pick instead, on the same chunks, vectors and tokens (issue 13).

    make bench-peers                      # installs the peers into .venv-peers, then runs the line below
    .venv-peers/bin/python bench/peers.py --data ../shared/eval [--sets cmrc2018_dev,stard_dev]
        [--from-index /work/cache/q-idx] [--cache /work/cache/embeddings] [--stacks zhiku,bm25s]
        [--workdir /tmp/zhiku-peers] [--max-queries N] [--json out.json]
    .venv-peers/bin/python bench/peers.py --data ../shared/eval --sets "" --stacks zhiku,bm25s --scale 100000

Stacks (bench/peer_stacks.py, one adapter each): zhiku (embedded SQLite store, default hybrid z-score fusion;
tracing off, and on), Chroma + rank_bm25 + RRF k=60, LanceDB hybrid + RRFReranker, Milvus Lite hybrid_search +
RRFRanker(60), bm25s + numpy + RRF k=60; and, to find where a gap comes from, one channel alone: zhiku-bm25,
zhiku-dense, bm25s-bm25, bm25s-dense.

``--scale N …`` adds latency/size points on bench/scale_latency.py's corpus (its sentence recombiner and seeds:
the same real-Chinese chunks and random unit vectors as its builds; no quality figures there).

The corpus is zhiku's chunk-level index of each dev set: every stack indexes the same chunks, the same passage
vectors and the same index tokens (zhiku's rjieba search-mode segmentation, stored in the index), and gets the
same query vector and query tokens. Where they come from:

- from the dev sets alone (default): the set is ingested into ``--workdir/<set>/source`` with the default
  settings, which embeds every passage with the bundled model (cmrc2018 about an hour on 2 cores; the embedding
  cache, ``--cache DIR``, makes a rerun embed nothing);
- ``--from-index ROOT``: ``ROOT/<set>/zhiku.db`` (e.g. the indexes `bench/quality.py --index-root` keeps) is
  copied and read; nothing is embedded;
- query vectors: read from a copy of ``--cache DIR/embeddings.sqlite`` (zhiku's cache keys); any missing one is
  embedded with the bundled model.

Scoring is zhiku's evaluator's: a stack returns the top 100 chunks; a target's rank is its best chunk's rank
(``EvalQuery.label``: the document for BEIR sets, the matched expectation for stard_longdoc); nDCG@10,
Recall@100 and MRR@10 come from ``zhiku.evaluation.metrics``. Each stack runs in its own child process pinned to
one core (BLAS/OpenMP/Lance threads 1), so its peak RSS is its own: build (no embedding; timed), size on disk,
the scored pass (top 100, every query), then the latency pass (top 10, ``--latency-queries`` spread over the set,
warm; query embedding excluded — peers get their query tokens ready-made, zhiku segments the query inside its
timing): wall time, and CPU time of all the child's threads (what a query costs; a loaded machine inflates it far
less than wall time). ``p`` is a paired randomisation test (10,000 sign flips) of per-query nDCG@10 against zhiku.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import resource
import shutil
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_stacks import STACKS, Corpus, Query, disk_bytes, fresh, make_stack, query_tokens  # noqa: E402
from zhiku.evaluation.datasets import EvalSet, from_beir, load_dataset  # noqa: E402
from zhiku.evaluation.metrics import score  # noqa: E402
from zhiku.numeric import l2_normalise, percentile  # noqa: E402
from zhiku.stores._sqlite_schema import CHUNK_COLS, DOC_COLS, chunk_from_row, doc_from_row  # noqa: E402

SETS = ("cmrc2018_dev", "meddialog_im_dev", "stard_dev", "stard_longdoc")
METRICS = ("ndcg@10", "recall@100", "mrr@10")
DEPTH = 100
THREADS_1 = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS")} | {
    "LANCE_CPU_THREADS": "1",
    "LANCE_LOG": "error",
    "LANCEDB_LOG": "error",  # lancedb's own logger (its default, warn, printed a deprecation line per search)
    "RUST_LOG": "error",
}  # LANCE_IO_THREADS=1 hangs lancedb


# --- inputs: one corpus and one query list per set, shared by every stack ------------------------------------
def read_corpus(db: Path) -> Corpus:
    """Chunks, index tokens, vectors and documents of a zhiku index (any schema that keeps the vector BLOBs)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        docs = [doc_from_row(r) for r in conn.execute(f"SELECT {DOC_COLS} FROM documents ORDER BY doc_id")]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        tokens = "chunk_tokens" if "chunk_tokens" in tables else "fts"  # schema 4 / schemas 1–3
        rows = conn.execute(
            f"SELECT {CHUNK_COLS}, c.vector, t.tokens FROM chunks c JOIN {tokens} t ON t.rowid = c.rowid"
            " ORDER BY c.rowid"
        ).fetchall()
    finally:
        conn.close()
    vectors = l2_normalise(np.stack([np.frombuffer(r[12], dtype="<f4") for r in rows]).astype(np.float32))
    return Corpus([chunk_from_row(r[:12]) for r in rows], [r[13].split() for r in rows], vectors, docs, meta)


def source_index(name: str, folder: Path, args: argparse.Namespace, work: Path) -> Path:
    """The zhiku index the corpus is read from: a copy of ``--from-index``'s, else one built from the set."""
    target = work / "source"
    if args.from_index:
        fresh(target)
        shutil.copy2(args.from_index / name / "zhiku.db", target / "zhiku.db")
        return target / "zhiku.db"
    if not (target / "zhiku.db").exists():
        from zhiku.api import KnowledgeBase
        from zhiku.evaluation.runner import index_dataset
        from zhiku.settings import load_settings, merge

        settings = merge(load_settings(index=target), cache_dir=str(cache_dir(args, work.parent)))
        with KnowledgeBase(settings) as kb:
            index_dataset(kb, load_dataset(folder), collection=name)
    return target / "zhiku.db"


def cache_dir(args: argparse.Namespace, workdir: Path) -> Path:
    """A copy of ``--cache`` (never written in place), or a cache of this run's own."""
    own = workdir / "embeddings"
    if args.cache and not (own / "embeddings.sqlite").exists():
        own.mkdir(parents=True, exist_ok=True)
        src = sqlite3.connect(f"file:{args.cache / 'embeddings.sqlite'}?mode=ro", uri=True)
        dst = sqlite3.connect(own / "embeddings.sqlite")
        src.backup(dst)
        src.close()
        dst.close()
    return own


def make_queries(data: EvalSet, meta: dict[str, str], cache: Path) -> list[Query]:
    from zhiku.embedding.cache import EmbeddingCache, query_key
    from zhiku.settings import load_settings
    from zhiku.text import TextProcessor

    settings = load_settings()
    tp = TextProcessor(**settings.text.model_dump())
    texts = [q.text.strip() for q in data.queries]
    dim = int(meta["dim"])
    store = EmbeddingCache(cache / "embeddings.sqlite")
    found = store.get_many(meta["embedder"], [query_key(t) for t in texts], dim)
    missing = [t for t in dict.fromkeys(texts) if query_key(t) not in found]
    if missing:
        from zhiku.embedding import build_embedder

        embedder = build_embedder(settings.embedding, None)
        if embedder.name != meta["embedder"]:
            raise SystemExit(f"the index was embedded with {meta['embedder']}, the configured model is {embedder.name}")
        print(f"  embedding {len(missing)} queries", file=sys.stderr, flush=True)
        vecs = [embedder.embed_query(t) for t in missing]
        store.put_many(meta["embedder"], [(query_key(t), v) for t, v in zip(missing, vecs, strict=True)])
        found.update((query_key(t), v) for t, v in zip(missing, vecs, strict=True))
    store.close()
    return [
        Query(q.qid, t, tp.query_tokens(t), np.asarray(found[query_key(t)], dtype=np.float32))
        for q, t in zip(data.queries, texts, strict=True)
    ]


# --- one stack in its own process -------------------------------------------------------------------------------
def peak_rss_mb() -> float:
    """This process's peak RSS since exec (VmHWM; ``ru_maxrss`` would carry over the parent's peak across exec)."""
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def pinned_inputs(work: Path) -> tuple[Corpus, list[Query]]:
    """This process pinned to one core, and the set's corpus and questions (``work/inputs.pkl``)."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    corpus, queries = pickle.loads((work / "inputs.pkl").read_bytes())
    return corpus, queries


def check_tokens(queries: list[Query]) -> None:
    """What every search segments is what zhiku indexed."""
    if any(query_tokens(q) != q.tokens for q in queries):
        raise SystemExit("the query tokens differ from the source index's segmentation: rebuild the inputs")


def timed_questions(queries: list[Query], latency_queries: int) -> list[Query]:
    """The latency pass's questions: about ``latency_queries`` of them, evenly spread over the set."""
    return queries[:: max(1, len(queries) // latency_queries)]


def child(stack_key: str, work: Path, latency_queries: int) -> None:
    corpus, queries = pinned_inputs(work)
    base_rss = peak_rss_mb()
    check_tokens(queries)
    stack = make_stack(stack_key, queries)
    where = fresh(work / "stacks" / stack_key)
    t = time.perf_counter()
    stack.build(corpus, where)
    build_s = time.perf_counter() - t
    rankings = [stack.search(q, DEPTH) for q in queries]  # the scored pass; it also warms every stack
    latencies, cpu = [], []
    for q in timed_questions(queries, latency_queries):
        t, c = time.perf_counter(), time.process_time()
        stack.search(q, 10)
        latencies.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)  # every thread's: what a query costs, whatever the load
    out = {
        "stack": stack.name,
        "build_s": round(build_s, 2),
        "disk_mb": round(disk_bytes(where) / 1e6, 1),
        "p50_ms": round(percentile(latencies, 50), 2),
        "p95_ms": round(percentile(latencies, 95), 2),
        "cpu_p50_ms": round(percentile(cpu, 50), 2),
        "cpu_p95_ms": round(percentile(cpu, 95), 2),
        "peak_rss_mb": round(peak_rss_mb()),
        "inputs_rss_mb": round(base_rss),
        "rankings": rankings,
    }
    (work / f"{stack_key}.json").write_text(json.dumps(out), encoding="utf-8")


def run_child(stack_key: str, work: Path, args: argparse.Namespace) -> dict[str, Any] | None:
    load = os.getloadavg()[0]
    cmd = [sys.executable, __file__, "--child", stack_key, "--workdir", str(work)]
    cmd += ["--latency-queries", str(args.latency_queries)]
    timeout_s = args.timeout
    started = time.perf_counter()
    try:
        subprocess.run(cmd, env={**os.environ, **THREADS_1}, check=True, timeout=timeout_s)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        print(f"  {stack_key}: FAILED ({e})", file=sys.stderr, flush=True)
        return None
    out: dict[str, Any] = json.loads((work / f"{stack_key}.json").read_text(encoding="utf-8"))
    out["load_avg_1m"] = round(load, 1)
    (work / f"{stack_key}.json").write_text(json.dumps(out), encoding="utf-8")
    print(f"  {stack_key}: {time.perf_counter() - started:.0f}s", file=sys.stderr, flush=True)
    return out


def kept(stack_key: str, work: Path) -> dict[str, Any]:
    """A stack's figures and rankings from an earlier run in this workdir (``--keep``)."""
    print(f"  {stack_key}: kept from {work / f'{stack_key}.json'}", file=sys.stderr, flush=True)
    out: dict[str, Any] = json.loads((work / f"{stack_key}.json").read_text(encoding="utf-8"))
    return out


# --- scoring ----------------------------------------------------------------------------------------------------
def per_query_scores(data: EvalSet, corpus: Corpus, rankings: list[list[str]]) -> np.ndarray:
    """(queries, METRICS) at document level: a target's rank is its best chunk's rank, as `zhiku eval`."""
    chunk = {c.chunk_id: c for c in corpus.chunks}
    rows = []
    for q, ids in zip(data.queries, rankings, strict=True):
        ranked = list(dict.fromkeys(q.label(chunk[cid]) for cid in ids))
        values = score(METRICS, ranked, q.relevant)
        rows.append([values[m] for m in METRICS])
    return np.array(rows)


def randomisation_p(a: np.ndarray, b: np.ndarray, rounds: int = 10_000, seed: int = 13) -> float:
    """Two-sided paired randomisation test (sign flips of the per-query differences)."""
    d = a - b
    observed = abs(d.mean())
    if observed == 0:
        return 1.0
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(rounds // 1000):
        signs = rng.choice(np.array([-1.0, 1.0]), size=(1000, len(d)))
        hits += int((np.abs((signs * d).mean(axis=1)) >= observed - 1e-12).sum())
    return (hits + 1) / (rounds + 1)


@dataclass(frozen=True)
class Row:
    dataset: str
    key: str
    stack: str
    metrics: dict[str, float]
    p_vs_zhiku: float | None
    figures: dict[str, Any]


def run_set(name: str, args: argparse.Namespace) -> list[Row]:
    folder = args.data / name
    work = args.workdir / name
    work.mkdir(parents=True, exist_ok=True)
    db = source_index(name, folder, args, work)
    corpus = read_corpus(db)
    loaded = load_dataset(folder, max_queries=args.max_queries)
    data = loaded if isinstance(loaded, EvalSet) else from_beir(loaded)
    queries = make_queries(data, corpus.meta, cache_dir(args, args.workdir))
    (work / "inputs.pkl").write_bytes(pickle.dumps((corpus, queries)))
    print(f"{name}: {len(corpus.chunks)} chunks, {len(queries)} queries", file=sys.stderr, flush=True)
    results = {k: kept(k, work) if k in args.keep else run_child(k, work, args) for k in args.stacks}
    scores = {k: per_query_scores(data, corpus, r["rankings"]) for k, r in results.items() if r}
    rows = []
    for k, r in results.items():
        if r is None:
            continue
        means = dict(zip(METRICS, scores[k].mean(axis=0), strict=True))
        p = randomisation_p(scores[k][:, 0], scores["zhiku"][:, 0]) if "zhiku" in scores and k != "zhiku" else None
        figures = {f: r[f] for f in ("build_s", "disk_mb", "p50_ms", "p95_ms", "peak_rss_mb", "inputs_rss_mb")}
        figures |= {f: r.get(f, float("nan")) for f in ("cpu_p50_ms", "cpu_p95_ms")}
        figures |= {"load_avg_1m": r.get("load_avg_1m", "?"), "chunks": len(corpus.chunks), "queries": len(queries)}
        rows.append(Row(name, k, r["stack"], means, p, figures))
    return rows


def scale_inputs(size: int, args: argparse.Namespace) -> tuple[Corpus, list[Query]]:
    """bench/scale_latency.py's corpus at ``size`` chunks (the same seeds: the same chunks and random unit vectors
    as its build), and ``--scale-queries`` questions with random unit vectors: latency and size only."""
    import random

    from scale_latency import PER_DOC, document, make_chunks, sentences, unit_vectors
    from zhiku.text import TextProcessor

    sents = sentences(args.scale_corpus or [args.data / "cmrc2018_dev"])
    tp = TextProcessor()
    sent_tokens = [tp.index_tokens(x) for x in sents]
    rng, vrng = random.Random(size), np.random.default_rng(size)
    chunks, tokens, vectors, docs = [], [], [], []
    for d in range(size // PER_DOC):
        parts = make_chunks(sents, PER_DOC, rng)
        doc, cs = document(d, ["".join(sents[i] for i in p) for p in parts])
        docs.append(doc)
        chunks += cs
        tokens += [[w for i in p for w in sent_tokens[i]] for p in parts]
        vectors.append(unit_vectors(vrng, len(cs)))
    meta = {"embedder": "random", "dim": str(vectors[0].shape[1])}
    lines = (args.scale_queries or args.data / "cmrc2018_dev" / "queries.jsonl").read_text(encoding="utf-8")
    texts = random.Random(7).sample([json.loads(x)["text"].strip() for x in lines.splitlines() if x.strip()], 200)
    qv = unit_vectors(np.random.default_rng(13), len(texts))
    queries = [Query(str(n), t, tp.query_tokens(t), qv[n]) for n, t in enumerate(texts)]
    return Corpus(chunks, tokens, np.concatenate(vectors), docs, meta), queries


def run_scale(size: int, args: argparse.Namespace) -> list[Row]:
    work = args.workdir / f"scale-{size}"
    work.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    corpus, queries = scale_inputs(size, args)
    (work / "inputs.pkl").write_bytes(pickle.dumps((corpus, queries), protocol=pickle.HIGHEST_PROTOCOL))
    print(f"scale {size}: inputs in {time.perf_counter() - t:.0f}s", file=sys.stderr, flush=True)
    del corpus
    rows = []
    for k in args.stacks:
        r = kept(k, work) if k in args.keep else run_child(k, work, args)
        if r is not None:
            figures = {f: r[f] for f in ("build_s", "disk_mb", "p50_ms", "p95_ms", "peak_rss_mb", "inputs_rss_mb")}
            figures |= {f: r.get(f, float("nan")) for f in ("cpu_p50_ms", "cpu_p95_ms")}
            figures |= {"load_avg_1m": r.get("load_avg_1m", "?"), "chunks": size, "queries": len(queries)}
            rows.append(Row(f"scale {size:,}", k, r["stack"], dict.fromkeys(METRICS, float("nan")), None, figures))
    return rows


def table(rows: list[Row]) -> str:
    head = (
        "| set | stack | nDCG@10 | Recall@100 | MRR@10 | p vs zhiku | p50 ms | p95 ms | CPU p50 / p95 ms | build s "
        "| disk MB | peak RSS MB (inputs) | load |"
    )
    lines = [head, "|" + "---|" * 13]
    for r in rows:
        f, m = r.figures, r.metrics
        p = "–" if r.p_vs_zhiku is None else f"{r.p_vs_zhiku:.4f}"
        q = " | ".join("–" if np.isnan(m[x]) else f"{m[x]:.4f}" for x in METRICS)
        lines.append(
            f"| {r.dataset} | {r.stack} | {q} | {p} | "
            f"{f['p50_ms']:.2f} | {f['p95_ms']:.2f} | {_cpu(f)} | {f['build_s']:.1f} | {f['disk_mb']:.1f} | "
            f"{f['peak_rss_mb']} ({f['inputs_rss_mb']}) | {f['load_avg_1m']} |"
        )
    return "\n".join(lines)


def _cpu(figures: dict[str, Any]) -> str:
    """CPU time per query (every thread's), p50 / p95; "–" for results kept from before it was measured."""
    a, b = figures.get("cpu_p50_ms", float("nan")), figures.get("cpu_p95_ms", float("nan"))
    return "–" if np.isnan(a) else f"{a:.2f} / {b:.2f}"


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for pkg in ("zhiku", "numkong", "chromadb", "rank_bm25", "lancedb", "pyarrow", "pymilvus", "milvus-lite", "bm25s"):
        try:
            out.append(f"{pkg} {version(pkg)}")
        except PackageNotFoundError:
            out.append(f"{pkg} (not installed)")
    return ", ".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=Path("../shared/eval"), help="folder holding the dev sets")
    ap.add_argument("--sets", default="cmrc2018_dev,meddialog_im_dev,stard_dev")
    ap.add_argument("--stacks", default=",".join(STACKS))
    ap.add_argument("--from-index", type=Path, help="ROOT/<set>/zhiku.db: reuse these indexes (copied)")
    ap.add_argument("--cache", type=Path, help="an embedding cache folder (embeddings.sqlite; copied)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/zhiku-peers"))
    ap.add_argument("--max-queries", type=int)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per stack and set")
    ap.add_argument("--latency-queries", type=int, default=500, help="timed top-10 queries, spread over the set")
    ap.add_argument("--json", type=Path, help="write the rows here")
    ap.add_argument("--keep", default="", help="stacks whose results of an earlier run in --workdir are reused")
    ap.add_argument("--scale", type=int, nargs="*", default=[], help="also 100000 1000000 …: latency/size only")
    ap.add_argument("--scale-corpus", type=Path, action="append", help="Markdown/BEIR folders (scale_latency)")
    ap.add_argument("--scale-queries", type=Path, help="queries.jsonl for the scale points")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.workdir, args.latency_queries)
        return
    args.stacks = [s for s in args.stacks.split(",") if s]
    args.keep = [s for s in args.keep.split(",") if s]
    rows: list[Row] = []
    for name in [s for s in args.sets.split(",") if s]:
        rows += run_set(name, args)
        print(table([r for r in rows if r.dataset == name]), flush=True)
    for size in args.scale:
        rows += run_scale(size, args)
        print(table(rows[-len(args.stacks) :]), flush=True)
    print(f"\n{platform.processor() or platform.machine()}, {os.cpu_count()} cores · {versions()}")
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in rows], indent=1, ensure_ascii=False), encoding="utf-8")


if __name__ == "__main__":
    main()
