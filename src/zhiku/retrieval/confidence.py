"""How sure an answer is: signals of one retrieval and the low-confidence decision."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from zhiku.errors import NotFound
from zhiku.retrieval.bridge import held_share
from zhiku.types import Hit, ScoredId

if TYPE_CHECKING:
    from zhiku.retrieval.search import Retrieval

_CODE = re.compile(r"(?=[^\s]*[a-z])(?=[^\s]*\d)[a-z0-9][a-z0-9._/-]{2,}")  # ord-4290, v2.3.0, gb18030 (normalised)
# the code whole, not a piece of a longer one (ord-429 in ord-4290, v2.3 in v2.3.0); a sentence's full stop may follow
_WHOLE = r"(?<![a-z0-9])(?<![a-z0-9][._/-]){}(?![a-z0-9])(?![._/-][a-z0-9])"
# a code names one thing when it has a separator or 3+ digits: win10, mp4, x86, k8s, ipv6, python3 are common words
_DISTINCT = re.compile(r"[._/-]|\d{3}")
MIN_COVERAGE = 0.4  # bm25 mode's threshold, calibrated with answer.min_score
# An English question over Chinese passages: its best cosine alone separates poorly (on cmrc2018_dev answerable
# English questions score lower than off-topic ones), so its score adds CROSS_COVERAGE × the share of its bridged
# phrases (``QueryPlan.bridge``) whose senses the first CROSS_HITS passages hold, against min_score less
# CROSS_LINGUAL_DROP (0.857 at the default 0.88); both chosen on half A of the English dev sets against
# data/offtopic_en.txt (the most off-topic less answerable questions flagged). On half B, answerable / off-topic
# flagged: stard_dev 13 % / 78 % (the cosine alone at 0.78: 16 % / 72 %), cmrc2018_dev 26 % / 33 % (65 % / 26 %)
CROSS_COVERAGE = 0.15
CROSS_LINGUAL_DROP = 0.023
CROSS_HITS = 5


@dataclass(frozen=True)
class Signals:
    top_cosine: float | None  # None in bm25 mode (no dense channel)
    margin: float | None
    coverage: float | None  # None when the query has no BM25 term
    top_bm25: float | None


@dataclass(frozen=True)
class Confidence:
    """The decision for one answer: ``score`` is the signal it was made on (``signal``)."""

    score: float | None
    low: bool
    signal: str
    threshold: float
    signals: Signals


def signals_of(
    hits: Sequence[Hit],
    dense: Sequence[ScoredId],
    bm25: Sequence[ScoredId],
    terms: Sequence[str],
    normalize: Callable[[str], str] = str.lower,
) -> Signals:
    """The signals of one retrieval: ``hits`` returned, the channels' candidates, the query's BM25 terms."""
    top = dense[0].score if dense else None
    margin = None if top is None else top - sum(x.score for x in dense) / len(dense)
    coverage = None
    if terms:
        # each passage on its own (the same as the joined text: no normalisation crosses a line break), so a
        # passage that came back before is not normalised again (``TextProcessor.normalize`` keeps them)
        text = "\n".join([normalize(h.chunk.text) for h in hits])
        coverage = sum(1 for t in terms if t in text) / len(terms)
    return Signals(top, margin, coverage, bm25[0].score if bm25 else None)


def assess(signals: Signals, *, found: bool, mode: str, min_score: float, held: float | None = None) -> Confidence:
    """``low`` when nothing was found or the best cosine is below ``min_score`` (0 turns the check off); ``held``:
    an English question's share of bridged phrases the first passages hold (``CROSS_COVERAGE``)."""
    if mode == "bm25":
        name, score, threshold = "coverage", signals.coverage, MIN_COVERAGE if min_score > 0 else 0.0
    elif held is not None and signals.top_cosine is not None and min_score > 0:
        name, score = "top_cosine+bridged", signals.top_cosine + CROSS_COVERAGE * held
        threshold = max(min_score - CROSS_LINGUAL_DROP, 0.01)
    else:
        name, score, threshold = "top_cosine", signals.top_cosine, min_score
    low = not found or (threshold > 0 and score is not None and score < threshold)
    return Confidence(score, low, name, threshold, signals)


def codes_in_first(hits: Sequence[Hit], terms: Sequence[str], normalize: Callable[[str], str] = str.lower) -> bool:
    """Whether the first passage holds every code the query names (ORD-4290, v2.3.0), whole: a lookup answered."""
    codes = [t for t in terms if _CODE.fullmatch(t) and _DISTINCT.search(t)]
    if not (codes and hits):
        return False
    text = normalize(hits[0].chunk.text)
    return all(re.search(_WHOLE.format(re.escape(t)), text) for t in codes)


def judge(r: Retrieval, *, min_score: float, normalize: Callable[[str], str] = str.lower) -> Confidence:
    """The confidence of one retrieval; not low when the question looks up codes or pages the passages hold."""
    found = signals_of(r.hits, r.dense, r.bm25, r.query.terms, normalize)
    held = None
    if r.query.cross_lingual:
        held = held_share(r.query.bridge, "\n".join([normalize(h.chunk.text) for h in r.hits[:CROSS_HITS]]))
    verdict = assess(found, found=bool(r.hits), mode=r.mode, min_score=min_score, held=held)
    if verdict.low and (r.pages or codes_in_first(r.hits, r.query.terms, normalize)):
        return replace(verdict, low=False)
    return verdict


def check_collection(name: str | None, names: Sequence[str]) -> None:
    """``NotFound`` naming the collections there are when ``name`` is none of them: a typo'd collection is an error."""
    if name is not None and name not in names:
        raise NotFound(f"no collection {name!r} in this knowledge base; available: {', '.join(names) or '(none yet)'}")
