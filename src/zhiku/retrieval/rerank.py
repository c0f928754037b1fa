"""Rerankers behind the ``Reranker`` protocol, and the fallback that keeps queries answering when one fails."""

from __future__ import annotations

import contextvars
import json
import logging
import math
import re
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from zhiku.errors import InvalidInput, RerankError
from zhiku.modelhub import HASH_MEMO, USER_MANIFEST, HashMemo, HubModel, load_manifest
from zhiku.observability.tracing import rank_changes, span
from zhiku.settings import RerankSettings
from zhiku.types import Hit

log = logging.getLogger(__name__)


@runtime_checkable
class Reranker(Protocol):
    @property
    def name(self) -> str:
        """What reranks (provider, model id, revision), e.g. ``cross-encoder:BAAI/bge-reranker-v2-m3@953dc6f6``."""
        ...

    def load(self) -> None:
        """Load the model now (servers call it at start-up, so the first query is not the slow one)."""
        ...

    def rerank(self, query: str, hits: Sequence[Hit], top_k: int) -> list[Hit]:
        """The best ``top_k`` of ``hits`` for ``query``, best first, with ``rerank_*`` fields filled."""
        ...


def sigmoid(x: float) -> float:
    """1 / (1 + e^−x), without overflow for large |x|."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


def apply_scores(hits: Sequence[Hit], raw: Sequence[float], top_k: int, *, offset: float = 0.0) -> list[Hit]:
    """``hits`` sorted by ``raw`` (best first; ties keep the input order), cut to ``top_k``, with their raw score."""
    if len(raw) != len(hits):
        raise RerankError(f"the reranker gave {len(raw)} scores for {len(hits)} passages")
    scores = [float(s) for s in raw]
    if not all(math.isfinite(s) for s in scores):
        raise RerankError(f"the reranker gave non-finite scores: {scores[:5]}")
    order = sorted(range(len(hits)), key=lambda i: (-scores[i], i))
    return [
        replace(hits[i], rerank_rank=r, rerank_score=scores[i], rerank_sigmoid=sigmoid(scores[i] - offset))
        for r, i in enumerate(order[:top_k], 1)
    ]


@dataclass(frozen=True)
class RerankOutcome:
    hits: tuple[Hit, ...]
    status: str  # "ok" | "off" | "fallback: <reason>"

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _run_bounded(fn: Any, timeout: float) -> Any:
    """``fn()`` in a daemon thread (a hung model must not keep the process from exiting), in a copy of the caller's
    context."""
    future: Future[Any] = Future()

    def run() -> None:
        try:
            future.set_result(fn())
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            future.set_exception(e)

    threading.Thread(target=contextvars.copy_context().run, args=(run,), name="zhiku-rerank", daemon=True).start()
    if not wait([future], timeout).done:
        raise TimeoutError(f"timeout after {timeout:g}s")
    return future.result()


def _check_output(out: Any, candidates: Sequence[Hit], want: int) -> list[Hit]:
    """The reranker's output must be a reordering of (some of) its input, without repeats."""
    if not isinstance(out, list) or not all(isinstance(h, Hit) for h in out):
        raise RerankError(f"the reranker returned {type(out).__name__}, not a list of hits")
    ids = [h.chunk.chunk_id for h in out]
    given = {h.chunk.chunk_id for h in candidates}
    if len(set(ids)) != len(ids) or not set(ids) <= given:
        raise RerankError("the reranker returned passages it was not given, or one twice")
    if len(out) < min(want, len(candidates)):
        raise RerankError(f"the reranker returned {len(out)} of the {min(want, len(candidates))} passages asked for")
    return out


def rerank_with_fallback(
    reranker: Reranker, query: str, hits: Sequence[Hit], *, top_m: int, top_k: int, timeout: float
) -> RerankOutcome:
    """Rerank the first ``top_m`` of ``hits`` (the rest follow in their fused order), keep ``top_k``."""
    candidates = list(hits[:top_m])
    want = min(top_k, len(candidates))
    if not candidates:
        return RerankOutcome(tuple(hits[:top_k]), "ok")
    try:
        out = _run_bounded(lambda: reranker.rerank(query, candidates, want), timeout)
        ranked = _check_output(out, candidates, want)[:want]
    except BaseException as e:  # noqa: BLE001 - every failure falls back
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        reason = str(e) if isinstance(e, TimeoutError) else f"{type(e).__name__}: {e}"
        reason = " ".join(reason.split())[:300]
        log.warning("reranker %s failed, answering with the fused order: %s", reranker_name(reranker), reason)
        return RerankOutcome(tuple(hits[:top_k]), f"fallback: {reason}")
    final = ranked + list(hits[top_m:])  # candidates past top_m keep their fused order
    return RerankOutcome(tuple(final[:top_k]), "ok")


