"""Ingest throughput: chunks/s with cached vectors and with the bundled embedder, against the embedder alone on the
same texts, a stage breakdown, and the same runs on other checkouts ("before") in one go.

    nice -n 10 .venv/bin/python bench/ingest_throughput.py --corpus ../shared/corpus/laws --copies 5 \\
        --cache ~/.cache/zhiku/embeddings.sqlite --before /path/to/old/checkout/src [...] --workdir /tmp/zhiku-ingest

- The corpus's Markdown files are copied ``--copies`` times (one folder per copy, so every copy is its own
  document; chunk texts repeat, so their vectors come from the cache).
- ``--cache`` is copied into the workdir (never changed) and warmed by one ingest of one copy, which embeds
  whatever it lacks; every cached run then embeds nothing (``chunks_embedded`` is checked).
- cached: a fresh index, the whole replicated corpus, default settings (tracing on), each run in a fresh process,
  ``--repeat`` times (best and median); the after code with ``ingest.workers`` 0 (inline) and the default.
- stages: each stage alone on the same files in one process (read + SHA-256, parse, chunk + index texts, BM25
  tokens, window check, cache lookup, store write), and preparation (read … window check) inline, in 2 threads and
  in 2 processes (each prepared document pickled back): whether a process pool would pay.
- bundled: the smallest files whose chunks reach ``--bundled-chunks``, no cache: the embedder alone on their index
  texts (before and after the ingests, averaged), then a full ingest of the files by each checkout.
- embed_by_size: the bundled embedder alone on ``--embed-texts`` texts of exactly N characters for each N of
  ``--embed-sizes`` (cut from the corpus, whitespace removed): its throughput per chunk size.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
SRC = HERE.parent.parent / "src"


# ------------------------------------------------------------------------------------------ the child
def _settings(index: Path, cache_dir: Path | None, ingest: dict[str, Any] | None) -> Any:
    from zhiku.settings import Settings

    data: dict[str, Any] = {"index": str(index), "collection": "bench"}
    data["cache_dir"] = str(cache_dir) if cache_dir else None
    if ingest and "ingest" in Settings.model_fields:  # an older checkout has no ingest section
        data["ingest"] = ingest
    return Settings.model_validate(data)


def child_ingest(corpus: Path, index: Path, cache_dir: Path | None, ingest: dict[str, Any] | None) -> dict[str, Any]:
    """One ingest of ``corpus`` into a fresh ``index``; the trace's stage times."""
    from zhiku.api import KnowledgeBase

    shutil.rmtree(index, ignore_errors=True)
    kb = KnowledgeBase(_settings(index, cache_dir, ingest))
    kb.embedder.embed_documents(
        ["预热"]
    )  # load the model outside the timing (a cached run loads it for the window check)
    t, cpu = time.perf_counter(), _cpu()
    report = kb.ingest([corpus])
    seconds, cpu = time.perf_counter() - t, _cpu() - cpu
    kb.close()
    trace = json.loads((index / "traces.jsonl").read_text(encoding="utf-8").splitlines()[-1])
    return {
        "chunks": report.chunks_written,
        "embedded": report.chunks_embedded,
        "failed": len(report.failed),
        "seconds": round(seconds, 3),
        "chunks_per_s": round(report.chunks_written / seconds, 1),
        "cpu_s": round(cpu, 3),  # user + system time of every thread of the process
        "chunks_per_cpu_s": round(report.chunks_written / cpu, 1),
        "stages_ms": {s["name"]: round(s["elapsed_ms"]) for s in trace["stages"]},
        "embed_calls": next((s["calls"] for s in trace["stages"] if s["name"] == "embed"), 0),
    }


def _cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def child_embed(texts_file: Path) -> dict[str, Any]:
    """The bundled embedder alone on the texts (in one call, as a caller who already has the texts would)."""
    from zhiku.embedding import BundledE5Embedder

    texts = json.loads(texts_file.read_text(encoding="utf-8"))
    e5 = BundledE5Embedder()
    e5.embed_documents(["预热"])
    t, cpu = time.perf_counter(), _cpu()
    e5.embed_documents(texts)
    seconds, cpu = time.perf_counter() - t, _cpu() - cpu
    return {
        "chunks": len(texts),
        "seconds": round(seconds, 3),
        "cpu_s": round(cpu, 3),
        "chunks_per_s": round(len(texts) / seconds, 2),
    }


