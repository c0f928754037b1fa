"""The ingestion pipeline: discover → fingerprint (SHA-256) → load → chunk → tokenise + embed → store.

Unchanged files are skipped without writing anything; changed files are replaced in one transaction per
document; ``sync`` drops documents whose files are gone. One bad file never stops the batch and never
touches what is stored.

The calling thread embeds chunks in calls of ``ingest.batch_chunks`` across documents (``ingest.batching``) and
writes each document, in order, as soon as all its chunks are embedded. While it is inside an embedding call,
``ingest.workers`` threads prepare the next documents (``ingest.prepare``: read, parse, chunk, tokenise); a
document none of them has started is prepared by the calling thread (``ingest.prefetch`` says why).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from zhiku.embedding.base import Embedder
from zhiku.errors import ZhikuError
from zhiku.ingest.batching import EmbedBatcher
from zhiku.ingest.discover import FileTask, discover
from zhiku.ingest.guard import MIB, printable
from zhiku.ingest.images import ImageStore
from zhiku.ingest.loaders import Loader, default_loaders, supported_suffixes
from zhiku.ingest.loaders.ocr import needs_ocr_note
from zhiku.ingest.prefetch import Gate, prefetch
from zhiku.ingest.prepare import (
    STOP_CODES,
    Loaded,
    Prepared,
    Preparer,
    doc_id_for,
    one_file_per_source,
    sha256_bytes,
)
from zhiku.ingest.progress import chunk_note
from zhiku.ingest.transforms.stage import TransformStage
from zhiku.observability.tracing import span
from zhiku.settings import ChunkingSettings
from zhiku.stores.base import Writer
from zhiku.text import TextProcessor
from zhiku.types import FileFailure, IngestionRecord, IngestReport, OcrNeeded, SourceDoc

__all__ = ["Ingestor", "ProgressFn", "STOP_CODES", "doc_id_for", "sha256_bytes"]

log = logging.getLogger("zhiku.ingest")
ProgressFn = Callable[[int, int, str], None]
# Chunks per embedding call, across documents: large enough to keep a model or endpoint busy, small enough that
# progress shows every few seconds and a document is written soon after its last chunk is embedded
BATCH_CHUNKS = 128
WORKERS = 1  # threads that prepare the next documents while an embedding call runs (more pay only without the GIL)


@dataclass
class _Tally:
    """One ingest run's outcome so far."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failures: list[FileFailure] = field(default_factory=list)
    handled: int = 0  # items taken from the preparers
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
        batch_chunks: int | None = None,
        workers: int | None = None,
    ) -> None:
        """``images``: where extracted images go (None: they are not kept). ``retry_needs_ocr``: re-load
        unchanged documents whose pages needed OCR (OCR has become available). ``max_file_mb``: larger files
        fail without being read. ``batch_chunks``: chunks per embedding call; ``workers``: prepare threads."""
        self.store = store
        self.embedder = embedder
        self.images = images
        self.ocr_setting = ocr_setting
        self.transforms = transforms
        self.batch_chunks = batch_chunks or BATCH_CHUNKS
        self._workers = WORKERS if workers is None else workers
        self.prep = Preparer(
            store,
            embedder,
            text,
            chunking,
            tuple(loaders) if loaders is not None else default_loaders(),
            max_file_bytes=int(max_file_mb * MIB),
            retry_needs_ocr=retry_needs_ocr,
            transforms=transforms,
        )
        self._needs_ocr: list[OcrNeeded] = []

    @property
    def loaders(self) -> tuple[Loader, ...]:
        return self.prep.loaders

    @loaders.setter
    def loaders(self, value: Sequence[Loader]) -> None:
        self.prep.loaders = tuple(value)

    @property
    def workers(self) -> int:
        """Prepare threads: none with LLM transforms (they call the service and count its use in order)."""
        return 0 if self.transforms is not None else self._workers

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
    ) -> IngestReport:
        started = time.perf_counter()
        self._needs_ocr = []
        tasks, failures, unsupported = self._tasks(paths)
        tasks, clashes = one_file_per_source(tasks, collection, partial(self._stored_path, collection))
        failures.extend(clashes)
        if not dry_run:  # missing paths and unsupported files belong in the history like every other failure
            for f in failures:
                self.store.record_ingestion(
                    IngestionRecord(f.path, collection, None, None, "failed", f.reason, 0, time.time())
                )
        tally = _Tally(failures=failures)
        computed_before = getattr(self.embedder, "computed", 0)
        prepare = partial(self.prep.file, collection=collection, force=force, dry_run=dry_run)
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
        self._run(docs, partial(self.prep.document, collection=collection), tally, collection, on_progress, total=total)
        return self._report(tally, started, computed_before)

    # -- the loop: prepare ahead, embed in chunk batches, write in order ----------------------------
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
        """Prepare ``items`` in the prepare threads, in order; embed and write each prepared one here."""
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
            gate=(gate := Gate()),
        )
        if on_progress and total:  # the count is known before the first document is prepared (LLM transforms: long)
            on_progress(0, total, "")
        for out in prefetch(items, prepare, workers=self.workers, gate=gate):
            item = out.item
            shown, source = (item.shown, item.source) if isinstance(item, FileTask) else (item.source, item.source)
            if on_progress:
                on_progress(tally.handled, total, source)
            tally.handled += 1
            if out.error is not None:
                raise out.error  # STOP_CODES, or a bug outside a file's own preparation
            loaded = out.value
            assert loaded is not None
            if loaded.status == "failed":
                self._fail(tally.failures, shown, collection, loaded.sha, loaded.size, loaded.reason, dry_run)
            elif loaded.prepared is None:
                tally.count(loaded.status, source)
            else:
                tally.over_window += loaded.prepared.over_window
                self._store(batcher.add(loaded.prepared, loaded.prepared.texts), tally)
        self._store(batcher.finish(), tally)

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
