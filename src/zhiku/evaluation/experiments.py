"""Retrieval variants side by side on one index: the same queries, one row of metrics and latency per variant."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from zhiku.api import KnowledgeBase
from zhiku.errors import InvalidInput
from zhiku.evaluation.datasets import EvalSet
from zhiku.evaluation.runner import ProgressFn, evaluate, index_dataset, standard_metrics
from zhiku.settings import Settings, merge
from zhiku.types import SearchMode

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
        lines = [
            f"| variant ({self.dataset}, {self.queries} queries) | " + " | ".join(names) + " | p50 ms | p95 ms |",
            "|" + "---|" * (len(names) + 3),
        ]
        for r in self.rows:
            metrics = [f"{r.metrics[n]:.4f}" for n in names] if r.status == "ok" else ["n/a"] * len(names)
            cells = metrics + [f"{r.latency_ms[p]:.1f}" if r.status == "ok" else "n/a" for p in ("p50", "p95")]
            lines.append(f"| {r.variant} | " + " | ".join(cells) + " |")
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
    kb_for: KbFor | None = None,
) -> ExperimentResult:
    """Evaluate every variant on ``kb`` (one index; variants with transforms on ``kb_for``'s) with the same queries."""
    rows = []
    unmatched: tuple[str, ...] = ()
    common: dict[str, Any] = {"k": k, "collection": collection, "keep_hits": 0, "budget": budget}
    for v in variants:
        reason = v.unavailable(kb)
        own = bool(v.transforms or v.settings)
        target = kb_for(v, collection) if own and kb_for is not None and reason is None else kb
        if reason is None and own and (target is None or target is kb):
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
