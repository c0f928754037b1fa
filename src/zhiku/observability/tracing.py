"""Traces: one per query and per ingestion run, stage by stage, written as one JSON line each.

A trace is ``trace → stages[]``; a stage has a name, a start (ms after the trace began), ``elapsed_ms``,
a status (``ok``, ``off`` for a stage that is switched off, ``error``), ``counts`` and its ``data``.
Library code marks stages with ``with span("bm25") as sp: …; sp.set(counts={...}, ranking=[...])``.
Outside an open trace ``span`` returns a shared no-op object, so instrumented code costs a context-variable
read when tracing is off (``bench/tracing_overhead.py`` measures it).

The current trace lives in a ``ContextVar``: code run with ``contextvars.copy_context().run`` in a worker
thread (the dense channel) records into the same trace. A span whose name already exists in the trace is
merged into that stage (``calls`` + 1, elapsed and counts summed, list data extended), so ingestion's
per-document spans give one ``load`` stage per run, not one per file.

Rank tracking (fusion, rerank) is a set of small pure functions in ``zhiku.observability.rank_changes``, re-exported here:
``rank_changes``, ``fusion_rank_changes``, ``summarize_changes``, ``changes_data``.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from zhiku.observability.columns import Columns
from zhiku.observability.rank_changes import (  # noqa: F401 (re-exported: tracing is where stages record rank changes)
    RankChange,
    RankSummary,
    changes_data,
    fusion_rank_changes,
    rank_changes,
    summarize_changes,
)
from zhiku.observability.trace import (  # noqa: F401 (re-exported)
    DETAILS,
    RANKING_MAX,
    STAGES,
    TRACE_FILE,
    JsonlSink,
    MemorySink,
    Sink,
    Stage,
    Trace,
    ordered_stages,
    read_traces,
    trace_files,
)
from zhiku.settings import TracingSettings
from zhiku.types import Hit, IngestReport, ScoredId

log = logging.getLogger(__name__)


_current: ContextVar[Trace | None] = ContextVar("zhiku_trace", default=None)


class _Span:
    """A stage being timed inside an open trace."""

    __slots__ = ("_trace", "_name", "_t0", "stage")
    active = True

    def __init__(self, trace: Trace, name: str) -> None:
        self._trace = trace
        self._name = name

    def __enter__(self) -> _Span:
        self._t0 = time.perf_counter()
        self.stage = self._trace._open(self._name, self._t0)
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        self.stage.elapsed_ms += (time.perf_counter() - self._t0) * 1000
        if exc is not None:
            self.stage.status = "error"
            self.stage.data["error"] = f"{type(exc).__name__}: {exc}"

    def set(self, counts: Mapping[str, int] | None = None, status: str | None = None, **data: Any) -> None:
        """Add ``counts`` (summed over merged calls), set ``status`` and ``data`` (lists, columns are extended)."""
        _record(self._trace, self.stage, counts, status, data)

    def ranking(self, items: Sequence[ScoredId], **data: Any) -> None:
        """Record a channel's candidates: ``counts.candidates`` now, the first ``Trace.ranking_limit()`` when the
        trace is sealed (``items`` is kept, not copied: a ranking is not changed once a channel returned it)."""
        self.set(counts={"candidates": len(items)}, **data)
        self.later(lambda: ({}, {"ranking": ranking_columns(items, self._trace.ranking_limit())}))

    def later(self, record: Callable[[], tuple[Mapping[str, int], Mapping[str, Any]]]) -> None:
        """``set(counts, **data)`` with what ``record()`` returns, when the trace is sealed (``Trace.defer``): for
        what only a written trace needs (rank changes). ``record`` must only read values that do not change."""
        self._trace.defer(lambda: self._set_later(record))

    def _set_later(self, record: Callable[[], tuple[Mapping[str, int], Mapping[str, Any]]]) -> None:
        counts, data = record()
        self.set(counts=counts, **data)


def _record(
    trace: Trace, s: Stage, counts: Mapping[str, int] | None, status: str | None, data: Mapping[str, Any]
) -> None:
    with trace._lock:
        if counts:
            for k, v in counts.items():
                s.counts[k] = s.counts.get(k, 0) + int(v)
        if status is not None:
            s.status = status
        for k, v in data.items():
            old = s.data.get(k)
            if isinstance(v, (list, Columns)) and type(old) is type(v):
                old.extend(v)
            else:
                s.data[k] = v


class _NoSpan:
    """What ``span`` returns outside a trace: every method does nothing."""

    __slots__ = ()
    active = False

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set(self, counts: Mapping[str, int] | None = None, status: str | None = None, **data: Any) -> None:
        return None

    def ranking(self, items: Sequence[ScoredId], **data: Any) -> None:
        return None

    def later(self, record: Callable[[], tuple[Mapping[str, int], Mapping[str, Any]]]) -> None:
        return None


NOOP = _NoSpan()


def span(name: str) -> _Span | _NoSpan:
    """Time the enclosed block as stage ``name`` of the current trace (a no-op when there is none)."""
    t = _current.get()
    return NOOP if t is None else _Span(t, name)


def mark(name: str, status: str = "off", **data: Any) -> None:
    """Record a stage that did not run (``{"status": "off"}``), e.g. rerank while no reranker exists."""
    t = _current.get()
    if t is not None:
        _record(t, t._open(name, time.perf_counter()), None, status, data)


def current() -> Trace | None:
    return _current.get()


def ranking_columns(items: Sequence[ScoredId], limit: int = RANKING_MAX) -> Columns:
    """A channel's first ``limit`` candidates as columns: ``chunk_id``, ``rank``, ``score``."""
    first = items[:limit]
    return Columns(
        {
            "chunk_id": [x.chunk_id for x in first],
            "rank": [x.rank for x in first],
            "score": [round(float(x.score), 6) for x in first],
        }
    )


