"""The ingestion pipeline: discover → fingerprint (SHA-256) → load → chunk → tokenise + embed → store.

Unchanged files are skipped without writing anything; changed files are replaced in one transaction per
document; ``sync`` drops documents whose files are gone. One bad file never stops the batch and never
touches what is stored.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from zhiku.embedding.base import Embedder
from zhiku.errors import EmbeddingError, IngestError, ZhikuError
from zhiku.ingest.chunking import chunk_document
from zhiku.ingest.context import index_text, note_window
from zhiku.ingest.discover import FileTask, discover
from zhiku.ingest.guard import MIB, printable, read_bounded
from zhiku.ingest.images import ImageStore
from zhiku.ingest.loaders import Loader, default_loaders, load_document, supported_suffixes
from zhiku.ingest.loaders.ocr import needs_ocr_note
from zhiku.ingest.progress import embed_with_notes, notes
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

log = logging.getLogger("zhiku.ingest")
ProgressFn = Callable[[int, int, str], None]
EMBED_GROUP = 64  # documents whose chunks are embedded in one call
STOP_CODES = ("INDEX_MISMATCH", "INDEX_READ_ONLY", "INDEX_LOCKED")  # the whole batch would fail the same way


def doc_id_for(collection: str, source: str) -> str:
    return hashlib.sha256(f"{collection}\x00{source}".encode()).hexdigest()[:16]


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class _Prepared:
    doc: DocRecord
    chunks: list[Chunk]
    texts: list[str]  # index texts
    status: str  # added | updated
    path: str
    images: tuple[SourceImage, ...] = ()
    batch: DocumentBatch | None = None  # the chunks with what the transforms added


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
        self.max_file_bytes = int(max_file_mb * MIB)
        self.store = store
        self.embedder = embedder
        self.text = text
        self.chunking = chunking
        self.loaders = tuple(loaders) if loaders is not None else default_loaders()
        self.images = images
        self.retry_needs_ocr = retry_needs_ocr
        self.ocr_setting = ocr_setting
        self.transforms = transforms
        self._needs_ocr: list[OcrNeeded] = []
        self._over_window = 0  # chunks over the embedder's window in this run (reset by each ingest call)

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
        self._needs_ocr, self._over_window = [], 0
        suffixes = supported_suffixes(self.loaders)
        tasks, failures = discover(paths, suffixes)
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
        if not dry_run:  # missing paths and unsupported files belong in the history like every other failure
            for f in failures:
                self.store.record_ingestion(
                    IngestionRecord(f.path, collection, None, None, "failed", f.reason, 0, time.time())
                )
        added: list[str] = []
        updated: list[str] = []
        skipped: list[str] = []
        pending: list[_Prepared] = []
        written = 0
        computed_before = getattr(self.embedder, "computed", 0)

        def flush() -> None:
            nonlocal written
            written += self._write(pending, added, updated, failures)
            pending.clear()

        self._note = notes(on_progress, lambda: len(added) + len(updated) + len(skipped) + len(pending), len(tasks))

        for n, task in enumerate(tasks, 1):
            if on_progress:
                on_progress(n - 1, len(tasks), task.source)
            read: list[Any] = [None, None]  # sha256, size: known once the file is read
            try:
                status, prepared = self._load_task(task, collection, force, dry_run, read)
            except ZhikuError as e:
                if e.code in STOP_CODES:
                    raise
                reason = str(e)
            except Exception as e:  # whatever a loader or the chunker does, the batch goes on
                log.warning("ingesting %s failed unexpectedly: %s: %s", task.shown, type(e).__name__, e)
                log.debug("the traceback", exc_info=True)
                reason = f"unexpected error: {type(e).__name__}: {e}"
            else:
                if prepared is not None:
                    pending.append(prepared)
                    if len(pending) >= EMBED_GROUP:
                        flush()
                else:
                    {"skipped": skipped, "added": added, "updated": updated}[status].append(task.source)
                continue
            self._fail(failures, task.shown, collection, read[0], read[1], reason, dry_run)
        flush()
        if on_progress and tasks:
            on_progress(len(tasks), len(tasks), "")

        removed: list[str] = []
        if sync:
            removed = self._sync(paths, tasks, collection, dry_run)
        return IngestReport(
            added=tuple(added),
            updated=tuple(updated),
            skipped=tuple(skipped),
            removed=tuple(removed),
            failed=tuple(failures),
            chunks_written=written,
            chunks_embedded=getattr(self.embedder, "computed", 0) - computed_before,
            elapsed_s=time.perf_counter() - started,
            dry_run=dry_run,
            needs_ocr=tuple(self._needs_ocr),
            chunks_over_window=self._over_window,
            transforms=self.transforms.report() if self.transforms else None,
        )

    def _load_task(
        self, task: FileTask, collection: str, force: bool, dry_run: bool, read: list[Any]
    ) -> tuple[str, _Prepared | None]:
        """``(status, prepared)``: "skipped" (unchanged), or "added"/"updated" with the prepared document
        (None in a dry run). ``read`` receives the file's SHA-256 and size once they are known."""
        data = read_bounded(task.path, self.max_file_bytes)
        sha = read[0] = sha256_bytes(data)
        read[1] = len(data)
        existing = self.store.find_document(collection, task.source)
        if (
            existing is not None
            and existing.sha256 == sha
            and not force
            and not (self.retry_needs_ocr and existing.status == DocStatus.NEEDS_OCR)
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

    # -- in-memory documents (evaluation corpora) ------------------------------------------------
    def ingest_docs(
        self, docs: Iterable[SourceDoc], *, collection: str, on_progress: ProgressFn | None = None, total: int = 0
    ) -> IngestReport:
        """Index documents that are not files (e.g. a BEIR corpus); unchanged texts are skipped."""
        started = time.perf_counter()
        added: list[str] = []
        updated: list[str] = []
        skipped: list[str] = []
        failures: list[FileFailure] = []
        pending: list[_Prepared] = []
        written, self._over_window = 0, 0
        computed_before = getattr(self.embedder, "computed", 0)
        for n, doc in enumerate(docs, 1):
            sha = sha256_bytes(f"{doc.title}\x00{doc.text}".encode())
            existing = self.store.find_document(collection, doc.source)
            if existing is not None and existing.sha256 == sha:
                skipped.append(doc.source)
                continue
            try:
                pending.append(
                    self._prepare(
                        doc, collection, doc.source, sha, len(doc.text.encode()), "updated" if existing else "added"
                    )
                )
            except ZhikuError as e:
                self._fail(failures, doc.source, collection, sha, None, str(e), False)
            if len(pending) >= EMBED_GROUP:
                written += self._write(pending, added, updated, failures)
                pending.clear()
                if on_progress:
                    on_progress(n, total, doc.source)
        written += self._write(pending, added, updated, failures)
        return IngestReport(
            added=tuple(added),
            updated=tuple(updated),
            skipped=tuple(skipped),
            failed=tuple(failures),
            chunks_written=written,
            chunks_embedded=getattr(self.embedder, "computed", 0) - computed_before,
            elapsed_s=time.perf_counter() - started,
            needs_ocr=tuple(self._needs_ocr),
            chunks_over_window=self._over_window,
            transforms=self.transforms.report() if self.transforms else None,
        )

    # -- steps -----------------------------------------------------------------------------------
    def _prepare(self, doc: SourceDoc, collection: str, path: str, sha: str, size: int, status: str) -> _Prepared:
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
            ingested_at=time.time(),
            status=DocStatus.NEEDS_OCR if doc.needs_ocr_pages else DocStatus.READY,
            needs_ocr_pages=tuple(doc.needs_ocr_pages),
            ocr_pages=tuple(doc.ocr_pages),
        )
        texts = TransformStage.index_texts(batch, partial(index_text, context=self.chunking.index_context))
        chunks = list(batch.chunks)
        linked = {im.image_id for c in chunks for im in c.images}
        images = tuple({im.ref.image_id: im for im in doc.images if im.ref.image_id in linked}.values())
        return _Prepared(record, chunks, texts, status, path, images, batch)

    def _embed(self, pending: list[_Prepared], failures: list[FileFailure]) -> list[tuple[_Prepared, np.ndarray]]:
        """Each prepared document with its vectors. When a group fails for a reason other than the embedding
        service, each document is embedded alone, so only the one that fails is lost."""
        texts = [t for p in pending for t in p.texts]
        computed = getattr(self.embedder, "computed", 0)
        try:
            with span("embed") as sp:
                vectors = embed_with_notes(self.embedder, texts, getattr(self, "_note", None))  # [] for scans
                sp.set(counts={"texts": len(texts), "computed": getattr(self.embedder, "computed", 0) - computed})
                self._over_window += note_window(self.embedder, texts, sp)
        except EmbeddingError:
            raise  # the service (or the model) is down: every document would fail the same way
        except Exception as e:
            if len(pending) > 1:
                return [pair for p in pending for pair in self._embed([p], failures)]
            p = pending[0]
            reason = f"embedding failed: {type(e).__name__}: {e}"
            self._fail(failures, p.path, p.doc.collection, p.doc.sha256, p.doc.size, reason, False)
            return []
        out, offset = [], 0
        for p in pending:
            out.append((p, vectors[offset : offset + len(p.chunks)]))
            offset += len(p.chunks)
        return out

    def _write(
        self, pending: list[_Prepared], added: list[str], updated: list[str], failures: list[FileFailure]
    ) -> int:
        if not pending:
            return 0
        written = 0
        for p, vecs in self._embed(pending, failures):
            n = len(p.chunks)
            try:
                tokens = [self.text.index_tokens(t) for t in p.texts]
                if self.images is not None:  # files first: a chunk never refers to a missing image
                    for im in p.images:
                        self.images.put(im.ref.image_id, im.data)
                with span("upsert") as sp:
                    self.store.write_document(p.doc, p.chunks, tokens, vecs)
                    sp.set(counts={"documents": 1, "chunks": n})
            except ZhikuError as e:
                if e.code in STOP_CODES:
                    raise
                self._fail(failures, p.path, p.doc.collection, p.doc.sha256, p.doc.size, str(e), False)
                continue
            except Exception as e:  # a bug on one document's way into the store must not stop the batch
                log.warning("writing %s failed unexpectedly: %s: %s", p.path, type(e).__name__, e)
                log.debug("the traceback", exc_info=True)
                reason = f"unexpected error: {type(e).__name__}: {e}"
                self._fail(failures, p.path, p.doc.collection, p.doc.sha256, p.doc.size, reason, False)
                continue
            (added if p.status == "added" else updated).append(p.doc.source)
            note = None
            if p.doc.needs_ocr_pages:
                self._needs_ocr.append(OcrNeeded(p.doc.source, p.doc.needs_ocr_pages))
                note = needs_ocr_note(p.doc.needs_ocr_pages, self.ocr_setting)
            self.store.record_ingestion(
                IngestionRecord(p.path, p.doc.collection, p.doc.sha256, p.doc.size, p.status, note, n, time.time())
            )
            if self.transforms is not None and p.batch is not None:  # after the write: never for a lost chunk
                self.transforms.commit(p.batch, p.doc.collection)
            written += n
        return written

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
