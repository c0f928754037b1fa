"""Ranked candidates in a trace, column by column (``Columns``), and how a reader gets rows back (``as_rows``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


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


def as_rows(value: Any, labels: Mapping[str, Mapping[str, Any]]) -> Any:
    """A data value as a reader sees it: columns become rows, and a row with a ``chunk_id`` gets that chunk's
    labels (source, section, page, enrichment; what the row holds itself wins)."""
    if isinstance(value, dict) and value.keys() == {"cols"}:
        value = Columns(value["cols"]).rows()
    if not labels or not isinstance(value, list):
        return value
    return [{**labels[r["chunk_id"]], **r} if isinstance(r, dict) and r.get("chunk_id") in labels else r for r in value]
