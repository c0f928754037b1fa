"""Export zhiku traces as OpenTelemetry spans (the ``otel`` extra: ``pip install 'zhiku[otel]'``)."""

from __future__ import annotations

import json
from typing import Any

from zhiku.errors import MissingDependency
from zhiku.observability.trace import Trace

INSTRUMENTATION = "zhiku"


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
        self._tracer = otel_trace.get_tracer(INSTRUMENTATION, tracer_provider=tracer_provider)

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
