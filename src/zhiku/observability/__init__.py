"""Tracing (contextvar spans, JSONL sink, rank changes) and OpenTelemetry export."""
