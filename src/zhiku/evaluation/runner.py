"""Run an evaluation set through the real pipeline and compute retrieval metrics, overall and per category; and
experiments: retrieval variants side by side on one index, one row of metrics and latency per variant; the outputs
(``summary.json``, ``report.md``, ``per_query.json``) and an index's evaluation history."""

from __future__ import annotations

import fnmatch
import functools
import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from zhiku.api import KnowledgeBase
from zhiku.embedding.cache import caching_queries
from zhiku.errors import InvalidInput
from zhiku.evaluation.datasets import EvalQuery, EvalSet, Expected, folded
from zhiku.evaluation.generation import GenerationResult
from zhiku.evaluation.metrics import BUDGET_METRIC, BarResult, parse_metric, score
from zhiku.numeric import percentile
from zhiku.retrieval.confidence import check_collection
from zhiku.settings import Settings, merge
from zhiku.types import Chunk, DocRecord, Hit, SearchMode, SourceDoc

RECALL_DEPTH = 100
BUDGETS = (2000, 4000)  # context budgets (characters) every run reports: hit_chars@2000, hit_chars@4000
ProgressFn = Callable[[int, int, str], None]


def standard_metrics(k: int, budget: int | None = None) -> list[str]:
    """The metrics every run reports (the ``--json`` keys of `zhiku eval`)."""
    names = [f"ndcg@{k}", f"recall@{k}", f"recall@{RECALL_DEPTH}", f"mrr@{k}", "hit@1", "hit@5"]
    names += [f"{BUDGET_METRIC}@{b}" for b in (*BUDGETS, *([budget] if budget else []))]
    return list(dict.fromkeys(names))


def within_budget(q: EvalQuery, hits: Sequence[Hit], chars: int) -> list[str]:
    """The targets (best first, once each) of the text an agent reads when it cuts the ranked chunks' text at
    ``chars`` characters: a chunk counts if some of it is inside, and a ``contains`` expectation only if its text is
    inside the part that fits."""
    labels: list[str] = []
    used = 0
    for h in hits:
        if used >= chars:
            break
        labels.append(q.label(h.chunk, h.chunk.text[: chars - used]))
        used += len(h.chunk.text)
    return list(dict.fromkeys(labels))


@dataclass(frozen=True)
class IndexingStats:
    documents: int
    chunks: int
    seconds: float
    chunks_embedded: int  # computed by the model; the rest came from the embedding cache

    @property
    def chunks_per_s(self) -> float:
        return self.chunks / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class HitRecord:
    """One retrieved chunk of one query, with every stage's evidence (what `per_query.json` lists)."""

    rank: int
    chunk_id: str
    source: str
    section: str
    page: int | None
    score: float
    bm25_rank: int | None
    bm25_score: float | None
    dense_rank: int | None
    dense_distance: float | None  # 1 − cosine similarity
    rerank_score: float | None  # the reranker's raw score; None when no reranker scored this hit
    target: str  # the judged document / expected entry this chunk counts for
    relevant: bool


@dataclass(frozen=True)
class QueryRecord:
    qid: str
    query: str
    category: str
    relevant: tuple[str, ...]  # BEIR: document ids; YAML: the expected entries as text
    first_relevant: int | None  # 1-based position of the first relevant target in the ranking
    metrics: dict[str, float]
    latency_ms: float
    hits: tuple[HitRecord, ...]


