"""What a query trace says about chunks: the returned hits as rows (``hit_rows``, written with every trace)
and chunk labels (``VersionedLabels``, ``label_chunks``: source, section, page, enrichments), added when a trace
keeps its candidate detail."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from zhiku.observability.columns import Columns, Rows
from zhiku.observability.records import DATA, Trace
from zhiku.observability.sampling import SAMPLED_OUT
from zhiku.types import Hit


class VersionedLabels:
    """Chunk labels for traces (``fetch(ids)``: source, section, page, enrichments), remembered for one index
    version: a chunk id's labels do not change until the index does, so a traced query looks up only the chunks
    no earlier query labelled. ``version()`` is the store's ``index_version``, read at most every ``recheck_s``
    (a trace written within that time of a write may carry a changed chunk's old labels); at most ``max_items``
    are kept.
    (A document's enrichments are stored just after its chunks: a query traced in between labels that document's
    chunks without them until the next write. Traces only; answers never read these labels.)"""

    def __init__(
        self,
        fetch: Callable[[list[str]], Mapping[str, Mapping[str, Any]]],
        version: Callable[[], int],
        max_items: int = 100_000,
        recheck_s: float = 0.5,
    ) -> None:
        self._fetch, self._version, self._max, self._recheck_s = fetch, version, max_items, recheck_s
        self._state: tuple[int, dict[str, Mapping[str, Any]]] = (-1, {})
        self._checked = (-1.0, -1)  # (when, version): the version is read at most every recheck_s (~11 µs a read)

    def __call__(self, chunk_ids: list[str]) -> dict[str, Mapping[str, Any]]:
        now = time.monotonic()
        when, version = self._checked
        if now - when >= self._recheck_s or when < 0:
            version = self._version()
            self._checked = (now, version)
        state = self._state
        if state[0] != version or len(state[1]) > self._max:
            state = self._state = (version, {})  # one swap: a query still filling the old dict changes nothing
        known = state[1]
        missing = [c for c in chunk_ids if c not in known]
        if missing:
            known.update(self._fetch(missing))
        return {c: known[c] for c in chunk_ids if c in known}


def label_chunks(trace: Trace, lookup: Callable[[list[str]], Mapping[str, Mapping[str, Any]]]) -> None:
    """Put the labels (``lookup``: source, section, page, enrichment) of every chunk the trace lists, in its
    stages' data and its own (columns or rows with a ``chunk_id``), in ``trace.labels``: readers add them to
    the rows (``Trace.readable``), and the line names each chunk's labels once."""
    ids: set[str] = set()
    for data in [s.data for s in trace.stages] + [trace.data]:
        for v in data.values():
            if type(v) is Columns:
                ids.update(v.cols.get("chunk_id", ()))
            elif type(v) is Rows:
                ids.update(v.column("chunk_id"))
            elif type(v) is list and v and type(v[0]) is dict:
                ids.update([r["chunk_id"] for r in v if "chunk_id" in r])
    if ids:
        trace.labels.update(lookup(sorted(ids)))


def label_later(
    trace: Trace, hits: Sequence[Hit], lookup: Callable[[list[str]], Mapping[str, Mapping[str, Any]]]
) -> None:
    """When the trace is sealed: ``data.hits`` as rows, and (with its candidate detail) the labels of every
    chunk the trace lists; hits carry their own source, section and page."""

    def label(sealed: Trace) -> None:  # the trace comes as an argument: no reference cycle through it
        sealed.data["hits"] = hit_rows(hits)
        if sealed.detail != SAMPLED_OUT:
            label_chunks(sealed, lookup)

    trace.defer(label, DATA)  # sampled out, it reads no stage


HIT_FIELDS: tuple[str, ...] = (
    "rank",
    "chunk_id",
    "source",
    "section",
    "page",
    "score",
    "bm25_rank",
    "bm25_score",
    "dense_rank",
)
HIT_FIELDS += ("dense_score", "fused_rank", "rerank_score", "rerank_sigmoid")


def hit_rows(hits: Sequence[Hit]) -> Rows:
    """The final hits of a query as trace rows (rank, ids, every channel's evidence): one tuple per hit, built in
    one pass (every query's trace has them; readers get dicts back, ``as_rows``). Attribute reads: a hit's
    ``__dict__`` would be built for the occasion (3.11 keeps an instance's attributes without one)."""
    return Rows(
        fields=HIT_FIELDS,
        rows=[
            (
                n,
                (c := h.chunk).chunk_id,
                c.source,
                c.section,
                c.page,
                h.score,
                h.bm25_rank,
                h.bm25_score,
                h.dense_rank,
                h.dense_score,
                h.fused_rank,
                h.rerank_score,
                h.rerank_sigmoid,
            )
            for n, h in enumerate(hits, 1)
        ],
    )
