"""Which files an ingest reads, read so that one bad file (a FIFO, ``/dev/zero``, a GBK name) costs neither the
batch nor the machine."""

from __future__ import annotations

import os
import re
import stat
from collections import Counter
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from zhiku.errors import LoaderError
from zhiku.types import FileFailure

MIB = 1024 * 1024
MAX_INDENT = 8  # columns of leading whitespace kept on a line (deeper Markdown nesting reads the same)
_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)
WS = " \t\u3000"
_LONG_RUN_RE = re.compile(r"[ \t\u3000]{%d,}" % (MAX_INDENT + 1))  # linear: a run is matched once, whole
_BLANK_LINES_RE = re.compile(r"\n(?:[ \t\u3000]{0,%d}\n){3,}" % MAX_INDENT)


def printable(name: str) -> str:
    """``name`` as text any UTF-8 consumer accepts and a terminal shows on one line: bytes that are not UTF-8 read as
    GB18030 when that is text, else ``\\xNN``; invisible characters (a newline, a right-to-left override) escaped."""
    try:
        name.encode("utf-8")
        text = name
    except UnicodeEncodeError:
        raw, text = name.encode("utf-8", "surrogateescape"), ""
        with suppress(UnicodeDecodeError):
            text = raw.decode("gb18030")
        if not (text and text.isprintable()):
            text = raw.decode("utf-8", "backslashreplace")
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def not_regular(mode: int) -> str | None:
    return next((what for test, what in _KINDS if test(mode)), None if stat.S_ISREG(mode) else "not a regular file")


def read_bounded(path: Path, max_bytes: int) -> bytes:
    shown = printable(str(path))
    try:
        st = os.stat(path)
    except OSError as e:
        raise LoaderError(f"cannot read {shown}: {e.strerror or e}") from None
    except ValueError as e:  # an embedded NUL byte
        raise LoaderError(f"invalid path {shown!r}: {e}") from None
    if (kind := not_regular(st.st_mode)) is not None:
        raise LoaderError(f"{shown} is {kind}, not a regular file: skipped without opening it")
    if st.st_size > max_bytes:
        raise LoaderError(
            f"{shown} is {st.st_size / MIB:.1f} MiB, over the {max_bytes / MIB:g} MiB limit: "
            "raise loaders.max_file_mb to ingest it"
        )
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:  # O_NONBLOCK: if the file was swapped for a FIFO since stat, open() must not wait for a writer
        fd = os.open(path, flags)
    except OSError as e:
        raise LoaderError(f"cannot read {shown}: {e.strerror or e}") from None
    with open(fd, "rb", closefd=True) as f:
        if (kind := not_regular(os.fstat(f.fileno()).st_mode)) is not None:
            raise LoaderError(f"{shown} is {kind}, not a regular file: skipped")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise LoaderError(
            f"{shown} grew over the {max_bytes / MIB:g} MiB limit while being read: "
            "raise loaders.max_file_mb to ingest it"
        )
    return data


def collapse_whitespace(text: str) -> str:
    """Indentation capped, runs of spaces and blank lines shortened; linear (no regex backtracking)."""
    if len(text) < 2 * MAX_INDENT or (_LONG_RUN_RE.search(text) is None and "\n\n\n\n" not in text):
        return text
    lines = []
    for line in text.split("\n"):
        body = line.lstrip(WS)
        indent = line[: len(line) - len(body)]
        if not body:  # a whitespace-only line
            lines.append(line if len(line) <= MAX_INDENT else "")
            continue
        trimmed = body.rstrip(WS)
        body = trimmed if len(body) - len(trimmed) > MAX_INDENT else body
        lines.append((indent if len(indent) <= MAX_INDENT else " " * MAX_INDENT) + _LONG_RUN_RE.sub(" ", body))
    return _BLANK_LINES_RE.sub("\n\n\n", "\n".join(lines))


@dataclass(frozen=True)
class FileTask:
    path: Path  # absolute
    source: str  # relative to the ingest root, forward slashes

    @property
    def shown(self) -> str:
        return printable(str(self.path))


def discover(
    paths: Sequence[Path], suffixes: Sequence[str], unsupported: Counter[str] | None = None
) -> tuple[list[FileTask], list[FileFailure]]:
    """Files to ingest under ``paths``: hidden files skipped, unknown suffixes counted, symlinked dirs not followed."""
    tasks: list[FileTask] = []
    failures: list[FileFailure] = []
    seen: set[Path] = set()
    for given in paths:
        shown = printable(str(given))
        if "\x00" in str(given):
            failures.append(FileFailure(shown, "invalid path: it contains a NUL byte"))  # shown escapes it
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
                tasks.append(FileTask(p, printable(p.name)))
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
                tasks.append(FileTask(f, printable(f.relative_to(p).as_posix())))
    return tasks, failures