@dataclass(frozen=True)
class EvalResult:
    dataset: str
    mode: str
    k: int
    queries: int
    metrics: dict[str, float]
    latency_ms: dict[str, float]
    indexing: IndexingStats | None = None
    categories: dict[str, dict[str, float]] = field(default_factory=dict)  # category -> metrics (+ "queries")
    records: tuple[QueryRecord, ...] = field(default=(), repr=False)
    kind: str = "beir"
    variant: str = ""
    rerank: dict[str, int] = field(default_factory=dict)  # queries per rerank outcome ("ok", "fallback"); empty: off
    budget: int | None = None  # ranking metrics count only the text within the first `budget` characters
    unmatched: tuple[str, ...] = ()  # expected entries no chunk of the index satisfies (they can never be found)

    def to_json(self) -> dict[str, Any]:
        """The one-object `zhiku eval --json` output (its keys are a public contract)."""
        out: dict[str, Any] = {"dataset": self.dataset, "mode": self.mode, "queries": self.queries}
        if self.budget is not None:
            out["budget"] = self.budget
        out.update({name: round(v, 4) for name, v in self.metrics.items()})
        out["latency_ms"] = {name: round(v, 2) for name, v in self.latency_ms.items()}
        if (i := self.indexing) is not None:
            out["indexing"] = {**asdict(i), "seconds": round(i.seconds, 2), "chunks_per_s": round(i.chunks_per_s, 1)}
        if self.rerank:
            out["rerank"] = dict(self.rerank)
        if self.unmatched:
            out["unmatched"] = list(self.unmatched)
        return out


def index_dataset(
    kb: KnowledgeBase, dataset: EvalSet, *, collection: str, on_progress: ProgressFn | None = None
) -> IndexingStats:
    """Index a BEIR corpus, or a long-document set's ``docs/`` folder, into ``collection``."""
    if dataset.docs:
        report = kb.ingest([Path(dataset.docs)], collection=collection, on_progress=on_progress)
        if report.failed:
            f = report.failed[0]
            raise InvalidInput(
                f"{len(report.failed)} documents of {dataset.docs} failed to ingest: {f.path}: {f.reason}"
            )
        documents = sum(c.documents for c in kb.collections() if c.name == collection)
    else:
        docs = [SourceDoc(source=d.doc_id, doc_type="text", title=d.title, text=d.text) for d in dataset.corpus]
        report = kb.ingest_documents(docs, collection=collection, on_progress=on_progress)
        documents = len(docs)
    chunks = sum(c.chunks for c in kb.collections() if c.name == collection)
    return IndexingStats(documents, chunks, report.elapsed_s, report.chunks_embedded)


def hit_records(q: EvalQuery, hits: Sequence[Hit], limit: int) -> tuple[HitRecord, ...]:
    def r6(x: float | None) -> float | None:
        return None if x is None else round(x, 6)

    out = []
    for n, h in enumerate(hits[:limit], 1):
        c, target, dense = h.chunk, q.label(h.chunk), h.dense_score
        where = (c.chunk_id, c.source, c.section, c.page, round(h.score, 6), h.bm25_rank, r6(h.bm25_score))
        ranks = (h.dense_rank, r6(None if dense is None else 1.0 - dense), r6(h.rerank_score))
        out.append(HitRecord(n, *where, *ranks, target, target in q.relevant))
    return tuple(out)


def _means(records: Sequence[QueryRecord], names: Sequence[str]) -> dict[str, float]:
    return {n: sum(r.metrics[n] for r in records) / len(records) for n in names}


