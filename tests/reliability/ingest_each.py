"""Driver of the bad-file run: ingest each path named in a list file on its own, in this one process, and print
one JSON line per file: seconds, peak RSS so far (MB), added or the failure reason, and whether it raised.

    python tests/reliability/ingest_each.py INDEX LIST_FILE

Time spent in the embedding model is measured apart (``embed_seconds``): it grows with the text a file really
holds, at the machine's embedding speed, while a hang is time spent anywhere else. A file still running after
``ALARM_S`` is interrupted by SIGALRM. Settings come from the ``ZHIKU_*`` environment (the embedding cache).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ALARM_S = 300


def peak_rss_mb() -> float:
    """``VmHWM``: this process's peak resident memory since its exec (``ru_maxrss`` also counts what the
    parent's pages added between fork and exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Hang(BaseException):  # not an Exception: the pipeline's "one bad file" handler must not swallow it
    pass


def _alarm(signum: int, frame: object) -> None:
    raise Hang(f"no answer within {ALARM_S}s")


class TimedEmbedder:
    """The configured embedder, with the seconds spent in it added up."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.seconds = inner, 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def embed_documents(self, texts: Any) -> Any:
        started = time.monotonic()
        try:
            return self.inner.embed_documents(texts)
        finally:
            self.seconds += time.monotonic() - started


def main(index: str, list_file: str) -> None:
    from zhiku.api import KnowledgeBase
    from zhiku.embedding import build_embedder
    from zhiku.ingest.files import printable
    from zhiku.settings import load_settings

    paths = [os.fsdecode(line) for line in Path(list_file).read_bytes().split(b"\0") if line]
    signal.signal(signal.SIGALRM, _alarm)
    settings = load_settings(None, index=Path(index))
    embedder = TimedEmbedder(build_embedder(settings.embedding, settings.cache_dir))
    with KnowledgeBase(settings, embedder=embedder) as kb:
        for path in paths:
            started = time.monotonic()
            row: dict[str, object] = {"path": printable(path)}
            signal.alarm(ALARM_S)
            embed_before = embedder.seconds
            try:
                report = kb.ingest([Path(path)], collection="bad")
                row.update(added=bool(report.added or report.updated or report.skipped))
                row.update(reason=report.failed[0].reason if report.failed else None)
            except Hang:
                row.update(hang=True)
            except BaseException as e:  # a traceback: what the suite counts as a failure
                row.update(raised=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-2000:])
            finally:
                signal.alarm(0)
            row.update(
                seconds=round(time.monotonic() - started, 3),
                embed_seconds=round(embedder.seconds - embed_before, 3),
                peak_rss_mb=round(peak_rss_mb(), 1),
            )
            print(json.dumps(row, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
