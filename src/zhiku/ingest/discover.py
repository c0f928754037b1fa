"""Which files an ingest reads: the paths given, directories walked (symlinked directories not followed, hidden
files and unknown suffixes skipped), each with the source name it is stored under."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from zhiku.ingest.guard import not_regular, printable
from zhiku.types import FileFailure


@dataclass(frozen=True)
class FileTask:
    path: Path  # absolute
    source: str  # relative to the ingest root, forward slashes
    root: Path | None  # the directory it was found under (None for a file named directly)

    @property
    def shown(self) -> str:
        """The absolute path as stored and reported (:func:`~zhiku.ingest.guard.printable`)."""
        return printable(str(self.path))


def discover(
    paths: Sequence[Path], suffixes: Sequence[str], unsupported: Counter[str] | None = None
) -> tuple[list[FileTask], list[FileFailure]]:
    """Files to ingest under ``paths`` (directories are walked, symlinked directories not followed; hidden files
    and unknown suffixes skipped). A path that is not a regular file or a directory is a failure with the reason;
    sources are :func:`~zhiku.ingest.guard.printable`. ``unsupported`` counts the skipped files of a walked
    directory per suffix (``.xlsx``; ``""`` for none), so a report can say they were not read."""
    tasks: list[FileTask] = []
    failures: list[FileFailure] = []
    seen: set[Path] = set()
    for given in paths:
        shown = printable(str(given))
        if "\x00" in str(given):
            failures.append(FileFailure(shown.replace("\x00", "\\x00"), "invalid path: it contains a NUL byte"))
            continue
        try:
            p = Path(given).expanduser()
            if not p.exists():
                failures.append(FileFailure(shown, "no such file or directory"))
                continue
            p = p.resolve()
            mode = p.stat().st_mode
        except (OSError, ValueError) as e:  # a NUL byte, a symlink loop, no permission
            failures.append(FileFailure(shown, f"invalid path: {getattr(e, 'strerror', None) or e}"))
            continue
        kind = not_regular(mode)
        if kind is None:
            if p not in seen:
                seen.add(p)
                tasks.append(FileTask(p, printable(p.name), None))
            continue
        if kind != "a directory":
            failures.append(FileFailure(shown, f"{kind}, not a regular file: skipped without opening it"))
            continue
        for dirpath, dirnames, filenames in os.walk(p):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                f = Path(dirpath) / name
                if name.startswith(".") or f in seen:
                    continue
                if f.suffix.lower() not in suffixes:
                    if unsupported is not None:
                        unsupported[f.suffix.lower()] += 1
                    continue
                seen.add(f)
                tasks.append(FileTask(f, printable(f.relative_to(p).as_posix()), p))
    return tasks, failures