def _trace_id() -> str:
    """16 hex digits from ``random`` (seeded from ``os.urandom``, reseeded in a forked child): an id, not a
    secret; ``uuid4`` reads ``os.urandom`` on every call (~7× slower)."""
    return f"{random.getrandbits(64):016x}"


class _Root:
    """Opens a new trace, makes it current, and hands it to the sinks when the block ends."""

    def __init__(self, tracer: Tracer, kind: str, attrs: dict[str, Any], capture: bool) -> None:
        self._tracer = tracer
        self._capture = capture
        self._trace = Trace(kind, _trace_id(), time.time(), attrs, detail=tracer.detail)

    def __enter__(self) -> Trace:
        self._trace._t0 = time.perf_counter()
        self._token = _current.set(self._trace)
        return self._trace

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        t = self._trace
        _current.reset(self._token)
        t.elapsed_ms = (time.perf_counter() - t._t0) * 1000
        if exc is not None:
            t.status, t.error = "error", f"{type(exc).__name__}: {exc}"
        if self._capture:  # the caller reads it (``--verbose``, the dashboard): complete it now, as rows
            t.readable()
        self._tracer.emit(t)


class _Join:
    """A trace opened inside another one adds its attributes to the outer trace and records into it."""

    def __init__(self, trace: Trace, attrs: dict[str, Any]) -> None:
        self._trace = trace
        self._attrs = attrs

    def __enter__(self) -> Trace:
        for k, v in self._attrs.items():
            self._trace.attrs.setdefault(k, v)
        return self._trace

    def __exit__(self, *exc: object) -> None:
        return None


class _NoTrace:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_TRACE = _NoTrace()


class Tracer:
    """Opens traces and writes finished ones to its sinks; with no sinks it is off (and costs nothing)."""

    def __init__(self, sinks: Sequence[Sink] = (), *, detail: str = "lean") -> None:
        if detail not in DETAILS:
            raise ValueError(f"tracing detail {detail!r}: use one of {', '.join(DETAILS)}")
        self.sinks = tuple(sinks)
        self.detail = detail

    @property
    def enabled(self) -> bool:
        return bool(self.sinks)

    def trace(self, kind: str, *, capture: bool = False, **attrs: Any) -> _Root | _Join | _NoTrace:
        """``with tracer.trace("query", query=q) as t:`` — ``t`` is the open ``Trace`` or ``None`` when off.

        Inside an already open trace this joins it. ``capture=True`` records even when the tracer has no
        sinks (``zhiku query --verbose`` prints the stages without writing them anywhere).
        """
        outer = _current.get()
        if outer is not None:
            return _Join(outer, attrs)
        if not self.sinks and not capture:
            return _NO_TRACE
        return _Root(self, kind, attrs, capture)

    def flush(self) -> None:
        """Wait until the sinks that write in the background have written every trace handed to them."""
        for sink in self.sinks:
            flush = getattr(sink, "flush", None)
            if flush is not None:
                flush()

    def emit(self, trace: Trace) -> None:
        for sink in self.sinks:
            try:
                sink.write(trace)
            except Exception as e:  # a full disk or a broken exporter must never fail a query
                log.warning("could not write trace %s to %s: %s", trace.trace_id, type(sink).__name__, e)


