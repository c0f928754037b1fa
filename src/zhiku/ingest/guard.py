"""What keeps one bad file from costing a batch or the machine: only regular files are opened (a FIFO blocks
``open()`` until a writer comes, ``/dev/zero`` never ends), their size is checked with ``stat`` before a byte is
read and never read past ``loaders.max_file_mb``, names that are not valid UTF-8 (GBK names from Windows ZIP
archives) get a printable form, and runs of whitespace are collapsed before chunking (a Markdown list nested 1,000
levels deep is chunked as its words, not its megabyte of spaces).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from zhiku.errors import LoaderError

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
    """``name`` as text that any UTF-8 consumer accepts and a terminal shows on one line: bytes that are not
    UTF-8 decoded as GB18030 when that reads as text, else shown as ``\\xNN``; control and other invisible
    characters (a newline, a right-to-left override) shown as escapes."""
    try:
        name.encode("utf-8")
        text = name
    except UnicodeEncodeError:
        raw = name.encode("utf-8", "surrogateescape")
        try:
            text = raw.decode("gb18030")
            if not all(ch.isprintable() for ch in text):
                raise UnicodeDecodeError("gb18030", raw, 0, len(raw), "not text")
        except UnicodeDecodeError:
            text = raw.decode("utf-8", "backslashreplace")
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def not_regular(mode: int) -> str | None:
    """What a ``stat`` mode is when it is not a regular file ("a FIFO (named pipe)", ...); None for a file."""
    for test, what in _KINDS:
        if test(mode):
            return what
    return None if stat.S_ISREG(mode) else "not a regular file"


def check_path(path: Path, max_bytes: int) -> int:
    """The size of ``path`` (symlinks followed) when it is a regular file within ``max_bytes``; else
    ``LoaderError`` with the reason. Nothing is opened."""
    shown = printable(str(path))
    try:
        st = os.stat(path)
    except OSError as e:
        raise LoaderError(f"cannot read {shown}: {e.strerror or e}") from None
    except ValueError as e:  # an embedded NUL byte
        raise LoaderError(f"invalid path {shown!r}: {e}") from None
    kind = not_regular(st.st_mode)
    if kind is not None:
        raise LoaderError(f"{shown} is {kind}, not a regular file: skipped without opening it")
    if st.st_size > max_bytes:
        raise LoaderError(
            f"{shown} is {st.st_size / MIB:.1f} MiB, over the {max_bytes / MIB:g} MiB limit: "
            "raise loaders.max_file_mb to ingest it"
        )
    return st.st_size


def read_bounded(path: Path, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` (see :func:`check_path`), read once."""
    check_path(path, max_bytes)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:  # O_NONBLOCK: if the file was swapped for a FIFO since stat, open() must not wait for a writer
        fd = os.open(path, flags)
    except OSError as e:
        raise LoaderError(f"cannot read {printable(str(path))}: {e.strerror or e}") from None
    with open(fd, "rb", closefd=True) as f:
        kind = not_regular(os.fstat(f.fileno()).st_mode)
        if kind is not None:
            raise LoaderError(f"{printable(str(path))} is {kind}, not a regular file: skipped")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise LoaderError(
            f"{printable(str(path))} grew over the {max_bytes / MIB:g} MiB limit while being read: "
            "raise loaders.max_file_mb to ingest it"
        )
    return data


def collapse_whitespace(text: str) -> str:
    """Indentation capped at ``MAX_INDENT`` columns, longer inner runs of spaces made one and longer trailing
    ones dropped, more than two blank (or whitespace-only) lines in a row made two. Words and line structure
    stay as they are. Linear in the length of ``text`` (no regex backtracks over a run of spaces)."""
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
