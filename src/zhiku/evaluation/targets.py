"""Expected entries of a YAML set that no chunk of the index satisfies: a typo in ``contains``, a glob that names no
file, a section or page the documents do not have. Such an entry can never be found, so its query scores 0 whatever
retrieval does; the run says so instead of leaving the user to suspect the ranking. Only the queries that found
nothing are checked, each over the chunks of the documents its ``source`` glob matches."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from zhiku.evaluation.datasets import EvalQuery, Expected
from zhiku.types import Chunk, DocRecord

MAX_DOCS = 500  # an entry whose glob matches more documents is not checked (its chunks would all be read)


@dataclass(frozen=True)
class Unmatched:
    qid: str
    entry: int  # index in the query's ``expected`` list
    expected: Expected
    reason: str

    def __str__(self) -> str:
        fields = ", ".join(f"{k}={v}" for k, v in self.expected.to_json().items())
        return f"{self.qid} expected[{self.entry}] ({fields}) can never be found: {self.reason}"


def _why(e: Expected, chunks: Sequence[Chunk], documents: int) -> str | None:
    """None when some chunk satisfies ``e``; else the first field no chunk satisfies on its own."""
    if any(e.matches(c) for c in chunks):
        return None
    of = f"of the {documents} document(s) whose source matches {e.source!r}"
    if e.contains is not None and not any(replace(e, page=None, section=None).matches(c) for c in chunks):
        return f"no chunk {of} holds {e.contains!r} (whitespace ignored; check the text against the document)"
    if e.section is not None and not any(replace(e, page=None, contains=None).matches(c) for c in chunks):
        return f"no chunk {of} has a section path with {e.section!r} at the start of a level"
    if e.page is not None and not any(replace(e, section=None, contains=None).matches(c) for c in chunks):
        return f"no chunk {of} is on page {e.page}"
    return f"no single chunk {of} satisfies all its fields together"


def unmatched_targets(
    queries: Iterable[EvalQuery], documents: Sequence[DocRecord], chunks_of: Callable[[str], list[Chunk]]
) -> tuple[Unmatched, ...]:
    """The expected entries of ``queries`` that no chunk of ``documents`` (the searched ones) satisfies."""
    cache: dict[str, list[Chunk]] = {}
    found: list[Unmatched] = []
    for q in queries:
        for i, e in enumerate(q.expected):
            docs = [d for d in documents if fnmatch.fnmatchcase(d.source, e.source)]
            if not docs:
                why = f"no indexed document's source matches {e.source!r} (`zhiku documents` lists them)"
                found.append(Unmatched(q.qid, i, e, why))
                continue
            if len(docs) > MAX_DOCS:
                continue
            chunks = [c for d in docs for c in cache.setdefault(d.doc_id, chunks_of(d.doc_id))]
            why_not = _why(e, chunks, len(docs))
            if why_not is not None:
                found.append(Unmatched(q.qid, i, e, why_not))
    return tuple(found)


def missing_documents(queries: Iterable[EvalQuery], corpus_ids: set[str]) -> tuple[str, ...]:
    """BEIR: the judged documents of ``queries`` that are not in the corpus (a qrels id typo'd or of another
    corpus version): they can never be retrieved, so the query scores 0 whatever retrieval does."""
    return tuple(
        f"{q.qid} judges {doc!r} relevant, which is not in the corpus (corpus.jsonl has no such `_id`): it can "
        "never be found"
        for q in queries
        for doc in q.relevant
        if doc not in corpus_ids
    )
