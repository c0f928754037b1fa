"""Query rewriting (``retrieval.rewrite``): ``multi_query`` phrasings or a ``hyde`` passage, fused by RRF."""

from __future__ import annotations

import contextvars
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace

from zhiku.errors import ConfigError
from zhiku.llm import ChatService, Prompts, TransformError, build_service, clean_reply, detect_language, json_object_in
from zhiku.observability.tracing import span
from zhiku.retrieval.fusion import RRF_K, ranked, rrf
from zhiku.retrieval.plan import QueryPlan
from zhiku.retrieval.query import MAX_QUERY_CHARS, MAX_TOP_K
from zhiku.retrieval.rerank import TOP_M, rerank_traced
from zhiku.retrieval.search import Retrieval, Searcher
from zhiku.settings import Settings
from zhiku.types import Chunk

Tagged = tuple[set[str], set[str]]  # chunk ids, doc ids that carry the wanted tags


class QueryRewriter:
    """``variants(query)`` → the extra queries to search (``TransformError`` or ``TimeoutError`` on failure)."""

    def __init__(self, llm: ChatService, mode: str, *, prompts: Prompts) -> None:
        self.llm, self.mode, self.prompts = llm, mode, prompts
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="zhiku-rewrite")

    def _ask(self, query: str) -> list[str]:
        lang = detect_language(query)
        text = self.prompts.render(self.mode, lang, query=query, n=REWRITE_QUERIES)
        messages = [{"role": "user", "content": text}]
        prompt_id = self.prompts.id_of(self.mode)
        if self.mode == "hyde":
            return [clean_reply(self.llm.chat(messages, prompt_id=prompt_id, max_tokens=400, validate=_nonblank))]
        reply = self.llm.chat(messages, prompt_id=prompt_id, max_tokens=300, validate=_queries)
        return _queries(reply)[:REWRITE_QUERIES]

    def variants(self, query: str) -> list[str]:
        future = self._pool.submit(contextvars.copy_context().run, self._ask, query)
        try:
            found = future.result(timeout=REWRITE_TIMEOUT_S)
        except FutureTimeout:
            raise TimeoutError(f"timeout: no rewrite within {REWRITE_TIMEOUT_S:g}s") from None
        return [q for q in dict.fromkeys(found) if q and q != query]


def _nonblank(text: str) -> None:
    if not clean_reply(text):
        raise ValueError("empty passage")


def _queries(text: str) -> list[str]:
    value = json_object_in(text).get("queries")
    if not isinstance(value, list) or not value or not all(isinstance(q, str) for q in value):
        raise ValueError(f"no list of query strings under 'queries': {text[:80]!r}")
    return [" ".join(q.split()) for q in value if q.strip()]


def search(
    searcher: Searcher,
    plan: QueryPlan,
    *,
    rewriter: QueryRewriter | None,
    tagged: Tagged | None,
    top_k: int | None,
    per_source_k: int | None,
    rerank: bool | None,
) -> Retrieval:
    """``searcher.search`` with query rewriting and tag filtering when asked, then what the question looks up."""
    want = top_k or searcher.settings.top_k
    depth = MAX_TOP_K if tagged is not None else top_k
    if rewriter is None:  # no stage in the trace: the query trace's `rewrite` field says "off"
        r = searcher.search(plan, top_k=depth, per_source_k=per_source_k, rerank=rerank)
    else:
        r = _rewritten(searcher, rewriter, plan, depth, per_source_k, rerank)
    if tagged is None:
        return searcher.looked_up(r)
    chunks, docs = tagged

    def carries(c: Chunk) -> bool:
        return c.chunk_id in chunks or c.doc_id in docs

    # the tags first: a page is looked up in a document the filter keeps, and of its chunks only those it keeps
    hits = tuple([h for h in r.hits if carries(h.chunk)][:want])
    r = replace(r, hits=hits, candidates=tuple(h for h in r.candidates if carries(h.chunk)))
    return searcher.looked_up(r, carries)


def _rewritten(
    searcher: Searcher,
    rewriter: QueryRewriter,
    plan: QueryPlan,
    depth: int | None,
    per_source_k: int | None,
    rerank: bool | None,
) -> Retrieval:
    with span("rewrite") as sp:
        try:
            extra = rewriter.variants(plan.text)
            status = "ok"
        except (TransformError, TimeoutError) as e:
            extra, status = [], f"fallback: {' '.join(str(e).split())[:300]}"
        reason = {} if status == "ok" else {"reason": status.removeprefix("fallback: ")}
        sp.set(counts={"queries": len(extra)}, mode=rewriter.mode, queries=extra, **reason)
    if not extra:
        return replace(searcher.search(plan, top_k=depth, per_source_k=per_source_k, rerank=rerank), rewrite=status)
    final_k = depth or searcher.settings.top_k
    k = max(final_k, TOP_M)
    plans = [plan] + [searcher.read(q[:MAX_QUERY_CHARS], plan.mode, plan.filters) for q in extra]
    results = [searcher.search(p, top_k=k, per_source_k=per_source_k, rerank=False) for p in plans]
    fused = rrf([ranked([(h.chunk.chunk_id, h.score) for h in r.hits]) for r in results], k=RRF_K)
    hits_by = {h.chunk.chunk_id: h for r in reversed(results) for h in reversed(r.hits)}  # (each chunk's first hit)
    hits = [replace(hits_by[cid], score=s, fused_rank=n) for n, (cid, s) in enumerate(fused, 1)]
    rerank_status, shown = "off", hits[:final_k]
    if rerank is not False and searcher.reranker is not None:
        shown, rerank_status = rerank_traced(searcher.reranker, plan.text, hits, searcher.rerank_settings, final_k)
    return replace(
        results[0],
        hits=tuple(shown),
        candidates=tuple(hits),
        rerank=rerank_status,
        rewrite=status,
        queries=tuple(extra),
    )


REQUEST_SLACK_S = 1.0  # how long a rewrite's request may outlive REWRITE_TIMEOUT_S
REWRITE_QUERIES = 3  # multi_query: alternative phrasings asked for, each one more search
REWRITE_TIMEOUT_S = 8.0  # past it the plain question's hits are returned: a rewrite must not double the wait


def build_rewriter(settings: Settings) -> QueryRewriter | None:
    """The rewriter of ``retrieval.rewrite`` through ``llm.*`` (None when it is ``none``)."""
    mode = settings.retrieval.rewrite
    if mode == "none":
        return None
    llm = settings.llm
    # the request is abandoned shortly after the rewrite gave up (its own timeout says why), not after llm.timeout_s
    deadline = REWRITE_TIMEOUT_S + REQUEST_SLACK_S
    service = build_service(llm, settings.cache_dir, deadline_s=deadline)
    if service is None:
        raise ConfigError(
            f"retrieval.rewrite {mode!r} needs an LLM endpoint: set llm.base_url and llm.model (docs/transforms.md)"
        )
    return QueryRewriter(service, mode, prompts=Prompts(llm.prompts_dir))
