"""What labelling a trace's ranked candidates costs (source, section, page and enrichments of ~200 chunks not
labelled before): through ``get_chunks`` (decoding each chunk into the chunk cache) against ``chunk_places``
(three columns, nothing kept). Seven groups of 200 chunks of a built index, each read once, per way.

    PYTHONPATH=src .venv/bin/python bench/trace_labels.py --index /tmp/qs-stard
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from zhiku.api import KnowledgeBase
from zhiku.settings import load_settings, merge


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--index", type=Path, required=True)
    args = ap.parse_args()
    settings = merge(load_settings(index=args.index), tracing={"enabled": False})
    for way in ("get_chunks", "chunk_places"):
        with KnowledgeBase(settings, read_only=True) as kb:  # a fresh chunk cache for each way
            store = kb.store
            with store._read() as conn:
                ids = [r[0] for r in conn.execute("SELECT chunk_id FROM chunks ORDER BY rowid")]
            groups = [ids[i : i + 200] for i in range(0, min(len(ids), 1400), 200)]
            t0 = time.perf_counter()
            for g in groups:
                if way == "get_chunks":
                    kb.enrichments.chunk_labels(
                        {c.chunk_id: (c.source, c.section, c.page) for c in store.get_chunks(g)}
                    )
                else:
                    kb.enrichments.chunk_labels(store.chunk_places(g))
            per = (time.perf_counter() - t0) / len(groups)
            print(f"{way}: {per * 1e6:.0f} µs per 200 labels ({len(groups)} groups)")


if __name__ == "__main__":
    main()
