"""Preparing one document for the index: fingerprint (SHA-256), skip if unchanged, load, chunk, transform, index
texts, BM25 tokens and the embedder's window check. Everything but embedding and writing.

It runs in the pipeline's prepare threads (``ingest.prefetch``), ahead of the embedder: it only reads the store
(``find_document``) and never writes, and every failure of a file comes back as a ``Loaded`` with the reason
(errors that would fail the whole batch the same way, ``STOP_CODES``, are raised).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from zhiku.embedding.base import Embedder
from zhiku.errors import IngestError, ZhikuError
from zhiku.ingest.chunking import chunk_document
from zhiku.ingest.context import check_window, index_text
from zhiku.ingest.discover import FileTask
from zhiku.ingest.guard import printable, read_bounded
from zhiku.ingest.loaders import Loader, load_document
from zhiku.ingest.transforms.stage import DocumentBatch, TransformStage, run_transforms
from zhiku.observability.tracing import span
from zhiku.settings import ChunkingSettings
from zhiku.stores.base import Writer
from zhiku.text import TextProcessor
from zhiku.types import Chunk, DocRecord, DocStatus, FileFailure, SourceDoc, SourceImage

log = logging.getLogger("zhiku.ingest")
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


class Preparer:
    """Thread-safe: holds settings only (and a running maximum for the trace)."""

    def __init__(
        self,
        store: Writer,
        embedder: Embedder,
        text: TextProcessor,
        chunking: ChunkingSettings,
        loaders: tuple[Loader, ...],
        *,
        max_file_bytes: int,
        retry_needs_ocr: bool,
        transforms: TransformStage | None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.text = text
        self.chunking = chunking
        self.loaders = loaders
        self.max_file_bytes = max_file_bytes
        self.retry_needs_ocr = retry_needs_ocr
        self.transforms = transforms
        self._lock = threading.Lock()
        self._longest = 0  # the most tokens of one index text in this run (trace)

    def file(self, task: FileTask, *, collection: str, force: bool, dry_run: bool) -> Loaded:
        read: list[Any] = [None, None]  # sha256, size: known once the file is read
        try:
            status, prepared = self._file(task, collection, force, dry_run, read)
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

    def _file(
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
        return status, self.prepare(doc, collection, task.shown, sha, len(data), status)

    def document(self, doc: SourceDoc, *, collection: str) -> Loaded:
        """An in-memory document (an evaluation corpus): skipped when its title and text are unchanged."""
        sha = sha256_bytes(f"{doc.title}\x00{doc.text}".encode())
        existing = self.store.find_document(collection, doc.source)
        written = existing.ingested_at if existing is not None else 0.0
        owed = self.transforms is not None and self.transforms.owes(collection, doc.source, written)
        if existing is not None and existing.sha256 == sha and not owed:
            return Loaded("skipped")
        status = "updated" if existing else "added"
        try:
            return Loaded(status, self.prepare(doc, collection, doc.source, sha, len(doc.text.encode()), status))
        except ZhikuError as e:
            if e.code in STOP_CODES:
                raise
            return Loaded("failed", None, sha, None, str(e))

    def prepare(self, doc: SourceDoc, collection: str, path: str, sha: str, size: int, status: str) -> Prepared:
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
            with self._lock:
                self._longest = max(self._longest, window.longest)
                longest = self._longest
            sp.set(
                counts={"chunks": len(texts), "over_window": len(window.over)},
                max_tokens=window.max_tokens,
                longest_tokens=longest,
            )
        return tokens, len(window.over)


CLASH_FIX = (
    "ingest the two folders into different collections (-c NAME), or ingest their common parent folder so that "
    "their names differ"
)


def one_file_per_source(
    tasks: Sequence[FileTask], collection: str, stored_path: Callable[[str], str | None]
) -> tuple[list[FileTask], list[FileFailure]]:
    """One file per source name in a run (`zhiku ingest A B`, both holding ``说明.md``): the others fail with the
    fix before anything is read. Their documents were prepared side by side, so neither saw the other stored; the
    second silently replaced the first ("2 added", one document). The file already stored under the name is kept,
    else the first given."""
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
