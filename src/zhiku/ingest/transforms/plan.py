"""A transform dry run: the LLM requests an ingest would send, with estimated tokens and cost and what the cache holds.
Nothing is sent, written or cached."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from zhiku.errors import ZhikuError
from zhiku.ingest.chunking import chunk_document
from zhiku.ingest.files import discover
from zhiku.ingest.loaders import Loader, load_document, supported_suffixes
from zhiku.ingest.pipeline import doc_id_for, sha256_bytes
from zhiku.ingest.transforms.stage import TransformStage
from zhiku.llm.service import CURRENCY, PlannedCall, PlanningService
from zhiku.settings import Settings
from zhiku.types import DocRecord, FileFailure

SAMPLES = 3


@dataclass(frozen=True)
class PlanLine:
    transform: str
    requests: int
    cached: int
    prompt_tokens: int  # estimated, requests not in the cache only


@dataclass(frozen=True)
class TransformPlan:
    transforms: tuple[str, ...]
    documents: int
    chunks: int
    lines: tuple[PlanLine, ...]
    cost: float  # estimated, input tokens only
    currency: str
    samples: tuple[PlannedCall, ...]  # the first requests, to show what is sent
    failed: tuple[FileFailure, ...] = ()

    @property
    def requests(self) -> int:
        return sum(x.requests for x in self.lines)

    @property
    def cached(self) -> int:
        return sum(x.cached for x in self.lines)

    @property
    def prompt_tokens(self) -> int:
        return sum(x.prompt_tokens for x in self.lines)


def plan_transforms(
    paths: Sequence[Path],
    stage: TransformStage,
    settings: Settings,
    loaders: Sequence[Loader],
    existing: Callable[[str], DocRecord | None],
    *,
    collection: str,
    force: bool = False,
) -> TransformPlan:
    """Run ``stage`` (built with a ``PlanningService``) over the files that would be ingested."""
    service = stage.service
    assert isinstance(service, PlanningService), "plan_transforms needs a stage built with planning=True"
    tasks, failed = discover(paths, supported_suffixes(loaders))
    documents = chunks = 0
    for task in tasks:
        try:
            old = existing(task.source)
            unchanged = old is not None and old.sha256 == sha256_bytes(task.path.read_bytes())
            if old is not None and unchanged and not force and not stage.owes(collection, task.source, old.ingested_at):
                continue  # as the ingest decides
            doc = load_document(task.path, task.source, loaders)
            pieces = chunk_document(
                doc, collection=collection, doc_id=doc_id_for(collection, doc.source), settings=settings.chunking
            )
        except (OSError, ZhikuError) as e:
            failed.append(FileFailure(str(task.path), str(e)))
            continue
        stage.run(doc, doc_id_for(collection, doc.source), pieces)
        documents += 1
        chunks += len(pieces)
    by: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for call in service.planned:
        row = by[call.prompt_id.partition("@")[0]]
        row[0] += 1
        row[1] += call.cached
        row[2] += 0 if call.cached else call.tokens
    lines = tuple(PlanLine(name, *by[name]) for name in stage.names if name in by)
    tokens = sum(x.prompt_tokens for x in lines)
    return TransformPlan(
        transforms=stage.names,
        documents=documents,
        chunks=chunks,
        lines=lines,
        cost=round(tokens * settings.llm.price_input / 1e6, 6),
        currency=CURRENCY,
        samples=tuple(service.planned[:SAMPLES]),
        failed=tuple(failed),
    )
