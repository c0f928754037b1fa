"""Building traces: one per query and per ingestion run, stage by stage, and exporting them as OpenTelemetry spans
(the ``otel`` extra); the records and the file sink are in ``trace``."""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from zhiku.cache import Cache
from zhiku.errors import MissingDependency
from zhiku.observability.trace import TRACE_FILE, JsonlSink, Sink, Stage, Trace, stage_order
from zhiku.observability.trace import MemorySink as MemorySink  # one import for the tracer and its sinks
from zhiku.observability.trace import read_traces as read_traces
from zhiku.settings import TracingSettings
from zhiku.types import Hit, IngestReport, ScoredId

log = logging.getLogger(__name__)

RANKING_MAX = 20  # candidates a channel stage lists (the rest are counted)
LABELS = 100_000  # chunk labels kept for traces (of one index version)

_current: ContextVar[_Root | None] = ContextVar("zhiku_trace", default=None)
Sets = list[tuple[Mapping[str, int] | None, str | None, Mapping[str, Any]]]  # what a span set: counts, status, data


class _Span:
    """One timed call of a stage; without a trace (``NOOP``) every method does nothing."""

    def __init__(self, open_: _Root | None, name: str) -> None:
        self._open, self._name, self._t0 = open_, name, 0.0
        self._sets: Sets = []
        self.active = open_ is not None

    def __enter__(self) -> _Span:
        if self._open is not None:
            self._t0 = time.perf_counter()
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if self._open is None:
            return
        seconds = time.perf_counter() - self._t0
        if exc is not None:
            self._sets.append((None, "error", {"error": f"{type(exc).__name__}: {exc}"}))
        self._open.add(self._name, self._t0, seconds, self._sets)

    def set(self, counts: Mapping[str, int] | None = None, status: str | None = None, **data: Any) -> None:
        """Add ``counts`` (summed over merged calls), set ``status`` and ``data`` (lists are extended)."""
        if self._open is not None:
            self._sets.append((counts, status, data))

    def ranking(self, items: Sequence[ScoredId], **data: Any) -> None:
        """Record a channel's candidates: ``counts.candidates`` and the first ``RANKING_MAX`` as ``data.ranking``."""
        if self._open is not None:
            self.set({"candidates": len(items)}, ranking=ranking_rows(items), **data)


NOOP = _Span(None, "")


def span(name: str) -> _Span:
    """Time the enclosed block as stage ``name`` of the current trace (a no-op when there is none)."""
    o = _current.get()
    return NOOP if o is None else _Span(o, name)


def mark(name: str, status: str = "off", **data: Any) -> None:
    """Record a stage that did not run (``{"status": "off"}``), e.g. rerank while no reranker exists."""
    o = _current.get()
    if o is not None:
        o.add(name, time.perf_counter(), 0.0, [(None, status, data)])


def waited(name: str, start: float, **data: Any) -> None:
    """Record a stage that only waited, from ``start`` (``time.perf_counter()``) until now: e.g. ``queue``."""
    o = _current.get()
    if o is not None:
        o.add(name, start, time.perf_counter() - start, [(None, None, data)])


class _Root:
    """A trace being recorded: made current while its block runs, added to by spans (which end on several threads,
    hence the lock), then sealed and handed to the tracer's sinks."""

    def __init__(self, sinks: Sequence[Sink], kind: str, attrs: dict[str, Any]) -> None:
        self.sinks, self.trace = sinks, Trace(kind, secrets.token_hex(8), time.time(), attrs)
        self.t0, self.lock, self.closed = time.perf_counter(), threading.Lock(), False

    def add(self, name: str, start: float, seconds: float, sets: Sets) -> None:
        """Record one call of stage ``name`` (merged into the stage when it exists); dropped once the trace ended."""
        with self.lock:
            if self.closed:
                return
            t = self.trace
            stage = t.stage(name)
            if stage is None:
                stage = Stage(name, (start - self.t0) * 1000)
                t.stages.append(stage)
            else:
                stage.calls += 1
            stage.elapsed_ms += seconds * 1000
            for counts, status, data in sets:
                stage.record(counts, status, data)

    def __enter__(self) -> Trace:
        self._token = _current.set(self)
        return self.trace

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        t = self.trace
        _current.reset(self._token)
        with self.lock:
            self.closed = True
            t.elapsed_ms = (time.perf_counter() - self.t0) * 1000
            if exc is not None:
                t.status, t.error = "error", f"{type(exc).__name__}: {exc}"
            t.stages.sort(key=stage_order)
        for sink in self.sinks:
            try:
                sink.write(t)
            except Exception as e:  # a full disk or a broken exporter must never fail a query
                log.warning("could not write trace %s to %s: %s", t.trace_id, type(sink).__name__, e)


