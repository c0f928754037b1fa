"""Trace records: ``Trace`` and ``Stage``, the data a query or an ingestion run leaves, and how it is sealed
(deferred work, tail-sampled candidate detail: ``sampling``). Sinks and the reader are in ``trace``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from zhiku.observability.columns import RANKING_MAX as RANKING_MAX  # re-exported
from zhiku.observability.columns import Columns, as_rows
from zhiku.observability.rounding import rounded_one
from zhiku.observability.sampling import SAMPLED_OUT, Reason, keep_reason

log = logging.getLogger(__name__)

# what a span or a mark leaves in an open trace: stage name, start (perf_counter), seconds, [(counts, status, data)]
Sets = list[tuple[Mapping[str, int] | None, str | None, Mapping[str, Any]]]
Event = tuple[str, float, float, Sets | None]
# the sets of an event that is the first part of a span whose clock stopped (``_Span.outside``): not a call of its own
PIECE: Sets = []


# one entry per trace open in this process (``JsonlSink``'s writer waits while there are any): appended and popped
# (atomic, no id() or hashing: a set of ids cost each query ~3 k instructions)
OPEN: list[None] = []
_SEALING = threading.RLock()  # one for every trace (a lock per trace costs each query its allocation)


def _after_fork_in_child() -> None:
    """A child forked while another thread sealed a trace would inherit the lock held, by a thread it lacks."""
    global _SEALING
    _SEALING = threading.RLock()
    OPEN.clear()  # the parent's threads are not here


os.register_at_fork(after_in_child=_after_fork_in_child)


_started = itemgetter(1)
_new = object.__new__  # an event's start (a C key: ``sorted`` calls no Python function per event)


TRACE_FILE = "traces.jsonl"
DETAILS = ("lean", "full")  # lean: a channel lists its first top_k candidates (the query's top_k; 10 if unknown)
# when deferred work runs (``Trace.defer``): always; with the candidate detail; always, reading no stage of a trace
# that keeps no detail (such a trace is encoded straight from its events: ``Trace.lean_record``)
ALWAYS, DETAIL, DATA = 0, 1, 2
STAGES = (
    "parse",
    "queue",
    "bm25",
    "dense",
    "clauses",
    "fusion",
    "rerank",
    "answer",
    "load",
    "split",
    "transform",
    "tokenise",
    "embed",
    "upsert",
)


# ------------------------------------------------------------------------------------------- records
@dataclass  # not slotted: orjson writes a plain dataclass ~4× faster (bench/RESULTS.md, sampled trace detail)
class Stage:
    """One stage of a trace. ``start_ms`` is relative to the trace's start."""

    name: str
    start_ms: float
    elapsed_ms: float = 0.0
    status: str = "ok"  # ok | off | error
    counts: dict[str, int] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    calls: int = 1

    def record(self, counts: Mapping[str, int] | None, status: str | None, data: Mapping[str, Any]) -> None:
        """Add ``counts`` (summed over merged calls), set ``status`` and ``data`` (lists, columns are extended)."""
        if counts:
            for k, v in counts.items():
                self.counts[k] = self.counts.get(k, 0) + int(v)
        if status is not None:
            self.status = status
        for k, v in data.items():
            old = self.data.get(k)
            if isinstance(v, (list, Columns)) and type(old) is type(v):
                old.extend(v)
            else:
                self.data[k] = v

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "start_ms": round(self.start_ms, 3),
            "elapsed_ms": round(self.elapsed_ms, 3),
            "status": self.status,
            "calls": self.calls,
            "counts": self.counts,
            "data": self.data,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Stage:
        return cls(
            name=str(d["name"]),
            start_ms=float(d.get("start_ms", 0.0)),
            elapsed_ms=float(d.get("elapsed_ms", 0.0)),
            status=str(d.get("status", "ok")),
            counts=dict(d.get("counts") or {}),
            data=dict(d.get("data") or {}),
            calls=int(d.get("calls", 1)),
        )


