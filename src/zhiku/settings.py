"""One typed settings tree, read from ``zhiku.yaml`` and ``ZHIKU_*`` environment variables.

Precedence (highest first): explicit overrides (CLI flags) > environment (``ZHIKU_SECTION__KEY``) > ``zhiku.yaml``
> defaults. Settings are built once at the edge (CLI, server) and passed down; library code never reads ``os.environ``.
"""

from __future__ import annotations

import os
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict

from zhiku.errors import ConfigError
from zhiku.llm.settings import JudgeSettings as JudgeSettings  # re-exported: its home before the LLM settings
from zhiku.llm.settings import LLMSettings, TransformSettings
from zhiku.settings_errors import SERVER_ALIASES, Origins, check_env_names, explain, section_model
from zhiku.settings_rerank import RerankSettings
from zhiku.settings_sections import (
    DEFAULT_CONFIG_FILE,
    AnswerSettings,
    ChunkingSettings,
    EmbeddingSettings,
    IngestSettings,
    LoaderSettings,
    Plugin,
    RetrievalSettings,
    ServerSettings,
    StoreSettings,
    TextSettings,
    TracingSettings,
    _default_cache_dir,
)

# The sections live in zhiku.settings_sections (rerank: zhiku.settings_rerank); this module is their public home.
__all__ = [
    "AnswerSettings",
    "ChunkingSettings",
    "DEFAULT_CONFIG_FILE",
    "EmbeddingSettings",
    "IngestSettings",
    "JudgeSettings",
    "LLMSettings",
    "LoaderSettings",
    "Plugin",
    "RerankSettings",
    "RetrievalSettings",
    "ServerSettings",
    "Settings",
    "StoreSettings",
    "TextSettings",
    "TracingSettings",
    "TransformSettings",
    "load_settings",
    "merge",
    "settings_reference",
]