class Tracer:
    """Opens traces and writes finished ones to its sinks; with no sinks it is off (and costs nothing)."""

    def __init__(self, sinks: Sequence[Sink] = ()) -> None:
        self.sinks = tuple(sinks)

    def trace(self, kind: str, *, capture: bool = False, **attrs: Any) -> AbstractContextManager[Trace | None]:
        """``with tracer.trace("query", query=q) as t:`` — ``t`` is the open ``Trace`` or ``None`` when off; a trace
        opened inside another adds its attributes to the outer one and records into it."""
        outer = _current.get()
        if outer is not None:
            for k, v in attrs.items():
                outer.trace.attrs.setdefault(k, v)
            return nullcontext(outer.trace)
        return _Root(self.sinks, kind, attrs) if self.sinks or capture else nullcontext()


def _attr(value: Any) -> str | int | float | bool:
    if isinstance(value, (str, bool, int, float)):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


class OtelSink:
    """A tracing sink that re-emits each finished trace through an OpenTelemetry tracer."""

    def __init__(self, tracer_provider: Any = None) -> None:
        try:
            from opentelemetry import trace as otel_trace
            from opentelemetry.trace import Status, StatusCode
        except ImportError:
            raise MissingDependency(
                "OpenTelemetry export needs the opentelemetry SDK: pip install 'zhiku[otel]' (or set tracing.otel: false)"
            ) from None
        self._otel_trace, self._Status, self._StatusCode = otel_trace, Status, StatusCode
        self._tracer = otel_trace.get_tracer("zhiku", tracer_provider=tracer_provider)

    def write(self, trace: Trace) -> None:
        start_ns = int(trace.started_at * 1e9)
        root = self._tracer.start_span(
            f"zhiku.{trace.kind}",
            start_time=start_ns,
            attributes={
                "zhiku.trace_id": trace.trace_id,
                **{f"zhiku.{k}": _attr(v) for k, v in trace.attrs.items() if v is not None},
            },
        )
        ctx = self._otel_trace.set_span_in_context(root)
        for s in sorted(trace.stages, key=lambda s: s.start_ms):
            begin = start_ns + int(s.start_ms * 1e6)
            attrs: dict[str, Any] = {"zhiku.status": s.status, "zhiku.calls": s.calls}
            attrs.update({f"zhiku.count.{k}": int(v) for k, v in s.counts.items()})
            if "summary" in s.data:
                attrs.update({f"zhiku.rank.{k}": int(v) for k, v in s.data["summary"].items()})
            child = self._tracer.start_span(s.name, context=ctx, start_time=begin, attributes=attrs)
            if s.status == "error":
                child.set_status(self._Status(self._StatusCode.ERROR, str(s.data.get("error", ""))))
            child.end(end_time=begin + int(s.elapsed_ms * 1e6))
        if trace.status == "error":
            root.set_status(self._Status(self._StatusCode.ERROR, trace.error or ""))
        root.end(end_time=start_ns + int(trace.elapsed_ms * 1e6))


def build_tracer(settings: TracingSettings, index: Path) -> Tracer:
    """The tracer a ``KnowledgeBase`` uses: ``<index>/traces.jsonl`` (and OpenTelemetry when asked), or off."""
    if not settings.enabled:
        return Tracer()
    sinks: list[Sink] = [JsonlSink(Path(index) / TRACE_FILE)]
    if settings.otel:
        sinks.append(OtelSink())
    return Tracer(sinks)


def ranking_rows(items: Sequence[ScoredId], limit: int = RANKING_MAX) -> list[dict[str, Any]]:
    """A channel's first ``limit`` candidates as rows: ``chunk_id``, ``rank``, ``score``."""
    return [{"chunk_id": x.chunk_id, "rank": x.rank, "score": round(float(x.score), 6)} for x in items[:limit]]