@dataclass(slots=True)
class Trace:
    """A query or an ingestion run; mutable while it is open, then written once."""

    kind: str  # query | ingest
    trace_id: str
    started_at: float  # unix seconds
    attrs: dict[str, Any] = field(default_factory=dict)
    stages: list[Stage] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    elapsed_ms: float = 0.0
    status: str = "ok"  # ok | error
    error: str | None = None
    detail: str = "full"  # lean | full: candidates a channel stage lists (``ranking_limit``) | sampled-out: none
    labels: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # chunk id → source, section, page, …
    kept: Reason | None = None  # why the candidate detail was kept (``sampling.keep_reason``); None: not sampled
    sample: float = field(default=1.0, repr=False, compare=False)  # tracing.sample and tracing.slow_ms
    slow_ms: float = field(default=float("inf"), repr=False, compare=False)
    _t0: float = field(default=0.0, repr=False, compare=False)
    _events: list[Event] = field(default_factory=list, repr=False, compare=False)  # spans and marks, until sealed
    _later: list[tuple[Callable[[Trace], None], int]] = field(default_factory=list, repr=False, compare=False)
    _sealed: bool = field(default=False, repr=False, compare=False)
    # ended (``_Root``) or sealed: spans, marks and deferred work that come later (a thread that outlived the query,
    # e.g. a reranker past rerank.timeout) are dropped, so the trace's replay never races them
    _closed: bool = field(default=False, repr=False, compare=False)
    _decided: bool | None = field(default=None, repr=False, compare=False)
    stage_failed: bool = field(
        default=False, repr=False, compare=False
    )  # a span raised or set status "error"  # keeps its detail (``decide``)
    _by_name: dict[str, Stage] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def opened(cls, kind: str, trace_id: str, started_at: float, attrs: dict[str, Any], *settings: Any) -> Trace:
        """``Trace(kind, trace_id, started_at, attrs, detail=…, kept=…, sample=…, slow_ms=…)`` (``settings``, in
        that order), each other field its default, without the dataclass's ``__init__`` (20 fields by keyword: ~10 k
        instructions, 2–3× this; every query opens one). tests/test_tracing_lean.py checks it field by field."""
        t = _new(cls)
        t.kind, t.trace_id, t.started_at, t.attrs = kind, trace_id, started_at, attrs
        t.stages, t.data, t.elapsed_ms, t.status, t.error, t.labels = [], {}, 0.0, "ok", None, {}
        (t.detail, t.kept, t.sample, t.slow_ms), t._t0, t._events, t._later = settings, 0.0, [], []
        t._sealed, t._closed, t._decided, t.stage_failed, t._by_name = False, False, None, False, {}
        return t

    def defer(self, fn: Callable[[Trace], None], when: int = ALWAYS) -> None:
        """Run ``fn(trace)`` when the trace is sealed (by the first sink that writes it, or a reader of the live trace):
        work that only a written or read trace needs, such as ranked rows, rank changes and chunk labels; a query
        no sink takes (tracing off) never runs it. Deferred work runs in the order it was added. ``when``:
        ``ALWAYS``; ``DETAIL`` (candidate detail): only if the trace keeps it (``sampling``); ``DATA``: always, and
        in a trace without the detail it reads and writes the trace's own fields (``data``), never a stage. ``fn`` gets the
        trace as its argument, so it need not hold it (a trace without reference cycles is freed as soon as it is
        written, not by the garbage collector). Once the trace has ended or is sealed, ``fn`` is dropped."""
        if not self._closed:
            self._later.append((fn, when))

    def keep(self, reason: Reason) -> None:
        """Keep this trace's candidate detail (a low-confidence answer, a caller that reads it): first reason wins
        (not once the trace has ended: its sample may be decided already)."""
        if self.kept is None and not self._closed:
            self.kept = reason

    def seal(self) -> Trace:
        """Decide whether the candidate detail is kept, then run the deferred work, once (sinks and readers of a
        live trace call it; later calls return at once)."""
        if not self._sealed:
            with _SEALING:
                if not self._sealed:
                    self._closed = True  # what a straggling thread records from now on is dropped
                    detail = self.decide()
                    self._replay()
                    later, self._later = tuple(self._later), []  # a copy: a late append cannot change it
                    for fn, when in later:
                        if when != DETAIL or detail:
                            self._run(fn)
                    self._sealed = True
        return self

    def decide(self) -> bool:
        """Whether the trace keeps its candidate detail (``sampling``), decided once, when it has ended: a trace
        sampled out drops the deferred detail work at once (and the rankings it holds). ``JsonlSink`` asks on the
        query's thread before it queues the trace, ``seal`` otherwise."""
        decided = self._decided
        if decided is None:  # no lock: the thread that ends the trace asks first, then hands it on
            decided = True  # nothing to sample (an ingestion run)
            for entry in self._later:
                if entry[1] == DETAIL:
                    decided = self._keeps_detail()
                    break
            self._decided = decided
        return decided

    def _replay(self) -> None:
        """Turn the spans and marks recorded while the trace was open into stages, in the order they started (a
        span only appends one tuple to ``_events`` when it ends: a query pays for stage objects only if sealed). The
        events are copied first (``sorted``): a thread that appended after the trace closed changes nothing here."""
        events, self._events = sorted(self._events, key=_started), []
        by_name, t_start = self._by_name, self._t0
        for name, t0, elapsed_s, sets in events:
            if name not in by_name and sets is not None and len(sets) == 1:  # most stages: one span, one set()
                counts, status, data = sets[0]
                start, counted = (t0 - t_start) * 1000, dict(counts) if counts else {}
                by_name[name] = s = Stage(name, start, elapsed_s * 1000, status or "ok", counted, dict(data))
                self.stages.append(s)
                continue
            s = self._open(name, t0)
            s.elapsed_ms += elapsed_s * 1000
            if sets is PIECE:  # the span goes on in a later event: one call
                s.calls -= 1
            for counts, status, data in sets or ():
                s.record(counts, status, data)

    def _keeps_detail(self) -> bool:
        failed = self.status == "error" or self.stage_failed  # or a stage set to "error" (none yet when it ended)
        failed = failed or (bool(self.stages) and "error" in [s.status for s in self.stages])
        self.kept = keep_reason(
            self.trace_id,
            kept=self.kept,
            failed=failed,  # the query failed, or one of its stages did (a span that raised, set to ``error``)
            elapsed_ms=self.elapsed_ms,
            slow_ms=self.slow_ms,
            fraction=self.sample,
        )
        if self.kept is not None:
            return True
        self.detail = SAMPLED_OUT
        kept: list[tuple[Callable[[Trace], None], int]] = []
        for entry in self._later:  # (a loop: a comprehension makes a function and a frame each time)
            if entry[1] != DETAIL:
                kept.append(entry)
        self._later = kept
        return False

    def _run(self, fn: Callable[[Trace], None]) -> None:
        try:
            fn(self)
        except Exception as e:  # the trace loses that detail, never the query or its other stages
            log.warning("trace %s: deferred %r failed: %s", self.trace_id, fn, e)

    def ranking_limit(self) -> int:
        """How many candidates a channel stage lists: ``RANKING_MAX`` (full) or the query's ``top_k`` (lean)."""
        if self.detail == "full":
            return RANKING_MAX
        top_k = self.attrs.get("top_k")
        return top_k if isinstance(top_k, int) and top_k > 0 else 10

    def readable(self) -> Trace:
        """Seal the trace and give it the shape readers use: every ``Columns`` turned into rows, labelled."""
        self.seal()
        self.data = {k: as_rows(v, self.labels) for k, v in self.data.items()}
        for s in self.stages:
            s.data = {k: as_rows(v, self.labels) for k, v in s.data.items()}
        return self

    def stage(self, name: str) -> Stage | None:
        found = self._by_name.get(name)
        return found if found is not None else next((s for s in self.stages if s.name == name), None)

    def _open(self, name: str, now: float) -> Stage:
        found = self._by_name.get(name)
        if found is not None:
            found.calls += 1
            return found
        s = self._by_name[name] = Stage(name, (now - self._t0) * 1000)
        self.stages.append(s)
        return s

    def to_json(self) -> dict[str, Any]:
        return self._record() | {"stages": [s.to_json() for s in ordered_stages(self)]}

    def _record(self) -> dict[str, Any]:
        """The sealed trace without its stages (``encode_line`` hands orjson the ``Stage`` objects themselves)."""
        self.seal()
        return self._head()

    def lean_record(self) -> dict[str, Any] | None:
        """What ``encode_line`` writes, for a trace that keeps no candidate detail (``decide``), whose stages are
        each one span, mark or wait with at most one ``set``, and whose deferred work is all ``DATA``: its stages
        as dicts built straight from the events (the fields a ``Stage`` holds, in its order), not ``Stage``
        objects sorted twice; None for any other trace (``seal`` it). The deferred work is run, the stages are not
        replayed: the trace is not sealed, and a later ``seal`` gives it its stages as usual."""
        self._closed = True
        if self._sealed or self.decide():
            return None
        later = self._later  # (closed: nothing is added any more)
        for _, when in later:
            if when != DATA:
                return None
        with _SEALING:
            stages = None if self._sealed else _lean_stages(self._events, self._t0)
            if stages is None:
                return None
            self._later = []
            for fn, _ in later:
                self._run(fn)
        head = self._head()
        head["stages"] = stages
        return head

    def _head(self) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "kind": self.kind,
            "started_at": rounded_one(self.started_at, 6),
            "elapsed_ms": rounded_one(self.elapsed_ms, 3),
            "status": self.status,
            "error": self.error,
            "detail": self.detail,
            "kept": self.kept,
            "attrs": self.attrs,
            "data": self.data,
            "labels": self.labels,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Trace:
        return cls(
            kind=str(d["kind"]),
            trace_id=str(d["trace_id"]),
            started_at=float(d["started_at"]),
            attrs=dict(d.get("attrs") or {}),
            stages=[Stage.from_json(s) for s in d.get("stages") or []],
            data=dict(d.get("data") or {}),
            elapsed_ms=float(d.get("elapsed_ms", 0.0)),
            status=str(d.get("status", "ok")),
            error=d.get("error"),
            detail=str(d.get("detail", "full")),
            kept=d.get("kept"),
            labels=dict(d.get("labels") or {}),
        ).readable()


