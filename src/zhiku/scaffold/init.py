"""``zhiku init DIR``: settings, sample documents, an eval set and MCP client configs; nothing overwritten unasked."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from zhiku.errors import InvalidInput
from zhiku.settings import Settings, section_model, shown_fields

CONFIG = "zhiku.yaml"
DOCS = "docs"
INDEX = ".zhiku"
EVAL = "eval.yaml"
COLLECTION = "docs"
SAMPLE_QUERY = "女职工产假有多少天？"
OWN_QUERY = "一个你的文档能回答的问题"
SERVER_NAME = "zhiku"
WIDTH = 116


@dataclass(frozen=True)
class InitReport:
    root: str
    written: tuple[str, ...]  # paths relative to root
    kept: tuple[str, ...]  # existing files left alone
    serve: tuple[str, ...]  # the command the client configs start
    samples: bool = True  # the sample documents and their eval.yaml were part of the project

    def next_steps(self) -> list[str]:
        ask = f'zhiku query "{SAMPLE_QUERY if self.samples else OWN_QUERY}"'
        evaluate = ["zhiku eval"] if self.samples else []
        return [f"cd {self.root}", f"zhiku ingest {DOCS}", ask, *evaluate, "zhiku serve"]


@dataclass(frozen=True)
class ClientConfig:
    """Absolute paths: clients start servers from a folder of their own choosing."""

    client: str
    path: str  # relative to the project folder
    where: str  # where the client reads it, or where to paste it

    def render(self, command: list[str]) -> str:
        entry: dict[str, Any] = {"command": command[0], "args": command[1:]}
        if self.client == "cline":
            entry.update(
                disabled=False, autoApprove=["query_knowledge_hub", "list_collections", "get_document_summary"]
            )
        if self.client == "cherry-studio":
            entry = {"name": "知库 zhiku", "type": "stdio", "isActive": True, **entry}
        if self.client == "vscode":
            data = {"servers": {SERVER_NAME: {"type": "stdio", **entry}}}
        else:
            data = {"mcpServers": {SERVER_NAME: entry}}
        return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


CLIENTS = (
    ClientConfig(
        "claude-desktop",
        "mcp-clients/claude_desktop_config.json",
        "Claude Desktop → Settings → Developer → Edit Config: merge `mcpServers` into claude_desktop_config.json "
        "(macOS ~/Library/Application Support/Claude/, Windows %APPDATA%\\Claude\\), then restart Claude Desktop.",
    ),
    ClientConfig("cursor", ".cursor/mcp.json", "Cursor reads it from this project folder (Settings → MCP lists it)."),
    ClientConfig("vscode", ".vscode/mcp.json", "VS Code (Copilot agent mode) reads it from this project folder."),
    ClientConfig(
        "cline",
        "mcp-clients/cline_mcp_settings.json",
        "Cline → MCP Servers → Installed → Configure MCP Servers: merge `mcpServers` into cline_mcp_settings.json.",
    ),
    ClientConfig(
        "cherry-studio",
        "mcp-clients/cherry-studio.json",
        "Cherry Studio → Settings → MCP Servers → Add → Import from JSON: paste this file.",
    ),
)


def serve_command(config: Path, index: Path, write: bool = False) -> list[str]:
    """The ``zhiku`` script of this install (else ``python -m zhiku.cli``) serving read-only unless ``write``."""
    script = Path(sys.executable).parent / ("zhiku.exe" if sys.platform == "win32" else "zhiku")
    found = str(script) if script.is_file() else shutil.which("zhiku")
    base = [found] if found else [sys.executable, "-m", "zhiku.cli"]
    command = [*base, "serve", "--config", str(config.resolve()), "--index", str(index.resolve())]
    return command if write else [*command, "--read-only"]


def command_of(client: str, text: str) -> list[str]:
    """The command line a written client config starts (for ``zhiku doctor``)."""
    entry = json.loads(text)["servers" if client == "vscode" else "mcpServers"][SERVER_NAME]
    return [entry["command"], *entry["args"]]


def clients_readme(command: list[str]) -> str:
    head = "Written by `zhiku init` with this machine's absolute paths; `zhiku doctor` checks them. Each one starts:"
    lines = ["# MCP client configurations", "", head, "", "```", " ".join(command), "```", ""]
    return "\n".join([*lines, *(f"- `{c.path}` ({c.client}): {c.where}" for c in CLIENTS)]) + "\n"


def _value(v: Any) -> str:
    """A default as one line of YAML (flow style)."""
    if isinstance(v, SecretStr):
        v = v.get_secret_value()
    if isinstance(v, Path):
        v = str(v)
    if isinstance(v, tuple):
        v = [str(x) if isinstance(x, Path) else x for x in v]
    text = yaml.safe_dump(v, allow_unicode=True, default_flow_style=True, width=10_000).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def _describe(field: FieldInfo, indent: str) -> list[str]:
    text = (field.description or "").replace("`", "")
    return textwrap.wrap(text, WIDTH - len(indent) - 3, initial_indent=f"{indent}## ", subsequent_indent=f"{indent}## ")


def _section(name: str, model: type[BaseModel], default: BaseModel, values: dict[str, Any]) -> list[str]:
    head = "" if values else "# "
    lines = [f"{head}{name}:"]
    for key, field in shown_fields(model):
        lines += [head + line for line in _describe(field, "  ")]
        if key in values:
            lines.append(f"  {key}: {_value(values[key])}")
        else:
            lines.append(f"{head or '  # '}{'  ' if head else ''}{key}: {_value(getattr(default, key))}")
    return lines


def settings_yaml(values: dict[str, Any], header: str = "") -> str:
    """Every setting as YAML: ``## text`` describes, ``# key: value`` is a default, ``key: value`` set by ``values``."""
    defaults = Settings.model_validate({})
    lines = [f"## {h}" if h else "##" for h in header.splitlines()]
    for name, field in Settings.model_fields.items():
        section = section_model(field.annotation)
        lines.append("")
        if section is not None:
            lines += _section(name, section, getattr(defaults, name), values.get(name, {}))
        else:
            lines += _describe(field, "")
            value = values[name] if name in values else getattr(defaults, name)
            lines.append(f"{'' if name in values else '# '}{name}: {_value(value)}")
    return "\n".join(lines).lstrip("\n") + "\n"


