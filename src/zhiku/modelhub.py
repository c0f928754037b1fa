"""Model files: a manifest of known models (file names, byte sizes, SHA-256) checked before a model loads, and the
Hugging Face models of the sentence-transformers embedder and the cross-encoder reranker."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
import threading
from collections.abc import Iterable, Mapping
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from zhiku.errors import ConfigError, MissingDependency, ModelIntegrityError, NotFound, ZhikuError

log = logging.getLogger(__name__)

MANIFEST_FORMAT = 1
INSTALL = "pip install 'zhiku[models]'"
# What a sentence-transformers model needs from a hub repository: not the ONNX/OpenVINO/TF/Flax copies.
IGNORE_PATTERNS = "onnx/* openvino/* *.onnx *.h5 *.msgpack *.ot flax_model* tf_model* rust_model* *.gguf coreml/*"
USER_MANIFEST = "models.json"
HASH_MEMO = "model_hashes.json"
# Files that do not change what a model computes: left out of pins (a README edit is no tampering).
IGNORED_FILES = frozenset({"README.md", "LICENSE", "LICENSE.txt", "NOTICE", ".gitattributes"})
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".onnx", ".pt", ".pth", ".gguf", ".msgpack", ".h5")
_HF_SNAPSHOT = re.compile(r"models--(?P<org>[^/]+?)--(?P<name>[^/]+)/snapshots/(?P<rev>[^/]+)/?$")


@dataclass(frozen=True)
class PinnedFile:
    path: str  # relative to the model folder, forward slashes
    size: int
    sha256: str


@dataclass(frozen=True)
class ModelEntry:
    """One model of the manifest. ``files`` is empty while ``pinned`` is false."""

    id: str
    kind: Literal["embedder", "reranker"] = "embedder"
    provider: str = "sentence-transformers"
    pinned: bool = False
    revision: str | None = None
    source: str = ""
    note: str = ""
    files: tuple[PinnedFile, ...] = ()  # asdict() gives the manifest's JSON form

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ModelEntry:
        files = tuple(
            PinnedFile(str(f["path"]), int(f["size"]), str(f["sha256"]).lower()) for f in d.get("files") or ()
        )
        given = {k: d[k] for k in ("kind", "provider", "revision", "source", "note") if k in d}
        return cls(str(d["id"]), **given, pinned=bool(d.get("pinned", bool(files))), files=files)


@dataclass(frozen=True)
class Manifest:
    entries: tuple[ModelEntry, ...]

    def get(self, model_id: str) -> ModelEntry | None:
        return next((e for e in self.entries if e.id == model_id), None)

    def match(self, folder: Path, model_id: str | None = None) -> ModelEntry | None:
        """The entry ``folder`` is checked against (see the module docstring), or None."""
        if model_id:
            return self.get(model_id)
        found = hub_id_of(folder)
        if found is not None and self.get(found[0]) is not None:
            return self.get(found[0])
        for e in self.entries:  # a local copy: the entry's largest file (the weights) is there, same size
            if e.pinned and e.files:
                weights = max(e.files, key=lambda f: f.size)
                if (folder / weights.path).is_file() and (folder / weights.path).stat().st_size == weights.size:
                    return e
        return None


def hub_id_of(folder: Path) -> tuple[str, str] | None:
    """``("ORG/NAME", revision)`` for a Hugging Face cache snapshot folder, else None."""
    m = _HF_SNAPSHOT.search(Path(folder).as_posix())
    return (f"{m['org']}/{m['name']}", m["rev"]) if m else None


def parse_manifest(text: str, origin: str) -> tuple[ModelEntry, ...]:
    try:
        data = json.loads(text)
        return tuple(ModelEntry.from_json(e) for e in data.get("models", []))
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ConfigError(f"model manifest {origin} is malformed ({e}): fix or delete it") from None


def load_manifest(user_manifest: Path | None = None) -> Manifest:
    """The shipped manifest, with the entries of ``user_manifest`` (when it exists) replacing same-id ones."""
    shipped = resources.files("zhiku").joinpath("data/models.json").read_text(encoding="utf-8")
    entries = {e.id: e for e in parse_manifest(shipped, "zhiku/data/models.json")}
    if user_manifest is not None and user_manifest.is_file():
        for e in parse_manifest(user_manifest.read_text(encoding="utf-8"), str(user_manifest)):
            entries[e.id] = e
    return Manifest(tuple(entries.values()))


def write_entry(manifest_path: Path, entry: ModelEntry) -> None:
    """Add ``entry`` to the manifest file (replacing one with the same id); creates the file."""
    existing = (
        parse_manifest(manifest_path.read_text(encoding="utf-8"), str(manifest_path)) if manifest_path.is_file() else ()
    )
    entries = sorted([e for e in existing if e.id != entry.id] + [entry], key=lambda e: e.id)
    data = {"format": MANIFEST_FORMAT, "models": [asdict(e) for e in entries]}
    _atomic_write(manifest_path, json.dumps(data, ensure_ascii=False, indent=2) + "\n")


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name, dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class HashMemo:
    """SHA-256 of files remembered by (absolute path, size, mtime_ns) in a JSON file; ``None`` path: in memory."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._known: dict[str, list[Any]] = {}
        with suppress(ValueError, OSError, TypeError):  # an unreadable memo only costs hashing again
            if path is not None and path.is_file():
                self._known = dict(json.loads(path.read_text(encoding="utf-8")))

    def sha256(self, path: Path, *, fresh: bool = False) -> str:
        p = Path(path).resolve()
        st = p.stat()
        key = str(p)
        with self._lock:
            seen = self._known.get(key)
        if not fresh and seen is not None and seen[:2] == [st.st_size, st.st_mtime_ns]:
            return str(seen[2])
        digest = file_sha256(p)
        with self._lock:
            self._known[key] = [st.st_size, st.st_mtime_ns, digest]
            if self.path is not None:
                with suppress(OSError):  # a read-only cache directory only costs re-hashing next time
                    _atomic_write(self.path, json.dumps(self._known, ensure_ascii=False))
        return digest