def _preparer(cache_dir: Path | None) -> Any:
    from zhiku.embedding import build_embedder
    from zhiku.ingest.loaders import default_loaders
    from zhiku.ingest.prepare import Preparer
    from zhiku.stores.sqlite import SQLiteStore
    from zhiku.text import TextProcessor

    s = _settings(Path(os.environ["BENCH_INDEX"]), cache_dir, None)
    store = SQLiteStore(s.index)
    return Preparer(
        store,
        build_embedder(s.embedding, s.cache_dir),
        TextProcessor(),
        s.chunking,
        default_loaders(s.loaders),
        max_file_bytes=100 << 20,
        retry_needs_ocr=False,
        transforms=None,
    )


_PREP: Any = None


def _prepare_one(path: str) -> int:
    """Prepare one file in this process (a thread or a pool worker); its chunk count."""
    global _PREP
    if _PREP is None:
        _PREP = _preparer(Path(os.environ["BENCH_CACHE"]))
    from zhiku.ingest.discover import FileTask

    p = Path(path)
    loaded = _PREP.file(FileTask(p, p.name, p.name), collection="bench", force=True, dry_run=False)
    assert loaded.prepared is not None, loaded.reason
    return len(loaded.prepared.chunks)


def _warm(path: str) -> None:
    _prepare_one(path)
    time.sleep(0.5)  # so that the other worker takes the other warm-up


def _prepare_returned(path: str) -> Any:
    """Prepare one file and hand back the whole prepared document (a process pool pickles it to the caller)."""
    global _PREP
    if _PREP is None:
        _PREP = _preparer(Path(os.environ["BENCH_CACHE"]))
    from zhiku.ingest.discover import FileTask

    p = Path(path)
    return _PREP.file(FileTask(p, p.name, p.name), collection="bench", force=True, dry_run=False).prepared


def child_stages(corpus: Path, index: Path, cache_dir: Path) -> dict[str, Any]:
    """Each stage alone over the replicated corpus, in this process; then preparation in threads and processes."""
    from zhiku.ingest.discover import discover

    shutil.rmtree(index, ignore_errors=True)
    os.environ.update(BENCH_INDEX=str(index), BENCH_CACHE=str(cache_dir))
    prep = _preparer(cache_dir)
    tasks, _ = discover([corpus], (".md",))
    out: dict[str, float] = {}
    chunks = _stage_times(prep, tasks, out)
    files = [str(t.path) for t in tasks]
    for name, pool in (("prepare_2_threads", ThreadPoolExecutor(2)), ("prepare_2_processes", ProcessPoolExecutor(2))):
        with pool:
            list(pool.map(_warm, [files[0]] * 2, chunksize=1))  # start both workers and load their tokenisers
            t = time.perf_counter()
            fn = _prepare_returned if isinstance(pool, ProcessPoolExecutor) else _prepare_one
            list(pool.map(fn, files, chunksize=4))
            out[name] = time.perf_counter() - t
    return {"chunks": chunks, **{k: {"s": round(v, 3), "chunks_per_s": round(chunks / v)} for k, v in out.items()}}


def _stage_times(prep: Any, tasks: list[Any], out: dict[str, float]) -> int:
    from dataclasses import replace
    from functools import partial

    from zhiku.ingest.chunking import chunk_document
    from zhiku.ingest.context import check_window, index_text
    from zhiku.ingest.loaders import load_document
    from zhiku.ingest.prepare import doc_id_for, sha256_bytes

    def timed(name: str, fn: Any, items: list[Any]) -> list[Any]:
        t = time.perf_counter()
        res = [fn(x) for x in items]
        out[name] = time.perf_counter() - t
        return res

    prep.text.index_tokens("预热分词")  # load the dictionary and the model outside the timings
    check_window(prep.embedder, ["预热"])
    timed("read_sha256", lambda t: sha256_bytes(t.path.read_bytes()), tasks)
    docs = timed("parse", lambda t: load_document(t.path, t.source, prep.loaders), tasks)
    cut = partial(chunk_document, collection="bench", settings=prep.chunking)
    per_doc = timed("chunk", lambda d: cut(d, doc_id=doc_id_for("bench", d.source)), docs)
    texts = [[index_text(d.title, c.section, c.text) for c in cs] for d, cs in zip(docs, per_doc, strict=True)]
    tokens = timed("tokenise", lambda ts: [prep.text.index_tokens(x) for x in ts], texts)
    timed("window_check", lambda ts: check_window(prep.embedder, ts), texts)
    vecs = timed("cache_lookup", prep.embedder.embed_documents, texts)
    store = prep.store
    out["prepare_inline"] = sum(out[k] for k in ("read_sha256", "parse", "chunk", "tokenise", "window_check"))

    def write(i: int) -> None:
        from zhiku.types import DocRecord

        d = docs[i]
        rec = DocRecord(
            doc_id=doc_id_for("bench", d.source),
            collection="bench",
            source=d.source,
            path=str(tasks[i].path),
            doc_type=d.doc_type,
            title=d.title,
            sha256=str(i),
            size=1,
            chunk_count=len(per_doc[i]),
            pages=None,
            ingested_at=time.time(),
        )
        store.write_document(rec, [replace(c) for c in per_doc[i]], tokens[i], vecs[i])

    timed("store_write", write, list(range(len(docs))))
    return sum(len(c) for c in per_doc)


