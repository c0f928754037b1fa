"""What the dashboard shows, read through the library (nothing here imports Streamlit)."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zhiku.api import KnowledgeBase
from zhiku.embedding.base import Embedder
from zhiku.errors import InvalidInput, NotFound, ZhikuError
from zhiku.evaluation.runner import HistoryEntry, append_history, history_entry, read_history
from zhiku.numeric import percentile
from zhiku.observability.trace import TRACE_FILE, Trace, ordered_stages, read_traces
from zhiku.settings import Settings, merge
from zhiku.types import Chunk, CollectionStats, DocRecord, IngestionRecord, IngestReport

UPLOADS = "uploads"  # <index>/uploads/<collection>/<file>: where uploaded files are kept (ingestion reads paths)
RECENT = 200  # traces looked at for "recent health"


@dataclass(frozen=True)
class Health:
    """Recent query traces: how many, how many failed, latency percentiles."""

    queries: int
    errors: int
    p50_ms: float
    p95_ms: float
    ingests: int
    last_at: float | None


@dataclass(frozen=True)
class Overview:
    index: str
    exists: bool
    settings: dict[str, Any]
    meta: dict[str, str]  # what the index was built with (tokenizer, embedder, dim, chunking, versions)
    collections: tuple[CollectionStats, ...]
    health: Health
    last_ingestion: IngestionRecord | None
    eval_runs: int
    problems: tuple[str, ...] = field(default=())

    @property
    def documents(self) -> int:
        return sum(c.documents for c in self.collections)

    @property
    def chunks(self) -> int:
        return sum(c.chunks for c in self.collections)


class DashboardData:
    """The dashboard's window on one index (``settings.index``)."""

    def __init__(self, settings: Settings, *, embedder: Embedder | None = None) -> None:
        self.settings = settings
        self.embedder = embedder

    @property
    def index(self) -> Path:
        return Path(self.settings.index)

    @property
    def exists(self) -> bool:
        return self.index.is_dir() and any(self.index.iterdir())

    def kb(self, *, read_only: bool = True) -> KnowledgeBase:  # used as `with self.kb() as kb:`
        return KnowledgeBase(self.settings, read_only=read_only, embedder=self.embedder)

    def health(self) -> Health:
        recent = read_traces(self.index / TRACE_FILE, limit=RECENT)
        queries = [t for t in recent if t.kind == "query"]
        ms = [t.elapsed_ms for t in queries]
        p50, p95 = (percentile(ms, p) if ms else 0.0 for p in (50, 95))  # no queries yet: the overview shows 0
        errors, ingests = sum(t.status == "error" for t in queries), sum(t.kind == "ingest" for t in recent)
        return Health(len(queries), errors, p50, p95, ingests, max((t.started_at for t in recent), default=None))

    def overview(self) -> Overview:
        settings = json.loads(self.settings.model_dump_json())
        if not self.exists:
            missing = f"no index at {self.index} yet: ingest documents (ingestion page or `zhiku ingest PATH`)"
            return Overview(str(self.index), False, settings, {}, (), self.health(), None, 0, (missing,))
        problems: list[str] = []
        with self.kb() as kb:
            meta = kb.meta()
            try:
                stale = kb.stale()
            except ZhikuError as e:  # e.g. the configured embedder cannot be built here
                stale, problems = {}, [f"cannot check the index against the settings: {e}"]
            if changed := ", ".join(f"{k}: {a} → {b}" for k, (a, b) in stale.items()):
                problems.append(
                    f"the index was built with other settings ({changed}): rebuild with `zhiku ingest PATH --force`"
                )
            last = next(iter(kb.history(1)), None)
            collections, runs = tuple(kb.collections()), len(read_history(self.index))
            return Overview(
                str(self.index), True, settings, meta, collections, self.health(), last, runs, tuple(problems)
            )

    def collections(self) -> list[CollectionStats]:
        if not self.exists:
            return []
        with self.kb() as kb:
            return kb.collections()

    def documents(self, collection: str | None = None) -> list[DocRecord]:
        if not self.exists:
            return []
        with self.kb() as kb:
            return kb.documents(collection)

    def chunks(self, doc_id: str) -> list[Chunk]:
        with self.kb() as kb:
            return kb.document_chunks(doc_id)

    def save_uploads(self, files: Sequence[tuple[str, bytes]], collection: str) -> list[Path]:
        """Keep uploaded files under ``<index>/uploads/<collection>/`` (re-uploading replaces them)."""
        folder = self.index / UPLOADS / collection
        folder.mkdir(parents=True, exist_ok=True)
        for name, _ in files:
            if not Path(name).name or Path(name).name.startswith("."):
                raise InvalidInput(f"cannot store an upload named {name!r}")
        for name, data in files:
            (folder / Path(name).name).write_bytes(data)
        return [folder / Path(name).name for name, _ in files]

    def ingest(
        self, paths: Sequence[Path], collection: str, *, on_progress: Callable[[int, int, str], None] | None = None
    ) -> IngestReport:
        with self.kb(read_only=False) as kb:
            return kb.ingest(list(paths), collection=collection, on_progress=on_progress)

    def delete(self, doc_id: str) -> DocRecord:
        """Delete a document from every index (and its uploaded file, if it came from an upload)."""
        with self.kb(read_only=False) as kb:
            doc = kb.delete(doc_id)
        uploaded = Path(doc.path)
        if uploaded.is_file() and uploaded.is_relative_to((self.index / UPLOADS).resolve()):
            uploaded.unlink()
        return doc

    def traces(self, kind: str | None = None, limit: int = 100) -> list[Trace]:
        return read_traces(self.index / TRACE_FILE, kind=kind, limit=limit)

    def query(
        self, text: str, *, mode: str | None = None, top_k: int | None = None, collection: str | None = None
    ) -> Trace:
        """Run a query now and return its trace (also written to traces.jsonl when tracing is on)."""
        with self.kb() as kb, kb.tracer.trace("query", capture=True, surface="dashboard") as t:
            with suppress(NotFound):  # a collection emptied since it was chosen: the trace shows the search
                kb.query(text, mode=mode, top_k=top_k, collection=collection)
        assert t is not None
        return t

    def eval_history(self) -> list[HistoryEntry]:
        return read_history(self.index)

    def run_eval(self, dataset: Path, *, mode: str | None = None, k: int = 10, collection: str | None = None) -> Any:
        """Evaluate a YAML set against this index, or a BEIR folder in a temporary index; recorded in the history."""
        from zhiku.evaluation.datasets import load_dataset
        from zhiku.evaluation.runner import evaluate, index_dataset

        data = load_dataset(Path(dataset))
        mode_ = mode or self.settings.retrieval.mode
        with tempfile.TemporaryDirectory(prefix="zhiku-dashboard-eval-") as tmp:
            index = self.index if data.kind == "yaml" else Path(tmp)
            settings = merge(self.settings, index=str(index), tracing={"enabled": False})
            with KnowledgeBase(settings, read_only=data.kind == "yaml", embedder=self.embedder) as kb:
                if data.kind == "beir":
                    collection = data.name
                    index_dataset(kb, data, collection=collection)
                result = evaluate(kb, data, mode=mode_, k=k, collection=collection)
        if self.exists:
            append_history(self.index, history_entry(result))
        return result