def sample_files() -> dict[str, bytes]:
    """The sample documents, their licence note and the eval set, shipped inside the package."""
    base = resources.files("zhiku") / "data" / "sample"
    out = {f"{DOCS}/{p.name}": p.read_bytes() for p in (base / "docs").iterdir() if p.name.endswith(".md")}
    out["SOURCES.md"] = (base / "SOURCES.md").read_bytes()  # beside docs/, or it would be ingested with them
    out[EVAL] = (base / "eval.yaml").read_bytes()
    return dict(sorted(out.items()))


def project_yaml(root: Path) -> str:
    header = (
        f"{CONFIG} — the settings of this zhiku project (written by `zhiku init`; reference: docs/settings.md).\n"
        "Every setting is listed at its default: remove the '# ' of a key (and of its section line) to change it.\n"
        "Precedence: command-line flags > ZHIKU_* environment variables > this file > defaults."
    )
    values = {"index": INDEX, "collection": COLLECTION, "server": {"ingest_roots": [str((root / DOCS).resolve())]}}
    return settings_yaml(values, header)


def own_documents(root: Path) -> bool:
    """``root/docs`` holds files that are not the samples (hidden ones aside: `zhiku ingest` skips them)."""
    docs = root / DOCS
    samples = {Path(rel).name for rel in sample_files() if rel.startswith(f"{DOCS}/")}
    return docs.is_dir() and any(
        p.is_file() and p.name not in samples and not any(part.startswith(".") for part in p.relative_to(docs).parts)
        for p in docs.rglob("*")
    )


def create_project(root: Path, *, force: bool = False, samples: bool | None = None, write: bool = False) -> InitReport:
    """``samples`` None: unless ``docs/`` holds documents already (the samples would be served with them)."""
    root = root.expanduser()
    if root.exists() and not root.is_dir():
        raise InvalidInput(f"{root} exists and is not a folder: choose another DIR")
    root.mkdir(parents=True, exist_ok=True)
    root = root.resolve()
    if samples is None:
        samples = not own_documents(root)
    command = serve_command(root / CONFIG, root / INDEX, write)
    files: dict[str, bytes] = {CONFIG: project_yaml(root).encode(), **(sample_files() if samples else {})}
    if not samples:
        (root / DOCS).mkdir(exist_ok=True)
    files.update({c.path: c.render(command).encode() for c in CLIENTS})
    files["mcp-clients/README.md"] = clients_readme(command).encode()
    written, kept = [], []
    for rel, data in files.items():
        path = root / rel
        if path.exists() and not force:
            kept.append(rel)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written.append(rel)
    return InitReport(str(root), tuple(written), tuple(kept), tuple(command), samples)
