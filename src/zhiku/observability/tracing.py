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
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from zhiku.observability.columns import ranking_columns as ranking_columns  # re-exported
from zhiku.observability.columns import report_rows as report_rows  # re-exported
from zhiku.observability.labels import VersionedLabels as VersionedLabels  # re-exported
from zhiku.observability.labels import hit_rows as hit_rows
from zhiku.observability.labels import label_chunks as label_chunks
from zhiku.observability.labels import label_later as label_later
from zhiku.observability.rank_changes import (  # noqa: F401 (re-exported: tracing is where stages record rank changes)
    RankChange,
    RankSummary,
    changes_data,
    fusion_rank_changes,
    rank_changes,
    summarize_changes,
)
from zhiku.observability.records import OPEN, PIECE, Sets
from zhiku.observability.sampling import Reason
from zhiku.observability.trace import (  # noqa: F401 (re-exported)
    DETAIL,
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
from zhiku.types import ScoredId

log = logging.getLogger(__name__)


_current: ContextVar[Trace | None] = ContextVar("zhiku_trace", default=None)
Later = Callable[[], tuple[Mapping[str, int], Mapping[str, Any]]]  # counts and data recorded when sealed


class _Span:
    """A stage being timed inside an open trace: what it records is appended to the trace when it ends, as one
    tuple, and becomes a ``Stage`` when the trace is sealed (``Trace._replay``)."""

    __slots__ = ("_trace", "_name", "_t0", "_sets")
    active = True
    _trace: Trace
    _name: str
    _t0: float
    _sets: Sets | None  # made by ``span`` (no ``__init__``)

    def __enter__(self) -> _Span:
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        elapsed = time.perf_counter() - self._t0
        t, sets = self._trace, self._sets
        if t._closed:  # the trace ended meanwhile (a thread that outlived its query): dropped
            return
        if exc is not None:
            sets = [*(sets or ()), (None, "error", {"error": f"{type(exc).__name__}: {exc}"})]
            t.stage_failed = True
        t._events.append((self._name, self._t0, elapsed, sets))  # list.append: safe across threads

    @contextmanager
    def outside(self, cm: AbstractContextManager[Any]) -> Iterator[None]:
        """Enter ``cm`` with this span's clock stopped (waiting for the search gate is the ``queue`` stage's time,
        not this one's): the part so far is recorded now, as part of the same call."""
        now = time.perf_counter()
        if not self._trace._closed:
            self._trace._events.append((self._name, self._t0, now - self._t0, PIECE))
        self._t0 = now
        with cm:
            self._t0 = time.perf_counter()
            yield

    def set(self, counts: Mapping[str, int] | None = None, status: str | None = None, **data: Any) -> None:
        """Add ``counts`` (summed over merged calls), set ``status`` and ``data`` (lists, columns are extended)."""
        if self._trace._closed:
            return
        if status == "error":
            self._trace.stage_failed = True
        if self._sets is None:
            self._sets = [(counts, status, data)]
        else:
            self._sets.append((counts, status, data))

    def ranking(self, items: Sequence[ScoredId], **data: Any) -> None:
        """Record a channel's candidates: ``counts.candidates`` now, the first ``Trace.ranking_limit()`` when the
        trace is sealed (``items`` is kept, not copied: a ranking is not changed once a channel returned it)."""
        t = self._trace
        if t._closed:
            return
        counted = ({"candidates": len(items)}, None, data)  # ``set`` inline (every channel's span records one)
        if self._sets is None:
            self._sets = [counted]
        else:
            self._sets.append(counted)
        t._later.append((_Ranking((self._name, items)), DETAIL))  # type: ignore[arg-type]  # (a tuple's __call__)

    def later(self, record: Later) -> None:
        """``set(counts, **data)`` with what ``record()`` returns, when the trace is sealed (``Trace.defer``) and
        keeps its candidate detail (``sampling``): for what only a written trace needs (rank changes). ``record``
        must only read values that do not change (the trace may be sealed by the trace writer's thread)."""
        self._trace.defer(_Later((self._name, record)), DETAIL)  # type: ignore[arg-type]


class _Later(tuple[str, Later]):
    """A span's deferred ``set``, ``(name, record)``: what ``record()`` returns, added to stage ``name`` when the
    trace is sealed. A tuple: made without a Python ``__init__`` (most are dropped unread: sampled out)."""

    __slots__ = ()

    def __call__(self, trace: Trace) -> None:
        name, record = self
        counts, data = record()
        stage = trace.stage(name)
        if stage is not None:
            stage.record(counts, None, data)


class _Ranking(tuple[str, Sequence[ScoredId]]):
    """A channel's candidates (``_Span.ranking``), ``(name, items)``, listed in stage ``name`` when the trace is
    sealed (a tuple, as ``_Later``)."""

    __slots__ = ()

    def __call__(self, trace: Trace) -> None:
        name, items = self
        stage = trace.stage(name)
        if stage is not None:
            stage.record({}, None, {"ranking": ranking_columns(items, trace.ranking_limit())})


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

    def later(self, record: Later) -> None:
        return None

    def outside(self, cm: AbstractContextManager[Any]) -> AbstractContextManager[Any]:
        return cm


NOOP = _NoSpan()


def span(name: str) -> _Span | _NoSpan:
    """Time the enclosed block as stage ``name`` of the current trace (a no-op when there is none)."""
    t = _current.get()
    if t is None:
        return NOOP
    sp = _new(_Span)  # (no ``__init__`` frame: a span is opened several times per query)
    sp._trace, sp._name, sp._sets = t, name, None
    return sp


_new = object.__new__


def mark(name: str, status: str = "off", **data: Any) -> None:
    """Record a stage that did not run (``{"status": "off"}``), e.g. rerank while no reranker exists."""
    t = _current.get()
    if t is not None and not t._closed:
        t._events.append((name, time.perf_counter(), 0.0, [(None, status, data)]))
        if status == "error":
            t.stage_failed = True


def waited(name: str, start: float, **data: Any) -> None:
    """Record a stage that only waited, from ``start`` (``time.perf_counter()``) until now: e.g. ``queue``, a search
    waiting for a place in the search gate (``retrieval.max_concurrent``)."""
    t = _current.get()
    if t is not None and not t._closed:
        t._events.append((name, start, time.perf_counter() - start, [(None, None, data)]))


def current() -> Trace | None:
    return _current.get()


def keep_detail(reason: Reason) -> None:
    """Keep the current trace's candidate detail whatever ``tracing.sample`` says (e.g. a low-confidence answer)."""
    t = _current.get()
    if t is not None:
        t.keep(reason)


def _trace_id() -> str:
    """16 hex digits from ``random`` (seeded from ``os.urandom``, reseeded in a forked child): an id, not a
    secret; ``uuid4`` reads ``os.urandom`` on every call (~7× slower)."""
    return random.getrandbits(64).to_bytes(8, "big").hex()  # (3× faster than formatting it with "016x")


class _Root:
    """Opens a new trace, makes it current, and hands it to the sinks when the block ends."""

    __slots__ = ("_tracer", "_capture", "_trace", "_token")

    def __init__(self, tracer: Tracer, kind: str, attrs: dict[str, Any], capture: bool) -> None:
        self._tracer = tracer
        self._capture = capture
        kept: Reason | None = "forced" if capture else None  # the caller reads the trace: it keeps its detail
        settings = (tracer.detail, kept, tracer.sample, tracer.slow_ms)
        self._trace = Trace.opened(kind, _trace_id(), time.time(), attrs, *settings)

    def __enter__(self) -> Trace:
        t = self._trace
        OPEN.append(None)
        t._t0 = time.perf_counter()
        self._token = _current.set(t)
        return t

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        t = self._trace
        t._closed = True  # from now on nothing is added: a thread still running for it records into nothing
        try:  # first: a reset that fails (ended in another context) must not leave it open for good
            OPEN.pop()
        except IndexError:  # a child forked while it was open starts with none
            pass
        _current.reset(self._token)
        t.elapsed_ms = (time.perf_counter() - t._t0) * 1000
        if exc is not None:  # the caller sees the error: its trace is sealed here, with its detail
            t.status, t.error = "error", f"{type(exc).__name__}: {exc}"
            t.seal()
        if self._capture:  # the caller reads it (``--verbose``, the dashboard): complete it now, as rows
            t.readable()
        self._tracer.emit(t)


class _Join:
    """A trace opened inside another one adds its attributes to the outer trace and records into it."""

    __slots__ = ("_trace", "_attrs")

    def __init__(self, trace: Trace, attrs: dict[str, Any]) -> None:
        self._trace = trace
        self._attrs = attrs

    def __enter__(self) -> Trace:
        attrs = self._trace.attrs
        if not attrs:  # (``KnowledgeBase.query``'s trace has none: one C call)
            attrs.update(self._attrs)
            return self._trace
        for k, v in self._attrs.items():
            attrs.setdefault(k, v)
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

    def __init__(
        self, sinks: Sequence[Sink] = (), *, detail: str = "lean", sample: float = 1.0, slow_ms: float = float("inf")
    ) -> None:
        """``sample``, ``slow_ms``: which query traces keep their candidate detail (``sampling``); the default
        keeps every one's."""
        if detail not in DETAILS:
            raise ValueError(f"tracing detail {detail!r}: use one of {', '.join(DETAILS)}")
        self.sinks = tuple(sinks)
        self.detail, self.sample, self.slow_ms = detail, sample, slow_ms

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

    def close(self) -> None:
        """Write what the sinks hold and end their writer threads (the tracer still works: a later trace is written
        by the thread that ends it)."""
        for sink in self.sinks:
            close = getattr(sink, "close", None)
            try:
                if close is not None:
                    close()
            except Exception as e:  # like a write: never fails the caller (KnowledgeBase.close must go on)
                log.warning("could not close trace sink %s: %s", type(sink).__name__, e)

    def emit(self, trace: Trace) -> None:
        """Hand ``trace`` to the sinks. A trace nobody reads is not sealed here: ``JsonlSink``'s writer thread seals
        it (off the query's thread); with several sinks it is sealed first (each sink reads the same sealed trace)."""
        if len(self.sinks) > 1:
            trace.seal()
        for sink in self.sinks:
            try:
                sink.write(trace)
            except Exception as e:  # a full disk or a broken exporter must never fail a query
                log.warning("could not write trace %s to %s: %s", trace.trace_id, type(sink).__name__, e)


def build_tracer(settings: TracingSettings, index: Path) -> Tracer:
    """The tracer a ``KnowledgeBase`` uses: ``<index>/traces.jsonl`` (and OpenTelemetry when asked), or off."""
    if not settings.enabled:
        return Tracer()
    sinks: list[Sink] = [JsonlSink(Path(index) / TRACE_FILE, max_bytes=settings.max_bytes, backups=settings.backups)]
    if settings.otel:
        from zhiku.observability.otel import OtelSink

        sinks.append(OtelSink())
    return Tracer(sinks, detail=settings.detail, sample=settings.sample, slow_ms=settings.slow_ms)
