"""The transform stage of ingestion: runs the enabled transforms on each document's chunks, stores the enrichments
after the document is written, and sums up usage and issues. A transform that fails keeps the chunk without it."""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from zhiku.errors import ConfigError, ZhikuError
from zhiku.ingest.chunking import chunk_document, doc_id_for
from zhiku.ingest.files import discover
from zhiku.ingest.loaders import Loader, load_document, supported_suffixes
from zhiku.ingest.transforms.base import DocumentBatch, Enrichment, Transform, TransformContext, TransformError
from zhiku.ingest.transforms.builtin import Caption, Contextual, Metadata, Refine
from zhiku.ingest.transforms.store import EnrichmentStore, UsageRecord
from zhiku.llm import (
    CONCURRENCY,
    CURRENCY,
    LLM_CACHE_FILE,
    LLMService,
    PlannedCall,
    PlanningService,
    Prompts,
    ReplyCache,
    build_service,
    detect_language,
)
from zhiku.observability.tracing import mark, span
from zhiku.settings import TRANSFORM_ORDER, LLMSettings, Settings, TransformSettings
from zhiku.types import Chunk, DocRecord, FileFailure, LLMUsage, SourceDoc, TransformIssue, TransformReport

TransformProgress = Callable[[str, str, int, int], None]  # (transform, source, chunks done, chunks in document)
TRACE_CHUNKS = 200  # chunk rows kept in one ingest trace
LANGUAGE = "auto"  # prompts in the document's language: Chinese for a mostly-CJK one, else English
RETRY_LIMIT = 3  # ingests in a row without an answer for some chunk of a document; then only --force asks again
__all__ = ["DocumentBatch", "TransformStage", "registry", "resolve", "run_transforms"]


def registry() -> dict[str, type]:
    from zhiku.plugins import load, report_problem

    found: dict[str, type] = {"caption": Caption, "refine": Refine, "metadata": Metadata, "contextual": Contextual}
    for plugin in load("zhiku.transforms"):
        name, obj = plugin.info.name, plugin.obj
        if name in found:
            report_problem(plugin.info, f"the name {name!r} is a built-in transform's; rename the entry point")
        elif not (isinstance(obj, type) and callable(getattr(obj, "apply", None))):
            report_problem(plugin.info, "not a Transform class (needs name, needs_llm and apply(batch, ctx))")
        else:
            found[name] = obj
    return found


def resolve(names: Sequence[str]) -> list[Transform]:
    available = registry()
    if unknown := [n for n in names if n not in available]:
        raise ConfigError(
            f"unknown transform {', '.join(map(repr, unknown))}: use any of {', '.join(available)} "
            "(transforms.enabled or --transform contextual,refine,metadata,caption)"
        )
    wanted = list(dict.fromkeys(names))
    ordered = [n for n in TRANSFORM_ORDER if n in wanted] + [n for n in wanted if n not in TRANSFORM_ORDER]
    return [available[n]() for n in ordered]


def enriched_text(base: str, e: Enrichment) -> str:
    extra = " ".join(p for p in (e.title, " ".join(e.tags)) if p)
    return "\n".join(p for p in (e.context, base, extra) if p)