def rank_changes(
    before: Mapping[str, int],
    after: Sequence[str],
    *,
    keep_dropped_within: int,
    channels: tuple[Mapping[str, int], Mapping[str, int]] | None = None,
) -> dict[str, Any]:
    """What a stage records: ``changes``, one row per id of ``after`` (in order), then the ids of ``before`` it left out
    that stood within ``keep_dropped_within`` (the ones worth a look), and the ``summary`` over all of them."""
    rows: list[dict[str, Any]] = []
    summary = dict.fromkeys(("moved_up", "moved_down", "unchanged", "new", "max_gain", "max_drop", "dropped"), 0)

    def row(cid: str, was: int | None, pos: int | None, delta: int | None, status: str) -> None:
        rows.append({"chunk_id": cid, "rank_before": was, "rank_after": pos, "delta": delta, "status": status})
        if channels is not None:
            rows[-1].update(bm25_rank=channels[0].get(cid), dense_rank=channels[1].get(cid))

    for pos, cid in enumerate(after, 1):
        was = before.get(cid)
        if was is None:
            summary["new"] += 1
            row(cid, None, pos, None, "new")
            continue
        delta = was - pos
        if delta > 0:
            summary["moved_up"] += 1
            summary["max_gain"] = max(summary["max_gain"], delta)
        elif delta < 0:
            summary["moved_down"] += 1
            summary["max_drop"] = max(summary["max_drop"], -delta)
        else:
            summary["unchanged"] += 1
        row(cid, was, pos, delta, "up" if delta > 0 else "down" if delta < 0 else "same")
    kept = set(after)
    for cid, was in sorted(before.items(), key=lambda kv: (kv[1], kv[0])):
        if cid not in kept:
            summary["dropped"] += 1
            if was <= keep_dropped_within:
                row(cid, was, None, None, "dropped")
    return {"changes": rows, "summary": summary}


def fusion_changes(
    bm25: Sequence[ScoredId], dense: Sequence[ScoredId], fused: Sequence[str], top_k: int
) -> tuple[dict[str, int], dict[str, Any]]:
    """The fusion stage's ``counts`` (``candidates``: the chunks any channel found) and its rank changes."""
    b = {x.chunk_id: x.rank for x in bm25}
    d = {x.chunk_id: x.rank for x in dense}
    best = {c: min(r for r in (b.get(c), d.get(c)) if r is not None) for c in b.keys() | d.keys()}
    counts = {"candidates": len(best.keys() | set(fused))}
    return counts, rank_changes(best, fused, keep_dropped_within=top_k, channels=(b, d))


HIT_FIELDS = ("bm25_rank", "bm25_score", "dense_rank", "dense_score", "fused_rank", "rerank_score", "rerank_sigmoid")


Lookup = Callable[[list[str]], Mapping[str, Mapping[str, Any]]]


def labels(fetch: Lookup, version: Callable[[], int]) -> Lookup:
    """Chunk labels for traces (``fetch(ids)``: source, section, page, enrichments), kept by index version."""
    kept: Cache[Mapping[str, Any]] = Cache(LABELS)

    def lookup(chunk_ids: list[str]) -> dict[str, Mapping[str, Any]]:
        now = version()
        out = {c: got for c in chunk_ids if (got := kept.get(c, now)) is not None}
        if missing := [c for c in chunk_ids if c not in out]:
            for c, label in fetch(missing).items():
                kept.put(c, label, now)
                out[c] = label
        return out

    return lookup


def record_hits(trace: Trace, hits: Sequence[Hit], lookup: Lookup) -> None:
    """Put the query's hits in ``trace.data`` and label every row the trace lists."""
    place = ("source", "section", "page", "score", *HIT_FIELDS)
    trace.data["hits"] = [
        {"rank": n, "chunk_id": h.chunk.chunk_id, **{f: getattr(h.chunk if f in place[:3] else h, f) for f in place}}
        for n, h in enumerate(hits, 1)
    ]
    lists = [v for d in [*(s.data for s in trace.stages), trace.data] for v in d.values() if isinstance(v, list)]
    rows = [r for rows in lists for r in rows if isinstance(r, dict) and "chunk_id" in r]
    labels = lookup(sorted({r["chunk_id"] for r in rows}))
    for r in rows:
        for k, v in (labels.get(r["chunk_id"]) or {}).items():
            r.setdefault(k, v)


def report_rows(report: IngestReport) -> dict[str, Any]:
    """An ingestion report as trace data: one row per document with its status (and reason when it failed)."""
    why = {"skipped": "unchanged (same SHA-256)"}
    statuses = ("added", "updated", "skipped", "removed")
    docs = [{"source": n, "status": s, "reason": why.get(s)} for s in statuses for n in getattr(report, s)]
    docs += [{"source": f.path, "status": "failed", "reason": f.reason} for f in report.failed]
    totals = {k: getattr(report, k) for k in ("chunks_written", "chunks_embedded", "dry_run")}
    return {"documents": docs, "counts": report.counts(), **totals}