def evaluate(
    kb: KnowledgeBase,
    dataset: EvalSet,
    *,
    mode: str,
    k: int = 10,
    collection: str | None = None,
    extra_metrics: Sequence[str] = (),
    keep_hits: int | None = None,
    variant: str = "",
    options: Mapping[str, Any] | None = None,
    on_progress: ProgressFn | None = None,
    budget: int | None = None,
) -> EvalResult:
    """Search every query (deep enough for recall@100) and score the ranked targets against the judgements."""
    evalset = folded(dataset, kb.text.normalize)
    if budget is not None and budget < 1:
        raise InvalidInput(f"budget must be ≥ 1 character, got {budget}")
    check_collection(collection or None, [c.name for c in kb.collections()])  # a typo'd -c scored every query 0
    names = list(dict.fromkeys(standard_metrics(k, budget) + list(extra_metrics)))
    cuts = sorted({n for base, n in map(parse_metric, names) if base == BUDGET_METRIC})
    depth = max([RECALL_DEPTH, k] + [n for base, n in map(parse_metric, names) if base != BUDGET_METRIC])
    keep = k if keep_hits is None else keep_hits
    latencies: list[float] = []
    records: list[QueryRecord] = []
    rerank: dict[str, int] = {}
    for n, q in enumerate(evalset.queries, 1):
        started = time.perf_counter()
        with caching_queries(kb.embedder if mode != "bm25" else None):
            r = kb.retrieve(
                q.text, top_k=depth, mode=mode, collection=collection, per_source_k=depth, **(options or {})
            )
        latency = (time.perf_counter() - started) * 1000
        latencies.append(latency)
        if r.rerank != "off":
            outcome = r.rerank.split(":", 1)[0]
            rerank[outcome] = rerank.get(outcome, 0) + 1
        by_budget = {c: within_budget(q, r.hits, c) for c in cuts}
        ranked = by_budget[budget] if budget else list(dict.fromkeys(q.label(h.chunk) for h in r.hits))
        values = score(names, ranked, q.relevant, by_budget)
        first = next((i for i, t in enumerate(ranked, 1) if t in q.relevant), None)
        hits = hit_records(q, r.hits, keep)
        relevant = tuple(", ".join(f"{f}={v}" for f, v in e.to_json().items()) for e in q.expected) or tuple(q.relevant)
        records.append(QueryRecord(q.qid, q.text, q.category, relevant, first, values, round(latency, 2), hits))
        if on_progress and n % 50 == 0:
            on_progress(n, len(evalset.queries), q.qid)
    missed = [q for q, rec in zip(evalset.queries, records, strict=True) if rec.first_relevant is None]
    if evalset.kind == "beir":  # every query: a missing id caps the recall of one that found the others too
        unmatched = missing_documents(evalset.queries, {d.doc_id for d in evalset.corpus})
    else:
        unmatched = unmatched_targets(missed, kb.documents(collection), kb.store.document_chunks) if missed else ()
    by_category = {c: [r for r in records if r.category == c] for c in sorted({r.category for r in records})}
    categories = {c: {**_means(rs, names), "queries": float(len(rs))} for c, rs in by_category.items()}
    percentiles = {f"p{p}": percentile(latencies, p) for p in (50, 95)}
    scores = (_means(records, names), percentiles, None, categories, tuple(records))
    nq = len(evalset.queries)
    return EvalResult(evalset.name, mode, k, nq, *scores, evalset.kind, variant, rerank, budget, unmatched)


# Expected entries of a YAML set that no chunk of the index satisfies (a typo in ``contains``, a glob that names no
# file) can never be found, so their query scores 0 whatever retrieval does: the run says so. Only the queries
# that found nothing are checked, each over the chunks of the documents its ``source`` glob matches.
MAX_DOCS = 500  # an entry whose glob matches more documents is not checked: all their chunks would be read


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
) -> tuple[str, ...]:
    """The expected entries of ``queries`` that no chunk of ``documents`` (the searched ones) satisfies, each with
    the reason."""
    chunks_of = functools.cache(chunks_of)  # a document's chunks are read once
    found = []
    for q in queries:
        for i, e in enumerate(q.expected):
            docs = [d for d in documents if fnmatch.fnmatchcase(d.source, e.source)]
            if len(docs) > MAX_DOCS:
                continue
            nothing = f"no indexed document's source matches {e.source!r} (`zhiku documents` lists them)"
            why = _why(e, [c for d in docs for c in chunks_of(d.doc_id)], len(docs)) if docs else nothing
            if why is not None:
                fields = ", ".join(f"{k}={v}" for k, v in e.to_json().items())
                found.append(f"{q.qid} expected[{i}] ({fields}) can never be found: {why}")
    return tuple(found)


