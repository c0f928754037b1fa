"""Trace records (``Trace``, ``Stage``), where they go (sinks: memory, a size-capped JSONL file) and the reader."""

from __future__ import annotations

import fcntl
import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)

TRACE_FILE = "traces.jsonl"
STAGES: tuple[str, ...] = ("parse", "queue", "bm25", "dense", "clauses", "fusion", "rerank", "answer")  # a query's
STAGES += ("load", "split", "transform", "tokenise", "embed", "upsert")  # an ingestion run's
_ORDER = {name: i for i, name in enumerate(STAGES)}


@dataclass
class Stage:
    """One stage of a trace. ``start_ms`` is relative to the trace's start."""

    name: str
    start_ms: float = 0.0
    elapsed_ms: float = 0.0
    status: str = "ok"  # ok | off | error | fallback
    counts: dict[str, int] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    calls: int = 1

    def record(self, counts: Mapping[str, int] | None, status: str | None, data: Mapping[str, Any]) -> None:
        """Add ``counts`` (summed over merged calls), set ``status`` and ``data`` (lists are extended)."""
        for k, v in (counts or {}).items():
            self.counts[k] = self.counts.get(k, 0) + int(v)
        if status is not None:
            self.status = status
        for k, v in data.items():
            old = self.data.get(k)
            if isinstance(v, list) and isinstance(old, list):
                old.extend(v)
            else:
                self.data[k] = v

    def to_json(self) -> dict[str, Any]:
        return {**vars(self), "start_ms": round(self.start_ms, 3), "elapsed_ms": round(self.elapsed_ms, 3)}


@dataclass
class Trace:
    """A query or an ingestion run: filled by spans while it is open (``tracing``), then written once."""

    kind: str  # query | ingest
    trace_id: str
    started_at: float  # unix seconds
    attrs: dict[str, Any] = field(default_factory=dict)
    stages: list[Stage] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    elapsed_ms: float = 0.0
    status: str = "ok"  # ok | error
    error: str | None = None

    def stage(self, name: str) -> Stage | None:
        return next((s for s in self.stages if s.name == name), None)

    def to_json(self) -> dict[str, Any]:
        rounded = {"started_at": round(self.started_at, 6), "elapsed_ms": round(self.elapsed_ms, 3)}
        return {**vars(self), **rounded, "stages": [s.to_json() for s in self.stages]}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Trace:
        labels = d.get("labels") or {}  # (lines written before rows carried their labels)
        return cls(
            **{**_fields(cls, d, labels), "stages": [Stage(**_fields(Stage, s, labels)) for s in d.get("stages") or []]}
        )


def _fields(cls: type, d: Mapping[str, Any], labels: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of ``cls`` that line ``d`` holds, its data's rows labelled."""
    data = {k: _rows(v, labels) for k, v in (d.get("data") or {}).items()}
    return {**{f.name: d[f.name] for f in fields(cls) if f.name in d}, "data": data}


def _rows(value: Any, labels: Mapping[str, Any]) -> Any:
    """Rows from the column forms older lines used (``{"cols": …}``, ``{"fields": …, "rows": …}``), labelled."""
    if isinstance(value, dict) and value.keys() == {"cols"}:
        value = [dict(zip(value["cols"], r, strict=True)) for r in zip(*value["cols"].values(), strict=True)]
    elif isinstance(value, dict) and value.keys() == {"fields", "rows"}:
        value = [dict(zip(value["fields"], r, strict=True)) for r in value["rows"]]
    if labels and isinstance(value, list):
        return [{**labels.get(str(r.get("chunk_id")), {}), **r} if isinstance(r, dict) else r for r in value]
    return value


def stage_order(s: Stage) -> tuple[int, float]:
    """Pipeline order (parse, bm25, dense, clauses, fusion, rerank, answer; load … upsert), others after by start."""
    return _ORDER.get(s.name, len(_ORDER)), s.start_ms


def ordered_stages(trace: Trace) -> list[Stage]:
    return sorted(trace.stages, key=stage_order)


def _encodable(value: Any) -> Any:
    item = getattr(value, "item", None)  # a numpy scalar
    return item() if callable(item) else str(value)


class Sink(Protocol):
    def write(self, trace: Trace) -> None: ...  # its errors are logged by the tracer, never raised to callers


class MemorySink:
    def __init__(self) -> None:
        self.traces: list[Trace] = []

    def write(self, trace: Trace) -> None:
        self.traces.append(trace)


class JsonlSink:
    """Appends one JSON line per trace to ``path`` on the caller's thread."""

    def __init__(self, path: Path, *, max_bytes: int = 10_000_000, backups: int = 3) -> None:
        self.path, self.max_bytes, self.backups = Path(path), max_bytes, backups
        self._lock = threading.Lock()  # one rotation at a time in this process

    def write(self, trace: Trace) -> None:
        line = (
            json.dumps(trace.to_json(), ensure_ascii=False, separators=(",", ":"), default=_encodable) + "\n"
        ).encode()
        with self._lock, open(self.path, "ab", buffering=0) as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                if (size := f.seek(0, 2)) and size + len(line) > self.max_bytes:
                    for n in range(self.backups, 0, -1):  # the open file becomes a backup: the line goes to a fresh one
                        newer = self.path if n == 1 else self.path.with_name(f"{self.path.name}.{n - 1}")
                        if newer.exists():
                            newer.replace(self.path.with_name(f"{self.path.name}.{n}"))
                    with open(self.path, "ab", buffering=0) as fresh:
                        fresh.write(line)
                else:
                    f.write(line)
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)


def read_traces(path: Path, *, kind: str | None = None, limit: int = 200) -> list[Trace]:
    """The newest ``limit`` traces (of ``kind``) in ``path`` and its backups, newest first."""
    out: list[Trace] = []
    files = [Path(path)] + [Path(path).with_name(f"{Path(path).name}.{n}") for n in range(1, 101)]  # newest first
    for line in (ln for f in files if f.is_file() for ln in reversed(f.read_text("utf-8", "replace").splitlines())):
        try:
            t = Trace.from_json(json.loads(line))
        except (ValueError, KeyError, TypeError):
            continue
        if kind is None or t.kind == kind:
            out.append(t)
            if len(out) >= limit:
                break
    return sorted(out, key=lambda t: t.started_at, reverse=True)  # stable: equal times keep the file's order