class TransformStage:
    """One per ingestion run; without a ``service``, transforms that need an LLM are refused up front."""

    def __init__(
        self,
        transforms: Sequence[Transform],
        service: LLMService | None,
        settings: TransformSettings,
        llm: LLMSettings,
        *,
        store: EnrichmentStore | None = None,
        on_progress: TransformProgress | None = None,
    ) -> None:
        need = [t.name for t in transforms if t.needs_llm]
        if need and service is None:
            raise ConfigError(
                f"transform {', '.join(need)} needs an LLM endpoint: set llm.base_url and llm.model "
                "(ZHIKU_LLM__BASE_URL, ZHIKU_LLM__MODEL; key in ZHIKU_LLM_API_KEY) — see docs/transforms.md"
            )
        self.transforms = list(transforms)
        self.service = service
        self.settings = settings
        self.llm = llm
        self.store = store
        self.prompts = Prompts(llm.prompts_dir)
        self.on_progress = on_progress
        self._applied: dict[str, int] = {}
        self._issues: list[TransformIssue] = []
        self._retried = False  # some document's unanswered chunks are asked again by the next plain ingest
        self._doc_usage: dict[str, LLMUsage] = {}  # each document's share, kept until it is written

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.transforms)

    @functools.cached_property
    def marks(self) -> dict[str, str]:
        """A digest per transform of what its enrichments depend on besides the chunks; a built-in prompt counts by
        name (a release that words one better does not re-buy every enrichment)."""
        common = {
            "model": self.llm.model,
            "language": LANGUAGE,
            "settings": self.settings.model_dump(mode="json", exclude={"enabled"}, exclude_defaults=True),
        }
        marks = {}
        for name in self.names:
            parts = {
                **common,
                "vision_model": self.llm.vision_model if name == "caption" else None,
                "prompts": [self._prompt_mark(name, lang) for lang in ("zh", "en")],
            }
            marks[name] = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]
        return marks

    @functools.cached_property
    def setup(self) -> str:
        return json.dumps(self.marks, sort_keys=True, separators=(",", ":")) if self.transforms else ""

    def _changed(self, recorded: str) -> bool:
        """Whether one of these transforms ran with another setup then (an older record, ``""``: no). A transform off
        now is no change: a plain ``zhiku ingest`` must not strip an earlier ``--transform``'s enrichments."""
        try:
            old = json.loads(recorded) if recorded else {}
        except ValueError:
            return False
        return isinstance(old, dict) and any(name in old and old[name] != mark for name, mark in self.marks.items())

    def _prompt_mark(self, name: str, lang: str) -> str:
        folder = self.prompts.override_dir
        if folder is None or not (folder / f"{name}.{lang}.txt").is_file():
            try:
                self.prompts.text(name, lang)
            except ConfigError:
                return ""
            return "builtin"
        try:
            text = self.prompts.text(name, lang)
        except (OSError, UnicodeError) as e:  # (not UTF-8, say): the transform reports it for a document
            text = f"unreadable: {type(e).__name__}"  # in that language; this ingest goes on
        return hashlib.sha256(text.encode()).hexdigest()

    def owes(self, collection: str, source: str, written_at: float = 0.0) -> bool:
        """Whether an unchanged document is ingested again. Unanswered chunks are retried only with the reply cache
        (else every chunk is paid for again), and only for ``RETRY_LIMIT`` ingests in a row; then ``--force``."""
        if not self.transforms or self.store is None:
            return False
        recent = self.store.recent_usage(collection, source, RETRY_LIMIT)
        last = recent[0] if recent else None
        if last is None or not set(self.names) <= set(last.transforms) or last.at < written_at:
            return True
        if self._changed(last.setup):
            return True
        same = list(itertools.takewhile(lambda r: r.setup == last.setup, recent))
        unanswered = [any(i.unreached for i in r.issues) for r in same]
        cached = self.service is not None and self.service.cache is not None
        return cached and unanswered[0] and not (len(same) == RETRY_LIMIT and all(unanswered))

    def _context(self, doc: SourceDoc, total: int) -> TransformContext:
        lang = detect_language(doc.text)
        done: dict[str, int] = {}

        def on_chunk(name: str) -> None:
            done[name] = done.get(name, 0) + 1
            if self.on_progress is not None:
                self.on_progress(name, doc.source, done[name], total)

        options: dict[str, Any] = {**self.settings.model_dump(), "concurrency": CONCURRENCY}
        prompt = functools.partial(self.prompts.text, language=lang)
        return TransformContext(
            self.service, "zh" if lang == "zh" else "en", prompt, self.prompts.id_of, options, on_chunk
        )

    def run(self, doc: SourceDoc, doc_id: str, chunks: Sequence[Chunk]) -> DocumentBatch:
        before = self.service.usage() if self.service is not None else LLMUsage()
        batch = DocumentBatch.start(doc, doc_id, chunks)
        ctx = self._context(doc, len(chunks))
        with span("transform") as sp:
            for t in self.transforms:
                batch = self._apply(t, batch, ctx)
            if sp.active:
                sp.set(
                    counts={"chunks": len(batch.chunks), "issues": len(batch.issues)},
                    transforms=list(self.names),
                    chunks=trace_rows(batch)[:TRACE_CHUNKS],
                    issues=[i.__dict__ for i in batch.issues],
                )
        self._issues.extend(batch.issues)
        self._doc_usage[doc_id] = _minus(self.service.usage(), before) if self.service is not None else LLMUsage()
        return batch

    def _apply(self, t: Transform, batch: DocumentBatch, ctx: TransformContext) -> DocumentBatch:
        try:
            out = t.apply(batch, ctx)
        except TransformError as e:
            return batch.with_issue(t.name, str(e), unreached=e.unreached)
        except Exception as e:  # a plugin's bug must not stop the batch
            return batch.with_issue(t.name, f"unexpected error: {type(e).__name__}: {e}")
        ids = [c.chunk_id for c in out.chunks]
        if ids != [c.chunk_id for c in batch.chunks] or len(out.enrichments) != len(ids):
            return batch.with_issue(t.name, "changed the chunks it was given (ids or count); its output is ignored")
        changed = sum(
            a != b or c != d
            for a, b, c, d in zip(batch.enrichments, out.enrichments, batch.chunks, out.chunks, strict=True)
        )
        changed += int(out.meta != batch.meta)
        self._applied[t.name] = self._applied.get(t.name, 0) + changed
        return out

    def commit(self, batch: DocumentBatch, collection: str) -> None:
        if self.store is None:
            return
        self.store.put(batch)
        if not self.transforms:
            return
        usage = self._doc_usage.pop(batch.doc_id, LLMUsage())
        record = UsageRecord(time.time(), collection, batch.doc.source, self.names, usage, batch.issues, self.setup)
        self.store.record_usage(record)
        if any(i.unreached for i in batch.issues) and self.owes(collection, batch.doc.source, record.at):
            self._retried = True

    def report(self) -> TransformReport | None:
        if not self.transforms:
            return None
        return TransformReport(
            enabled=self.names,
            applied=tuple((n, self._applied.get(n, 0)) for n in self.names),
            usage=self.service.usage() if self.service is not None else LLMUsage(),
            issues=tuple(self._issues),
            retried=self._retried,
        )


