"""What the structured citations cost: (text + structuredContent) / text of `query_knowledge_hub` answers.

    make bench-answers
    python bench/answer_size.py --data ../shared/eval [--sets stard_dev] [--max-queries 200] [--json]

Each dev set is indexed as bench/quality.py does (vectors from the embedding cache), and the sample laws
(examples/laws, bench/mcp_latency.py's questions); each question goes through the MCP server's query path, top_k 5,
the compact structuredContent (the default). Characters; the JSON as compact as the wire's. Also in UTF-8 bytes,
nearer what a client pays: a Chinese character of the text is three bytes, the JSON's ids and keys one each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from mcp_latency import QUESTIONS
from quality import SETS
from zhiku.api import KnowledgeBase
from zhiku.evaluation.datasets import load_dataset
from zhiku.evaluation.runner import index_dataset
from zhiku.mcp.hub import Hub, QueryArgs
from zhiku.settings import load_settings

LAWS = Path(__file__).resolve().parents[1] / "examples" / "laws"


def sizes(kb: KnowledgeBase, questions: list[str], collection: str) -> dict[str, object]:
    hub = Hub(kb, kb.settings)
    text, structured, ratio, in_bytes = [], [], [], []
    for q in questions:
        r = hub.query(QueryArgs(q, top_k=5, collection=collection))
        markdown, compact = r.to_markdown(), json.dumps(r.structured(), ensure_ascii=False, separators=(",", ":"))
        t, s = len(markdown), len(compact)
        text.append(t)
        structured.append(s)
        ratio.append((t + s) / t)
        tb = len(markdown.encode("utf-8"))
        in_bytes.append((tb + len(compact.encode("utf-8"))) / tb)
    return {
        "questions": len(questions),
        "text_chars_p50": statistics.median(text),
        "structured_chars_p50": statistics.median(structured),
        "ratio_p50": round(statistics.median(ratio), 3),
        "ratio_p90": round(p90(ratio), 3),
        "bytes_ratio_p50": round(statistics.median(in_bytes), 3),
        "bytes_ratio_p90": round(p90(in_bytes), 3),
    }


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[-1] if len(values) > 1 else values[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=Path("../shared/eval"), help="folder holding the dev sets")
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--max-queries", type=int, default=200, help="the first N questions of each set")
    ap.add_argument("--json", action="store_true", help="save the rows for the results page")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="zhiku-answers-") as tmp:
        settings = load_settings(None, index=Path(tmp) / "laws", tracing={"enabled": False})
        with KnowledgeBase(settings) as kb:
            kb.ingest([LAWS], collection="laws")
            rows.append({"set": "examples/laws"} | sizes(kb, list(QUESTIONS), "laws"))
        print(json.dumps(rows[-1], ensure_ascii=False), flush=True)
        for name in args.sets.split(","):
            data = load_dataset(args.data / name, max_queries=args.max_queries)
            settings = load_settings(None, index=Path(tmp) / name, tracing={"enabled": False})
            with KnowledgeBase(settings) as kb:
                index_dataset(kb, data, collection=name)
                rows.append({"set": name} | sizes(kb, [q.text for q in data.queries], name))
            print(json.dumps(rows[-1], ensure_ascii=False), flush=True)
    if args.json:
        from report import save

        save("answers", rows, "make bench-answers")


if __name__ == "__main__":
    main()
