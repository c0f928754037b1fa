"""``zhiku init DIR``: a ready project — settings, sample documents with their licence, an eval set over them and
MCP client configurations with absolute paths. Nothing is overwritten unless asked."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from zhiku.errors import InvalidInput
from zhiku.scaffold.clients import CLIENTS, readme, serve_command
from zhiku.scaffold.config_yaml import settings_yaml

CONFIG = "zhiku.yaml"
DOCS = "docs"
INDEX = ".zhiku"
EVAL = "eval.yaml"
COLLECTION = "docs"
SAMPLE_QUERY = "女职工产假有多少天？"
OWN_QUERY = "一个你的文档能回答的问题"


@dataclass(frozen=True)
class InitReport:
    root: str
    written: tuple[str, ...]  # paths relative to root
    kept: tuple[str, ...]  # existing files left alone
    serve: tuple[str, ...]  # the command the client configs start
    samples: bool = True  # the sample documents and their eval.yaml were part of the project

    def next_steps(self) -> list[str]:
        ask = f'zhiku query "{SAMPLE_QUERY if self.samples else OWN_QUERY}"'
        return [
            f"cd {self.root}",
            f"zhiku ingest {DOCS}",
            ask,
            *(["zhiku eval"] if self.samples else []),
            "zhiku serve",
        ]


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
    """``root/docs`` already holds files that are not the samples: a team's folder, not a new project. Hidden
    files (``.gitkeep``, ``.DS_Store``) are no documents: ``zhiku ingest`` skips them."""
    docs = root / DOCS
    samples = {Path(rel).name for rel in sample_files() if rel.startswith(f"{DOCS}/")}
    return docs.is_dir() and any(
        p.is_file() and p.name not in samples and not any(part.startswith(".") for part in p.relative_to(docs).parts)
        for p in docs.rglob("*")
    )


def create_project(root: Path, *, force: bool = False, samples: bool | None = None) -> InitReport:
    """Write the project into ``root`` (created if missing). Existing files are kept unless ``force``.
    ``samples``: write the sample documents and eval.yaml; ``None``: unless ``docs/`` holds documents already (the
    samples would be ingested and served with them)."""
    root = root.expanduser()
    if root.exists() and not root.is_dir():
        raise InvalidInput(f"{root} exists and is not a folder: choose another DIR")
    root.mkdir(parents=True, exist_ok=True)
    root = root.resolve()
    if samples is None:
        samples = not own_documents(root)
    command = serve_command(root / CONFIG, root / INDEX)
    files: dict[str, bytes] = {CONFIG: project_yaml(root).encode(), **(sample_files() if samples else {})}
    if not samples:
        (root / DOCS).mkdir(exist_ok=True)
    for c in CLIENTS:
        files[c.path] = c.render(command).encode()
    files["mcp-clients/README.md"] = readme(command).encode()
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