def _minus(now: LLMUsage, before: LLMUsage) -> LLMUsage:
    counts = {
        k: getattr(now, k) - getattr(before, k) for k in ("calls", "cached", "prompt_tokens", "completion_tokens")
    }
    return replace(now, **counts, cost=round(now.cost - before.cost, 6))


def trace_rows(batch: DocumentBatch) -> list[dict[str, Any]]:
    rows = []
    for c, e in zip(batch.chunks, batch.enrichments, strict=True):
        row: dict[str, Any] = {"chunk_id": c.chunk_id, "source": c.source, "section": c.section}
        if e.context:
            row["context"] = e.context[:200]
        if e.refined:
            row["refined"] = e.refined[:200]
        if e.title or e.tags:
            row.update(title=e.title, summary=e.summary[:200], tags=list(e.tags))
        if captions := [i.caption[:200] for i in c.images if i.caption]:
            row["captions"] = captions
        rows.append(row)
    return rows


def run_transforms(stage: TransformStage | None, doc: SourceDoc, doc_id: str, chunks: Sequence[Chunk]) -> DocumentBatch:
    if stage is None or not stage.transforms:  # an empty stage only clears what an earlier run stored
        mark("transform", reason="no transforms configured")
        return DocumentBatch.start(doc, doc_id, chunks)
    return stage.run(doc, doc_id, chunks)


def parse_transform_names(spec: str | None) -> tuple[str, ...] | None:
    """``--transform contextual,metadata`` as names (None: the settings'; ``none``: no transform)."""
    if spec is None:
        return None
    names = tuple(dict.fromkeys(n.strip() for n in spec.split(",") if n.strip()))
    return () if names in ((), ("none",)) else names


def build_stage(
    settings: Settings,
    store: EnrichmentStore | None,
    *,
    on_progress: TransformProgress | None = None,
    planning: bool = False,
) -> TransformStage | None:
    """None for a plan without transforms or without a store; an empty stage clears older enrichments and keeps the
    files' own tags."""
    names = tuple(settings.transforms.enabled)
    if not names and (store is None or (planning and not store.path.exists())):
        return None
    transforms = resolve(names) if names else []
    service: LLMService | None
    if planning:
        llm = settings.llm
        path = settings.cache_dir / LLM_CACHE_FILE if settings.cache_dir else None  # read, never created, by a dry run
        cache = ReplyCache(path, read_only=True) if path is not None and path.exists() else None
        service = PlanningService(llm.model or "(llm.model unset)", vision_model=llm.vision_model, cache=cache)
    else:
        service = build_service(settings.llm, settings.cache_dir) if names else None
    return TransformStage(transforms, service, settings.transforms, settings.llm, store=store, on_progress=on_progress)


# -- a transform dry run: the LLM requests an ingest would send; nothing is sent, written or cached.
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
    service = stage.service
    assert isinstance(service, PlanningService), "plan_transforms needs a stage built with planning=True"
    tasks, failed = discover(paths, supported_suffixes(loaders))
    documents = chunks = 0
    for task in tasks:
        try:
            old = existing(task.source)
            unchanged = old is not None and old.sha256 == hashlib.sha256(task.path.read_bytes()).hexdigest()
            if old is not None and unchanged and not force and not stage.owes(collection, task.source, old.ingested_at):
                continue  # as the ingest decides
            doc = load_document(task.path, task.source, loaders)
            doc_id = doc_id_for(collection, doc.source)
            pieces = chunk_document(doc, collection=collection, doc_id=doc_id, settings=settings.chunking)
        except (OSError, ZhikuError) as e:
            failed.append(FileFailure(str(task.path), str(e)))
            continue
        stage.run(doc, doc_id, pieces)
        documents += 1
        chunks += len(pieces)
    by = {name: [c for c in service.planned if c.prompt_id.partition("@")[0] == name] for name in stage.names}
    lines = tuple(
        PlanLine(n, len(cs), sum(c.cached for c in cs), sum(c.tokens for c in cs if not c.cached))
        for n, cs in by.items()
        if cs
    )
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
