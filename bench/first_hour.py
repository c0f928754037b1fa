"""Issue 14 figures: MCP result economy (characters of the text block and of structuredContent per top_k) and
the depth of PDF section paths (cover/declaration pages left out of the heading tree).

    python bench/first_hour.py economy --index demo-index          # after `make demo`
    python bench/first_hour.py pdf-sections path/to/*.pdf

Economy runs ``Hub.query`` (what ``query_knowledge_hub`` calls) and measures the text block
(``QueryResult.to_markdown``) and structuredContent (``QueryResult.structured``, compact JSON as on the wire) in
the default compact form and with ``server.structured_passages``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

QUERIES = ("试用期最长不得超过几个月？", "女职工产假有多少天", "加班费", "用人单位违法解除劳动合同要支付多少赔偿金")


def economy(index: Path) -> None:
    from zhiku.mcp.hub import Hub, QueryArgs
    from zhiku.settings import load_settings

    hub = Hub.open(load_settings(None, index=index))
    try:
        print("| top_k | text chars | structured (compact) | ratio | structured (full) | ratio |")
        print("| --- | --- | --- | --- | --- | --- |")
        for k in (3, 5, 10):
            text = compact = full = 0
            for q in QUERIES:
                r = hub.query(QueryArgs.of(q, k, None, None, 12000))
                text += len(r.to_markdown())
                compact += _chars(r.with_passages(False).structured())
                full += _chars(r.with_passages(True).structured())
            n = len(QUERIES)
            print(
                f"| {k} | {text / n:.0f} | {compact / n:.0f} | {(text + compact) / text:.2f} | {full / n:.0f} "
                f"| {(text + full) / text:.2f} |"
            )
    finally:
        hub.close()


def _chars(structured: dict[str, object]) -> int:
    return len(json.dumps(structured, ensure_ascii=False, separators=(",", ":")))


def pdf_sections(paths: list[Path]) -> None:
    from zhiku.ingest.chunking import chunk_document
    from zhiku.ingest.loaders.pdf import PdfLoader
    from zhiku.settings import ChunkingSettings, LoaderSettings

    print("| PDF | sections | mean path depth | max depth | first body chapter's path |")
    print("| --- | --- | --- | --- | --- |")
    for path in paths:
        doc = PdfLoader(LoaderSettings(ocr="off", images=False)).load(path, path.name)
        secs: list[str] = []
        for c in chunk_document(doc, collection="c", doc_id="d", settings=ChunkingSettings()):
            if c.section and c.section not in secs:
                secs.append(c.section)
        depths = [s.count(" > ") + 1 for s in secs]
        chapter = next((s for s in secs if "1" in s.rsplit(" > ", 1)[-1][:4] or "第 1 章" in s), "")
        print(f"| {path.name} | {len(secs)} | {sum(depths) / len(depths):.2f} | {max(depths)} | {chapter} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    e = sub.add_parser("economy")
    e.add_argument("--index", type=Path, required=True)
    p = sub.add_parser("pdf-sections")
    p.add_argument("paths", type=Path, nargs="+")
    a = ap.parse_args()
    if a.what == "economy":
        economy(a.index)
    else:
        pdf_sections(a.paths)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
