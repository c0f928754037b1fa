"""Where trace records go: sinks (memory, size-capped JSONL) and the reader; the records (``Trace``/``Stage``)
are in ``records`` and re-exported here.

Split from ``tracing`` so that exporters (``otel``) depend on the records, not on the tracer that builds them.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import logging
import os
import threading
import time
import weakref
from collections import deque
from operator import itemgetter
from pathlib import Path
from typing import Any, Protocol

import orjson

from zhiku.observability.records import ALWAYS as ALWAYS  # re-exported: readers import the records from here
from zhiku.observability.records import DETAIL as DETAIL
from zhiku.observability.records import DETAILS as DETAILS
from zhiku.observability.records import OPEN
from zhiku.observability.records import RANKING_MAX as RANKING_MAX
from zhiku.observability.records import STAGES as STAGES
from zhiku.observability.records import TRACE_FILE as TRACE_FILE
from zhiku.observability.records import Stage as Stage
from zhiku.observability.records import Trace as Trace
from zhiku.observability.records import ordered_stages as ordered_stages

log = logging.getLogger(__name__)


def encode_line(trace: Trace) -> bytes:
    """One trace as a compact UTF-8 JSON line: what ``JsonlSink`` appends. ``orjson`` (a dependency) encodes a
    query trace several times faster than ``json`` (bench/RESULTS.md, Issue 13 — tracing at ≤ 10 %); ``json``
    takes what it refuses (an int past 64 bits). A trace without its candidate detail (most) is written straight
    from its events (``Trace.lean_record``): the same bytes, about half the work (bench/RESULTS.md, Issue 13 — a
    sampled-out trace, cheaper)."""
    lean = trace.lean_record()
    if lean is not None:
        try:
            return orjson.dumps(lean, default=_encodable, option=orjson.OPT_APPEND_NEWLINE)
        except TypeError:  # sealed and written as below (the json fallback writes a Stage rounded: ``to_json``)
            pass
    record = trace._record()
    record["stages"] = ordered_stages(trace)  # dataclasses: orjson writes their fields without a dict each
    try:
        return orjson.dumps(record, default=_encodable, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:  # e.g. a dict with int keys (OPT_NON_STR_KEYS would take it, but slows every line down)
        return (json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=_encodable) + "\n").encode()


def _encodable(value: Any) -> Any:
    if isinstance(value, Stage):
        return value.to_json()
    item = getattr(value, "item", None)  # a numpy scalar
    return item() if callable(item) else str(value)


class Busy:
    """``with busy:`` — a query is being served though no trace is open yet (the MCP hub reads the index version
    before its trace opens): ``JsonlSink``'s writer seals and writes queued traces only between queries (``OPEN``
    empty), so it does not take the interpreter from a query that released it for a read (measured: a hub call
    waited ~60 µs a query for the writer's batch, back to back). Nests; costs a list append and pop."""

    __slots__ = ()

    def __enter__(self) -> None:
        OPEN.append(None)

    def __exit__(self, *exc: object) -> None:
        try:
            OPEN.pop()
        except IndexError:  # a child forked meanwhile starts with none
            pass


busy = Busy()


# ---------------------------------------------------------------------------------------------- sinks
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

    Writers in several processes (CLI, MCP server, dashboard) share the file through an ``flock``; with
    ``background=True`` (the default) a writer thread appends what is queued under one ``flock``, so a query never
    waits for a file lock or the disk. Where a trace is sealed and encoded (bench/RESULTS.md, Issue 13 — tracing
    off the query thread):

    - a trace nobody reads (most queries) is handed to the writer unsealed: ``write`` only decides its sample
      (``Trace.decide``: a trace sampled out drops its rankings at once) and queues it; the writer seals and
      encodes it as soon as no trace is open in the process (``OPEN``: between queries, while the caller reads
      its answer), or every ``interval_s``;
    - while another query runs in the process (concurrent clients) or ``hand_off`` traces already wait (queries
      back to back) there is no pause to hide the work in, and work done in another thread costs a Python
      process more CPU than the same work done inline: the caller seals and encodes the trace, as it does a trace
      already sealed (its caller read it: ``--verbose``, the dashboard, an error).

    Readers in this process (``read_traces``), ``KnowledgeBase.close`` and interpreter exit flush the queue; with
    nothing queued the writer sleeps until a write wakes it. After ``close`` a write seals and appends on its
    caller's thread (a query that was still finishing on another thread).
    """

    BATCH = 256
    POLL_S = 0.01  # while traces wait for a pause between queries (or came lately), the writer looks this often

    def __init__(
        self,
        path: Path,
        *,
        max_bytes: int = 10_000_000,
        backups: int = 3,
        background: bool = True,
        interval_s: float = 0.2,
        hand_off: int = 8,
    ) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.backups = backups
        self.background = background
        self.interval_s = interval_s
        self.hand_off = hand_off
        self.loops = 0  # the writer's wake-ups (tests count them: an idle writer sleeps until there is work)
        self._closed = False  # closed: a later write seals, encodes and appends on its caller's thread
        self._no_writer()

    def _no_writer(self) -> None:
        """Empty queues, no writer thread, fresh locks and events: a new sink, or one in a forked child."""
        # append and popleft are atomic: no lock on a query's path
        self._traces: deque[Trace] = deque()  # handed off unsealed
        self._lines: deque[tuple[float, bytes]] = deque()  # (started_at, line) encoded by their caller
        self._wake = threading.Event()  # set by a write to a sleeping writer, a full batch, flush and close
        self._idle = threading.Condition()
        self._busy = False
        self._sleeping = False  # the writer waits for work with nothing queued: a write wakes it
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # the writer's state and the queues: a write never lands after close's drain
        self._close_lock = threading.Lock()  # one close at a time
        self._closing = False
        self._hurry = 0  # flushes waiting: the writer writes at once

    def write(self, trace: Trace) -> None:
        """Queue ``trace``: unsealed for the writer thread, or (sealed already, or ``hand_off`` traces waiting) as
        its JSON line, encoded here. After ``close`` the trace is written here."""
        if not self.background:
            self._append([encode_line(trace)])
            return
        line: tuple[float, bytes] | None = None
        if trace._sealed or OPEN or len(self._traces) >= self.hand_off:  # no pause coming: encode it here
            line = (trace.started_at, encode_line(trace))
        else:
            trace.decide()  # a trace sampled out lets go of its rankings now, not when the writer gets to it
        with self._lock:  # ~0.1 µs: an uncontended lock
            if not self._closed:
                if self._thread is None:
                    _PENDING.add(self)
                    self._thread = threading.Thread(target=self._run, name="zhiku-traces", daemon=True)
                    self._thread.start()
                if line is None:
                    self._traces.append(trace)  # a writer polling for a pause sees it; one asleep is woken
                else:
                    self._lines.append(line)
                if self._sleeping or len(self._lines) >= self.BATCH:  # a full batch is appended now, pause or not
                    self._wake.set()
                return
        self._append([line[1] if line is not None else encode_line(trace)])  # closed: no writer to hand it to

    def close(self) -> None:
        """Write every queued trace and end the writer thread; a later ``write`` writes its trace itself (each
        ``KnowledgeBase`` has its own sink, and the dashboard opens one per page action). Every trace whose
        ``write`` returned before ``close`` did is in the file when it returns."""
        with self._close_lock:
            with self._lock:
                thread, self._closing = self._thread, self._thread is not None
            if thread is not None:
                self._wake.set()
                thread.join()
            with self._lock:  # a write that raced the writer's last batch waits here, then finds the sink closed
                self._thread, self._closing, self._closed = None, False, True
                _PENDING.discard(self)
                if self._traces or self._lines:  # queued while the writer was ending
                    self._write_batch(len(self._traces), len(self._lines))

    def flush(self) -> None:
        """Wait until every queued trace is in the file."""
        if self._thread is None:
            return
        with self._idle:
            self._hurry += 1
            try:
                while self._traces or self._lines or self._busy:
                    self._wake.set()
                    self._idle.wait(1.0)
            finally:
                self._hurry -= 1

    def _run(self) -> None:
        written = handed = time.monotonic()  # the last write; the last write with traces handed off
        while True:
            self.loops += 1
            # while traces wait or came lately, look every POLL_S for a pause to write them in; lines encoded by
            # their callers wait up to interval_s; with nothing queued, sleep until a write (or close) wakes it
            if self._traces or time.monotonic() - handed < self.interval_s:
                self._wake.wait(self.POLL_S)
            elif self._lines:
                self._wake.wait(self.interval_s)
            elif not self._closing:
                self._sleep()
                continue
            self._wake.clear()
            now = time.monotonic()
            full = len(self._lines) >= self.BATCH  # lines encoded already: waiting for a pause only piles them up
            if OPEN and not (full or self._closing or self._hurry or now - written >= self.interval_s):
                continue  # a query is running: seal and write in its pause
            with self._idle:
                self._busy = bool(self._traces or self._lines)
            if self._busy:
                written = now
                handed = now if self._traces else handed
            try:
                if self._busy:
                    self._write_batch(min(len(self._traces), self.BATCH), min(len(self._lines), self.BATCH))
            finally:
                with self._idle:
                    self._busy = False
                    self._idle.notify_all()
            if self._traces or self._lines:
                self._wake.set()  # more than a batch waited
            elif self._closing:
                return

    def _sleep(self) -> None:
        """Wait for work: ``write`` sets ``_wake`` when it sees ``_sleeping`` (set before the queues are looked at
        again, so a trace queued meanwhile is seen here or wakes it)."""
        self._sleeping = True
        if not (self._traces or self._lines or self._closing):
            self._wake.wait()
        self._sleeping = False
        self._wake.clear()

    def _write_batch(self, traces: int, lines: int) -> None:
        """Seal and encode the first ``traces`` queued traces, append them and the first ``lines`` queued lines in
        the order the traces started (a trace that cannot be encoded is logged and left out; a failed write is
        logged, never raised)."""
        batch = [self._lines.popleft() for _ in range(lines)]
        for trace in [self._traces.popleft() for _ in range(traces)]:
            try:
                batch.append((trace.started_at, encode_line(trace)))
            except Exception as e:  # a trace that cannot be encoded never stops the writer
                log.warning("could not encode trace %s: %s", trace.trace_id, e)
        batch.sort(key=itemgetter(0))  # in the order the traces started
        try:
            self._append([line for _, line in batch])
        except Exception as e:  # a full disk must never stop the writer (or fail a query)
            log.warning("could not write %d trace(s) to %s: %s", len(batch), self.path, e)

    def _append(self, lines: list[bytes]) -> None:
        while lines:
            lines = self._append_until_full(lines)

    def _append_until_full(self, lines: list[bytes]) -> list[bytes]:
        """Append ``lines`` under one ``flock``; past ``max_bytes`` rotate and return the lines not written."""
        with open(self.path, "ab", buffering=0) as f:  # one write per batch: no copy through a buffer
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                size = f.seek(0, 2)
                n = 0  # lines that fit before max_bytes (a first line always fits an empty file)
                while n < len(lines) and not (size and size + len(lines[n]) > self.max_bytes):
                    size += len(lines[n])
                    n += 1
                data = memoryview(b"".join(lines[:n]))
                while data:  # a raw write may take less than it was given
                    data = data[f.write(data) or 0 :]
                if n < len(lines):
                    self._rotate()
                return lines[n:]
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


def _after_fork_in_child() -> None:
    """A forked child has none of its parent's writer threads (its flush would wait for one forever) and a copy
    of their queues (the parent writes those): each sink starts afresh, and its next write starts a writer."""
    for sink in list(_PENDING):
        sink._no_writer()
    _PENDING.clear()


atexit.register(flush_traces)
os.register_at_fork(after_in_child=_after_fork_in_child)


def trace_files(path: Path, backups: int = 100) -> list[Path]:
    """``path`` and its rotated backups that exist, newest first (``tracing.backups`` keeps at most 100; a gap
    does not end the list: another process may be rotating them)."""
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
