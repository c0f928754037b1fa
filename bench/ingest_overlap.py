"""Does preparation overlap embedding? The same files ingested through an OpenAI-compatible endpoint that answers
each request after a fixed delay (``tests/fake_openai.py``, run in its own process: deterministic 8-d vectors, so
only time is measured), with ``ingest.workers`` 0 (the ingesting thread prepares every document) and 1 (a helper
prepares the next documents while a call waits on the endpoint).

    nice -n 10 .venv/bin/python bench/ingest_overlap.py --corpus ../shared/corpus/laws --delay 0.1 --repeat 3

Prints one JSON line per run and a summary: with overlap, an ingest should take about max(prepare, embed) rather
than prepare + embed (+ the store write, which runs in the ingesting thread either way).
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
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent


def serve(delay: float) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    import threading
    from http.server import ThreadingHTTPServer

    from fake_openai import FakeOpenAI, _handler

    state = FakeOpenAI(embed_delay_s=delay)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    print(f"http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdin.read()  # until the parent closes our stdin


def ingest(corpus: Path, index: Path, url: str, workers: int) -> dict[str, Any]:
    from zhiku.api import KnowledgeBase
    from zhiku.settings import Settings

    shutil.rmtree(index, ignore_errors=True)
    emb = {"provider": "openai", "model": "fake", "base_url": url, "cache": False, "batch_size": 32, "concurrency": 4}
    s = Settings.model_validate({"index": str(index), "embedding": emb, "ingest": {"workers": workers}})
    kb = KnowledgeBase(s)
    kb.text.index_tokens("预热")  # the tokeniser's dictionary, outside the timing
    t = time.perf_counter()
    report = kb.ingest([corpus])
    seconds = time.perf_counter() - t
    kb.close()
    trace = json.loads((index / "traces.jsonl").read_text(encoding="utf-8").splitlines()[-1])
    return {
        "workers": workers,
        "chunks": report.chunks_written,
        "seconds": round(seconds, 3),
        "stages_ms": {st["name"]: round(st["elapsed_ms"]) for st in trace["stages"]},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=ROOT / "tests" / "fixtures" / "laws")
    ap.add_argument("--delay", type=float, default=0.1, help="seconds the endpoint waits before each answer")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/zhiku-ingest-overlap"))
    ap.add_argument("--serve", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)  # corpus, url, workers
    args = ap.parse_args()
    if args.serve is not None:
        return serve(args.serve)
    if args.child:
        corpus, url, workers = args.child
        print(json.dumps(ingest(Path(corpus), args.workdir / "idx", url, int(workers))))
        return None
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZHIKU_")}
    server = subprocess.Popen(
        [sys.executable, str(HERE), "--serve", str(args.delay)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        runs: dict[int, list[dict[str, Any]]] = {0: [], 1: []}
        print(json.dumps({"load_avg": os.getloadavg(), "delay_s": args.delay}))
        for _ in range(args.repeat):
            for workers in (0, 1):  # alternating, so that both see the same load
                cmd = [sys.executable, str(HERE), "--workdir", str(args.workdir), "--child", str(args.corpus), url]
                out = subprocess.run([*cmd, str(workers)], env=env, capture_output=True, text=True, check=True)
                runs[workers].append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(json.dumps(runs[workers][-1], ensure_ascii=False), flush=True)
        for workers, rs in runs.items():
            secs = [r["seconds"] for r in rs]
            print(
                f"workers {workers}: median {statistics.median(secs)} s, best {min(secs)} s of {rs[0]['chunks']} chunks"
            )
        print(json.dumps({"load_avg_end": os.getloadavg()}))
    finally:
        server.stdin.close() if server.stdin else None
        server.wait(timeout=10)
    return None


if __name__ == "__main__":
    main()
