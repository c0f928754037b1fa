"""The ingestion pipeline: discover → fingerprint (SHA-256) → load → chunk → tokenise + embed → store.

Unchanged files are skipped without writing anything; changed files are replaced in one transaction per
document; ``sync`` drops documents whose files are gone. One bad file never stops the batch and never
touches what is stored.

Each document is prepared (read, parse, chunk, transform, tokenise) in turn; chunks are embedded in calls of
``BATCH_CHUNKS`` across documents (``ingest.batching``), and each document is written, in order, as soon
as all its chunks are embedded. Preparing runs inline: with cached vectors or a remote embedder, helper threads
saved at most a few percent, since preparing is Python that holds the GIL.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from zhiku.embedding.base import Embedder
from zhiku.errors import IngestError, ZhikuError
from zhiku.ingest.batching import EmbedBatcher
from zhiku.ingest.chunking import chunk_document
from zhiku.ingest.context import check_window, index_text
from zhiku.ingest.discover import FileTask, discover
from zhiku.ingest.guard import MIB, printable, read_bounded
from zhiku.ingest.images import ImageStore
from zhiku.ingest.loaders import Loader, default_loaders, load_document, supported_suffixes
from zhiku.ingest.loaders.ocr import needs_ocr_note
from zhiku.ingest.progress import chunk_note
from zhiku.ingest.transforms.stage import DocumentBatch, TransformStage, run_transforms
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

__all__ = ["Ingestor", "ProgressFn", "STOP_CODES", "doc_id_for", "sha256_bytes"]

log = logging.getLogger("zhiku.ingest")
ProgressFn = Callable[[int, int, str], None]
# Chunks per embedding call, across documents: large enough to keep a model or endpoint busy, small enough that
# progress shows every few seconds and a document is written soon after its last chunk is embedded
BATCH_CHUNKS = 128
STOP_CODES = ("INDEX_MISMATCH", "INDEX_READ_ONLY", "INDEX_LOCKED")  # the whole batch would fail the same way


def doc_id_for(collection: str, source: str) -> str:
    return hashlib.sha256(f"{collection}\x00{source}".encode()).hexdigest()[:16]


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Prepared:
    """A document ready to embed and write."""

    doc: DocRecord
    chunks: list[Chunk]
    texts: list[str]  # index texts: what is embedded
    tokens: list[list[str]]  # BM25 tokens of each index text
    status: str  # added | updated
    path: str
    images: tuple[SourceImage, ...] = ()
    batch: DocumentBatch | None = None  # the chunks with what the transforms added
    over_window: int = 0  # index texts longer than the embedder's window


@dataclass(frozen=True)
class Loaded:
    """What preparing one file or document gave: ``status`` skipped | added | updated | failed; ``prepared``
    (None when skipped, failed or in a dry run); for a failure its ``reason`` and what was read of the file."""

    status: str
    prepared: Prepared | None = None
    sha: str | None = None
    size: int | None = None
    reason: str = ""


CLASH_FIX = (
    "ingest the two folders into different collections (-c NAME), or ingest their common parent folder so that "
    "their names differ"
)


def one_file_per_source(
    tasks: Sequence[FileTask], collection: str, stored_path: Callable[[str], str | None]
) -> tuple[list[FileTask], list[FileFailure]]:
    """One file per source name in a run (`zhiku ingest A B`, both holding ``说明.md``): the others fail with the
    fix before anything is read (documents are written after their embedding batch, so the second would not see
    the first stored and would replace it). The file already stored under the name is kept, else the first given."""
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


def _another_file(stored: str, path: str) -> bool:
    """The document of this source name came from another file that still exists: two folders ingested into one
    collection both hold e.g. ``说明.md`` (a moved folder, whose old file is gone, replaces its documents)."""
    return stored != path and Path(stored).is_file()


@dataclass
class _Tally:
    """One ingest run's outcome so far."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failures: list[FileFailure] = field(default_factory=list)
    handled: int = 0  # items prepared so far
    written: int = 0
    over_window: int = 0

    def count(self, status: str, source: str) -> None:
        {"skipped": self.skipped, "added": self.added, "updated": self.updated}[status].append(source)


