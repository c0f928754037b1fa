"""Run a BEIR dataset through the real pipeline and compute retrieval metrics."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from zhiku.api import KnowledgeBase
from zhiku.evaluation.beir import BeirDataset
from zhiku.evaluation.metrics import hit_at_k, mrr_at_k, ndcg_at_k, percentile, recall_at_k
from zhiku.types import SourceDoc

RECALL_DEPTH = 100


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
class EvalResult:
    dataset: str
    mode: str
    k: int
    queries: int
    metrics: dict[str, float]
    latency_ms: dict[str, float]
    indexing: IndexingStats | None = None
    per_query: dict[str, list[str]] = field(default_factory=dict, repr=False)  # query id -> ranked doc ids

    def to_json(self) -> dict:
        out: dict = {"dataset": self.dataset, "mode": self.mode, "queries": self.queries}
        out.update({name: round(v, 4) for name, v in self.metrics.items()})
        out["latency_ms"] = {name: round(v, 2) for name, v in self.latency_ms.items()}
        if self.indexing is not None:
            i = self.indexing
            out["indexing"] = {"documents": i.documents, "chunks": i.chunks, "seconds": round(i.seconds, 2),
                               "chunks_per_s": round(i.chunks_per_s, 1), "chunks_embedded": i.chunks_embedded}
        return out


def index_dataset(kb: KnowledgeBase, dataset: BeirDataset, *, collection: str,
                  on_progress: Callable[[int, int, str], None] | None = None) -> IndexingStats:
    docs = [SourceDoc(source=d.doc_id, doc_type="text", title=d.title, text=d.text) for d in dataset.corpus]
    report = kb.ingest_documents(docs, collection=collection, on_progress=on_progress)
    chunks = sum(c.chunks for c in kb.collections() if c.name == collection)
    return IndexingStats(len(docs), chunks, report.elapsed_s, report.chunks_embedded)


def evaluate(kb: KnowledgeBase, dataset: BeirDataset, *, mode: str, k: int = 10, collection: str | None = None,
             on_progress: Callable[[int, int, str], None] | None = None) -> EvalResult:
    """Search every query (top 100 for recall) and score the ranked document ids against the qrels."""
    sums = {f"ndcg@{k}": 0.0, f"recall@{k}": 0.0, f"recall@{RECALL_DEPTH}": 0.0, f"mrr@{k}": 0.0,
            "hit@1": 0.0, "hit@5": 0.0}
    latencies: list[float] = []
    per_query: dict[str, list[str]] = {}
    depth = max(RECALL_DEPTH, k)
    for n, (qid, text) in enumerate(dataset.queries.items(), 1):
        started = time.perf_counter()
        r = kb.retrieve(text, top_k=depth, mode=mode, collection=collection, per_source_k=depth)
        latencies.append((time.perf_counter() - started) * 1000)
        ranked = list(dict.fromkeys(h.chunk.source for h in r.hits))
        per_query[qid] = ranked
        rel = dataset.qrels[qid]
        sums[f"ndcg@{k}"] += ndcg_at_k(ranked, rel, k)
        sums[f"recall@{k}"] += recall_at_k(ranked, rel, k)
        sums[f"recall@{RECALL_DEPTH}"] += recall_at_k(ranked, rel, RECALL_DEPTH)
        sums[f"mrr@{k}"] += mrr_at_k(ranked, rel, k)
        sums["hit@1"] += hit_at_k(ranked, rel, 1)
        sums["hit@5"] += hit_at_k(ranked, rel, 5)
        if on_progress and n % 50 == 0:
            on_progress(n, len(dataset.queries), qid)
    nq = len(dataset.queries)
    return EvalResult(
        dataset=dataset.name, mode=mode, k=k, queries=nq,
        metrics={name: v / nq for name, v in sums.items()},
        latency_ms={"p50": percentile(latencies, 50), "p95": percentile(latencies, 95)},
        per_query=per_query,
    )