class VersionedLabels:
    """Chunk labels for traces (``fetch(ids)``: source, section, page, enrichments), remembered for one index
    version: a chunk id's labels do not change until the index does, so a traced query looks up only the chunks
    no earlier query labelled. ``version()`` is the store's ``index_version``, read at most every ``recheck_s``
    (a trace written within that time of a write may carry a changed chunk's old labels); at most ``max_items``
    are kept.
    (A document's enrichments are stored just after its chunks: a query traced in between labels that document's
    chunks without them until the next write. Traces only; answers never read these labels.)"""

    def __init__(
        self,
        fetch: Callable[[list[str]], Mapping[str, Mapping[str, Any]]],
        version: Callable[[], int],
        max_items: int = 100_000,
        recheck_s: float = 0.5,
    ) -> None:
        self._fetch, self._version, self._max, self._recheck_s = fetch, version, max_items, recheck_s
        self._state: tuple[int, dict[str, Mapping[str, Any]]] = (-1, {})
        self._checked = (-1.0, -1)  # (when, version): the version is read at most every recheck_s (~11 µs a read)

    def __call__(self, chunk_ids: list[str]) -> dict[str, Mapping[str, Any]]:
        now = time.monotonic()
        when, version = self._checked
        if now - when >= self._recheck_s or when < 0:
            version = self._version()
            self._checked = (now, version)
        state = self._state
        if state[0] != version or len(state[1]) > self._max:
            state = self._state = (version, {})  # one swap: a query still filling the old dict changes nothing
        known = state[1]
        missing = [c for c in chunk_ids if c not in known]
        if missing:
            known.update(self._fetch(missing))
        return {c: known[c] for c in chunk_ids if c in known}


def label_chunks(trace: Trace, lookup: Callable[[list[str]], Mapping[str, Mapping[str, Any]]]) -> None:
    """Put the labels (``lookup``: source, section, page, enrichment) of every chunk the trace lists, in its
    stages' data and its own (columns or rows with a ``chunk_id``), in ``trace.labels``: readers add them to
    the rows (``Trace.readable``), and the line names each chunk's labels once."""
    ids: set[str] = set()
    for data in [s.data for s in trace.stages] + [trace.data]:
        for v in data.values():
            if type(v) is Columns:
                ids.update(v.cols.get("chunk_id", ()))
            elif type(v) is list and v and type(v[0]) is dict:
                ids.update([r["chunk_id"] for r in v if "chunk_id" in r])
    if ids:
        trace.labels.update(lookup(sorted(ids)))


def label_later(
    trace: Trace, hits: Sequence[Hit], lookup: Callable[[list[str]], Mapping[str, Mapping[str, Any]]]
) -> None:
    """When the trace is sealed: ``data.hits`` as columns, and the labels of every chunk the trace lists."""

    def label() -> None:
        trace.data["hits"] = hit_columns(hits)
        label_chunks(trace, lookup)

    trace.defer(label)


def build_tracer(settings: TracingSettings, index: Path) -> Tracer:
    """The tracer a ``KnowledgeBase`` uses: ``<index>/traces.jsonl`` (and OpenTelemetry when asked), or off."""
    if not settings.enabled:
        return Tracer()
    sinks: list[Sink] = [JsonlSink(Path(index) / TRACE_FILE, max_bytes=settings.max_bytes, backups=settings.backups)]
    if settings.otel:
        from zhiku.observability.otel import OtelSink

        sinks.append(OtelSink())
    return Tracer(sinks, detail=settings.detail)


_HIT_FIELDS: tuple[str, ...] = ("chunk_id", "source", "section", "page", "score", "bm25_rank", "bm25_score")
_HIT_FIELDS += ("dense_rank", "dense_score", "fused_rank", "rerank_score", "rerank_sigmoid")
_ROUNDED = frozenset({"score", "bm25_score", "dense_score", "rerank_score", "rerank_sigmoid"})


def hit_columns(hits: Sequence[Hit]) -> Columns:
    """The final hits of a query as trace columns (rank, ids, every channel's evidence; scores to 6 places)."""
    rows = [
        (c.chunk_id, c.source, c.section, c.page, h.score, h.bm25_rank, h.bm25_score)
        + (h.dense_rank, h.dense_score, h.fused_rank, h.rerank_score, h.rerank_sigmoid)
        for h in hits
        for c in (h.chunk,)
    ]
    cols: dict[str, list[Any]] = {"rank": list(range(1, len(hits) + 1))}
    for name, values in zip(_HIT_FIELDS, zip(*rows, strict=True) if rows else [()] * len(_HIT_FIELDS), strict=True):
        cols[name] = [None if v is None else round(v, 6) for v in values] if name in _ROUNDED else list(values)
    return Columns(cols)


def report_rows(report: IngestReport) -> dict[str, Any]:
    """An ingestion report as trace data: one row per document with its status (and reason when it failed)."""
    docs: list[dict[str, Any]] = []
    for status, names in (
        ("added", report.added),
        ("updated", report.updated),
        ("skipped", report.skipped),
        ("removed", report.removed),
    ):
        docs.extend(
            {"source": n, "status": status, "reason": "unchanged (same SHA-256)" if status == "skipped" else None}
            for n in names
        )
    docs.extend({"source": f.path, "status": "failed", "reason": f.reason} for f in report.failed)
    return {
        "documents": docs,
        "counts": report.counts(),
        "chunks_written": report.chunks_written,
        "chunks_embedded": report.chunks_embedded,
        "dry_run": report.dry_run,
    }
