"""Why a filtered search found nothing, and the fix: the words the CLI and MCP show with an empty answer."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

from zhiku.types import DocRecord, Filters

_SHOWN = 3  # example names in a hint


def _names(values: Sequence[str]) -> str:
    shown = ", ".join(repr(v) for v in values[:_SHOWN])
    return shown + (f" and {len(values) - _SHOWN} more" if len(values) > _SHOWN else "")


def filter_hint(
    docs: Sequence[DocRecord], source: str | None, doc_type: str | None, known: Sequence[str] = ()
) -> str | None:
    """Each filter that matches no document among ``docs`` (those of the searched collections) and what would match."""
    problems = []
    if source and not any(fnmatch.fnmatchcase(d.source, source) for d in docs):
        near = sorted({d.source for d in docs if source.strip("*?").lower() in d.source.lower()})
        if near:
            problems.append(
                f"source {source!r} matches no document: it is a pattern over the names as ingested, "
                f"e.g. {_names(near)}; use '*{source.strip('*?')}*' or a whole name"
            )
        else:
            problems.append(
                f"source {source!r} matches no document; sources here: {_names(sorted({d.source for d in docs}))}"
            )
    if doc_type and doc_type not in {d.doc_type for d in docs}:
        problems.append(
            f"type {doc_type!r} matches no document; types here: {', '.join(sorted({d.doc_type for d in docs}))}"
            + ("" if doc_type in known else f" (a type is one of {', '.join(sorted(known))})")
        )
    return "; ".join(problems) or None


def passes(doc: DocRecord, filters: Filters) -> bool:
    """Whether ``doc`` passes the document-level ``filters``."""
    c = filters.collection
    return (
        (c is None or doc.collection == c or isinstance(c, tuple) and doc.collection in c)
        and (filters.doc_type is None or doc.doc_type == filters.doc_type)
        and (filters.source_glob is None or fnmatch.fnmatchcase(doc.source, filters.source_glob))
    )
