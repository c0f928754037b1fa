"""The ``rerank`` section of the settings tree (its own module to keep ``zhiku.settings_sections`` small);
``zhiku.settings`` re-exports it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, model_validator

from zhiku.settings_sections import Plugin, _Section


class RerankSettings(_Section):
    provider: Literal["none", "cross-encoder", "llm"] | Plugin = Field(
        "none",
        description="`none`: keep the fused order. `cross-encoder`: a sentence-transformers CrossEncoder (`BAAI/bge-reranker-v2-m3`, `BAAI/bge-reranker-base`, or a local folder; needs `pip install 'zhiku[models]'`). `llm`: an OpenAI-compatible chat model at `rerank.base_url` grades the candidates. `plugin:NAME`: the `zhiku.rerankers` entry point NAME of an installed plugin. On a timeout or any error the query keeps the fused order and says `fallback: <reason>`.",
    )
    model: str | None = Field(
        None,
        description="cross-encoder: Hugging Face id or local folder; llm: the chat model name. Required unless provider is `none`.",
    )
    revision: str | None = Field(None, description="cross-encoder: hub revision (commit, tag or branch) to load.")
    base_url: str | None = Field(
        None, description="llm: OpenAI-compatible base URL including `/v1`, e.g. `http://127.0.0.1:8000/v1`."
    )
    api_key_env: str = Field(
        "ZHIKU_RERANK_API_KEY",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="llm: name of the environment variable holding the API key (read once when settings load; never stored or printed).",
    )
    api_key: SecretStr | None = Field(
        None,
        description="llm: the API key; filled from the variable named by `api_key_env` (prefer that). Never printed.",
    )
    top_m: int = Field(
        20,
        ge=1,
        le=200,
        description="Fused candidates the reranker scores; the ones below keep their fused order after them.",
    )
    top_k: int | None = Field(
        None, ge=1, le=100, description="At most this many hits after reranking (default: the query's `top_k`)."
    )
    timeout: float = Field(
        10.0,
        gt=0,
        le=600,
        description="Seconds the reranker may take per query; past it the query returns the fused order (`fallback: timeout …`). `zhiku serve`, `query` and `eval` load the model before the first query.",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="cross-encoder: `auto` uses CUDA when torch sees a GPU."
    )
    fp16: bool = Field(True, description="cross-encoder: half precision on a GPU (ignored on the CPU).")
    batch_size: int = Field(32, ge=1, le=1024, description="cross-encoder: pairs per forward pass.")
    max_length: int | None = Field(512, ge=8, le=32768, description="cross-encoder: longest query + passage in tokens.")
    max_chars: int = Field(600, ge=50, le=20000, description="llm: characters of each passage shown to the model.")
    verify: bool = Field(
        True, description="cross-encoder: check model files against the model manifest before loading."
    )

    @model_validator(mode="after")
    def _provider_needs(self) -> RerankSettings:
        if self.provider != "none" and not self.provider.startswith("plugin:") and not self.model:
            raise ValueError(
                f"rerank.provider {self.provider!r} needs rerank.model (a model id or folder, or the chat model name)"
            )
        if self.provider == "llm" and not self.base_url:
            raise ValueError("rerank.provider 'llm' needs rerank.base_url, e.g. http://127.0.0.1:8000/v1")
        return self