class Ingestor:
    """Writes documents into a ``Store``: chunks, BM25 tokens and vectors, one transaction per document."""

    def __init__(
        self,
        store: Writer,
        embedder: Embedder,
        text: TextProcessor,
        chunking: ChunkingSettings,
        *,
        loaders: Sequence[Loader] | None = None,
        images: ImageStore | None = None,
        retry_needs_ocr: bool = False,
        ocr_setting: str = "auto",
        max_file_mb: float = 100,
        transforms: TransformStage | None = None,
    ) -> None:
        """``images``: where extracted images go (None: they are not kept). ``retry_needs_ocr``: re-load
        unchanged documents whose pages needed OCR (OCR has become available). ``max_file_mb``: larger files
        fail without being read."""
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
        self._needs_ocr: list[OcrNeeded] = []
        self._longest = 0  # the most tokens of one index text in this run (trace)

    # -- files -----------------------------------------------------------------------------------
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
    ) -> IngestReport:
        started = time.perf_counter()
        self._needs_ocr = []
        tasks, failures, unsupported = self._tasks(paths)
        skip = skip or {}
        failures += [FileFailure(t.source, skip[t.path]) for t in tasks if t.path in skip]
        tasks = [t for t in tasks if t.path not in skip]
        tasks, clashes = one_file_per_source(tasks, collection, partial(self._stored_path, collection))
        failures.extend(clashes)
        if not dry_run:  # missing paths and unsupported files belong in the history like every other failure
            for f in failures:
                self.store.record_ingestion(
                    IngestionRecord(f.path, collection, None, None, "failed", f.reason, 0, time.time())
                )
        tally = _Tally(failures=failures)
        computed_before = getattr(self.embedder, "computed", 0)
        prepare = partial(self._prepare_file, collection=collection, force=force, dry_run=dry_run)
        self._run(tasks, prepare, tally, collection, on_progress, dry_run)
        if on_progress and tasks:
            on_progress(len(tasks), len(tasks), "")
        gone = self._sync(paths, tasks, collection, dry_run or not sync)  # without sync: only listed, kept
        report = self._report(tally, started, computed_before, removed=gone if sync else (), dry_run=dry_run)
        return replace(report, gone=() if sync else tuple(gone), unsupported=tuple(sorted(unsupported.items())))

    def _stored_path(self, collection: str, source: str) -> str | None:
        doc = self.store.find_document(collection, source)
        return None if doc is None else doc.path

    def _tasks(self, paths: Sequence[Path]) -> tuple[list[FileTask], list[FileFailure], Counter[str]]:
        """The files to ingest, the paths that fail before any is read (missing, unsupported), and the files of a
        walked folder skipped for their type, per suffix (``discover``)."""
        suffixes = supported_suffixes(self.loaders)
        unsupported: Counter[str] = Counter()
        tasks, failures = discover(paths, suffixes, unsupported)
        for given in paths:  # a file named directly with an unknown suffix is an error, not a silent skip
            p = Path(given).expanduser()
            if p.is_file() and p.suffix.lower() not in suffixes:
                tasks = [t for t in tasks if t.path != p.resolve()]
                what = printable(p.suffix or p.name)
                failures.append(
                    FileFailure(
                        printable(str(given)), f"unsupported file type '{what}' (supported: {', '.join(suffixes)})"
                    )
                )
        return tasks, failures, unsupported

    # -- in-memory documents (evaluation corpora) ------------------------------------------------
    def ingest_docs(
        self, docs: Iterable[SourceDoc], *, collection: str, on_progress: ProgressFn | None = None, total: int = 0
    ) -> IngestReport:
        """Index documents that are not files (e.g. a BEIR corpus); unchanged texts are skipped."""
        started = time.perf_counter()
        self._needs_ocr = []
        tally = _Tally()
        computed_before = getattr(self.embedder, "computed", 0)
        self._run(docs, partial(self._prepare_doc, collection=collection), tally, collection, on_progress, total=total)
        return self._report(tally, started, computed_before)

    # -- the loop: prepare, embed in chunk batches, write in order --------------------------------
    def _run(
        self,
        items: Iterable[FileTask | SourceDoc],
        prepare: Callable[[Any], Loaded],
        tally: _Tally,
        collection: str,
        on_progress: ProgressFn | None,
        dry_run: bool = False,
        total: int | None = None,
    ) -> None:
        """Prepare ``items`` in order; embed and write each prepared one."""
        if total is None:
            total = len(items) if isinstance(items, Sequence) else 0
        note = (
            None
            if on_progress is None
            else (lambda done, seen: on_progress(tally.handled, total, chunk_note(done, seen)))
        )
        batcher: EmbedBatcher[Prepared] = EmbedBatcher(
            self.embedder,
            self.batch_chunks,
            on_error=partial(self._embed_failed, tally),
            on_batch=note,
        )
        if on_progress and total:  # the count is known before the first document is prepared (LLM transforms: long)
            on_progress(0, total, "")
        for item in items:
            shown, source = (item.shown, item.source) if isinstance(item, FileTask) else (item.source, item.source)
            loaded = prepare(item)
            if on_progress:
                on_progress(tally.handled, total, source)
            tally.handled += 1
            if loaded.status == "failed":
                self._fail(tally.failures, shown, collection, loaded.sha, loaded.size, loaded.reason, dry_run)
            elif loaded.prepared is None:
                tally.count(loaded.status, source)
            else:
                tally.over_window += loaded.prepared.over_window
                self._store(batcher.add(loaded.prepared, loaded.prepared.texts), tally)
        self._store(batcher.finish(), tally)

    # -- preparing one file or document: everything but embedding and writing -----------------------
    def _prepare_file(self, task: FileTask, *, collection: str, force: bool, dry_run: bool) -> Loaded:
        read: list[Any] = [None, None]  # sha256, size: known once the file is read
        try:
            status, prepared = self._read_file(task, collection, force, dry_run, read)
        except ZhikuError as e:
            if e.code in STOP_CODES:
                raise
            reason = str(e)
        except Exception as e:  # whatever a loader or the chunker does, the batch goes on
            log.warning("ingesting %s failed unexpectedly: %s: %s", task.shown, type(e).__name__, e)
            log.debug("the traceback", exc_info=True)
            reason = f"unexpected error: {type(e).__name__}: {e}"
        else:
            return Loaded(status, prepared)
        return Loaded("failed", None, read[0], read[1], reason)

    def _read_file(
        self, task: FileTask, collection: str, force: bool, dry_run: bool, read: list[Any]
    ) -> tuple[str, Prepared | None]:
        """``(status, prepared)``: "skipped" (unchanged), or "added"/"updated" with the prepared document
        (None in a dry run). ``read`` receives the file's SHA-256 and size once they are known."""
        data = read_bounded(task.path, self.max_file_bytes)
        sha = read[0] = sha256_bytes(data)
        read[1] = len(data)
        existing = self.store.find_document(collection, task.source)
        if existing is not None and _another_file(existing.path, task.shown):
            raise IngestError(
                f"{existing.path} is already indexed as {task.source!r} in collection {collection!r}; this file "
                f"would replace it: {CLASH_FIX}"
            )
        if (
            existing is not None
            and existing.sha256 == sha
            and not force
            and not (self.retry_needs_ocr and existing.status == DocStatus.NEEDS_OCR)
            and not (
                self.transforms is not None and self.transforms.owes(collection, task.source, existing.ingested_at)
            )
        ):
            return "skipped", None
        status = "updated" if existing is not None else "added"
        if dry_run:
            return status, None
        with span("load") as sp:
            doc = load_document(task.path, task.source, self.loaders)
            sp.set(counts={"documents": 1, "bytes": len(data)})
        doc = replace(doc, title=printable(doc.title))  # loaders title a document by its file name
        return status, self._prepare(doc, collection, task.shown, sha, len(data), status)

    def _prepare_doc(self, doc: SourceDoc, *, collection: str) -> Loaded:
        """An in-memory document (an evaluation corpus): skipped when its title and text are unchanged."""
        sha = sha256_bytes(f"{doc.title}\x00{doc.text}".encode())
        existing = self.store.find_document(collection, doc.source)
        written = existing.ingested_at if existing is not None else 0.0
        owed = self.transforms is not None and self.transforms.owes(collection, doc.source, written)
        if existing is not None and existing.sha256 == sha and not owed:
            return Loaded("skipped")
        status = "updated" if existing else "added"
        try:
            return Loaded(status, self._prepare(doc, collection, doc.source, sha, len(doc.text.encode()), status))
        except ZhikuError as e:
            if e.code in STOP_CODES:
                raise
            return Loaded("failed", None, sha, None, str(e))

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
        texts = TransformStage.index_texts(batch, index_text)
        chunks = list(batch.chunks)
        linked = {im.image_id for c in chunks for im in c.images}
        images = tuple({im.ref.image_id: im for im in doc.images if im.ref.image_id in linked}.values())
        tokens, over = self._tokenise(texts)
        return Prepared(record, chunks, texts, tokens, status, path, images, batch, over)

    def _tokenise(self, texts: list[str]) -> tuple[list[list[str]], int]:
        """BM25 tokens of each index text, and how many are longer than the embedder's window."""
        with span("tokenise") as sp:
            tokens = [self.text.index_tokens(t) for t in texts]
            window = check_window(self.embedder, texts)
            self._longest = max(self._longest, window.longest)
            sp.set(
                counts={"chunks": len(texts), "over_window": len(window.over)},
                max_tokens=window.max_tokens,
                longest_tokens=self._longest,
            )
        return tokens, len(window.over)

    def _embed_failed(self, tally: _Tally, p: Prepared, e: Exception) -> None:
        reason = f"embedding failed: {type(e).__name__}: {e}"
        self._fail(tally.failures, p.path, p.doc.collection, p.doc.sha256, p.doc.size, reason, False)

    def _report(
        self, tally: _Tally, started: float, computed_before: int, *, removed: Sequence[str] = (), dry_run: bool = False
    ) -> IngestReport:
        return IngestReport(
            added=tuple(tally.added),
            updated=tuple(tally.updated),
            skipped=tuple(tally.skipped),
            removed=tuple(removed),
            failed=tuple(tally.failures),
            chunks_written=tally.written,
            chunks_embedded=getattr(self.embedder, "computed", 0) - computed_before,
            elapsed_s=time.perf_counter() - started,
            dry_run=dry_run,
            needs_ocr=tuple(self._needs_ocr),
            chunks_over_window=tally.over_window,
            transforms=self.transforms.report() if self.transforms else None,
        )

    def _store(self, done: Sequence[tuple[Prepared, np.ndarray]], tally: _Tally) -> None:
        """Write each embedded document in its own transaction, then its history row."""
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
            except ZhikuError as e:
                if e.code in STOP_CODES:
                    raise
                self._fail(tally.failures, p.path, doc.collection, doc.sha256, doc.size, str(e), False)
                continue
            except Exception as e:  # a bug on one document's way into the store must not stop the batch
                log.warning("writing %s failed unexpectedly: %s: %s", p.path, type(e).__name__, e)
                log.debug("the traceback", exc_info=True)
                reason = f"unexpected error: {type(e).__name__}: {e}"
                self._fail(tally.failures, p.path, doc.collection, doc.sha256, doc.size, reason, False)
                continue
            (tally.added if p.status == "added" else tally.updated).append(doc.source)
            note = None
            if doc.needs_ocr_pages:
                self._needs_ocr.append(OcrNeeded(doc.source, doc.needs_ocr_pages))
                note = needs_ocr_note(doc.needs_ocr_pages, self.ocr_setting)
            self.store.record_ingestion(
                IngestionRecord(p.path, doc.collection, doc.sha256, doc.size, p.status, note, n, time.time())
            )
            if self.transforms is not None and p.batch is not None:  # after the write: never for a lost chunk
                self.transforms.commit(p.batch, doc.collection)
            tally.written += n

    def _fail(
        self,
        failures: list[FileFailure],
        path: str,
        collection: str,
        sha: str | None,
        size: int | None,
        reason: str,
        dry_run: bool,
    ) -> None:
        path, reason = printable(path), printable(reason)
        failures.append(FileFailure(path, reason))
        if not dry_run:
            self.store.record_ingestion(IngestionRecord(path, collection, sha, size, "failed", reason, 0, time.time()))

    def _sync(self, paths: Sequence[Path], tasks: Sequence[FileTask], collection: str, dry_run: bool) -> list[str]:
        """Remove documents of ``collection`` that lived under a given directory and are gone now."""
        roots = [Path(p).expanduser().resolve() for p in paths if Path(p).expanduser().is_dir()]
        if not roots:  # files named one by one: nothing can be gone (and no listing of the collection)
            return []
        present = {str(t.path) for t in tasks}
        removed = []
        for doc in self.store.list_documents(collection):
            path = Path(doc.path)
            if str(path) in present or not any(path.is_relative_to(r) for r in roots):
                continue
            if (
                path.exists()
                and path.suffix.lower() in supported_suffixes(self.loaders)
                and not path.name.startswith(".")
            ):
                continue
            removed.append(doc.source)
            if not dry_run:
                self.store.delete_document(doc.doc_id)
                self.store.record_ingestion(
                    IngestionRecord(doc.path, collection, doc.sha256, doc.size, "removed", None, 0, time.time())
                )
        return removed
