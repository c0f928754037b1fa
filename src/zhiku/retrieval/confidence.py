"""How sure an answer is: signals of one retrieval and the low-confidence decision."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from zhiku.errors import NotFound
from zhiku.retrieval.bridge import CROSS_HITS, held_share
from zhiku.types import Hit, ScoredId

if TYPE_CHECKING:
    from zhiku.retrieval.search import Retrieval

_CODE = re.compile(r"(?=[^\s]*[a-z])(?=[^\s]*\d)[a-z0-9][a-z0-9._/-]{2,}")  # ord-4290, v2.3.0, gb18030 (normalised)
# the code whole, not a piece of a longer one (ord-429 in ord-4290, v2.3 in v2.3.0); a sentence's full stop may follow
_WHOLE = r"(?<![a-z0-9])(?<![a-z0-9][._/-]){}(?![a-z0-9])(?![._/-][a-z0-9])"
# a code names one thing when it has a separator or 3+ digits: win10, mp4, x86, k8s, ipv6, python3 are common words
_DISTINCT = re.compile(r"[._/-]|\d{3}")
MIN_COVERAGE = 0.4  # bm25 mode's threshold, calibrated with answer.min_score
# In hybrid mode a question's confidence is its best cosine, moved by its lexical evidence: LEXICAL × (ln(1 + its
# best BM25 score ÷ ln(1 + the index's chunks)) − LEXICAL_MID of the text's language) (BM25's idf grows with the
# index: a 7-chunk index scores a third of a 3,000-chunk one). An off-topic question meets few of the index's words,
# an answerable one many, and the two signals fail on different questions. Chosen on half A of the four dev sets
# against the shipped off-topic lists: every weight from 0.01 to 0.04 separates them better than the cosine alone
# on every set without the default flagging fewer off-topic questions anywhere (0.05 does, on cmrc2018_dev);
# LEXICAL_MID: the most off-topic questions flagged at the default min_score while no set flags more of its
# answerable half A than the worst did on the cosine alone (3.6 %); over English text (httpx_docs' English
# questions: their BM25 sums run lower) no more of them flagged than on the cosine alone. Half B, answerable /
# off-topic flagged (tests/data/offtopic) at 0.88, cosine alone → now: cmrc2018_dev 2.7 / 83.6 % → 1.0 / 84.3 %,
# meddialog_im_dev 0 / 92.5 % → 0 / 93.7 %, stard_dev 1.0 / 98.1 % → 2.4 / 98.1 %, stard_longdoc 1.5 / 98.1 % → 2.2
# / 98.1 %; and `zhiku tune` picks, on half A, thresholds that flag ≥ 90 % and ≤ 5 % on half B of every set.
LEXICAL = 0.03
LEXICAL_MID = {"zh": 1.1, "en": 1.15}  # by the language of the text
# A cross-lingual question (English over Chinese passages, or the reverse): its best cosine alone separates poorly
# (over cmrc2018_dev answerable English questions score lower than off-topic ones). Its score is its best cosine with
# its gloss in the text's language (the clause channel's best: same-language evidence), plus CROSS_COVERAGE × the
# share of its bridged phrases (``QueryPlan.bridge``) whose senses the first CROSS_HITS passages hold, plus
# CROSS_BM25 × its lexical evidence (of its bridged terms), less CROSS_LIFT of the text's language: then it stands
# on min_score's scale. Chosen on half A of the English dev sets and of httpx_docs (the reverse) against the
# shipped off-topic lists (the most off-topic less answerable questions flagged). On half B, answerable / off-topic
# flagged, before → after: cmrc2018_dev 30 / 33 % → 20 / 46 %, stard_dev 13 / 80 % → 11 / 93 %, httpx_docs 5 / 80 %
# → 9 / 90 %
CROSS_COVERAGE = 0.1
CROSS_BM25 = 0.06
CROSS_LIFT = {"zh": 0.082, "en": 0.038}  # by the language of the text


@dataclass(frozen=True)
class Signals:
    top_cosine: float | None  # None in bm25 mode (no dense channel)
    margin: float | None
    coverage: float | None  # None when the query has no BM25 term
    top_bm25: float | None
    top_clause: float | None = None  # the clause channel's best cosine (None: no clause)


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
    clauses: Sequence[ScoredId] = (),
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
    return Signals(top, margin, coverage, bm25[0].score if bm25 else None, clauses[0].score if clauses else None)


def assess(
    signals: Signals,
    *,
    found: bool,
    mode: str,
    min_score: float,
    held: float | None = None,
    language: str = "zh",
    chunks: int = 0,
) -> Confidence:
    """``low`` when nothing was found or the mode's score is below its threshold (``min_score``; 0 turns the check
    off): bm25 mode, the terms' coverage (against ``MIN_COVERAGE``); a cross-lingual question (``held``: its share of
    bridged phrases the first passages hold), its own score; hybrid mode, the best cosine moved by the lexical
    evidence (``LEXICAL``); dense mode, the best cosine. Over text in ``language``, of an index of about ``chunks``
    chunks (the scale of its BM25 scores)."""
    lexical = math.log1p(max(signals.top_bm25 or 0.0, 0.0) / math.log1p(max(chunks, 1)))  # no match: 0
    if mode == "bm25":
        name, score, threshold = "coverage", signals.coverage, MIN_COVERAGE if min_score > 0 else 0.0
    elif held is not None and signals.top_cosine is not None:
        best = signals.top_cosine if signals.top_clause is None else signals.top_clause
        evidence = CROSS_COVERAGE * held + CROSS_BM25 * lexical
        name, score, threshold = "cross_lingual", best + evidence - CROSS_LIFT[language], min_score
    elif mode == "hybrid" and signals.top_cosine is not None:
        name, score = "cosine_bm25", signals.top_cosine + LEXICAL * (lexical - LEXICAL_MID[language])
        threshold = min_score
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
    found = signals_of(r.hits, r.dense, r.bm25, r.query.terms, normalize, r.clauses)
    held = None
    if r.query.cross_lingual:
        lead = (r.candidates or r.hits)[:CROSS_HITS]
        held = held_share(r.query.bridge, "\n".join([normalize(h.chunk.text) for h in lead]))
    q = r.query
    verdict = assess(
        found, found=bool(r.hits), mode=r.mode, min_score=min_score, held=held, language=q.index_language or "zh",
        chunks=q.index_chunks,
    )  # fmt: skip
    if verdict.low and (r.pages or codes_in_first(r.hits, r.query.terms, normalize)):
        return replace(verdict, low=False)
    return verdict


def check_collection(name: str | None, names: Sequence[str]) -> None:
    """``NotFound`` naming the collections there are when ``name`` is none of them: a typo'd collection is an error."""
    if name is not None and name not in names:
        raise NotFound(f"no collection {name!r} in this knowledge base; available: {', '.join(names) or '(none yet)'}")
