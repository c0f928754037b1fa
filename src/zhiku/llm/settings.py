"""Settings of the LLM features: the shared chat endpoint (``llm``), the ingest transforms (``transforms``) and the
generation judge (``judge``). Part of the one settings tree (``zhiku.settings.Settings``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import NoDecode

TRANSFORM_ORDER = ("caption", "refine", "metadata", "contextual")  # built-ins, in the order they run


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LLMSettings(_Section):
    base_url: str | None = Field(
        None,
        description="OpenAI-compatible chat endpoint including `/v1` used by transforms and query rewriting, e.g. `https://api.deepseek.com/v1`, `https://dashscope.aliyuncs.com/compatible-mode/v1`, `http://127.0.0.1:11434/v1` (Ollama). See docs/transforms.md.",
    )
    model: str | None = Field(None, description="Chat model name, e.g. `deepseek-chat`, `qwen-plus`, `qwen2.5:7b`.")
    vision_model: str | None = Field(
        None, description="Vision model for `caption` (e.g. `qwen-vl-plus`); unset: `llm.model`."
    )
    api_key_env: str = Field(
        "ZHIKU_LLM_API_KEY",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="Name of the environment variable holding the API key (read once when settings load; never stored or printed).",
    )
    api_key: SecretStr | None = Field(
        None, description="The API key; filled from the variable named by `api_key_env` (prefer that). Never printed."
    )
    timeout: float = Field(60.0, gt=0, le=3600, description="Seconds one HTTP request may take.")
    max_retries: int = Field(
        3, ge=0, le=20, description="Retries on 429, 5xx, timeouts and lost connections (`Retry-After` honoured)."
    )
    concurrency: int = Field(4, ge=1, le=64, description="Requests in flight at the same time.")
    language: Literal["auto", "zh", "en"] = Field(
        "auto", description="Prompt language: `auto` picks Chinese when a document is mostly CJK, else English."
    )
    prompts_dir: Path | None = Field(
        None,
        description="Folder of prompt overrides, `<name>.<zh|en>.txt` (e.g. `contextual.zh.txt`); missing files use the built-in prompts.",
    )
    prompt_version: str = Field(
        "1",
        min_length=1,
        max_length=32,
        description="Your prompts' version; part of the cache key (bump it after editing them).",
    )
    price_input: float = Field(0.0, ge=0, description="Price per million input tokens, for the cost estimate.")
    price_output: float = Field(0.0, ge=0, description="Price per million output tokens, for the cost estimate.")
    currency: str = Field("USD", min_length=1, max_length=8, description="Currency of the prices.")
    cache: bool = Field(
        True,
        description="Cache replies by (model, prompt id and version, input hash) in `embedding.cache_dir`/llm.sqlite, so a re-ingest makes no LLM call.",
    )
    rewrite_queries: int = Field(
        3, ge=1, le=10, description="`retrieval.rewrite: multi_query`: alternative queries asked for."
    )
    rewrite_timeout: float = Field(
        8.0, gt=0, le=600, description="Seconds query rewriting may take; past it the plain query is used (`fallback`)."
    )


class TransformSettings(_Section):
    enabled: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="Ingest transforms to run, any of `caption`, `refine`, `metadata`, `contextual` (and installed `zhiku.transforms` plugins); also `zhiku ingest --transform`. All need `llm.base_url` and `llm.model`.",
    )
    context_window_chars: int = Field(
        6000,
        ge=500,
        le=200000,
        description="`contextual`: documents up to this many characters are shown whole; longer ones as this many characters around the chunk.",
    )
    context_max_tokens: int = Field(150, ge=16, le=2000, description="`contextual`: longest context asked for.")
    refine_min_ratio: float = Field(
        0.7, gt=0, le=1, description="`refine`: an output shorter than this fraction of the input is rejected."
    )
    refine_max_ratio: float = Field(
        1.2, ge=1, le=5, description="`refine`: an output longer than this multiple of the input is rejected."
    )
    refine_min_overlap: float = Field(
        0.85,
        gt=0,
        le=1,
        description="`refine`: share of the input's characters (multiset) the output must keep, and of the output's the input must hold; else the original is kept.",
    )
    max_tags: int = Field(5, ge=1, le=20, description="`metadata`: tags per chunk and per document.")
    caption_max_images: int = Field(50, ge=0, le=10000, description="`caption`: images captioned per document.")

    @field_validator("enabled", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):  # ZHIKU_TRANSFORMS__ENABLED=contextual,metadata (or a JSON list)
            text = value.strip()
            if text.startswith("["):
                return tuple(json.loads(text))
            return tuple(v.strip() for v in text.split(",") if v.strip())
        return value


class JudgeSettings(_Section):
    base_url: str | None = Field(
        None,
        description="OpenAI-compatible endpoint of the LLM judge for generation metrics, e.g. `http://127.0.0.1:8000/v1` (unset: those metrics are skipped).",
    )
    model: str | None = Field(None, description="Judge model name sent to `/v1/chat/completions`.")
    api_key_env: str | None = Field(
        None,
        description="Name of the environment variable holding the judge's API key (read by the CLI, never stored).",
    )
    timeout: float = Field(60.0, gt=0, le=3600, description="Seconds to wait for one judge response.")
    cache: bool = Field(
        True, description="Cache judge responses on disk (`embedding.cache_dir`/judge.sqlite) by (model, prompt)."
    )


RewriteMode = Literal["none", "multi_query", "hyde"]