def model_files(folder: Path) -> list[Path]:
    """The files of a model folder that a pin covers: everything but docs and hidden files or folders."""
    files = [p for p in sorted(Path(folder).rglob("*")) if p.is_file() and p.name not in IGNORED_FILES]
    return [p for p in files if not any(part.startswith(".") for part in p.relative_to(folder).parts)]


def weights_digest(folder: Path, memo: HashMemo) -> str:
    """One SHA-256 over the weight files of ``folder`` (``name:sha256`` lines): the local model's fingerprint."""
    weights = [p for p in model_files(folder) if p.suffix in WEIGHT_SUFFIXES] or model_files(folder)
    if not weights:
        raise NotFound(f"no model files in {folder}: is it a model folder?")
    lines = "".join(f"{p.relative_to(folder).as_posix()}:{memo.sha256(p)}\n" for p in weights)
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()


def pin_folder(
    folder: Path, model_id: str, *, kind: Literal["embedder", "reranker"] = "embedder", revision: str | None = None
) -> ModelEntry:
    """A pinned manifest entry for the files now in ``folder`` (hashes read fresh)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise NotFound(f"model folder not found: {folder}")
    files = model_files(folder)
    if not files:
        raise NotFound(f"no model files in {folder}: is it a model folder?")
    memo, hub = HashMemo(None), hub_id_of(folder)
    revision = hub[1] if revision is None and hub is not None else revision
    pinned = tuple(
        PinnedFile(p.relative_to(folder).as_posix(), p.stat().st_size, memo.sha256(p, fresh=True)) for p in files
    )
    return ModelEntry(model_id, kind, pinned=True, revision=revision, source=f"pinned from {folder}", files=pinned)


@dataclass(frozen=True)
class Verification:
    folder: str
    model_id: str | None
    status: Literal["ok", "mismatch", "unpinned", "unknown"]
    detail: str = ""
    files_checked: int = 0
    problems: tuple[str, ...] = field(default=())


def check_folder(folder: Path, entry: ModelEntry, memo: HashMemo, *, fresh: bool = False) -> Verification:
    """Compare every pinned file of ``entry`` with ``folder``; never raises for a mismatch (see ``verify_folder``)."""
    if not entry.pinned or not entry.files:
        why = entry.note or f"{entry.id} has no pinned hashes: `zhiku models pin {folder} --id {entry.id}`"
        return Verification(str(folder), entry.id, "unpinned", why)
    problems = []
    for f in entry.files:
        path = Path(folder) / f.path
        if not path.is_file():
            problems.append(f"{f.path}: missing")
        elif (size := path.stat().st_size) != f.size:
            problems.append(f"{f.path}: {size} bytes, pinned {f.size}")
        elif (digest := memo.sha256(path, fresh=fresh)) != f.sha256:
            problems.append(f"{f.path}: SHA-256 {digest[:16]}…, pinned {f.sha256[:16]}…")
    if problems:
        return Verification(str(folder), entry.id, "mismatch", "; ".join(problems), len(entry.files), tuple(problems))
    return Verification(str(folder), entry.id, "ok", f"{len(entry.files)} files match", len(entry.files))


def verify_folder(folder: Path, entry: ModelEntry | None, memo: HashMemo) -> Verification:
    """Check ``folder`` before loading it: raises ``ModelIntegrityError`` naming the first bad file."""
    if entry is None:
        return Verification(str(folder), None, "unknown", "no manifest entry matches this folder")
    v = check_folder(folder, entry, memo)
    if v.status == "mismatch":
        raise ModelIntegrityError(
            f"model {entry.id} in {folder} does not match its pinned manifest entry: {v.problems[0]}"
            + (f" (and {len(v.problems) - 1} more)" if len(v.problems) > 1 else "")
            + f". The file is corrupt or another version: download the model again, or if you trust these files "
            f"re-pin them with `zhiku models pin {folder} --id {entry.id}`"
        )
    return v


def snapshot_folders(cache_dir: Path) -> list[Path]:
    """Model folders under ``cache_dir``: Hugging Face snapshots (``models--*/snapshots/*``), else its subfolders."""
    cache_dir = Path(cache_dir)
    hub = sorted(p for p in cache_dir.glob("**/models--*/snapshots/*") if p.is_dir())
    return hub or sorted(p for p in cache_dir.iterdir() if p.is_dir() and not p.name.startswith("."))


def verify_many(
    folders: Iterable[Path], manifest: Manifest, memo: HashMemo, *, model_id: str | None = None
) -> list[Verification]:
    """``zhiku models verify``: every folder against its entry, hashes read fresh."""
    unknown = f"no manifest entry {model_id!r}" if model_id else "no manifest entry matches this folder"
    return [
        check_folder(folder, entry, memo, fresh=True)
        if (entry := manifest.match(folder, model_id)) is not None
        else Verification(str(folder), model_id, "unknown", unknown)
        for folder in folders
    ]


def package_folder(package: str) -> Path:
    """The folder of an installed package (for models that ship inside a PyPI package)."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise NotFound(f"package {package!r} is not installed")
    return Path(list(spec.submodule_search_locations)[0])


def import_sentence_transformers() -> Any:
    try:
        import sentence_transformers
    except ImportError as e:
        raise MissingDependency(f"this model provider needs sentence-transformers and torch: {INSTALL} ({e})") from None
    return sentence_transformers


@dataclass(frozen=True)
class ModelFolder:
    model_id: str  # hub id, or the folder's name for a local copy that is not a hub cache snapshot
    folder: Path
    revision: str | None  # hub commit when known
    verification: Verification

    def fingerprint(self, memo: HashMemo) -> str:
        """``ID@REVISION`` for hub snapshots, ``ID@sha256:DIGEST`` (weights) for other local folders."""
        if self.revision:
            return f"{self.model_id}@{self.revision[:12]}"
        return f"{self.model_id}@sha256:{weights_digest(self.folder, memo)[:12]}"


def download(repo_id: str, revision: str | None) -> Path:
    """The local snapshot of ``repo_id`` (downloaded once into the Hugging Face cache; offline: the cache only)."""
    try:
        from huggingface_hub import HfApi, snapshot_download
    except ImportError as e:
        raise MissingDependency(
            f"loading models from the Hugging Face hub needs huggingface_hub: {INSTALL} ({e})"
        ) from None
    ignore = IGNORE_PATTERNS.split()
    # one listing call skips the PyTorch .bin copy when the repo has safetensors (offline or private: the cache's files)
    with suppress(Exception):
        if any(f.endswith(".safetensors") for f in HfApi().list_repo_files(repo_id, revision=revision)):
            ignore.append("*.bin")
    try:
        return Path(snapshot_download(repo_id, revision=revision, ignore_patterns=ignore))
    except Exception as e:
        raise NotFound(
            f"cannot get model {repo_id!r}{f'@{revision}' if revision else ''} from the Hugging Face hub "
            f"or its local cache ({type(e).__name__}: {e}); download it where there is network "
            f"(`huggingface-cli download {repo_id}`) and set the model to its folder"
        ) from None


class HubModel:
    load_error: type[ZhikuError] = ZhikuError
    kind = "model"

    def __init__(
        self, model: str, *, batch_size: int = 32, manifest: Manifest | None = None, memo: HashMemo | None = None
    ) -> None:
        self.model, self.batch_size = model, batch_size
        self.manifest = manifest if manifest is not None else load_manifest()
        self.memo = memo if memo is not None else HashMemo(None)
        self._lock = threading.Lock()

    @cached_property
    def folder(self) -> ModelFolder:
        """The model's files, found (or downloaded) and checked against the manifest; nothing is loaded yet."""
        model = self.model
        local = Path(model).expanduser()
        if local.is_dir():
            folder = local.resolve()
            found = hub_id_of(folder)
            model_id, rev = found if found else (folder.name, None)
            entry = self.manifest.match(folder)
        elif local.exists():
            raise NotFound(f"model path {local} is a file; give the model's folder")
        elif "/" in model.strip("/") and not model.startswith((".", "/", "~")):
            entry = self.manifest.get(model)
            rev = entry.revision if entry is not None and entry.pinned else None
            folder = download(model, rev)
            found = hub_id_of(folder)
            model_id, rev = model, (found[1] if found else rev)
        else:
            raise NotFound(f"model {model!r} is neither a folder on disk nor a Hugging Face id like 'BAAI/bge-m3'")
        check = verify_folder(folder, entry, self.memo)
        if check.status != "ok":
            log.info("model %s (%s) not verified: %s", model_id, folder, check.detail)
        return ModelFolder(model_id, folder, rev, check)

    def load(self) -> None:
        _ = self._model

    @property
    def _model(self) -> Any:
        with self._lock:  # one load even when the first calls come from several threads
            if "_loaded" not in self.__dict__:
                self.__dict__["_loaded"] = self._load()
            return self.__dict__["_loaded"]

    def _load(self) -> Any:
        st = import_sentence_transformers()
        import torch

        folder = self.folder
        device = "cuda" if torch.cuda.is_available() else "cpu"
        try:
            model = self._construct(st, str(folder.folder), device)
        except Exception as e:
            why = f"{type(e).__name__}: {e}"
            raise self.load_error(f"cannot load {self.kind} {folder.model_id} from {folder.folder}: {why}") from None
        if device == "cuda":
            model.half()
        return model

    def _construct(self, st: Any, path: str, device: str) -> Any:
        raise NotImplementedError