class Settings(BaseSettings):
    """The whole configuration. See docs/settings.md for every key."""

    model_config = SettingsConfigDict(
        env_prefix="ZHIKU_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    index: Path = Field(Path(".zhiku"), description="Index directory (holds zhiku.db).")
    collection: str = Field(
        "default", min_length=1, max_length=64, pattern=r"^[\w\-.一-鿿]+$", description="Default collection name."
    )
    store: StoreSettings = StoreSettings()
    text: TextSettings = TextSettings()
    chunking: ChunkingSettings = ChunkingSettings()
    loaders: LoaderSettings = LoaderSettings()
    ingest: IngestSettings = IngestSettings()
    embedding: EmbeddingSettings = EmbeddingSettings()
    retrieval: RetrievalSettings = RetrievalSettings()
    rerank: RerankSettings = RerankSettings()
    answer: AnswerSettings = AnswerSettings()
    server: ServerSettings = ServerSettings()
    tracing: TracingSettings = TracingSettings()
    judge: JudgeSettings = JudgeSettings()
    llm: LLMSettings = LLMSettings()
    transforms: TransformSettings = TransformSettings()


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
        raise ConfigError(
            f"{path} must hold a mapping of settings (e.g. `retrieval: {{top_k: 5}}`), got {type(data).__name__}"
        )
    return data


def _is_path(annotation: Any) -> bool:
    return annotation is Path or any(_is_path(a) for a in typing.get_args(annotation))


# Settings that name a Hugging Face id, a served model's name, or a local folder (`embedding.model: ./models/bge`)
_MODEL_OR_FOLDER = ((EmbeddingSettings, "model"), (RerankSettings, "model"))


def _names_folder(value: str, base: Path) -> bool:
    """A model setting that names a folder: ``./x`` or ``../x`` (never a hub id), or one beside the file."""
    return not Path(value).expanduser().is_absolute() and (value.startswith(".") or (base / value).is_dir())


def _anchored(data: dict[str, Any], model: type[BaseModel], base: Path) -> dict[str, Any]:
    """``data`` (a settings file's) with its relative paths taken from the file's folder ``base``, not from
    wherever the command runs: a desktop client starts `zhiku serve --config /abs/zhiku.yaml` in a folder of its
    own, where `text.user_dict: terms.dict` or `index: .zhiku` name nothing. ``./zhiku.yaml`` changes nothing."""
    if base == Path("."):
        return data
    out = dict(data)
    for key, value in data.items():
        field = model.model_fields.get(key)
        ann = field.annotation if field is not None else None
        if (section := section_model(ann)) is not None and isinstance(value, dict):
            out[key] = _anchored(value, section, base)
        elif _is_path(ann) and isinstance(value, str) and not Path(value).expanduser().is_absolute():
            out[key] = str(base / value)
        elif (model, key) in _MODEL_OR_FOLDER and isinstance(value, str) and _names_folder(value, base):
            out[key] = str(base / value)
        elif _is_path(ann) and isinstance(value, list):
            out[key] = [
                str(base / v) if isinstance(v, str) and not Path(v).expanduser().is_absolute() else v for v in value
            ]
    return out


def load_settings(config: Path | None = None, **overrides: Any) -> Settings:
    """Build the settings once, at the edge.

    ``config`` defaults to ``./zhiku.yaml`` when it exists. ``overrides`` are CLI flags as nested dicts
    or values; ``None`` values are ignored.
    """
    path = config if config is not None else Path(DEFAULT_CONFIG_FILE)
    if config is not None and not config.is_file():
        raise ConfigError(f"config file not found: {config} (create it or drop --config)")
    file = _anchored(_read_yaml(path), Settings, path.parent) if path.is_file() else {}
    environ = {k: v for k, v in os.environ.items() if k.startswith("ZHIKU_")}
    check_env_names(Settings, environ)
    try:
        env = EnvSettingsSource(Settings)()
    except Exception as e:  # a malformed ZHIKU_* value, e.g. JSON for a nested section
        raise ConfigError(f"invalid ZHIKU_* environment variable: {e}") from None
    data = _deep_merge(file, env)
    aliases = {k: environ[f"ZHIKU_{k.upper()}"] for k in SERVER_ALIASES if f"ZHIKU_{k.upper()}" in environ}
    if aliases:
        data = _deep_merge(data, {"server": aliases})
    flags = {k: v for k, v in overrides.items() if v is not None}
    data = _with_api_keys(_deep_merge(data, flags), os.environ)
    try:
        return Settings.model_validate(data)
    except ValidationError as e:
        raise ConfigError(explain(e, Settings, Origins(path, file, environ, flags))) from None


def _with_api_keys(data: dict[str, Any], environ: Any) -> dict[str, Any]:
    """Fill ``embedding`` / ``rerank`` / ``llm`` ``api_key`` from the variables their ``api_key_env`` names.

    Secrets are read here, at the edge, once; library code gets them through the settings (as ``SecretStr``).
    """
    for section, model in (("embedding", EmbeddingSettings), ("rerank", RerankSettings), ("llm", LLMSettings)):
        part = data.get(section, {})
        if not isinstance(part, dict) or part.get("api_key"):
            continue
        value = environ.get(str(part.get("api_key_env") or model.model_fields["api_key_env"].default))
        if value:
            data = _deep_merge(data, {section: {"api_key": value}})
    return data


def merge(settings: Settings, **changes: Any) -> Settings:
    """A copy of ``settings`` with nested ``changes`` applied and validated (e.g. ``retrieval={"mode": "bm25"}``)."""
    data = _deep_merge(settings.model_dump(), changes)
    try:
        return Settings.model_validate(data)
    except ValidationError as e:
        raise ConfigError(explain(e, Settings, None)) from None


def settings_reference() -> str:
    """The settings reference as Markdown (docs/settings.md is generated from this; a test keeps it in sync)."""
    lines = [
        "# Settings reference",
        "",
        "<!-- generated by `python -m zhiku.settings > docs/settings.md`; do not edit by hand -->",
        "",
        "Set each key in `zhiku.yaml` (nested as shown), as an environment variable `ZHIKU_SECTION__KEY`, or with",
        "the matching CLI flag. Precedence: flags > environment > `zhiku.yaml` > defaults. A relative path in a",
        "settings file (a model's local folder too: `./models/bge`) is taken from the file's folder",
        "(`zhiku serve --config /abs/zhiku.yaml` works from anywhere);",
        "in a variable or a flag, from the current folder. Typos are errors: an unknown key or section, and a",
        "variable with one underscore where two belong (`ZHIKU_RETRIEVAL_TOP_K`).",
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
        section = section_model(field.annotation)
        if section is not None:
            for sub, f in section.model_fields.items():
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
