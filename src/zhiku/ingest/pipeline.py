"""The ingestion pipeline: discover → fingerprint → load → chunk → tokenise + embed → store, one transaction per
document. Embedding calls span documents; when a shared call fails for a reason other than the service, each document
is embedded alone, so one bad document is all that is lost."""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from zhiku.embedding.base import Embedder
from zhiku.errors import ConfigError, EmbeddingError, IngestError, ZhikuError
from zhiku.ingest.chunking import chunk_document, doc_id_for
from zhiku.ingest.files import MIB, FileTask, discover, printable, read_bounded
from zhiku.ingest.images import ImageStore
from zhiku.ingest.loaders import Loader, default_loaders, load_document, supported_suffixes
from zhiku.ingest.loaders.ocr import needs_ocr_note
from zhiku.ingest.transforms.stage import DocumentBatch, TransformStage, enriched_text, run_transforms
from zhiku.observability.tracing import span
from zhiku.settings import ChunkingSettings
from zhiku.stores.base import Writer
from zhiku.text import TextProcessor
from zhiku.types import (
    Chunk,
    DocRecord,
    DocStatus,
    FileFailure,
    IngestionRecord,
    IngestReport,
    OcrNeeded,
    SourceDoc,
    SourceImage,
)

__all__ = ["Ingestor", "ProgressFn", "STOP_CODES", "doc_id_for"]

log = logging.getLogger("zhiku.ingest")
ProgressFn = Callable[[int, int, str], None]
# Chunks per embedding call, across documents: keeps a model or endpoint busy, yet progress shows every few seconds
BATCH_CHUNKS = 128
STOP_CODES = ("INDEX_MISMATCH", "INDEX_READ_ONLY", "INDEX_LOCKED")  # the whole batch would fail the same way
NOTE_SUFFIX = " chunks embedded"  # progress between documents: "<embedded>/<queued> chunks embedded"
CLASH_FIX = (
    "ingest the two folders into different collections (-c NAME), or ingest their common parent folder so that "
    "their names differ"
)


def is_chunk_note(text: str) -> bool:
    return text.endswith(NOTE_SUFFIX)


def index_text(title: str, section: str, text: str, captions: Sequence[str] = ()) -> str:
    """What is embedded and tokenised for a chunk: its title and section path (so that a chunk saying ``本条`` still
    carries its law and chapter), its text, then the captions of its images that the text does not hold."""
    head = section if title and section.startswith(title) else " > ".join(p for p in (title, section) if p)
    body = f"{head}\n{text}" if head else text
    extra = [c for c in dict.fromkeys(captions) if c and c not in text]
    return body + "".join(f"\n图片：{c}" for c in extra)


@dataclass(frozen=True)
class WindowCheck:
    """Index texts over the embedder's window, by position (``max_tokens`` None: it cannot count tokens)."""

    max_tokens: int | None
    over: tuple[int, ...] = ()
    longest: int = 0


def check_window(embedder: object, texts: Sequence[str]) -> WindowCheck:
    """Texts the cheap ``token_bound`` puts inside the window are not tokenised (that costs more than BM25)."""
    inner = getattr(embedder, "inner", embedder)  # the embedding cache wraps the model
    if not (hasattr(inner, "max_tokens") and hasattr(inner, "token_count")):
        return WindowCheck(None)
    limit = inner.max_tokens
    bound = getattr(inner, "token_bound", lambda _: limit + 1)
    counts = [inner.token_count(t) if (b := bound(t)) > limit else b for t in texts]
    return WindowCheck(limit, tuple(i for i, n in enumerate(counts) if n > limit), max(counts, default=0))


@dataclass
class Prepared:
    doc: DocRecord
    chunks: list[Chunk]
    texts: list[str]  # index texts: what is embedded
    tokens: list[list[str]]  # BM25 tokens of each index text
    status: str  # added | updated
    images: tuple[SourceImage, ...] = ()
    batch: DocumentBatch | None = None
    over_window: int = 0  # index texts longer than the embedder's window


@dataclass(eq=False)
class _Queued:
    item: Prepared
    parts: list[np.ndarray] = field(default_factory=list)
    done: int = 0  # texts embedded

    @property
    def left(self) -> int:
        return len(self.item.texts) - self.done


