"""`zhiku tune`: the fusion weights and the refusal threshold chosen on a collection's own eval set by
cross-validation. Each question is searched once; its candidates are fused again for every point of the grid."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from itertools import takewhile
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from zhiku.api import KnowledgeBase
from zhiku.embedding.cache import caching_queries
from zhiku.evaluation.datasets import EvalQuery, EvalSet, folded
from zhiku.evaluation.metrics import score
from zhiku.retrieval.confidence import judge
from zhiku.retrieval.fusion import weights_of
from zhiku.retrieval.search import Retrieval
from zhiku.settings import Settings

METRICS = ("ndcg@10", "hit@5")
# z-score fusion sees only the ratio of the weights: the dense weight stays 1
GRID = [(b, 1.0, c) for b in (0.5, 0.75, 1.0, 1.5) for c in (0.0, 0.2, 0.35, 0.6)]
FOLDS = 5
MIN_QUESTIONS = 50  # fewer: a gain of a few hundredths of nDCG cannot be told from chance
BOOTSTRAP = 2000
MIN_OFFTOPIC_FLAGGED, MAX_ANSWERABLE_FLAGGED = 0.90, 0.05  # the bars a threshold must hold out of fold
# the threshold's margins within those bars, for questions the set did not see
ANSWERABLE_Q, OFFTOPIC_Q = 0.045, 0.97
ProgressFn = Callable[[int, int, str], None]


def offtopic_questions(language: str = "zh") -> list[str]:
    """The shipped everyday questions no collection of documents answers (weather, recipes, small talk …), in
    Chinese or English (``en``: for English questions over Chinese text, ``confidence.CROSS_LIFT``)."""
    text = (resources.files("zhiku") / "data" / f"offtopic_{language}.txt").read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


WARM = 256  # questions embedded at once (the searcher keeps 1,024 question vectors)
DEPTH = 20  # hits weighed per question: nDCG@10 and hit@5 of distinct targets need a few more than 10
PROBE = 2.0  # a min_score above any cosine: every question is low unless it is a lookup the passages answer


@dataclass(frozen=True)
class Asked:
    """One question searched once (hybrid, no reranker), and its confidence."""

    key: str
    retrieval: Retrieval
    query: EvalQuery | None  # None: an off-topic question
    confidence: float  # +inf: a lookup the passages answer (never low); -inf: nothing found (always low)

    def metrics(self, kb: KnowledgeBase, weights: tuple[float, float, float]) -> tuple[float, ...]:
        """nDCG@10 and hit@5 of its channels fused with ``weights`` (the rest of the pipeline as it runs)."""
        assert self.query is not None
        hits = kb.searcher.refused(self.retrieval, weights, DEPTH).hits
        found = score(METRICS, list(dict.fromkeys(self.query.label(h.chunk) for h in hits)), self.query.relevant)
        return tuple(found[m] for m in METRICS)


def gather(
    kb: KnowledgeBase, questions: Sequence[EvalQuery | str], collection: str | None, on_progress: ProgressFn | None
) -> list[Asked]:
    out = []
    for n, q in enumerate(questions, 1):
        text = q if isinstance(q, str) else q.text
        if n % WARM == 1:  # the next questions embedded in one call
            kb.searcher.warm([x if isinstance(x, str) else x.text for x in questions[n - 1 : n - 1 + WARM]])
        with caching_queries(kb.embedder):
            r = kb.retrieve(text, mode="hybrid", top_k=DEPTH, collection=collection, rerank=False)
        v = judge(r, min_score=PROBE, normalize=kb.text.normalize)  # above any cosine: low unless a lookup
        # on min_score's scale (a threshold of its own would be moved back onto it)
        on_scale = None if v.score is None else v.score - (v.threshold - PROBE)
        confidence = float("inf") if not v.low else on_scale if r.hits and on_scale is not None else float("-inf")
        out.append(Asked(text if isinstance(q, str) else q.qid, r, None if isinstance(q, str) else q, confidence))
        if on_progress and n % 50 == 0:
            on_progress(n, len(questions), text)
    return out


def fold_of(key: str) -> int:
    return zlib.crc32(key.encode("utf-8")) // 2 % FOLDS  # (the halves of `make bench-tune` split on the last bit)


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def interval(gains: Sequence[float]) -> list[float]:
    """The 99 % bootstrap interval of the mean of paired per-question gains (a fixed seed: the same every run);
    99 %, not 95: on stard_longdoc, weights whose 95 % interval on half A excludes 0 lose 0.0013 on half B."""
    if not gains:
        return [0.0, 0.0]
    picks = np.random.default_rng(0).integers(0, len(gains), (BOOTSTRAP, len(gains)))
    lo, hi = np.quantile(np.asarray(gains)[picks].mean(axis=1), [0.005, 0.995])
    return [float(lo), float(hi)]


def _quantile(xs: Sequence[float], q: float) -> float:
    s = sorted(x for x in xs if abs(x) != float("inf"))
    return s[min(len(s) - 1, int(q * len(s)))] if s else 0.0


def threshold_for(answerable: Sequence[float], offtopic: Sequence[float]) -> float:
    """Flags ``OFFTOPIC_Q`` of the off-topic questions, unless that flags more than ``ANSWERABLE_Q`` of the
    answerable ones: then just that many."""
    t = _quantile(offtopic, OFFTOPIC_Q)
    return round(t if flagged(answerable, t) <= ANSWERABLE_Q else _quantile(answerable, ANSWERABLE_Q), 3)


def flagged(confidences: Sequence[float], threshold: float) -> float:
    return _mean([1.0 if c < threshold else 0.0 for c in confidences])


def _fusion(w: tuple[float, float, float]) -> str:
    return "zscore:" + ",".join(f"{x:g}" for x in w)


@dataclass
class TuneResult:
    dataset: str
    questions: int
    offtopic: int
    before: dict[str, Any]  # {"fusion": …, "min_score": …}
    after: dict[str, Any]
    metrics: dict[str, dict[str, Any]]  # metric -> before, after (out of fold), gain, ci99
    refusal: dict[str, dict[str, float]]  # before / after -> offtopic_flagged, answerable_flagged (out of fold)
    write: dict[str, Any] = field(default_factory=dict)  # the keys worth writing: dotted key -> value
    reasons: list[str] = field(default_factory=list)  # why a key is not written
    written: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def tune(
    kb: KnowledgeBase,
    data: EvalSet,
    *,
    collection: str | None = None,
    current: Settings | None = None,
    on_progress: ProgressFn | None = None,
) -> TuneResult:
    """Choose ``retrieval.fusion`` (its weights) and ``answer.min_score`` by ``FOLDS``-fold cross-validation;
    ``current``: the settings compared against (default: the knowledge base's)."""
    current = current or kb.settings
    base = weights_of("zscore" if current.retrieval.fusion == "rrf" else current.retrieval.fusion)
    grid = [base, *(w for w in GRID if w != base)]  # a tie keeps the weights in use
    questions = gather(kb, folded(data, kb.text.normalize).queries, collection, on_progress)
    # off-topic questions in both languages, whatever the set's: agents ask a Chinese collection in English too, and
    # an English question over Chinese text is scored on its own (``confidence.CROSS_LIFT``)
    off = gather(kb, offtopic_questions() + offtopic_questions("en"), collection, None)
    table = [[c.metrics(kb, w) for w in grid] for c in questions]  # question x weights x metric
    folds = [fold_of(c.key) for c in questions]

    def best(left_out: int | None) -> int:  # the grid point with the best mean nDCG@10 outside fold ``left_out``
        rows = [row for row, f in zip(table, folds, strict=True) if f != left_out]
        return max(range(len(grid)), key=lambda g: (round(_mean([r[g][0] for r in rows]), 9), -g))

    chosen = {f: best(f) for f in range(FOLDS)}
    out_of_fold = [row[chosen[f]] for row, f in zip(table, folds, strict=True)]
    metrics: dict[str, dict[str, Any]] = {}
    reasons: list[str] = []
    write: dict[str, Any] = {}
    for m, name in enumerate(METRICS):
        gains = [o[m] - row[0][m] for o, row in zip(out_of_fold, table, strict=True)]
        before = _mean([row[0][m] for row in table])
        metrics[name] = {
            "before": before,
            "after": before + _mean(gains),
            "gain": _mean(gains),
            "ci99": interval(gains),
        }
    final = grid[best(None)]
    small = len(questions) < MIN_QUESTIONS
    lo, hi = metrics["ndcg@10"]["ci99"]
    if small:
        reasons.append(f"{len(questions)} questions: fewer than {MIN_QUESTIONS} cannot tell a gain from chance")
    elif lo <= 0:
        reasons.append(f"retrieval.fusion: the 99 % interval of the nDCG@10 gain [{lo:+.4f}, {hi:+.4f}] includes 0")
    elif final != base:
        write["retrieval.fusion"] = _fusion(final)

    answerable, off_conf = [c.confidence for c in questions], [c.confidence for c in off]
    off_folds = [fold_of(c.key) for c in off]

    def out_of(confidences: list[float], where: list[int]) -> float:  # flagged by the threshold of the other folds
        t = {f: threshold_for(*([x for x, g in zip(xs, gs, strict=True) if g != f] for xs, gs in
                                ((answerable, folds), (off_conf, off_folds)))) for f in range(FOLDS)}  # fmt: skip
        return _mean([1.0 if x < t[g] else 0.0 for x, g in zip(confidences, where, strict=True)])

    ans_oof, off_oof = out_of(answerable, folds), out_of(off_conf, off_folds)
    old = current.answer.min_score
    refusal = {
        "before": {"offtopic_flagged": flagged(off_conf, old), "answerable_flagged": flagged(answerable, old)},
        "after": {"offtopic_flagged": off_oof, "answerable_flagged": ans_oof},
    }
    threshold = threshold_for(answerable, off_conf)
    if not small and (off_oof < MIN_OFFTOPIC_FLAGGED or ans_oof > MAX_ANSWERABLE_FLAGGED):
        reasons.append(
            f"answer.min_score: chosen out of fold, it flags {off_oof:.1%} of off-topic questions (needs "
            f"≥ {MIN_OFFTOPIC_FLAGGED:.0%}) and {ans_oof:.1%} of answerable ones (needs ≤ {MAX_ANSWERABLE_FLAGGED:.0%})"
        )
    elif not small and threshold != old:
        write["answer.min_score"] = threshold
    after = {"fusion": _fusion(final), "min_score": threshold}
    return TuneResult(
        data.name, len(questions), len(off), {"fusion": _fusion(base), "min_score": old}, after, metrics, refusal,
        write, reasons,
    )  # fmt: skip


def write_settings(path: Path, changes: dict[str, Any]) -> None:
    """``changes`` (dotted keys) into the settings file at ``path``, every other value kept (re-rendered with the
    descriptions `zhiku init` writes)."""
    from zhiku.scaffold.init import settings_yaml

    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    values = yaml.safe_load(text) or {}
    for dotted, value in changes.items():
        section, name = dotted.split(".")
        values.setdefault(section, {})[name] = value
    head = "\n".join(line[3:] for line in takewhile(lambda x: x.startswith("##"), text.splitlines()))
    path.write_text(settings_yaml(values, head or "Settings of this zhiku project (docs/settings.md)."), "utf-8")