def missing_documents(queries: Iterable[EvalQuery], corpus_ids: set[str]) -> tuple[str, ...]:
    """BEIR: the judged documents of ``queries`` that are not in the corpus."""
    return tuple(
        f"{q.qid} judges {doc!r} relevant, which is not in the corpus (corpus.jsonl has no such `_id`): it can "
        "never be found"
        for q in queries
        for doc in q.relevant
        if doc not in corpus_ids
    )


# ------------------------------------------------------------------ experiments: variants side by side
NO_RERANKER = (
    "zhiku has no reranker yet: none is configured (rerank.provider: none); set rerank.provider and "
    "rerank.model, or pass --reranker cross-encoder:MODEL_OR_FOLDER (or llm)"
)


@dataclass(frozen=True)
class Variant:
    name: str
    mode: SearchMode
    description: str
    rerank: bool = False  # whether the configured reranker runs
    unavailable: Callable[[KnowledgeBase], str | None] = lambda kb: None  # the reason it cannot run, or None
    transforms: tuple[str, ...] = ()  # ingest transforms of the index it runs on (a second index)
    settings: Mapping[str, Any] = field(default_factory=dict)  # settings changes it runs with (e.g. query rewriting)


def _needs_llm(kb: KnowledgeBase) -> str | None:
    llm = kb.settings.llm
    if llm.base_url and llm.model:
        return None
    return "needs an LLM endpoint: set llm.base_url and llm.model (docs/transforms.md)"


def _no_reranker(kb: KnowledgeBase) -> str | None:
    return None if kb.reranker is not None else NO_RERANKER


KbFor = Callable[["Variant", "str | None"], "KnowledgeBase | None"]  # the index a variant with transforms runs on
_FUSIONS = (("zscore", "z-score"), ("rrf", "RRF (k = 60)"))
_REWRITTEN = "hybrid with query rewriting ({}) by the LLM, variants fused with RRF"
_CONTEXTUAL = "hybrid over chunks indexed with an LLM-written context (contextual transform)"

VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("bm25", "bm25", "BM25 over jieba tokens (SQLite FTS5)"),
        Variant("dense", "dense", "dense vectors only (cosine)"),
        Variant("hybrid", "hybrid", "BM25 + dense fused by retrieval.fusion (the settings line)"),
        *(
            Variant(
                f"hybrid_{f}",
                "hybrid",
                f"hybrid with {label} fusion whatever retrieval.fusion says",
                settings={"retrieval": {"fusion": f}},
            )
            for f, label in _FUSIONS
        ),
        Variant(
            "hybrid_rerank", "hybrid", "hybrid, then the configured reranker over the top 20 fused", True, _no_reranker
        ),
        Variant("hybrid+contextual", "hybrid", _CONTEXTUAL, unavailable=_needs_llm, transforms=("contextual",)),
        *(
            Variant(
                f"hybrid+{m}",
                "hybrid",
                _REWRITTEN.format(m),
                unavailable=_needs_llm,
                settings={"retrieval": {"rewrite": m}},
            )
            for m in ("multi_query", "hyde")
        ),
    )
}


@contextmanager
def variant_indexes(settings: Settings, data: EvalSet) -> Iterator[KbFor]:
    """``kb_for(variant, collection)``: the knowledge base a variant with transforms or settings runs on."""
    opened: dict[str, KnowledgeBase] = {}

    def kb_for(v: Variant, collection: str | None) -> KnowledgeBase | None:
        if v.name in opened:
            return opened[v.name]
        if v.transforms and data.kind == "yaml" and not data.docs:
            return None
        if v.transforms:
            where = Path(settings.index) / f"variant-{'-'.join(v.transforms)}"
            changes = {"index": str(where), "transforms": {"enabled": list(v.transforms)}, **v.settings}
            opened[v.name] = KnowledgeBase(merge(settings, **changes))
            index_dataset(opened[v.name], data, collection=collection or data.name)
        else:
            opened[v.name] = KnowledgeBase(merge(settings, **v.settings), read_only=True)
        return opened[v.name]

    try:
        yield kb_for
    finally:
        for kb in opened.values():
            kb.close()


