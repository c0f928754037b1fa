"""Generation metrics judged by an LLM (faithfulness, answer relevancy, context precision) and the judge: an
OpenAI-compatible ``/v1/chat/completions`` endpoint with an on-disk cache."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from zhiku.api import KnowledgeBase
from zhiku.errors import InvalidInput, ZhikuError
from zhiku.evaluation.datasets import EvalSet
from zhiku.llm import ReplyCache, json_object_in
from zhiku.openai_http import HttpApiError, OpenAICompatibleClient
from zhiku.retrieval.search import Retrieval
from zhiku.settings import Settings

CACHE_FILE = "judge.sqlite"
BREAKER = 3  # calls in a row the judge did not answer (after retries): the rest of the run sends none


class JudgeError(ZhikuError):
    code = "JUDGE_FAILED"


def parse_json_object(text: str) -> dict[str, Any]:
    """The JSON object in a model's reply (a ```json fence or surrounding prose is tolerated)."""
    try:
        return json_object_in(text)
    except ValueError as e:
        raise JudgeError(f"the judge {e}") from None


class JudgeClient:
    """Asks the judge model for JSON objects. ``calls`` counts HTTP requests (cache hits are free)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        cache: ReplyCache | None = None,  # the judge's replies: ``judge.sqlite`` in the cache folder
    ) -> None:
        base = base_url.rstrip("/")  # ``http://host:8000`` or ``http://host:8000/v1``
        base += "" if base.endswith("/v1") else "/v1"
        self.url, self.model, self.cache, self.calls = base + "/chat/completions", model, cache, 0
        self._failing, self._last = 0, ""  # calls in a row without an answer, and the last reason
        self._client = OpenAICompatibleClient(base, api_key=api_key, timeout=timeout, max_retries=2, backoff_s=0.25)

    def ask(self, system: str, user: str) -> dict[str, Any]:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        key = hashlib.sha256(json.dumps([self.model, messages], ensure_ascii=False).encode()).hexdigest()
        if self.cache is not None and (cached := self.cache.get(key)) is not None:
            return parse_json_object(cached)
        content = self._post(messages)
        value = parse_json_object(content)
        if self.cache is not None:
            self.cache.put(key, content)
        return value

    def _post(self, messages: list[dict[str, str]]) -> str:
        if self._failing >= BREAKER:
            raise JudgeError(f"not sent: the judge failed {self._failing} calls in a row (last: {self._last})")
        payload = {"model": self.model, "messages": messages, "temperature": 0}
        self.calls += 1
        try:
            content = self._client.chat(payload).content
        except HttpApiError as e:
            if e.status is not None and e.status < 300:
                raise JudgeError(f"the judge at {self.url} did not return an OpenAI-style JSON response") from None
            if e.status is not None:
                raise JudgeError(f"the judge at {self.url} answered HTTP {e.status}: {e}") from None
            self._failing, self._last = self._failing + 1, f"cannot reach the judge at {self.url}: {e}"
            raise JudgeError(f"{self._last} (check judge.base_url)") from None
        self._failing = 0
        return content


def build_judge(settings: Settings) -> JudgeClient | None:
    """The judge client, or None when no judge is configured (its API key read here, at the edge)."""
    j = settings.judge
    if not j.base_url or not j.model:
        return None
    if j.api_key_env and j.api_key is None:
        raise InvalidInput(f"judge.api_key_env names {j.api_key_env}, but that environment variable is empty")
    key = j.api_key.get_secret_value() if j.api_key else None
    cache = ReplyCache(settings.cache_dir / CACHE_FILE) if settings.cache_dir else None
    return JudgeClient(j.base_url, j.model, api_key=key, timeout=j.timeout_s, cache=cache)


GENERATION_METRICS = ("faithfulness", "answer_relevancy", "context_precision")
NO_JUDGE = (
    "no LLM judge configured: set judge.base_url and judge.model in zhiku.yaml "
    "(or ZHIKU_JUDGE__BASE_URL / ZHIKU_JUDGE__MODEL) to score faithfulness, answer relevancy and context precision"
)
CONTEXT_CHARS = 800  # characters of each context shown to the judge

FAITHFULNESS = """[faithfulness] You check whether an answer is supported by retrieved passages.
Split the ANSWER into short factual claims. For each claim decide whether the PASSAGES support it.
Reply with JSON only: {"claims": [{"claim": "...", "supported": true}]}"""
RELEVANCY = """[answer_relevancy] You read an answer and write the questions it answers.
Write 3 different questions, in the answer's language, that the ANSWER answers directly.
Reply with JSON only: {"questions": ["...", "...", "..."]}"""
PRECISION = """[context_precision] You judge retrieved passages for a question.
For each numbered PASSAGE decide whether it is useful for answering the QUESTION (1) or not (0).
Reply with JSON only: {"verdicts": [1, 0, ...]} with exactly one verdict per passage, in order."""


@dataclass(frozen=True)
class GenerationScores:
    qid: str
    faithfulness: float | None
    answer_relevancy: float | None
    context_precision: float | None
    errors: tuple[str, ...] = ()


@dataclass(frozen=True)
class GenerationResult:
    status: Literal["ok", "skipped"]
    reason: str | None = None
    queries: int = 0
    metrics: dict[str, float | None] = field(default_factory=dict)
    errors: int = 0
    judge_calls: int = 0
    per_query: tuple[GenerationScores, ...] = ()

    def error_reasons(self, n: int = 3) -> list[tuple[str, int]]:
        """The most frequent reasons the judge left a metric unscored (without the metric's name), with counts."""
        return Counter(e.split(": ", 1)[-1] for s in self.per_query for e in s.errors).most_common(n)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["metrics"] = {k: None if v is None else round(v, 4) for k, v in self.metrics.items()}
        return out


def skipped(reason: str = NO_JUDGE) -> GenerationResult:
    return GenerationResult(status="skipped", reason=reason)


def _contexts(r: Retrieval) -> str:
    return "\n\n".join(
        f"PASSAGE [{n}] ({h.chunk.source}): {h.chunk.text[:CONTEXT_CHARS]}" for n, h in enumerate(r.hits, 1)
    )


def faithfulness(judge: JudgeClient, answer: str, r: Retrieval) -> float:
    reply = judge.ask(FAITHFULNESS, f"PASSAGES:\n{_contexts(r)}\n\nANSWER:\n{answer}")
    claims = reply.get("claims")
    if not isinstance(claims, list) or not claims or not all(isinstance(c, dict) and "supported" in c for c in claims):
        raise JudgeError("faithfulness: the judge listed no claims with a `supported` verdict")
    return sum(1 for c in claims if c["supported"] is True) / len(claims)


def answer_relevancy(judge: JudgeClient, question: str, answer: str, embed: Callable[[str], np.ndarray]) -> float:
    reply = judge.ask(RELEVANCY, f"ANSWER:\n{answer}")
    questions = [q for q in reply.get("questions") or [] if isinstance(q, str) and q.strip()]
    if not questions:
        raise JudgeError("answer_relevancy: the judge wrote no questions")
    target = embed(question)
    return float(np.mean([float(np.dot(embed(q), target)) for q in questions]))


def average_precision(verdicts: Sequence[int]) -> float:
    """Average of precision@k over the positions k holding a useful context (0 when none is useful)."""
    at = [k for k, v in enumerate(verdicts, 1) if v]
    return sum(n / k for n, k in enumerate(at, 1)) / len(at) if at else 0.0


def context_precision(judge: JudgeClient, question: str, r: Retrieval) -> float:
    if not r.hits:
        return 0.0
    reply = judge.ask(PRECISION, f"QUESTION: {question}\n\n{_contexts(r)}")
    verdicts = reply.get("verdicts")
    if not isinstance(verdicts, list) or len(verdicts) != len(r.hits) or not all(v in (0, 1) for v in verdicts):
        raise JudgeError(f"context_precision: expected {len(r.hits)} verdicts of 0 or 1, got {verdicts!r}")
    return average_precision([int(v) for v in verdicts])


def judge_generation(
    kb: KnowledgeBase,
    evalset: EvalSet,
    judge: JudgeClient,
    *,
    mode: str | None = None,
    collection: str | None = None,
    top_k: int = 5,
    max_queries: int = 20,
) -> GenerationResult:
    """Score the first ``max_queries`` queries: retrieve ``top_k`` passages, build the answer, ask the judge."""
    calls_before = judge.calls
    per_query: list[GenerationScores] = []
    for q in evalset.queries[:max_queries]:
        r = kb.retrieve(q.text, top_k=top_k, mode=mode, collection=collection)
        answer = kb.answer(r).markdown
        values: dict[str, float | None] = {}
        errors: list[str] = []
        runs: tuple[tuple[str, Callable[[], float]], ...] = (
            ("faithfulness", lambda: faithfulness(judge, answer, r)),  # noqa: B023 (called in this iteration)
            ("answer_relevancy", lambda: answer_relevancy(judge, q.text, answer, kb.embedder.embed_query)),  # noqa: B023
            ("context_precision", lambda: context_precision(judge, q.text, r)),  # noqa: B023
        )
        for name, run in runs:
            try:
                values[name] = run()
            except JudgeError as e:
                values[name] = None
                errors.append(f"{name}: {e}")
        per_query.append(GenerationScores(q.qid, errors=tuple(errors), **values))
    scored = {n: [v for s in per_query if (v := getattr(s, n)) is not None] for n in GENERATION_METRICS}
    means: dict[str, float | None] = {n: sum(v) / len(v) if v else None for n, v in scored.items()}
    return GenerationResult(
        status="ok",
        queries=len(per_query),
        metrics=means,
        errors=sum(len(s.errors) for s in per_query),
        judge_calls=judge.calls - calls_before,
        per_query=tuple(per_query),
    )