def reranker_name(reranker: Reranker) -> str:
    """The reranker's name, or its class name when the name cannot be had (a missing model)."""
    try:
        return reranker.name
    except Exception:  # noqa: BLE001 - the name itself may need the (missing) model
        return type(reranker).__name__


CROSS_ENCODER_TOKENS = 512  # of a question and passage pair: what bge-reranker models are trained on


class CrossEncoderReranker(HubModel):
    """A sentence-transformers ``CrossEncoder``; the model loads on first use (thread-safe)."""

    load_error = RerankError
    kind = "cross-encoder"

    @cached_property
    def name(self) -> str:
        return f"cross-encoder:{self.folder.fingerprint(self.memo)}"

    def _construct(self, st: Any, path: str, device: str) -> Any:
        return st.CrossEncoder(path, device=device, max_length=CROSS_ENCODER_TOKENS, local_files_only=True)

    def rerank(self, query: str, hits: Sequence[Hit], top_k: int) -> list[Hit]:
        if not hits:
            return []
        import torch

        raw = self._model.predict(
            [(query, h.chunk.text) for h in hits],
            batch_size=self.batch_size,
            activation_fn=torch.nn.Identity(),
            show_progress_bar=False,
            convert_to_numpy=True,
        )
        return apply_scores(hits, [float(x) for x in raw.reshape(len(hits), -1)[:, -1]], top_k)


TOP_M = 20  # fused candidates a reranker scores: the top k and spares, within a CPU's or an endpoint's second
LLM_SYSTEM = (
    "You are a search relevance judge. Grade how well each passage answers the user's query, from 0 (irrelevant) "
    "to 10 (answers it fully). Passages may be in Chinese. Answer with JSON only, exactly "
    '{"scores": [g1, g2, ...]}: one number per passage, in the order given, nothing else.'
)
_THINK = re.compile(r"<think>.*?</think>", re.S)
_LINE = re.compile(r"^\s*[\[(（]?\s*(\d+)\s*[\])）]?\s*[:：=\-–]\s*(-?\d+(?:\.\d+)?)\s*(?:/\s*10)?\s*$")
LLM_MIDPOINT = 5.0  # grades are centred here for the sigmoid
LLM_PASSAGE_CHARS = 600  # of each candidate shown to the LLM reranker: its gist, and 20 of them fit any context


def llm_prompt(query: str, passages: Sequence[str]) -> str:
    lines = [f"Query: {query}", "", f"Passages ({len(passages)}):"]
    for n, text in enumerate(passages, 1):
        one = " ".join(text.split())
        lines.append(f"[{n}] {one[:LLM_PASSAGE_CHARS]}{'…' if len(one) > LLM_PASSAGE_CHARS else ''}")
    lines += ["", f'Reply with {{"scores": [...]}} holding exactly {len(passages)} grades (0-10).']
    return "\n".join(lines)


def parse_scores(text: str, n: int) -> list[float]:
    """Grades from an LLM answer: JSON ``{"scores": [...]}`` or one ``id: grade`` per line; else ``RerankError``."""
    if not isinstance(text, str) or not text.strip():
        raise RerankError("the LLM reranker answered nothing")
    body = _THINK.sub("", text).strip()
    start, end = body.find("{"), body.rfind("}")
    if 0 <= start < end:
        try:
            data = json.loads(body[start : end + 1])
        except ValueError:
            data = None
        if isinstance(data, dict) and "scores" in data:
            return _scores_from(data["scores"], n, text)
    found: dict[int, float] = {}
    for line in body.splitlines():
        m = _LINE.match(line)
        if m:
            found[int(m[1])] = float(m[2])
    if found:
        return _scores_from(found, n, text)
    raise RerankError(f"cannot read grades from the LLM reranker's answer: {text[:120]!r}")


def _scores_from(value: Any, n: int, text: str) -> list[float]:
    if isinstance(value, dict):
        try:
            by_id = {int(k): v for k, v in value.items()}
        except (TypeError, ValueError):
            raise RerankError(f"the LLM reranker's scores have ids that are not numbers: {text[:120]!r}") from None
        if sorted(by_id) != list(range(1, n + 1)):
            raise RerankError(f"the LLM reranker graded passages {sorted(by_id)[:10]}, expected 1..{n}")
        value = [by_id[i] for i in range(1, n + 1)]
    if not isinstance(value, list) or len(value) != n:
        got = len(value) if isinstance(value, list) else type(value).__name__
        raise RerankError(f"the LLM reranker gave {got} grades for {n} passages: {text[:120]!r}")
    try:
        scores = [float(v) for v in value]
    except (TypeError, ValueError):
        raise RerankError(f"the LLM reranker's grades are not numbers: {text[:120]!r}") from None
    if any(isinstance(v, bool) for v in value) or not all(math.isfinite(s) for s in scores):
        raise RerankError(f"the LLM reranker's grades are not finite numbers: {text[:120]!r}")
    return scores