def _flat(changes: Mapping[str, Any], prefix: str = "") -> str:
    """``{"retrieval": {"fusion": "rrf"}}`` as ``retrieval.fusion=rrf``."""
    return ", ".join(
        _flat(v, f"{prefix}{k}.") if isinstance(v, Mapping) else f"{prefix}{k}={v}" for k, v in changes.items()
    )


def parse_variants(spec: str) -> list[Variant]:
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if not names:
        raise InvalidInput(f"--variants is empty: use some of {', '.join(VARIANTS)}")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise InvalidInput(f"unknown variant {unknown[0]!r}: use {', '.join(VARIANTS)}")
    return [VARIANTS[n] for n in dict.fromkeys(names)]


@dataclass(frozen=True)
class VariantRow:
    variant: str
    description: str
    status: Literal["ok", "unavailable"]
    reason: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    latency_ms: dict[str, float] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)  # the settings this variant changed (its own run)


@dataclass(frozen=True)
class ExperimentResult:
    dataset: str
    queries: int
    k: int
    rows: tuple[VariantRow, ...]
    retrieval: dict[str, Any] = field(default_factory=dict)  # the retrieval settings every variant ran with
    budget: int | None = None  # the ranking metrics counted only the first `budget` returned characters
    unmatched: tuple[str, ...] = ()  # expected entries no chunk satisfies (the same for every variant)

    def to_json(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "queries": self.queries,
            "k": self.k,
            "budget": self.budget,
            "retrieval": self.retrieval,
            **({"unmatched": list(self.unmatched)} if self.unmatched else {}),
            "variants": [
                {
                    **asdict(r),
                    "metrics": {n: round(v, 4) for n, v in r.metrics.items()},
                    "latency_ms": {n: round(v, 2) for n, v in r.latency_ms.items()},
                }
                for r in self.rows
            ],
        }

    def markdown(self) -> str:
        names = standard_metrics(self.k, self.budget)
        cells = [
            [f"{r.metrics[n]:.4f}" for n in names] + [f"{r.latency_ms[p]:.1f}" for p in ("p50", "p95")]
            if r.status == "ok"
            else ["n/a"] * (len(names) + 2)
            for r in self.rows
        ]
        header = [f"variant ({self.dataset}, {self.queries} queries)", *names, "p50 ms", "p95 ms"]
        lines = _table(header, [[r.variant, *c] for r, c in zip(self.rows, cells, strict=True)])
        notes = [f"- `{r.variant}` unavailable: {r.reason}" for r in self.rows if r.status != "ok"]
        notes += [f"- `{r.variant}` ran with {_flat(r.settings)}" for r in self.rows if r.status == "ok" and r.settings]
        if self.retrieval:
            notes.append("- retrieval settings: " + ", ".join(f"{k}={v}" for k, v in self.retrieval.items()))
        notes += [f"- warning: {u}" for u in self.unmatched]
        return "\n".join(lines + ([""] + notes if notes else [])) + "\n"

    def save(self, out_dir: Path) -> dict[str, Path]:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = {"json": out_dir / "experiment.json", "markdown": out_dir / "experiment.md"}
        paths["json"].write_text(json.dumps(self.to_json(), ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        paths["markdown"].write_text(f"# Experiment: {self.dataset}\n\n" + self.markdown(), encoding="utf-8")
        return paths


def run_experiment(
    kb: KnowledgeBase,
    evalset: EvalSet,
    variants: Sequence[Variant],
    *,
    k: int = 10,
    collection: str | None = None,
    on_variant: Callable[[Variant], ProgressFn | None] | None = None,
    budget: int | None = None,
    kb_for: KbFor,
) -> ExperimentResult:
    """Evaluate every variant on ``kb`` (one index; variants with transforms on ``kb_for``'s) with the same queries."""
    rows = []
    unmatched: tuple[str, ...] = ()
    common: dict[str, Any] = {"k": k, "collection": collection, "keep_hits": 0, "budget": budget}
    for v in variants:
        reason = v.unavailable(kb)
        target = kb_for(v, collection) if reason is None and (v.transforms or v.settings) else kb
        if target is None:
            reason = "needs a BEIR or long-document set: the experiment builds a second index with the transform"
        if reason is not None or target is None:
            rows.append(VariantRow(v.name, v.description, "unavailable", reason, settings=dict(v.settings)))
            continue
        progress = on_variant(v) if on_variant is not None else None
        r = evaluate(
            target, evalset, mode=v.mode, variant=v.name, options={"rerank": v.rerank}, on_progress=progress, **common
        )
        unmatched = unmatched or r.unmatched
        fell_back = r.rerank.get("fallback", 0)
        note = f"the reranker fell back to the fused order on {fell_back} of {r.queries} queries" if fell_back else None
        rows.append(VariantRow(v.name, v.description, "ok", note, r.metrics, r.latency_ms, dict(v.settings)))
    retrieval = kb.settings.retrieval.model_dump(mode="json")
    return ExperimentResult(evalset.name, len(evalset.queries), k, tuple(rows), retrieval, budget, unmatched)


# ------------------------------------- outputs (summary.json, report.md, per_query.json) and the index's history
HISTORY_FILE = "eval_history.jsonl"
WORST_SHOWN = 10


def gate_json(gate: Sequence[BarResult]) -> dict[str, Any] | None:
    """The verdict and every bar (``summary.json``, and `zhiku eval --json` when ``--gate`` is given)."""
    if not gate:
        return None
    return {
        "passed": all(b.passed for b in gate),
        "bars": [{"bar": str(b.bar), "value": round(b.value, 4), "passed": b.passed} for b in gate],
    }


def check_out_dir(out_dir: Path | None) -> None:
    """Refuse an ``--out`` that cannot become a folder before the run, not with a traceback after it."""
    if out_dir is None:
        return
    taken = next((p for p in (Path(out_dir), *Path(out_dir).parents) if p.exists()), None)
    if taken is not None and not taken.is_dir():
        raise InvalidInput(f"--out {out_dir}: {taken} is a file, not a folder (name a folder; it is created)")


def write_outputs(
    out_dir: Path,
    result: EvalResult,
    *,
    gate: Sequence[BarResult] = (),
    generation: GenerationResult | None = None,
    index: str | None = None,
) -> dict[str, Path]:
    """Write the three files into ``out_dir`` (created); returns their paths by name."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    r = result  # summary.json: the --json object, k, kind, variant, per-category metrics, gate and generation
    data = {
        **r.to_json(),
        "kind": r.kind,
        "k": r.k,
        "variant": r.variant or r.mode,
        "metrics": {n: round(v, 4) for n, v in r.metrics.items()},
        "categories": {c: {n: round(v, 4) for n, v in m.items()} for c, m in r.categories.items()},
        "index": index,
        "gate": gate_json(gate),
        "generation": None if generation is None else generation.to_json(),
    }
    paths = {
        name: out_dir / f"{name}.{ext}" for name, ext in (("summary", "json"), ("report", "md"), ("per_query", "json"))
    }
    paths["summary"].write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    records = [{**asdict(r), "metrics": {n: round(v, 4) for n, v in r.metrics.items()}} for r in result.records]
    per_query = json.dumps(records, ensure_ascii=False, indent=1)
    paths["per_query"].write_text(per_query + "\n", encoding="utf-8")
    paths["report"].write_text(markdown_report(result, gate=gate, generation=generation), encoding="utf-8")
    return paths


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return lines


def markdown_report(
    result: EvalResult, *, gate: Sequence[BarResult] = (), generation: GenerationResult | None = None
) -> str:
    r = result
    lines = [
        f"# Evaluation: {r.dataset}",
        "",
        f"{r.queries} queries · mode `{r.mode}`"
        + (f" · variant `{r.variant}`" if r.variant else "")
        + f" · latency p50 {r.latency_ms['p50']:.1f} ms, p95 {r.latency_ms['p95']:.1f} ms",
        "",
        "## Retrieval",
        "",
    ]
    lines += _table(["metric", "value"], [(n, f"{v:.4f}") for n, v in r.metrics.items()])
    if len(r.categories) > 1:
        names = list(r.metrics)
        lines += ["", "## Per category", ""]
        lines += _table(
            ["category", "queries", *names],
            [(c, int(m["queries"]), *(f"{m[n]:.4f}" for n in names)) for c, m in r.categories.items()],
        )
    if gate:
        verdict = "passed" if all(b.passed for b in gate) else "FAILED"
        lines += ["", f"## Gate: {verdict}", ""] + [f"- {b}" for b in gate]
    lines += ["", "## Generation (LLM judge)", ""]
    if generation is None or generation.status == "skipped":
        lines.append(f"Skipped: {generation.reason if generation else 'not requested'}.")
    else:
        lines += _table(
            ["metric", "mean"], [(n, "–" if v is None else f"{v:.4f}") for n, v in generation.metrics.items()]
        )
        lines.append(
            f"\n{generation.queries} queries judged, {generation.judge_calls} judge calls, "
            f"{generation.errors} unscored (judge errors)."
        )
        lines += [f"- judge error ×{n}: {reason}" for reason, n in generation.error_reasons()]
    if r.unmatched:
        lines += ["", f"## Expected entries that match nothing in the index ({len(r.unmatched)})", ""]
        lines += [f"- {u}" for u in r.unmatched]
    missed = [q for q in r.records if q.first_relevant is None or q.first_relevant > 5]
    lines += ["", f"## Missed at 5 ({len(missed)} of {r.queries})", ""]
    for q in missed[:WORST_SHOWN]:
        found = "not found" if q.first_relevant is None else f"first relevant at {q.first_relevant}"
        lines.append(
            f"- **{q.query}** ({q.category}; {found}); expected {', '.join(q.relevant)[:200]}; got: "
            + "; ".join(f"{h.rank}. {h.source} {h.section}".strip() for h in q.hits[:3])
        )
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class HistoryEntry:
    at: float  # unix seconds
    dataset: str
    kind: str
    mode: str
    variant: str
    queries: int
    metrics: dict[str, float]
    latency_ms: dict[str, float]
    gate_passed: bool | None = None
    generation: dict[str, float | None] = field(default_factory=dict)
    out: str | None = None


def history_entry(
    result: EvalResult,
    *,
    gate: Sequence[BarResult] = (),
    generation: GenerationResult | None = None,
    out: Path | None = None,
) -> HistoryEntry:
    r = result
    what = (r.dataset, r.kind, r.mode, r.variant or r.mode, r.queries)
    scores = ({n: round(v, 4) for n, v in r.metrics.items()}, {n: round(v, 2) for n, v in r.latency_ms.items()})
    judged = dict(generation.metrics) if generation is not None and generation.status == "ok" else {}
    passed = None if not gate else all(b.passed for b in gate)
    return HistoryEntry(time.time(), *what, *scores, passed, judged, None if out is None else str(out))


def append_history(index: Path, entry: HistoryEntry) -> Path:
    path = Path(index) / HISTORY_FILE
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(asdict(entry), ensure_ascii=False) + "\n")
    return path


def read_history(index: Path) -> list[HistoryEntry]:
    """Every recorded run, oldest first; unreadable lines are skipped."""
    path = Path(index) / HISTORY_FILE
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(HistoryEntry(**json.loads(line)))
        except (ValueError, TypeError):
            continue
    return out