class EmbedBatcher:
    """Queue documents with ``add``; ``add`` and ``finish`` return the finished ones with their vectors."""

    def __init__(
        self,
        embedder: Embedder,
        batch_chunks: int,
        *,
        on_error: Callable[[Prepared, Exception], None],
        on_batch: Callable[[int, int], None],
    ) -> None:
        self.embedder = embedder
        self.batch_chunks = max(1, batch_chunks)
        self.on_error = on_error
        self.on_batch = on_batch
        self._queue: deque[_Queued] = deque()
        self._embedded = 0
        self._seen = 0

    @property
    def _waiting(self) -> int:  # queued texts not embedded yet
        return sum(q.left for q in self._queue)

    def add(self, item: Prepared) -> list[tuple[Prepared, np.ndarray]]:
        self._queue.append(_Queued(item))
        self._seen += len(item.texts)
        while self._waiting >= self.batch_chunks:
            self._embed_next(self.batch_chunks)
        return self._finished()

    def finish(self) -> list[tuple[Prepared, np.ndarray]]:
        while self._waiting > 0:
            self._embed_next(min(self.batch_chunks, self._waiting))
        return self._finished()

    def _finished(self) -> list[tuple[Prepared, np.ndarray]]:
        out = []
        while self._queue and self._queue[0].left == 0:
            q = self._queue.popleft()
            out.append((q.item, np.concatenate(q.parts) if q.parts else np.zeros((0, self.embedder.dim), np.float32)))
        return out

    def _embed_next(self, n: int) -> None:
        slices: list[tuple[_Queued, int]] = []  # (document, texts taken from it)
        taken = 0
        for q in self._queue:
            if k := min(q.left, n - taken):
                slices.append((q, k))
                taken += k
        self._embed(slices)

    def _embed(self, slices: list[tuple[_Queued, int]]) -> bool:
        """One call; when a shared one fails, each document alone (one that fails by itself is dropped)."""
        try:
            vectors = self._call([t for q, k in slices for t in q.item.texts[q.done : q.done + k]])
        except (EmbeddingError, ConfigError):
            raise  # the service or model is down, or the embedding cache damaged: every document would fail alike
        except Exception as e:
            if len(slices) == 1:  # this document alone fails: dropped
                q = slices[0][0]
                self._queue.remove(q)
                self._seen, self._embedded = self._seen - len(q.item.texts), self._embedded - q.done
                self.on_error(q.item, e)
            else:
                for q, _ in slices:
                    while q.left and self._embed([(q, min(q.left, self.batch_chunks))]):
                        pass
            return False
        offset = 0
        for q, k in slices:
            q.parts.append(vectors[offset : offset + k])
            q.done += k
            offset += k
        self._embedded += offset
        self.on_batch(self._embedded, self._seen)
        return True

    def _call(self, texts: Sequence[str]) -> np.ndarray:
        computed = getattr(self.embedder, "computed", 0)
        with span("embed") as sp:
            vectors = self.embedder.embed_documents(list(texts))
            sp.set(counts={"texts": len(texts), "computed": getattr(self.embedder, "computed", 0) - computed})
        if vectors.shape[0] != len(texts):
            raise ValueError(f"the embedder returned {vectors.shape[0]} vectors for {len(texts)} texts")
        return vectors


@dataclass(frozen=True)
class Loaded:
    status: str  # skipped | added | updated | failed
    prepared: Prepared | None = None
    sha: str | None = None
    size: int | None = None
    reason: str = ""


def one_file_per_source(
    tasks: Sequence[FileTask], collection: str, stored_path: Callable[[str], str | None]
) -> tuple[list[FileTask], list[FileFailure]]:
    """One file per source name in a run (``zhiku ingest A B``, both holding ``说明.md``): documents are written after
    their embedding batch, so the second would replace the first unseen. The others fail with the fix; the file
    already stored under the name is kept, else the first given."""
    by_source: dict[str, list[FileTask]] = {}
    for t in tasks:
        by_source.setdefault(t.source, []).append(t)
    refused: dict[Path, FileFailure] = {}
    for source, same in by_source.items():
        if len(same) == 1:
            continue
        stored = stored_path(source)
        kept = next((t for t in same if t.shown == stored), same[0])
        for t in same:
            if t is not kept:
                refused[t.path] = FileFailure(
                    t.shown,
                    f"{kept.shown} is also named {source!r} in this run; this file would replace it in collection "
                    f"{collection!r}: {CLASH_FIX}",
                )
    return [t for t in tasks if t.path not in refused], list(refused.values())


