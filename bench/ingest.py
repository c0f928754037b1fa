"""Ingest throughput: chunks per second on copies of the sample laws, with every vector cached and with the
bundled embedder.

    make bench-ingest
    python bench/ingest.py [--corpus examples/laws] [--copies 50] [--repeat 3] [--json]

- cached: ``--copies`` copies of the corpus (one folder each, so each copy is its own set of documents whose
  texts repeat) into a fresh index, default settings, every vector from the embedding cache (checked: nothing is
  embedded): what ingesting costs besides embedding. Best of ``--repeat`` runs.
- bundled: one copy into a fresh index with an empty embedding cache: the bundled CPU model embeds every chunk.

Each ingest runs in its own process with its caches under ``--workdir`` (``XDG_CACHE_HOME``): the user's cache is
neither read nor changed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def ingest(folder: Path, index: Path, cache: Path) -> dict[str, Any]:
    """One ingest of ``folder`` into a fresh ``index``, in a child process whose caches live under ``cache``."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    cmd = [sys.executable, __file__, "--child", str(folder), str(index)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def child(folder: Path, index: Path) -> dict[str, Any]:
    from zhiku.api import KnowledgeBase
    from zhiku.settings import load_settings

    shutil.rmtree(index, ignore_errors=True)
    with KnowledgeBase(load_settings(None, index=index)) as kb:
        kb.embedder.embed_query("预热")  # the model, loaded outside the clock
        kb.text.index_tokens("预热分词")
        t, cpu = time.perf_counter(), cpu_s()
        report = kb.ingest([folder], collection="bench")
        seconds, cpu = time.perf_counter() - t, cpu_s() - cpu
    assert not report.failed, report.failed
    return {
        "files": len(list(folder.rglob("*.md"))),
        "chunks": report.chunks_written,
        "embedded": report.chunks_embedded,
        "seconds": round(seconds, 2),
        "chunks_per_s": round(report.chunks_written / seconds, 1),
        "chunks_per_cpu_s": round(report.chunks_written / cpu, 1),  # every thread of this process
    }


def replicate(corpus: Path, copies: int, dest: Path) -> Path:
    shutil.rmtree(dest, ignore_errors=True)
    for i in range(copies):
        shutil.copytree(corpus, dest / f"c{i:03d}", ignore=shutil.ignore_patterns("SOURCES.md"))
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=ROOT / "examples" / "laws")
    ap.add_argument("--copies", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/zhiku-ingest"))
    ap.add_argument("--json", action="store_true", help="also save the rows for the results page")
    ap.add_argument("--child", type=Path, nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    work = args.workdir
    one, many = replicate(args.corpus, 1, work / "one"), replicate(args.corpus, args.copies, work / "many")
    shutil.rmtree(work / "empty-cache", ignore_errors=True)
    bundled = ingest(one, work / "index", work / "empty-cache")
    ingest(one, work / "index", work / "cache")  # fills the cache the cached runs read
    runs = [ingest(many, work / "index", work / "cache") for _ in range(args.repeat)]
    assert all(r["embedded"] == 0 for r in runs), runs
    rows = [{"run": "cached", **max(runs, key=lambda r: r["chunks_per_s"])}, {"run": "bundled", **bundled}]
    for r in rows:
        print(r, flush=True)
    if args.json:
        from report import save

        save("ingest", rows, "make bench-ingest")


if __name__ == "__main__":
    main()
