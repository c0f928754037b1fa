"""Ranked candidates in a trace, column by column (``Columns``) or as tuples (``Rows``), and how a reader gets
rows back (``as_rows``); an ingestion report as trace rows (``report_rows``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from zhiku.observability.rounding import rounded
from zhiku.types import IngestReport, Ranking, ScoredId

RANKING_MAX = 50  # candidates listed per channel stage with tracing.detail "full" (the rest are counted)


class Columns(dict[str, dict[str, list[Any]]]):
    """Rows held column by column (one list per field, all as long): how a trace keeps ranked candidates until a
    reader turns them back into rows (``Trace.readable``). A few lists cost a query a fraction of one dict per
    candidate, and the line names each field once. It is the dict ``{"cols": {field: [...]}}``, so any JSON
    encoder writes it as it is, and reading that back gives the same rows."""

    def __init__(self, cols: dict[str, list[Any]]) -> None:
        super().__init__(cols=cols)

    @property
    def cols(self) -> dict[str, list[Any]]:
        return self["cols"]

    def rows(self) -> list[dict[str, Any]]:
        names = tuple(self.cols)
        return [dict(zip(names, values, strict=True)) for values in zip(*self.cols.values(), strict=True)]

    def extend(self, other: Columns) -> None:
        for name, values in self.cols.items():
            values.extend(other.cols[name])


class Rows(dict[str, Any]):
    """Rows held as tuples under one list of field names: ``Rows(fields=[...], rows=[(...), ...])``, the dict
    ``{"fields": [...], "rows": [[...], ...]}`` (what a trace writes for a query's hits: one tuple per hit is
    cheaper to build than a list per field). No ``__init__`` of its own: made by ``dict``'s (a third of the cost
    of one in Python, on every trace)."""

    __slots__ = ()

    def column(self, name: str) -> list[Any]:
        at = list(self["fields"]).index(name)
        return [r[at] for r in self["rows"]]


def as_rows(value: Any, labels: Mapping[str, Mapping[str, Any]]) -> Any:
    """A data value as a reader sees it: columns become rows, and a row with a ``chunk_id`` gets that chunk's
    labels (source, section, page, enrichment; what the row holds itself wins)."""
    if isinstance(value, dict) and value.keys() == {"cols"}:
        value = Columns(value["cols"]).rows()
    elif isinstance(value, dict) and value.keys() == {"fields", "rows"}:
        names = tuple(value["fields"])
        value = [dict(zip(names, r, strict=True)) for r in value["rows"]]
    if not labels or not isinstance(value, list):
        return value
    return [{**labels[r["chunk_id"]], **r} if isinstance(r, dict) and r.get("chunk_id") in labels else r for r in value]


def ranking_columns(items: Sequence[ScoredId], limit: int = RANKING_MAX) -> Columns:
    """A channel's first ``limit`` candidates as columns: ``chunk_id``, ``rank``, ``score``."""
    if type(items) is Ranking:  # columns already: no ScoredId per candidate
        n = min(limit, len(items))
        scores = rounded(items.scores[:n], 6)
        return Columns({"chunk_id": list(items.ids[:n]), "rank": list(range(1, n + 1)), "score": scores})
    first = items[:limit]
    return Columns(
        {
            "chunk_id": [x.chunk_id for x in first],
            "rank": [x.rank for x in first],
            "score": rounded([x.score for x in first], 6),
        }
    )


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