def _failure(e: Exception, shown: str, doing: str) -> str:
    """The reason ``e`` gives for one document; a stop code is raised again."""
    if isinstance(e, ZhikuError):
        if e.code in STOP_CODES:
            raise e
        return str(e)
    log.warning("%s %s failed unexpectedly: %s: %s", doing, shown, type(e).__name__, e)
    log.debug("the traceback", exc_info=True)
    return f"unexpected error: {type(e).__name__}: {e}"


@dataclass
class _Tally:
    collection: str
    dry_run: bool  # nothing is recorded
    computed_before: int
    failures: list[FileFailure] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    needs_ocr: list[OcrNeeded] = field(default_factory=list)
    handled: int = 0  # items prepared so far
    written: int = 0
    over_window: int = 0


class Ingestor:
    def __init__(
        self,
        store: Writer,
        embedder: Embedder,
        text: TextProcessor,
        chunking: ChunkingSettings,
        *,
        loaders: Sequence[Loader] | None = None,
        images: ImageStore | None = None,
        retry_needs_ocr: bool = False,  # re-load unchanged documents whose pages needed OCR (it is available now)
        ocr_setting: str = "auto",
        max_file_mb: float = 100,
        transforms: TransformStage | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.images = images
        self.ocr_setting = ocr_setting
        self.transforms = transforms
        self.batch_chunks = BATCH_CHUNKS  # read here: tests make the batches small
        self.text = text
        self.chunking = chunking
        self.loaders = tuple(loaders) if loaders is not None else default_loaders()
        self.max_file_bytes = int(max_file_mb * MIB)
        self.retry_needs_ocr = retry_needs_ocr
        self._longest = 0  # the most tokens of one index text in this run (trace)

    def ingest_paths(
        self,
        paths: Sequence[Path],
        *,
        collection: str,
        force: bool = False,
        dry_run: bool = False,
        sync: bool = False,
        on_progress: ProgressFn | None = None,
        skip: Mapping[Path, str] | None = None,
        only: Collection[Path] | None = None,
    ) -> IngestReport:
        suffixes = supported_suffixes(self.loaders)
        unsupported: Counter[str] = Counter()
        tasks, failures = discover(paths, suffixes, unsupported)
        for given in paths:  # a file named directly with an unknown suffix is an error, not a silent skip
            p = Path(given).expanduser()
            if p.is_file() and p.suffix.lower() not in suffixes:
                tasks = [t for t in tasks if t.path != p.resolve()]
                what = f"unsupported file type '{printable(p.suffix or p.name)}' (supported: {', '.join(suffixes)})"
                failures.append(FileFailure(printable(str(given)), what))
        skip = skip or {}
        failures += [FileFailure(t.source, skip[t.path]) for t in tasks if t.path in skip]
        tasks = [t for t in tasks if t.path not in skip and (only is None or t.path in only)]
        stored = lambda source: getattr(self.store.find_document(collection, source), "path", None)  # noqa: E731
        tasks, clashes = one_file_per_source(tasks, collection, stored)
        tally = _Tally(collection, dry_run, getattr(self.embedder, "computed", 0))
        for f in [*failures, *clashes]:  # missing paths and unsupported files go in the history like other failures
            self._fail(tally, f.path, f.reason)
        prepare = partial(self._prepare_file, collection=collection, force=force, dry_run=dry_run)
        self._run(tasks, prepare, tally, on_progress, len(tasks))
        if on_progress and tasks:
            on_progress(len(tasks), len(tasks), "")
        gone = self._sync(paths, tasks, collection, dry_run or not sync)  # without sync: only listed, kept
        report = self._report(tally, removed=gone if sync else ())
        return replace(report, gone=() if sync else tuple(gone), unsupported=tuple(sorted(unsupported.items())))

    def ingest_docs(
        self, docs: Iterable[SourceDoc], *, collection: str, on_progress: ProgressFn | None = None, total: int = 0
    ) -> IngestReport:
        """Index documents that are not files (e.g. a BEIR corpus); unchanged texts are skipped."""
        tally = _Tally(collection, False, getattr(self.embedder, "computed", 0))
        self._run(docs, partial(self._prepare_doc, collection=collection), tally, on_progress, total)
        return self._report(tally)

    def _run(
        self,
        items: Iterable[FileTask | SourceDoc],
        prepare: Callable[[Any], Loaded],
        tally: _Tally,
        on_progress: ProgressFn | None,
        total: int,
    ) -> None:
        def note(done: int, seen: int) -> None:
            if on_progress:
                on_progress(tally.handled, total, f"{done}/{seen}{NOTE_SUFFIX}")

        def embed_failed(p: Prepared, e: Exception) -> None:
            self._fail(tally, p.doc.path, f"embedding failed: {type(e).__name__}: {e}", p.doc.sha256, p.doc.size)

        batcher = EmbedBatcher(self.embedder, self.batch_chunks, on_error=embed_failed, on_batch=note)
        if on_progress and total:  # the count is known before the first document is prepared (LLM transforms: long)
            on_progress(0, total, "")
        for item in items:
            shown, source = (item.shown, item.source) if isinstance(item, FileTask) else (item.source, item.source)
            loaded = prepare(item)
            if on_progress:
                on_progress(tally.handled, total, source)
            tally.handled += 1
            if loaded.status == "failed":
                self._fail(tally, shown, loaded.reason, loaded.sha, loaded.size)
            elif loaded.prepared is None:
                {"skipped": tally.skipped, "added": tally.added, "updated": tally.updated}[loaded.status].append(source)
            else:
                tally.over_window += loaded.prepared.over_window
                self._store(batcher.add(loaded.prepared), tally)
        self._store(batcher.finish(), tally)

    def _prepare_file(self, task: FileTask, *, collection: str, force: bool, dry_run: bool) -> Loaded:
        sha = size = None
        try:
            data = read_bounded(task.path, self.max_file_bytes)
            sha, size = hashlib.sha256(data).hexdigest(), len(data)
            existing = self.store.find_document(collection, task.source)
            # the document of this name came from another file that still exists (a moved folder's old file is gone)
            if existing is not None and existing.path != task.shown and Path(existing.path).is_file():
                raise IngestError(
                    f"{existing.path} is already indexed as {task.source!r} in collection {collection!r}; this "
                    f"file would replace it: {CLASH_FIX}"
                )
            if existing is not None and existing.sha256 == sha and not force:
                if not (self.retry_needs_ocr and existing.status == DocStatus.NEEDS_OCR) and not (
                    self.transforms is not None and self.transforms.owes(collection, task.source, existing.ingested_at)
                ):
                    return Loaded("skipped")
            status = "updated" if existing is not None else "added"
            if dry_run:
                return Loaded(status)
            with span("load") as sp:
                doc = load_document(task.path, task.source, self.loaders)
                sp.set(counts={"documents": 1, "bytes": size})
            doc = replace(doc, title=printable(doc.title))  # loaders title a document by its file name
            return Loaded(status, self._prepare(doc, collection, task.shown, sha, size, status))
        except Exception as e:  # whatever a loader or the chunker does, the batch goes on
            return Loaded("failed", None, sha, size, _failure(e, task.shown, "ingesting"))

    def _prepare_doc(self, doc: SourceDoc, *, collection: str) -> Loaded:
        sha = hashlib.sha256(f"{doc.title}\x00{doc.text}".encode()).hexdigest()
        existing = self.store.find_document(collection, doc.source)
        written = existing.ingested_at if existing is not None else 0.0
        owed = self.transforms is not None and self.transforms.owes(collection, doc.source, written)
        if existing is not None and existing.sha256 == sha and not owed:
            return Loaded("skipped")
        status = "updated" if existing else "added"
        try:
            return Loaded(status, self._prepare(doc, collection, doc.source, sha, len(doc.text.encode()), status))
        except ZhikuError as e:
            return Loaded("failed", None, sha, None, _failure(e, doc.source, "ingesting"))

    def _prepare(self, doc: SourceDoc, collection: str, path: str, sha: str, size: int, status: str) -> Prepared:
        doc_id = doc_id_for(collection, doc.source)
        with span("split") as sp:
            chunks = chunk_document(doc, collection=collection, doc_id=doc_id, settings=self.chunking)
            sp.set(counts={"documents": 1, "chunks": len(chunks)})
        batch = run_transforms(self.transforms, doc, doc_id, chunks)
        if not chunks and not doc.needs_ocr_pages:  # a scan without OCR is still recorded, so the user sees it
            raise IngestError(f"no text to index in {doc.source} (the file holds no words)")
        record = DocRecord(
            doc_id=doc_id,
            collection=collection,
            source=doc.source,
            path=path,
            doc_type=doc.doc_type,
            title=doc.title,
            sha256=sha,
            size=size,
            chunk_count=len(chunks),
            pages=max((p.number for p in doc.pages), default=None),
            ingested_at=0.0,  # set when it is written
            status=DocStatus.NEEDS_OCR if doc.needs_ocr_pages else DocStatus.READY,
            needs_ocr_pages=tuple(doc.needs_ocr_pages),
            ocr_pages=tuple(doc.ocr_pages),
        )
        texts = [  # the refined text, when a transform wrote one, in place of the original
            enriched_text(index_text(doc.title, c.section, e.refined or c.text, [i.caption for i in c.images]), e)
            for c, e in zip(batch.chunks, batch.enrichments, strict=True)
        ]
        chunks = list(batch.chunks)
        linked = {im.image_id for c in chunks for im in c.images}
        images = tuple({im.ref.image_id: im for im in doc.images if im.ref.image_id in linked}.values())
        with span("tokenise") as sp:
            tokens = [self.text.index_tokens(t) for t in texts]
            window = check_window(self.embedder, texts)
            self._longest = max(self._longest, window.longest)
            sp.set(
                counts={"chunks": len(texts), "over_window": len(window.over)},
                max_tokens=window.max_tokens,
                longest_tokens=self._longest,
            )
        return Prepared(record, chunks, texts, tokens, status, images, batch, len(window.over))

    def _report(self, tally: _Tally, *, removed: Sequence[str] = ()) -> IngestReport:
        return IngestReport(
            added=tuple(tally.added),
            updated=tuple(tally.updated),
            skipped=tuple(tally.skipped),
            removed=tuple(removed),
            failed=tuple(tally.failures),
            chunks_written=tally.written,
            chunks_embedded=getattr(self.embedder, "computed", 0) - tally.computed_before,
            elapsed_s=time.perf_counter() - tally.started,
            dry_run=tally.dry_run,
            needs_ocr=tuple(tally.needs_ocr),
            chunks_over_window=tally.over_window,
            transforms=self.transforms.report() if self.transforms else None,
        )

    def _store(self, done: Sequence[tuple[Prepared, np.ndarray]], tally: _Tally) -> None:
        for p, vecs in done:
            n = len(p.chunks)
            doc = replace(p.doc, ingested_at=time.time())
            try:
                if self.images is not None:  # files first: a chunk never refers to a missing image
                    for im in p.images:
                        self.images.put(im.ref.image_id, im.data)
                with span("upsert") as sp:
                    self.store.write_document(doc, p.chunks, p.tokens, vecs)
                    sp.set(counts={"documents": 1, "chunks": n})
            except Exception as e:  # a bug on one document's way into the store must not stop the batch
                self._fail(tally, doc.path, _failure(e, doc.path, "writing"), doc.sha256, doc.size)
                continue
            (tally.added if p.status == "added" else tally.updated).append(doc.source)
            note = None
            if doc.needs_ocr_pages:
                tally.needs_ocr.append(OcrNeeded(doc.source, doc.needs_ocr_pages))
                note = needs_ocr_note(doc.needs_ocr_pages, self.ocr_setting)
            self.store.record_ingestion(
                IngestionRecord(doc.path, doc.collection, doc.sha256, doc.size, p.status, note, n, time.time())
            )
            if self.transforms is not None and p.batch is not None:  # after the write: never for a lost chunk
                self.transforms.commit(p.batch, doc.collection)
            tally.written += n

    def _fail(self, tally: _Tally, path: str, reason: str, sha: str | None = None, size: int | None = None) -> None:
        path, reason = printable(path), printable(reason)
        tally.failures.append(FileFailure(path, reason))
        if not tally.dry_run:
            record = IngestionRecord(path, tally.collection, sha, size, "failed", reason, 0, time.time())
            self.store.record_ingestion(record)

    def _sync(self, paths: Sequence[Path], tasks: Sequence[FileTask], collection: str, dry_run: bool) -> list[str]:
        """Remove documents of ``collection`` that lived under a given directory and are gone now."""
        roots = [Path(p).expanduser().resolve() for p in paths if Path(p).expanduser().is_dir()]
        if not roots:  # files named one by one: nothing can be gone
            return []
        present, suffixes = {str(t.path) for t in tasks}, supported_suffixes(self.loaders)
        removed = []
        for doc in self.store.list_documents(collection):
            path = Path(doc.path)
            if str(path) in present or not any(path.is_relative_to(r) for r in roots):
                continue
            if path.exists() and path.suffix.lower() in suffixes and not path.name.startswith("."):
                continue
            removed.append(doc.source)
            if not dry_run:
                self.store.delete_document(doc.doc_id)
                self.store.record_ingestion(
                    IngestionRecord(doc.path, collection, doc.sha256, doc.size, "removed", None, 0, time.time())
                )
        return removed