def ordered_stages(trace: Trace) -> list[Stage]:
    """Stages in pipeline order (parse, bm25, dense, clauses, fusion, rerank, answer; load … upsert), others after by
    start."""
    return sorted(trace.stages, key=lambda s: (_ORDER.get(s.name, len(_ORDER)), s.start_ms))


_ORDER = {name: i for i, name in enumerate(STAGES)}


def _lean_stages(events: list[Event], t_start: float) -> list[dict[str, Any]] | None:
    """The stages ``_replay`` and ``ordered_stages`` would give, as the dicts orjson writes for a ``Stage`` (its
    fields in its order), when each event is a stage of its own with at most one ``set`` of plain dicts; None
    otherwise."""
    keyed: list[tuple[int, float, int, dict[str, Any]]] = []
    by_name: dict[str, dict[str, Any]] = {}
    counts: Mapping[str, int] | None
    status: str | None
    data: Mapping[str, Any]
    for name, t0, elapsed_s, sets in events:
        if sets is None:
            counts, status, data, elapsed_ms = None, None, {}, 0.0 + elapsed_s * 1000  # as ``_open`` adds it
        elif len(sets) == 1:
            counts, status, data = sets[0]
            elapsed_ms = elapsed_s * 1000
            if type(data) is not dict or (counts is not None and type(counts) is not dict):
                return None  # (``Stage`` holds copies as dicts)
        else:  # set more than once, or the first piece of a span (``PIECE``): ``_replay`` merges them
            return None
        by_name[name] = stage = {
            "name": name,
            "start_ms": (t0 - t_start) * 1000,
            "elapsed_ms": elapsed_ms,
            "status": status or "ok",
            "counts": counts or {},
            "data": data,
            "calls": 1,
        }
        keyed.append((_ORDER.get(name, _LAST), t0, len(keyed), stage))
    if len(by_name) < len(keyed):  # a name met twice: one stage of several calls
        return None
    keyed.sort()  # pipeline order, then by start (as ``ordered_stages`` after ``_replay``)
    return list(map(_stage_of, keyed))


_LAST = len(_ORDER)
_stage_of = itemgetter(3)