def waterfall(trace: Trace) -> list[dict[str, Any]]:
    """One row per stage: where it starts and ends (ms), its status and counts — a waterfall chart's data."""
    return [
        {
            "stage": s.name,
            "start_ms": round(s.start_ms, 3),
            "end_ms": round(s.start_ms + s.elapsed_ms, 3),
            "elapsed_ms": round(s.elapsed_ms, 3),
            "status": s.status,
            "calls": s.calls,
            "counts": ", ".join(f"{k}={v}" for k, v in s.counts.items()),
            "note": s.data.get("reason") or s.data.get("error") or "",
        }
        for s in ordered_stages(trace)
    ]


def channel_rows(trace: Trace, stage: str) -> list[dict[str, Any]]:
    """A retrieval channel's ranking (rank, score, source, section)."""
    rows = s.data.get("ranking", []) if (s := trace.stage(stage)) is not None else []
    return [{k: r.get(k, "") for k in ("rank", "score", "source", "section", "chunk_id")} for r in rows]


def rank_rows(trace: Trace) -> list[dict[str, Any]]:
    """The fusion rank-change table (empty for single-channel queries)."""
    s = trace.stage("fusion")
    if s is None or s.status != "ok":
        return []
    rows = []
    for c in s.data.get("changes", []):
        change = c["status"] if c["delta"] is None else f"{c['delta']:+d}"
        ranks = {"after": c["rank_after"], "change": change, "before": c["rank_before"]}
        place = {"source": c.get("source", ""), "section": c.get("section", "")}
        rows.append({**ranks, "bm25": c["bm25_rank"], "dense": c["dense_rank"], **place})
    return rows


def latest_busy(traces: Sequence[Trace]) -> int:
    """The position of the newest ingestion run that changed something."""
    busy = ("added", "updated", "removed", "failed")
    return next((i for i, t in enumerate(traces) if any(t.data.get("counts", {}).get(k) for k in busy)), 0)


def trace_label(t: Trace) -> str:
    when = time.strftime("%m-%d %H:%M:%S", time.localtime(t.started_at))
    what = t.attrs.get("query") or ", ".join(t.attrs.get("paths") or []) or f"{t.attrs.get('documents', '')} documents"
    by = f" · by {t.attrs['caller']}" if t.attrs.get("caller") else ""  # a served token's name: who asked
    return f"{when} · {t.status} · {t.elapsed_ms:.0f} ms{by} · {str(what)[:60]}"


def history_rows(entries: Sequence[HistoryEntry]) -> list[dict[str, Any]]:
    """Evaluation history as flat rows for a trend chart (one row per run and metric)."""
    return [
        {
            "run": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.at)),
            "dataset": e.dataset,
            "variant": e.variant,
            "metric": name,
            "value": value,
        }
        for e in entries
        for name, value in e.metrics.items()
    ]