# ------------------------------------------------------------------------------------------ the parent
def run_child(src: Path, *args: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    env = {k: v for k, v in env.items() if not k.startswith("ZHIKU_")}
    r = subprocess.run([sys.executable, str(HERE), "--child", *args], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"child {args[0]} with {src} failed:\n{r.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return result


def replicate(corpus: Path, copies: int, dest: Path) -> Path:
    shutil.rmtree(dest, ignore_errors=True)
    for i in range(copies):
        (dest / f"c{i:03d}").mkdir(parents=True)
        for f in sorted(corpus.glob("*.md")):
            shutil.copy(f, dest / f"c{i:03d}" / f.name)
    return dest


def bundled_subset(corpus: Path, work: Path, target: int) -> tuple[Path, Path]:
    """The smallest files whose chunks reach ``target``, copied to a folder; their index texts in a JSON file."""
    sys.path.insert(0, str(SRC))
    from zhiku.ingest.chunking import chunk_document
    from zhiku.ingest.context import index_text
    from zhiku.ingest.loaders import default_loaders, load_document
    from zhiku.settings import ChunkingSettings

    folder, texts = work / "bundled", []
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for f in sorted(corpus.glob("*.md"), key=lambda p: p.stat().st_size):
        doc = load_document(f, f.name, default_loaders())
        cs = chunk_document(doc, collection="bench", doc_id="x", settings=ChunkingSettings())
        texts += [index_text(doc.title, c.section, c.text) for c in cs]
        shutil.copy(f, folder / f.name)
        if len(texts) >= target:
            break
    (work / "bundled_texts.json").write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
    return folder, work / "bundled_texts.json"


def cached_runs(src: Path, corpus: Path, work: Path, repeat: int, ingest: dict[str, Any] | None) -> dict[str, Any]:
    runs = []
    for _ in range(repeat):
        spec = json.dumps(ingest or {})
        runs.append(run_child(src, "ingest", str(corpus), str(work / "idx"), str(work / "cache"), spec))
    assert all(r["embedded"] == 0 and r["failed"] == 0 for r in runs), runs
    rates = [r["chunks_per_s"] for r in runs]
    return {**max(runs, key=lambda r: r["chunks_per_s"]), "median_chunks_per_s": statistics.median(rates)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--corpus", type=Path, default=HERE.parent.parent / "tests" / "fixtures" / "laws")
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--cache", type=Path, help="an embedding cache (embeddings.sqlite) to copy and warm")
    ap.add_argument("--before", type=Path, nargs="*", default=[], help="src folders of checkouts to compare with")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--bundled-chunks", type=int, default=60, help="chunks for the bundled-embedder runs (0: skip)")
    ap.add_argument("--embed-sizes", type=int, nargs="*", default=[150, 300, 600], help="chunk sizes (characters)")
    ap.add_argument("--embed-texts", type=int, default=16, help="texts per chunk size for --embed-sizes")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/zhiku-ingest-bench"))
    ap.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(args.child)))
        return
    res = measure(args)
    print(json.dumps(res, ensure_ascii=False))
    print(summary(res))


def summary(res: dict[str, Any]) -> str:
    """The results as Markdown table rows."""
    lines = ["| run | chunks | s | chunks/s (best · median) | chunks per CPU-s | stages ms |"]
    lines.append("| --- | --- | --- | --- | --- | --- |")
    for name, r in res["cached"].items():
        stages = ", ".join(f"{k} {v}" for k, v in r["stages_ms"].items())
        lines.append(
            f"| cached {name} | {r['chunks']} | {r['seconds']} | {r['chunks_per_s']} · {r['median_chunks_per_s']} "
            f"| {r['chunks_per_cpu_s']} | {stages} |"
        )
    for name, r in res.get("bundled", {}).items():
        if name != "embedder_alone":
            stages = ", ".join(f"{k} {v}" for k, v in r["stages_ms"].items())
            lines.append(
                f"| bundled {name} | {r['chunks']} | {r['seconds']} | {r['chunks_per_s']} "
                f"(×{r['ratio_to_embedder_alone']} of the embedder alone; CPU ×{r['cpu_ratio_to_embedder_alone']}) "
                f"| | {stages} |"
            )
    if "bundled" in res:
        alone = res["bundled"]["embedder_alone"]
        lines.append(f"| embedder alone | {alone['chunks']} | {alone['seconds']} | CPU s {alone['cpu_s']} | | |")
    lines += ["", "| chunk size (chars) | texts | s | chunks/s | chars/s |", "| --- | --- | --- | --- | --- |"]
    lines += [
        f"| {n} | {r['chunks']} | {r['seconds']} | {r['chunks_per_s']} | {r['chars_per_s']} |"
        for n, r in res.get("embed_by_size", {}).items()
    ]
    lines += ["", "| stage alone | s | chunks/s |", "| --- | --- | --- |"]
    lines += [f"| {k} | {v['s']} | {v['chunks_per_s']} |" for k, v in res["stages"].items() if isinstance(v, dict)]
    return "\n".join(lines)


def _child(argv: list[str]) -> dict[str, Any]:
    kind, *rest = argv
    if kind == "ingest":
        corpus, index, cache, spec = rest
        return child_ingest(Path(corpus), Path(index), Path(cache) if cache != "-" else None, json.loads(spec))
    if kind == "embed":
        return child_embed(Path(rest[0]))
    return child_stages(Path(rest[0]), Path(rest[1]), Path(rest[2]))


def measure(args: argparse.Namespace) -> dict[str, Any]:
    work: Path = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    (work / "cache").mkdir(exist_ok=True)
    if args.cache and not (work / "cache" / "embeddings.sqlite").exists():
        shutil.copy(args.cache.expanduser(), work / "cache" / "embeddings.sqlite")
    checkouts = {"after": SRC, **{f"before {p.resolve().parent.name}": p.resolve() for p in args.before}}
    res: dict[str, Any] = {"cpus": os.cpu_count(), "load_avg_start": [round(x, 2) for x in os.getloadavg()]}
    one = replicate(args.corpus, 1, work / "warm")
    res["warm_up"] = run_child(SRC, "ingest", str(one), str(work / "idx"), str(work / "cache"), "{}")
    corpus = replicate(args.corpus, args.copies, work / "corpus")
    res["cached"] = {
        "after_workers_0": cached_runs(SRC, corpus, work, args.repeat, {"workers": 0}),
        "after": cached_runs(SRC, corpus, work, args.repeat, None),
    }
    for name, src in checkouts.items():
        if name != "after":
            res["cached"][name] = cached_runs(src, corpus, work, args.repeat, None)
    res["stages"] = run_child(SRC, "stages", str(corpus), str(work / "idx-stages"), str(work / "cache"))
    if args.bundled_chunks:
        res["bundled"] = bundled_runs(args, work, checkouts)
    res["embed_by_size"] = {n: embed_by_size(args.corpus, work, n, args.embed_texts) for n in args.embed_sizes}
    res["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    if args.out:
        args.out.write_text(json.dumps(res, ensure_ascii=False, indent=1), encoding="utf-8")
    return res


def embed_by_size(corpus: Path, work: Path, size: int, count: int) -> dict[str, Any]:
    """The bundled embedder alone on ``count`` texts of exactly ``size`` characters cut from the corpus."""
    text = "".join("".join(f.read_text(encoding="utf-8").split()) for f in sorted(corpus.glob("*.md")))
    step = max(size, (len(text) - size) // count)
    texts = [text[i : i + size] for i in range(0, step * count, step)]
    path = work / f"texts_{size}.json"
    path.write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
    r = run_child(SRC, "embed", str(path))
    return {**r, "chars_per_s": round(r["chunks_per_s"] * size)}


def bundled_runs(args: argparse.Namespace, work: Path, checkouts: dict[str, Path]) -> dict[str, Any]:
    folder, texts = bundled_subset(args.corpus, work, args.bundled_chunks)
    alone = [run_child(SRC, "embed", str(texts))]
    out: dict[str, Any] = {}
    checkouts = dict(list(checkouts.items())[:2])  # after and the first --before: embedding is 99 % of each
    for name, src in checkouts.items():
        out[name] = run_child(src, "ingest", str(folder), str(work / "idx-bundled"), "-", "{}")
    alone.append(run_child(SRC, "embed", str(texts)))
    alone_s, alone_cpu = (statistics.mean(a[k] for a in alone) for k in ("seconds", "cpu_s"))
    out["embedder_alone"] = {"chunks": alone[0]["chunks"], "seconds": [a["seconds"] for a in alone]}
    out["embedder_alone"]["cpu_s"] = [a["cpu_s"] for a in alone]
    for name in checkouts:  # CPU time moves much less than wall time with the machine's load
        out[name]["ratio_to_embedder_alone"] = round(out[name]["seconds"] / alone_s, 3)
        out[name]["cpu_ratio_to_embedder_alone"] = round(out[name]["cpu_s"] / alone_cpu, 3)
    return out


if __name__ == "__main__":
    main()
