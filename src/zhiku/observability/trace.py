"""Trace records and where they go: ``Trace``/``Stage`` data, sinks (memory, size-capped JSONL) and the reader.

Split from ``tracing`` so that exporters (``otel``) depend on the records, not on the tracer that builds them.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import logging
import queue
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)

TRACE_FILE = "traces.jsonl"
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
    _t0: float = field(default=0.0, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def stage(self, name: str) -> Stage | None:
        return next((s for s in self.stages if s.name == name), None)

    def _open(self, name: str, now: float) -> Stage:
        with self._lock:
            found = self.stage(name)
            if found is not None:
                found.calls += 1
                return found
            s = Stage(name=name, start_ms=(now - self._t0) * 1000)
            self.stages.append(s)
            return s

    def to_json(self) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "kind": self.kind,
            "started_at": round(self.started_at, 3),
            "elapsed_ms": round(self.elapsed_ms, 3),
            "status": self.status,
            "error": self.error,
            "attrs": self.attrs,
            "data": self.data,
            "stages": [s.to_json() for s in ordered_stages(self)],
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
        )


def ordered_stages(trace: Trace) -> list[Stage]:
    """Stages in pipeline order (parse, bm25, dense, fusion, rerank, answer; load … upsert), others after by start."""
    order = {name: i for i, name in enumerate(STAGES)}
    return sorted(trace.stages, key=lambda s: (order.get(s.name, len(order)), s.start_ms))


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
        self.traces.append(trace)


class JsonlSink:
    """Appends one JSON line per trace to ``path``; rotates to ``path.1`` … ``path.N`` past ``max_bytes``.

    Writers in several processes (CLI, MCP server, dashboard) share the file through an ``flock``. With
    ``background=True`` (the default) ``write`` only queues the trace: one writer thread serialises and appends
    what is queued, so a query neither pays for the JSON nor waits for another query's ``flock``. Readers in
    this process (``read_traces``) and interpreter exit flush the queue first.
    """

    def __init__(self, path: Path, *, max_bytes: int = 10_000_000, backups: int = 3, background: bool = True) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.backups = backups
        self.background = background
        self._queue: queue.Queue[Trace] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def write(self, trace: Trace) -> None:
        if not self.background:
            self._append([trace])
            return
        if self._thread is None:
            with self._start_lock:
                if self._thread is None:
                    _PENDING.add(self)
                    self._thread = threading.Thread(target=self._run, name="zhiku-traces", daemon=True)
                    self._thread.start()
        self._queue.put(trace)

    def flush(self) -> None:
        """Wait until every queued trace is in the file."""
        if self._thread is not None:
            self._queue.join()

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < 256:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self._append(batch)
            except Exception as e:  # a full disk must never stop the writer (or fail a query)
                log.warning("could not write %d trace(s) to %s: %s", len(batch), self.path, e)
            finally:
                for _ in batch:
                    self._queue.task_done()

    def _append(self, traces: list[Trace]) -> None:
        lines = [
            (json.dumps(t.to_json(), ensure_ascii=False, separators=(",", ":"), default=str) + "\n").encode("utf-8")
            for t in traces
        ]
        for line in lines:
            with open(self.path, "ab") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                try:
                    size = f.seek(0, 2)
                    if size and size + len(line) > self.max_bytes:
                        self._rotate()
                        with open(self.path, "ab") as fresh:
                            fresh.write(line)
                    else:
                        f.write(line)
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
    """The newest ``limit`` traces (of ``kind``) in ``path`` and its backups, newest first; bad lines are skipped."""
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
                    return out
    return out
