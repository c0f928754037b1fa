"""Trace records and where they go: ``Trace``/``Stage`` data, sinks (memory, size-capped JSONL) and the reader.

Split from ``tracing`` so that exporters (``otel``) depend on the records, not on the tracer that builds them.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import logging
import threading
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson

from zhiku.observability.columns import as_rows

log = logging.getLogger(__name__)

TRACE_FILE = "traces.jsonl"
RANKING_MAX = 50  # candidates listed per channel stage with tracing.detail "full" (the rest are counted)
DETAILS = ("lean", "full")  # lean: a channel lists its first top_k candidates (the query's top_k; 10 if unknown)
STAGES = (
    "parse",
    "bm25",
    "dense",
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
@dataclass
class Stage:
    """One stage of a trace. ``start_ms`` is relative to the trace's start."""

    name: str
    start_ms: float
    elapsed_ms: float = 0.0
    status: str = "ok"  # ok | off | error
    counts: dict[str, int] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    calls: int = 1

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


@dataclass
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
    detail: str = "full"  # lean | full: how many candidates a channel stage lists (``ranking_limit``)
    labels: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # chunk id → source, section, page, …
    _t0: float = field(default=0.0, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _later: list[Callable[[], None]] = field(default_factory=list, repr=False, compare=False)
    _sealing: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _sealed: bool = field(default=False, repr=False, compare=False)
    _by_name: dict[str, Stage] = field(default_factory=dict, repr=False, compare=False)

    def defer(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` when the trace is sealed (by the first sink that writes it, or a reader of the live trace):
        work that only a written or read trace needs, such as ranked rows, rank changes and chunk labels; a query
        no sink takes (tracing off) never runs it. Deferred work runs in the order it was added."""
        if self._sealed:
            self._run(fn)
        else:
            self._later.append(fn)

    def seal(self) -> Trace:
        """Run the deferred work, once (sinks and readers of a live trace call it; later calls return at once)."""
        if not self._sealed:
            with self._sealing:
                if not self._sealed:
                    for fn in self._later:
                        self._run(fn)
                    self._later.clear()
                    self._sealed = True
        return self

    def _run(self, fn: Callable[[], None]) -> None:
        try:
            fn()
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
        with self._lock:
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
        return {
            "trace_id": self.trace_id,
            "kind": self.kind,
            "started_at": round(self.started_at, 6),
            "elapsed_ms": round(self.elapsed_ms, 3),
            "status": self.status,
            "error": self.error,
            "detail": self.detail,
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
            labels=dict(d.get("labels") or {}),
        ).readable()


def encode_line(trace: Trace) -> bytes:
    """One trace as a compact UTF-8 JSON line: what ``JsonlSink`` appends. ``orjson`` (a dependency) encodes a
    query trace several times faster than ``json`` (bench/RESULTS.md, Issue 13 — tracing at ≤ 10 %); ``json``
    takes what it refuses (an int past 64 bits)."""
    record = trace._record()
    record["stages"] = ordered_stages(trace)  # dataclasses: orjson writes their fields without a dict each
    try:
        return orjson.dumps(record, default=_encodable, option=orjson.OPT_APPEND_NEWLINE | orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return (json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=_encodable) + "\n").encode()


def _encodable(value: Any) -> Any:
    if isinstance(value, Stage):
        return value.to_json()
    item = getattr(value, "item", None)  # a numpy scalar
    return item() if callable(item) else str(value)


def ordered_stages(trace: Trace) -> list[Stage]:
    """Stages in pipeline order (parse, bm25, dense, fusion, rerank, answer; load … upsert), others after by start."""
    return sorted(trace.stages, key=lambda s: (_ORDER.get(s.name, len(_ORDER)), s.start_ms))


_ORDER = {name: i for i, name in enumerate(STAGES)}


# --------------------------------------------------------------------------------------------- spans


# --------------------------------------------------------------------------------------- the tracer
class Sink(Protocol):
    def write(self, trace: Trace) -> None:
        """Persist or export one finished trace. Errors are logged by the tracer, never raised to callers."""
        ...


class MemorySink:
    """Keeps finished traces in a list (tests, the dashboard's live view)."""

    def __init__(self) -> None:
        self.traces: list[Trace] = []

    def write(self, trace: Trace) -> None:
        self.traces.append(trace.readable())


class JsonlSink:
    """Appends one JSON line per trace to ``path``; rotates to ``path.1`` … ``path.N`` past ``max_bytes``.

    Writers in several processes (CLI, MCP server, dashboard) share the file through an ``flock``. ``write``
    seals and encodes the trace in the caller's thread (a few tens of µs) and, with ``background=True`` (the
    default), only queues the line: a writer thread wakes every ``interval_s`` (or once ``BATCH`` lines wait) and
    appends what is queued under one ``flock``, so a query never waits for a file lock or the disk, and the writer
    holds the GIL only between its system calls. Encoding in the writer was measured and lost: queued traces
    keep their rankings and hits alive, and the garbage collector's extra passes over them cost more than the
    encoding (bench/RESULTS.md, Issue 13 — tracing at ≤ 10 %). Readers in this process (``read_traces``),
    ``KnowledgeBase.close`` and interpreter exit flush the queue first.
    """

    BATCH = 256

    def __init__(
        self,
        path: Path,
        *,
        max_bytes: int = 10_000_000,
        backups: int = 3,
        background: bool = True,
        interval_s: float = 0.2,
    ) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.backups = backups
        self.background = background
        self.interval_s = interval_s
        self._pending: deque[bytes] = deque()  # append and popleft are atomic: no lock on a query's path
        self._wake = threading.Event()
        self._idle = threading.Condition()
        self._busy = False
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def write(self, trace: Trace) -> None:
        line = encode_line(trace)
        if not self.background:
            self._append([line])
            return
        if self._thread is None:
            with self._start_lock:
                if self._thread is None:
                    _PENDING.add(self)
                    self._thread = threading.Thread(target=self._run, name="zhiku-traces", daemon=True)
                    self._thread.start()
        self._pending.append(line)
        if len(self._pending) >= self.BATCH:
            self._wake.set()

    def flush(self) -> None:
        """Wait until every queued trace is in the file."""
        if self._thread is None:
            return
        with self._idle:
            while self._pending or self._busy:
                self._wake.set()
                self._idle.wait(1.0)

    def _run(self) -> None:
        while True:
            self._wake.wait(self.interval_s)
            self._wake.clear()
            with self._idle:
                batch = [self._pending.popleft() for _ in range(min(len(self._pending), self.BATCH))]
                self._busy = bool(batch)
                if len(self._pending) >= self.BATCH:
                    self._wake.set()
            try:
                if batch:
                    self._append(batch)
            except Exception as e:  # a full disk must never stop the writer (or fail a query)
                log.warning("could not write %d trace(s) to %s: %s", len(batch), self.path, e)
            finally:
                with self._idle:
                    self._busy = False
                    self._idle.notify_all()

    def _append(self, lines: list[bytes]) -> None:
        while lines:
            lines = self._append_until_full(lines)

    def _append_until_full(self, lines: list[bytes]) -> list[bytes]:
        """Append ``lines`` under one ``flock``; past ``max_bytes`` rotate and return the lines not written."""
        with open(self.path, "ab") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                size = f.seek(0, 2)
                for n, line in enumerate(lines):
                    if size and size + len(line) > self.max_bytes:
                        f.flush()
                        self._rotate()
                        return lines[n:]
                    f.write(line)
                    size += len(line)
                f.flush()
                return []
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _rotate(self) -> None:
        if self.backups <= 0:
            self.path.unlink(missing_ok=True)
            return
        for n in range(self.backups, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{n}")
            newer = self.path if n == 1 else self.path.with_name(f"{self.path.name}.{n - 1}")
            if newer.exists():
                newer.replace(older)


_PENDING: weakref.WeakSet[JsonlSink] = weakref.WeakSet()


def flush_traces() -> None:
    """Write every trace still queued by this process's ``JsonlSink`` writers."""
    for sink in list(_PENDING):
        sink.flush()


atexit.register(flush_traces)


def trace_files(path: Path, backups: int = 9) -> list[Path]:
    """``path`` and its rotated backups that exist, newest first."""
    files = [path] + [path.with_name(f"{path.name}.{n}") for n in range(1, backups + 1)]
    return [p for p in files if p.is_file()]


def read_traces(path: Path, *, kind: str | None = None, limit: int = 200) -> list[Trace]:
    """The newest ``limit`` traces (of ``kind``) in ``path`` and its backups, newest first (by when they started:
    writers append every ~0.2 s, so two processes' lines can land out of order); bad lines are skipped."""
    flush_traces()
    out: list[Trace] = []
    for f in trace_files(Path(path)):
        lines = f.read_text(encoding="utf-8", errors="replace").splitlines()
        for line in reversed(lines):
            try:
                t = Trace.from_json(json.loads(line))
            except (ValueError, KeyError, TypeError):
                continue
            if kind is None or t.kind == kind:
                out.append(t)
                if len(out) >= limit:
                    break
        if len(out) >= limit:
            break
    return sorted(out, key=lambda t: t.started_at, reverse=True)  # stable: equal times keep the file's order
