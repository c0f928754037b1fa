"""The library API: one object that the CLI, the MCP server, the dashboard and evaluation all call."""

from __future__ import annotations

import fnmatch
import itertools
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zhiku.embedding import build_embedder
from zhiku.embedding.base import Embedder
from zhiku.errors import IndexMismatch, InvalidInput, NotFound
from zhiku.ingest.chunking import chunking_identity
from zhiku.ingest.files import MIB, discover
from zhiku.ingest.images import IMAGES_DIR, ImageStore
from zhiku.ingest.loaders import default_loaders, supported_suffixes
from zhiku.ingest.loaders.ocr import needs_ocr_note, ocr_available, page_list
from zhiku.ingest.pipeline import Ingestor, ProgressFn, is_chunk_note
from zhiku.ingest.transforms.stage import (
    TransformPlan,
    TransformProgress,
    build_stage,
    parse_transform_names,
    plan_transforms,
)
from zhiku.ingest.transforms.store import EnrichmentStore, enrichment_row, transform_rows
from zhiku.ingest.transforms.summary import document_summary
from zhiku.ingest.watch import require_watchfiles, watch_folders
from zhiku.ingest.web import is_url
from zhiku.observability.tracing import Lookup, Tracer, build_tracer, labels, record_hits, report_rows, span
from zhiku.reconstruct import reconstruct_markdown
from zhiku.retrieval import rewrite
from zhiku.retrieval.answer import MAX_CHARS as ANSWER_CHARS
from zhiku.retrieval.answer import build_answer, place
from zhiku.retrieval.answer import framed_passage as framed_passage  # the MCP server frames resources too
from zhiku.retrieval.bridge import dictionary, glosses
from zhiku.retrieval.confidence import check_collection, judge
from zhiku.retrieval.context import ChunkContext, chunk_context
from zhiku.retrieval.filters import filter_hint
from zhiku.retrieval.query import MAX_QUERY_CHARS as MAX_QUERY_CHARS  # the question limit the surfaces state
from zhiku.retrieval.rerank import Reranker, build_reranker, parse_reranker_spec
from zhiku.retrieval.search import Retrieval, Searcher
from zhiku.settings import Settings
from zhiku.stores import Store, TablesDamaged, compact_index, open_store, readable_documents, repair_files
from zhiku.stores.base import places_reader
from zhiku.stores.sqlite import SQLiteStore
from zhiku.text import TextProcessor
from zhiku.types import (
    Answer,
    Chunk,
    CollectionStats,
    DocRecord,
    Filters,
    IngestionRecord,
    IngestReport,
    QueryOptions,
    SourceDoc,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack  # Python 3.10 has no typing.Unpack; annotations only

    from zhiku.stores.migrate import MigrationReport

META_KEYS = ("tokenizer", "embedder", "dim", "chunking")


class KnowledgeBase:
    """An index directory opened with one ``Settings``. Use as a context manager or call ``close()``."""

    def __init__(
        self,
        settings: Settings,
        *,
        read_only: bool = False,
        embedder: Embedder | None = None,
        tracer: Tracer | None = None,
        reranker: Reranker | None = None,
    ) -> None:
        self.settings = settings
        self.tracer = tracer if tracer is not None else build_tracer(settings.tracing, settings.index)
        self.read_only = read_only
        self.store: Store = open_store(settings, read_only=read_only)
        self._embedder = embedder
        self._reranker = reranker
        self._checked_version: tuple[int, bool] | None = None

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if "searcher" in self.__dict__:
            self.searcher.close()
        if "enrichments" in self.__dict__:
            self.enrichments.close()
        self.store.close()

    @cached_property
    def text(self) -> TextProcessor:
        t = self.settings.text
        return TextProcessor(user_dict=t.user_dict, synonyms=t.synonyms)

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = build_embedder(self.settings.embedding, self.settings.cache_dir)
        return self._embedder

    @cached_property
    def searcher(self) -> Searcher:
        return Searcher(
            self.store,
            self.embedder,
            self.text,
            self.settings.retrieval,
            reranker=self.reranker,
            rerank=self.settings.rerank,
        )

    @cached_property
    def reranker(self) -> Reranker | None:
        """The reranker given to the constructor, else the configured one (``None`` for ``rerank.provider: none``)."""
        if self._reranker is not None:
            return self._reranker
        return build_reranker(self.settings.rerank, cache_dir=self.settings.cache_dir)

    def identity(self) -> dict[str, str]:
        """What this configuration indexes with; an index built otherwise is stale."""
        return {
            "tokenizer": self.text.identity,
            "embedder": self.embedder.name,
            "dim": str(self.embedder.dim),
            "chunking": chunking_identity(self.settings.chunking),
        }

    def warm_index(self) -> None:  # the tokenizer's dictionary and the vectors, before the first query
        self.text.query_tokens("试用期最长多久")
        self.store.warm()
        # (~1 s) what English questions over Chinese text need, or Chinese questions over English text
        bridge = glosses if self.searcher.index_language() == "en" else dictionary
        threading.Thread(target=bridge, name="zhiku-cedict", daemon=True).start()

    def load_reranker(self) -> str | None:
        """Load the configured reranker now, not in the first query; a failure is returned (``Type: message``)."""
        try:
            if self.reranker is not None:
                self.reranker.load()
        except Exception as e:  # noqa: BLE001 - every query falls back, naming the reason
            return f"{type(e).__name__}: {e}"
        return None

    def stale(self) -> dict[str, tuple[str, str]]:
        """``{key: (stored, current)}`` for every identity key that differs from the index's."""
        meta = self.store.get_meta()
        if not meta.get("embedder") or not any(c.chunks for c in self.store.collections()):
            return {}
        current = self.identity()
        return {k: (meta[k], current[k]) for k in META_KEYS if k in meta and meta[k] != current[k]}

    def _rebuild_hint(self) -> str:
        return (
            f"rebuild it with `zhiku ingest PATH... --index {self.settings.index} --force` "
            f"(re-embeds everything), or use another --index"
        )

    def _check_for_query(self, mode: str) -> None:
        version = self.store.index_version()
        if self._checked_version == (version, mode == "bm25"):
            return
        stale = self.stale()
        if mode != "bm25" and ("embedder" in stale or "dim" in stale):
            if "embedder" in stale:
                stored, current = stale["embedder"]
                what = f"was built with embedder {stored!r} but the settings use {current!r}"
            else:
                stored, current = stale["dim"]
                what = f"holds {stored}-dimensional vectors but the embedder gives {current}"
            raise IndexMismatch(
                f"index {self.settings.index} {what}; vectors from different models cannot be mixed: "
                f"{self._rebuild_hint()}"
            )
        self._checked_version = (version, mode == "bm25")

    def ingest(
        self,
        paths: Sequence[Path],
        *,
        collection: str | None = None,
        force: bool = False,
        dry_run: bool = False,
        sync: bool = False,
        on_progress: ProgressFn | None = None,
        on_transform: TransformProgress | None = None,
        skip: Mapping[Path, str] | None = None,
        only: Collection[Path] | None = None,
    ) -> IngestReport:
        """``skip``: walked files left out, each failed with its reason; ``only``: of the walked files, just these."""
        collection = self._collection(collection)
        options: dict[str, Any] = {"collection": collection, "force": force, "dry_run": dry_run, "sync": sync}

        def run() -> IngestReport:
            ingestor = self._ingestor(on_transform)
            return ingestor.ingest_paths(paths, **options, on_progress=on_progress, skip=skip, only=only)

        return self._traced_ingest(run, force, dry_run, paths=[str(p) for p in paths], **options)

    def _traced_ingest(
        self, run: Callable[[], IngestReport], force: bool, dry_run: bool, /, **attrs: Any
    ) -> IngestReport:
        """``run()`` in an ingest trace, once the index is ready for writing."""
        with self.tracer.trace("ingest", **attrs, index=str(self.settings.index)) as t:
            self._prepare_write(force, dry_run)
            report = run()
            if t is not None:
                t.data.update(report_rows(report), **transform_rows(report))
        return report

    def watch(
        self,
        folders: Sequence[Path],
        *,
        collection: str | None = None,
        stop: threading.Event | None = None,
        on_sync: Callable[[IngestReport], None] | None = None,
    ) -> None:
        """Keep ``folders`` in sync until ``stop`` is set (or Ctrl-C): ingest them now, then each batch of changes."""
        roots = watch_roots(folders)

        def sync(changed: Collection[Path] | None) -> None:
            report = self.ingest(roots, collection=collection, sync=True, only=changed)
            if on_sync is not None:
                on_sync(report)

        watch_folders(roots, sync, stop or threading.Event())

    def ingest_documents(
        self, docs: Sequence[SourceDoc], *, collection: str | None = None, on_progress: ProgressFn | None = None
    ) -> IngestReport:
        name = self._collection(collection)

        def run() -> IngestReport:
            return self._ingestor().ingest_docs(docs, collection=name, on_progress=on_progress, total=len(docs))

        return self._traced_ingest(run, False, False, documents=len(docs), collection=name)

    def ingest_urls(
        self, urls: Sequence[str], *, collection: str | None = None, max_pages: int | None = None, sync: bool = False
    ) -> IngestReport:
        """Web pages, a sitemap's pages, or (``max_pages`` > 1) a same-site crawl; ``sync`` drops pages gone from it."""
        from zhiku.ingest.web import WebFetcher, is_sitemap, scope

        collection = self._collection(collection)
        self._prepare_write(False, False)
        stored = lambda url: self.store.find_document(collection, url) is not None  # noqa: E731
        web = WebFetcher(Path(self.settings.index) / "web.json", int(self.settings.loaders.max_file_mb * MIB), stored)
        pages = [page for url in urls for page in web.crawl(url, max_pages)]
        report = self._ingestor().ingest_docs([p.doc for p in pages if p.doc], collection=collection)
        web.save()
        keep = {p.url for p in pages} | {f.path for f in web.failures}
        whole = [scope(u) for u in urls if (max_pages or 1) > 1 or is_sitemap(u)]
        docs = self.store.list_documents(collection)
        gone = [d.source for d in docs if d.source not in keep and any(d.source.startswith(w) for w in whole)]
        for source in gone if sync else ():
            self.delete(source, collection)
        return replace(
            report,
            skipped=report.skipped + tuple(p.url for p in pages if p.doc is None),
            failed=report.failed + tuple(web.failures),
            removed=tuple(gone) if sync else (),
            gone=() if sync else tuple(gone),
        )

    def _ingestor(self, on_transform: TransformProgress | None = None) -> Ingestor:
        return Ingestor(
            self.store,
            self.embedder,
            self.text,
            self.settings.chunking,
            loaders=default_loaders(loaders := self.settings.loaders),
            images=self.images,
            retry_needs_ocr=loaders.ocr == "auto" and ocr_available(),
            ocr_setting=loaders.ocr,
            max_file_mb=loaders.max_file_mb,
            transforms=build_stage(self.settings, self.enrichments, on_progress=on_transform),
        )

    @cached_property
    def enrichments(self) -> EnrichmentStore:
        """What the ingest transforms added (contexts, metadata, usage), beside the index."""
        return EnrichmentStore(Path(self.settings.index), read_only=self.read_only)

    def plan_transforms(
        self, paths: Sequence[Path], *, collection: str | None = None, force: bool = False
    ) -> TransformPlan:
        """A dry run of the enabled transforms: the requests an ingest would send, with estimated tokens and cost."""
        stage = build_stage(self.settings, self.enrichments, planning=True)  # read: which documents owe a transform
        if stage is None or not stage.names:
            raise InvalidInput("no transform enabled: set transforms.enabled or pass --transform contextual,…")
        name = self._collection(collection)
        loaders = default_loaders(self.settings.loaders)
        existing = lambda source: self.store.find_document(name, source)  # noqa: E731
        return plan_transforms(paths, stage, self.settings, loaders, existing, collection=name, force=force)

    @cached_property
    def images(self) -> ImageStore:
        """The index's image files (``<index>/images``), extracted from PDF and Word documents."""
        return ImageStore(Path(self.settings.index) / IMAGES_DIR)

    def _prepare_write(self, force: bool, dry_run: bool) -> None:
        stale = self.stale()
        if stale and not force:
            what = "; ".join(f"{k}: index has {a!r}, settings give {b!r}" for k, (a, b) in stale.items())
            raise IndexMismatch(f"index {self.settings.index} was built differently ({what}): {self._rebuild_hint()}")
        if dry_run:
            return
        if isinstance(self.store, SQLiteStore):  # take the write lock once before loading/embedding anything
            self.store.set_meta({})
        if stale and force:  # a forced rebuild with another model: drop every old vector first
            for doc in self.store.list_documents():
                self.store.delete_document(doc.doc_id)
            self.store.set_meta({"dim": ""} if "dim" in stale else {})
        identity = self.identity()
        if any(self.store.get_meta().get(k) != v for k, v in identity.items()):
            self.store.set_meta(identity)  # only when it changed: an unchanged re-ingest writes nothing

    def retrieve(self, query: str, **options: Unpack[QueryOptions]) -> Retrieval:
        """Search with the ``QueryOptions``; ``rerank`` None runs the configured reranker, False skips it."""
        o = options
        mode, top_k, tags = o.get("mode"), o.get("top_k"), tuple(o.get("tags") or ())
        collection, source, doc_type = o.get("collection"), o.get("source"), o.get("doc_type")
        filters = Filters(collection=collection, source_glob=source, doc_type=doc_type)
        with self.tracer.trace(
            "query",
            query=query,
            mode=mode or self.settings.retrieval.mode,
            top_k=top_k or self.settings.retrieval.top_k,
            collection=collection,
            source=source,
            doc_type=doc_type,
            index=str(self.settings.index),
        ) as t:
            with self.searcher.one_version():  # the check and the search see one index version
                self._check_for_query(mode or self.settings.retrieval.mode)
                plan = self.searcher.read(query, mode, filters, tags)  # the question, read once
                r = rewrite.search(
                    self.searcher,
                    plan,
                    rewriter=self.rewriter,
                    tagged=self.enrichments.tagged(tags) if tags else None,
                    top_k=top_k,
                    per_source_k=o.get("per_source_k"),
                    rerank=o.get("rerank"),
                )
            if t is not None:  # readable on its own: sources and sections of every ranked chunk
                t.data.update(rerank=r.rerank, rewrite=r.rewrite, queries=list(r.queries), tags=list(tags or []))
                record_hits(t, r.hits, self._labels)
        return r

    @cached_property
    def rewriter(self) -> rewrite.QueryRewriter | None:
        """The query rewriter of ``retrieval.rewrite`` (None: off, or no ``llm`` endpoint)."""
        return rewrite.build_rewriter(self.settings)

    @cached_property
    def _labels(self) -> Lookup:  # trace labels, looked up once per chunk and index version
        places = places_reader(self.store)
        return labels(lambda ids: self.enrichments.chunk_labels(places(ids)), self.store.index_version)

    def query(
        self, query: str, *, max_chars: int | None = None, framed: bool = False, **options: Unpack[QueryOptions]
    ) -> Answer:
        """Retrieve, judge and answer (``framed``: passages in ``<document>`` frames, for agents)."""
        with self.tracer.trace("query"):
            r = self.retrieve(query, **options)
            note = " ".join(filter(None, (r.query.note, None if r.hits else self._empty_note(options)))) or None
            judged = judge(r, min_score=self.settings.answer.min_score, normalize=self.text.normalize)
            answer = self.answer(r, low_confidence=judged.low, max_chars=max_chars, framed=framed)
        return replace(
            answer,
            confidence=judged.score,
            note=note,
            rerank=r.rerank,
            rewrite=r.rewrite,
            queries=r.queries,
            terms=r.query.terms,
            candidate_counts=(len(r.bm25), len(r.dense)),
        )

    def answer(
        self, r: Retrieval, *, low_confidence: bool = False, max_chars: int | None = None, framed: bool = False
    ) -> Answer:
        """The cited Markdown answer for a retrieval, with query-focused snippets (``max_chars``: as for ``query``)."""
        with span("answer") as sp:
            answer = build_answer(
                r.query.text,
                r.mode,
                r.hits,
                low_confidence=low_confidence,
                terms=r.query.terms,
                normalize=self.text.normalize,
                missing=r.missing,
                budget=max_chars,
                framed=framed,
            )
            sp.set(
                counts={"citations": len(answer.citations), "chars": len(answer.markdown)},
                low_confidence=low_confidence,
            )
        return answer

    def _empty_note(self, o: QueryOptions) -> str:
        """Why a search found nothing (``NotFound`` for a collection that does not exist)."""
        collection, source, doc_type = o.get("collection"), o.get("source"), o.get("doc_type")
        names = [c.name for c in self.collections()]
        check_collection(collection if isinstance(collection, str) else None, names)
        if not names:
            return "知识库为空 / The knowledge base is empty: ingest documents first."
        if source or doc_type or o.get("tags"):
            hint = self.filter_hint(collection, source, doc_type)
            return "没有符合过滤条件的段落 / No passage matches the filters" + (
                f": {hint}." if hint else "; loosen or drop them."
            )
        return "没有匹配的段落 / No passage matches the query; try other words."

    def filter_hint(
        self, collection: str | tuple[str, ...] | None, source: str | None, doc_type: str | None
    ) -> str | None:
        """Each filter that matches no document of ``collection`` and what would match (``filters.filter_hint``)."""
        known = [loader.doc_type for loader in default_loaders()]
        return filter_hint(self.documents(collection), source, doc_type, known)

    def collections(self) -> list[CollectionStats]:
        return self.store.collections()

    def documents(self, collection: str | tuple[str, ...] | None = None) -> list[DocRecord]:
        if isinstance(collection, tuple):
            return [d for d in self.store.list_documents() if d.collection in collection]
        return self.store.list_documents(collection)

    def history(self, limit: int = 100) -> list[IngestionRecord]:
        return self.store.ingestion_history(limit)

    def resolve_document(
        self, ref: str, collection: str | tuple[str, ...] | None = None, *, glob: bool = True
    ) -> DocRecord:
        """A document by id, source path or file path; with ``glob``, also a pattern that matches one source."""
        if not ref or not ref.strip():
            raise InvalidInput("name a document: its id (see `zhiku documents`) or its path")
        doc = self.store.get_document(ref)
        tuple_ok = isinstance(collection, tuple) and doc is not None and doc.collection in collection
        if doc is not None and (collection is None or doc.collection == collection or tuple_ok):
            return doc
        on_disk = str(Path(ref).expanduser().resolve()) if "\x00" not in ref else None
        candidates = [
            d
            for d in self.documents(collection)
            if d.source == ref or d.path == ref or d.path == on_disk or (glob and fnmatch.fnmatchcase(d.source, ref))
        ]
        if len(candidates) == 1:
            return candidates[0]
        if len(candidates) > 1:
            names = ", ".join(f"{d.doc_id} ({d.collection}/{d.source})" for d in candidates[:5])
            raise InvalidInput(f"{ref!r} matches {len(candidates)} documents: {names}; name one by its id")
        hint = " (a name, not a pattern: see `zhiku delete --glob`)" if not glob and set(ref) & set("*?[") else ""
        where = f" collection {collection!r}" if collection else ""
        raise NotFound(f"no document {ref!r} in {self.settings.index}{where}{hint} (list them with `zhiku documents`)")

    def document(self, doc_id: str) -> DocRecord | None:
        return self.store.get_document(doc_id)

    def damage(self) -> str | None:
        """What keeps the index from serving what it holds (deleted, replaced or damaged files), None when whole."""
        check = getattr(self.store, "damage", None)
        return check() if check is not None else None

    def index_version(self) -> int:
        """A number that changes with every write to the index."""
        return self.store.index_version()

    def document_text(self, ref: str, collection: str | None = None) -> str:
        """A document's text as Markdown, rebuilt from its stored chunks (``ref`` as for ``resolve_document``)."""
        return reconstruct_markdown(self.store.document_chunks(self.resolve_document(ref, collection).doc_id))

    def document_chunks(self, doc_id: str) -> list[Chunk]:
        return self.store.document_chunks(doc_id)

    def meta(self) -> dict[str, str]:
        """What the index records of how it was built (tokenizer, embedder, dim, chunking)."""
        return self.store.get_meta()

    def enrichment_rows(self, chunk_ids: Sequence[str]) -> dict[str, dict[str, object]]:
        """What the ingest transforms added to each chunk (context, refined text, title, tags, image captions)."""
        found = self.enrichments.chunk_enrichments(list(chunk_ids))
        captions = {c.chunk_id: [i.caption for i in c.images if i.caption] for c in self.store.get_chunks(chunk_ids)}
        return {
            cid: enrichment_row(found.get(cid)) | ({"captions": captions[cid]} if captions.get(cid) else {})
            for cid in chunk_ids
        }

    def chunk_context(self, chunk_id: str, context: str = "chunk") -> ChunkContext:
        """A stored chunk with its article (all its pieces) or section (``context``), within the answer budget."""
        return chunk_context(self.store, chunk_id, context, ANSWER_CHARS)

    def summary_fields(self, doc_id: str) -> dict[str, object]:
        """A document's summary and keywords: the LLM's (``metadata`` transform), else ``document_summary``'s."""
        s = document_summary(self.store.document_chunks(doc_id), self.enrichments.doc_meta(doc_id), self.text.words)
        return {"summary": s.summary or None, "summary_kind": s.kind, "keywords": list(s.keywords)}

    def delete(self, ref: str, collection: str | None = None) -> DocRecord:
        doc = self.resolve_document(ref, collection, glob=False)
        self.store.delete_document(doc.doc_id)
        self.enrichments.delete(doc.doc_id)
        return doc

    def _collection(self, name: str | None) -> str:
        name = name or self.settings.collection
        if not name.strip() or len(name) > 64 or any(ch in name for ch in "/\\\x00"):
            raise InvalidInput(f"invalid collection name {name!r}: use 1–64 characters without slashes")
        return name


def watch_roots(folders: Sequence[Path]) -> list[Path]:
    require_watchfiles()  # missing: say so before anything starts
    roots = [Path(f).expanduser().resolve() for f in folders]
    if not roots or (missing := [str(r) for r in roots if not r.is_dir()]):
        raise InvalidInput(f"watch existing folders (not files): {', '.join(missing) or 'none given'}")
    return roots


def watch_in_background(settings: Settings, folders: Sequence[Path], embedder: Embedder) -> Callable[[], None]:
    """``KnowledgeBase.watch`` in a thread sharing ``embedder`` with the server; returns what stops it."""
    roots, stop, kb = watch_roots(folders), threading.Event(), KnowledgeBase(settings, embedder=embedder)
    thread = threading.Thread(target=kb.watch, args=(roots,), kwargs={"stop": stop}, name="zhiku-watch", daemon=True)
    thread.start()

    def stopped() -> None:
        stop.set()
        thread.join(30)
        kb.close()

    return stopped


def files_to_ingest(paths: Sequence[Path]) -> list[Path]:
    """The files ``ingest`` would read under ``paths`` (folders walked, only the types a loader reads)."""
    return [task.path for task in discover(list(paths), supported_suffixes())[0]]


@dataclass(frozen=True)
class Repair:
    repaired: list[str]  # the files rebuilt in place
    rebuilt: tuple[str, ...] = ()  # zhiku.db's tables damaged: the documents ingested again from their files
    lost: tuple[str, ...] = ()  # ... and the paths of those whose file is gone or failed
    damaged_copy: Path | None = None  # where the damaged index was moved (never deleted)


def repair_index(settings: Settings) -> Repair:
    """Damaged files rebuilt from what is intact; damaged tables, by ingesting the catalogue's files afresh."""
    try:
        return Repair(repair_files(settings))
    except TablesDamaged:
        if not (docs := readable_documents(settings.index)):
            raise
    settings = settings.model_copy(update={"index": (index := settings.index.resolve())})  # `--index .` too
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = next(
        a for n in itertools.count() if not (a := index.with_name(f"{index.name}.damaged-{stamp}{n or ''}")).exists()
    )
    index.rename(aside)
    groups: dict[tuple[str, Path], set[Path]] = {}
    for collection, source, path in docs:  # the folder each was ingested from gives it the same source again
        if Path(path).is_file():
            groups.setdefault((collection, Path(path).parents[source.count("/")]), set()).add(Path(path))
    rebuilt, lost = [], {p for _, _, p in docs if not Path(p).is_file()}
    with KnowledgeBase(settings) as kb:
        for (collection, root), paths in groups.items():
            report = kb.ingest([root], collection=collection, only=paths)
            rebuilt += [f"{collection}/{s}" for s in report.added]
            lost |= {f.path for f in report.failed}
    return Repair([], tuple(rebuilt), tuple(sorted(lost)), aside)


def migrate_to_milvus(settings: Settings, on_progress: ProgressFn | None = None) -> MigrationReport:
    """Copy the embedded index of ``settings.index`` into the Milvus store of ``settings.store``."""
    from zhiku.stores.migrate import migrate_sqlite
    from zhiku.stores.milvus import MilvusStore

    with MilvusStore(settings.store) as target:
        return migrate_sqlite(settings.index, target, on_progress=on_progress)


__all__ = [
    "KnowledgeBase",
    "compact_index",
    "Repair",
    "repair_index",
    "files_to_ingest",
    "is_chunk_note",
    "migrate_to_milvus",
    "needs_ocr_note",
    "is_url",
    "page_list",
    "place",
    "parse_reranker_spec",
    "parse_transform_names",
    "supported_suffixes",
]