class LLMReranker:
    """One chat completion per query grades all candidates (listwise-in-one-call, pointwise grades)."""

    def __init__(self, client: Any, model: str, *, timeout: float = 10.0) -> None:
        self.client, self.model, self.timeout = client, model, timeout

    @property
    def name(self) -> str:
        return f"llm:{self.model}"

    def load(self) -> None:
        return None

    def rerank(self, query: str, hits: Sequence[Hit], top_k: int) -> list[Hit]:
        if not hits:
            return []
        prompt = llm_prompt(query, [h.chunk.text for h in hits])
        payload = {
            "model": self.model,
            "temperature": 0,
            "max_tokens": 8 * len(hits) + 64,
            "messages": [{"role": "system", "content": LLM_SYSTEM}, {"role": "user", "content": prompt}],
        }
        data = self.client.post("chat/completions", payload, deadline=time.monotonic() + self.timeout)
        try:
            content = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise RerankError(
                f"the LLM endpoint's answer has no choices[0].message.content: {str(data)[:120]}"
            ) from None
        return apply_scores(hits, parse_scores(content, len(hits)), top_k, offset=LLM_MIDPOINT)


def build_reranker(settings: RerankSettings, *, cache_dir: Path | None) -> Reranker | None:
    """The configured reranker (``None`` for ``provider: none``); no model is loaded yet."""
    match settings.provider:
        case "none":
            return None
        case "cross-encoder":
            assert settings.model is not None  # the settings validator requires it
            return CrossEncoderReranker(
                settings.model,
                manifest=load_manifest(cache_dir / USER_MANIFEST if cache_dir else None),
                memo=HashMemo(cache_dir / HASH_MEMO if cache_dir else None),
            )
        case "llm":
            from zhiku.openai_http import client_from

            assert settings.model is not None and settings.base_url is not None
            client = client_from(settings, max_retries=1)
            return LLMReranker(client, settings.model, timeout=settings.timeout_s)
        case str(name):  # "plugin:NAME", a `zhiku.rerankers` entry point: a factory f(RerankSettings)
            from zhiku.plugins import build_provider

            return build_provider("zhiku.rerankers", name, settings)  # type: ignore[no-any-return]


def parse_reranker_spec(spec: str) -> dict[str, Any]:
    """``--reranker`` values as ``rerank`` settings: ``none``, ``cross-encoder:MODEL``, ``llm[:MODEL]``, ``plugin:NAME``."""
    provider, _, model = spec.strip().partition(":")
    match provider:
        case "none" if not model:
            return {"provider": "none"}
        case "cross-encoder" | "ce" if model:
            return {"provider": "cross-encoder", "model": model}
        case "llm":
            return {"provider": "llm", **({"model": model} if model else {})}
        case "plugin" if model:
            return {"provider": f"plugin:{model}"}
    raise InvalidInput(
        f"--reranker {spec!r}: use none, cross-encoder:MODEL_OR_FOLDER, llm or llm:MODEL (with rerank.base_url set), "
        "or plugin:NAME"
    )


def rerank_traced(
    reranker: Reranker, query: str, hits: list[Hit], r: RerankSettings, top_k: int
) -> tuple[list[Hit], str]:
    """``rerank_with_fallback`` as stage ``rerank``: its candidates, scores and rank changes (or why it fell back)."""
    with span("rerank") as sp:
        outcome = rerank_with_fallback(reranker, query, hits, top_m=TOP_M, top_k=top_k, timeout=r.timeout_s)
        if sp.active:
            candidates = min(TOP_M, len(hits))
            data: dict[str, Any] = {"reranker": reranker_name(reranker), "top_m": TOP_M, "timeout_s": r.timeout_s}
            counts = {"candidates": candidates, "returned": len(outcome.hits)}
            if outcome.ok:
                changes = rank_changes(
                    {h.chunk.chunk_id: n for n, h in enumerate(hits[:candidates], 1)},
                    [h.chunk.chunk_id for h in outcome.hits if h.rerank_rank is not None],
                    keep_dropped_within=top_k,
                )
                scores = [
                    {
                        "chunk_id": h.chunk.chunk_id,
                        "rerank_rank": h.rerank_rank,
                        "fused_rank": h.fused_rank,
                        "raw": round(h.rerank_score, 6),
                        "sigmoid": round(h.rerank_sigmoid or 0.0, 6),
                    }
                    for h in outcome.hits
                    if h.rerank_score is not None
                ]
                sp.set(counts, scores=scores, **data, **changes)
            else:
                sp.set(counts, status="fallback", reason=outcome.status.removeprefix("fallback: "), **data)
    return list(outcome.hits), outcome.status
