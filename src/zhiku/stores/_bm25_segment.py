"""Immutable BM25 postings of rowids ``lo…hi`` (live or not: rowids are never reused), in
``bm25/seg-<lo>-<hi>.bin``: a JSON header line, then the arrays, read as queries need them: never mapped, as a
mapping's resident pages grow with every query (the kernel maps the cached pages around each one read).

Terms are the runs of letters and digits of each stored token; a token of several runs (``hbv-dna``, ``1.4.2``)
also counts once under each phrase of consecutive runs (``hbv dna``; ``1 4``, ``4 2``, ``1 4 2``), as an FTS5
phrase query matched it; phrases do not count towards a row's length.
"""

from __future__ import annotations

import json
import os
import re
import sys
import weakref
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np

FORMAT = "zhiku-bm25-segment-3"
_RUN = re.compile(r"[^\W_]+")
_ALIGN = 8


def row_terms(tokens: str) -> tuple[list[str], int]:
    """The postings terms of one row's space-joined tokens, and the row's length in terms."""
    split = tokens.split()
    if tokens.replace(" ", "").isalnum():  # every token one run (the common case)
        return split, len(split)
    terms: list[str] = []
    phrases: list[str] = []
    for token in split:
        if token.isalnum():
            terms.append(token)
            continue
        runs = _RUN.findall(token)
        terms += runs
        for size in range(2, len(runs) + 1):  # every phrase of consecutive runs an FTS5 query could match here
            phrases += (" ".join(runs[i : i + size]) for i in range(len(runs) - size + 1))
    return terms + phrases, len(terms)


def query_key(term: str) -> str:
    """The postings key a query term looks up (``""``: the term has no letter or digit and matches nothing)."""
    return " ".join(_RUN.findall(term))


@dataclass(frozen=True)
class Segment:
    """Postings of rowids ``lo…hi``; ``terms`` sorted, ``offsets[i]:offsets[i+1]`` the rows of ``terms[i]``."""

    lo: int
    hi: int
    terms: Sequence[str]
    offsets: np.ndarray  # int64 (len(terms) + 1,)
    rows: np.ndarray  # uint32 rowids, ascending within a term (a saved segment's are in ``file``)
    tfs: np.ndarray  # uint16 occurrences in the row (as ``rows``)
    doclen: np.ndarray  # uint32 (hi - lo + 1,): row lo + i has doclen[i] terms
    path: Path | None = None
    file: tuple[int, int, int, int] | None = None  # a saved segment's descriptor, where rows and tfs start, its size

    @property
    def size(self) -> int:
        return self.hi - self.lo + 1

    def _find(self, key: str) -> int | None:
        i = bisect_left(self.terms, key)
        return i if i < len(self.terms) and self.terms[i] == key else None

    def count(self, key: str) -> int:  # rows holding ``key``, live or not
        i = self._find(key)
        return 0 if i is None else int(self.offsets[i + 1] - self.offsets[i])

    def postings(self, key: str) -> tuple[np.ndarray, np.ndarray] | None:
        i = self._find(key)
        return None if i is None else self.slice(int(self.offsets[i]), int(self.offsets[i + 1]))

    def slice(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Postings ``a:b``: rows and tfs (raises ValueError when a file was cut shorter)."""
        if self.file is None:
            return self.rows[a:b], self.tfs[a:b]
        fd, rows_at, tfs_at, _ = self.file
        return _pread(fd, "<u4", b - a, rows_at + 4 * a), _pread(fd, "<u2", b - a, tfs_at + 2 * a)

    def cut(self) -> bool:
        """Whether its file was cut shorter in place since it was read."""
        return self.file is not None and os.fstat(self.file[0]).st_size < self.file[3]


def build(lo: int, hi: int, rows: Iterable[tuple[int, str]]) -> Segment:
    """A segment of rowids ``lo…hi`` from ``(rowid, space-joined tokens)`` pairs (rowids inside the range)."""
    rowids: list[int] = []
    per_row: list[list[str]] = []
    doclen = np.zeros(hi - lo + 1, np.uint32)
    for rowid, tokens in rows:
        terms, length = row_terms(tokens)
        rowids.append(rowid)
        per_row.append(terms)
        doclen[rowid - lo] = length
    counts = np.fromiter(map(len, per_row), np.int64, len(per_row))
    flat = list(chain.from_iterable(per_row))
    vocab = sorted(dict.fromkeys(flat))
    index = {t: i for i, t in enumerate(vocab)}
    tid = np.fromiter(map(index.__getitem__, flat), np.int64, len(flat))
    span = hi - lo + 1
    key = tid * span + (np.repeat(np.asarray(rowids, np.int64), counts) - lo)
    uniq, tf = np.unique(key, return_counts=True)
    tids = uniq // span
    offsets = np.searchsorted(tids, np.arange(len(vocab) + 1)).astype(np.int64)
    rows_out = (uniq % span + lo).astype(np.uint32)
    return Segment(lo, hi, vocab, offsets, rows_out, np.minimum(tf, 65535).astype(np.uint16), doclen)


def merge(segments: Sequence[Segment]) -> Segment:
    """One segment of consecutive ``segments`` (ordered by ``lo``, tiling their range)."""
    vocab = sorted(set().union(*(s.terms for s in segments)))
    index = {t: i for i, t in enumerate(vocab)}
    tids = np.concatenate(
        [
            np.repeat(np.fromiter(map(index.__getitem__, s.terms), np.int64, len(s.terms)), np.diff(s.offsets))
            for s in segments
        ]
    )
    order = np.argsort(tids, kind="stable")  # each input is sorted by term: runs merged, rows stay ascending
    parts = [s.slice(0, int(s.offsets[-1])) for s in segments]
    rows = np.concatenate([r for r, _ in parts])[order]
    tfs = np.concatenate([t for _, t in parts])[order]
    offsets = np.searchsorted(tids[order], np.arange(len(vocab) + 1)).astype(np.int64)
    doclen = np.concatenate([s.doclen for s in segments])
    return Segment(segments[0].lo, segments[-1].hi, vocab, offsets, rows, tfs, doclen)


def _pad(n: int) -> int:
    return -n % _ALIGN


def write(seg: Segment, folder: Path, index_id: str) -> Path:
    """Write ``seg`` (built or merged, not read) to ``folder/seg-<lo>-<hi>.bin`` atomically."""
    folder.mkdir(exist_ok=True)
    vocab = "\n".join(seg.terms).encode()
    header = dict(format=FORMAT, index_id=index_id, lo=seg.lo, hi=seg.hi, terms=len(seg.terms))
    head = json.dumps(header | dict(postings=int(seg.rows.size), vocab_bytes=len(vocab))).encode() + b"\n"
    head += b" " * _pad(len(head))
    parts = [head, seg.offsets.astype("<i8").tobytes(), seg.rows.astype("<u4").tobytes()]
    parts += [seg.tfs.astype("<u2").tobytes(), seg.doclen.astype("<u4").tobytes(), vocab]
    path = folder / f"seg-{seg.lo}-{seg.hi}.bin"
    tmp = folder / f".{path.name}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        for part in parts:
            f.write(part)
            f.write(b"\0" * _pad(len(part)))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def _layout(header: dict[str, int]) -> list[tuple[str, int]]:
    n_terms, n_post, rows = header["terms"], header["postings"], header["hi"] - header["lo"] + 1
    return [("<i8", n_terms + 1), ("<u4", n_post), ("<u2", n_post), ("<u4", rows)]


def read_header(path: Path, index_id: str) -> tuple[dict[str, int], list[int]] | None:
    """A segment file's header (its sizes) and where its arrays, then its vocabulary, start; None if not this
    index's, or torn (only the header is read, and the file's size)."""
    try:
        with open(path, "rb") as f:
            line = f.readline(4096)
        raw = json.loads(line)
        if raw.get("format") != FORMAT or raw.get("index_id") != index_id:
            return None
        header = {k: int(raw[k]) for k in ("lo", "hi", "terms", "postings", "vocab_bytes")}
        at = [len(line) + _pad(len(line))]
        for dtype, count in _layout(header):
            size = np.dtype(dtype).itemsize * count
            at.append(at[-1] + size + _pad(size))
        if path.stat().st_size != at[-1] + header["vocab_bytes"] + _pad(header["vocab_bytes"]):
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return header, at


def _pread(fd: int, dtype: str, count: int, at: int) -> np.ndarray:
    """``count`` items of ``dtype`` at byte ``at`` of the file ``fd`` (ValueError when the file ends before)."""
    return np.frombuffer(os.pread(fd, count * np.dtype(dtype).itemsize, at), dtype, count)


def read(path: Path, index_id: str) -> Segment | None:
    """The segment in ``path`` (postings read as queries need them); None if not this index's, or not whole."""
    found = read_header(path, index_id)
    if found is None:
        return None
    header, at = found
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        offsets = _pread(fd, "<i8", header["terms"] + 1, at[0])
        doclen = _pread(fd, "<u4", header["hi"] - header["lo"] + 1, at[3])
        vocab = os.pread(fd, header["vocab_bytes"], at[4]).decode().split("\n") if header["terms"] else []
        terms = list(map(sys.intern, vocab))  # one string per term, however many segments hold it
        if len(terms) != header["terms"] or int(offsets[-1]) != header["postings"]:
            raise ValueError(path)
        file = (fd, at[1], at[2], os.fstat(fd).st_size)
    except (OSError, ValueError):
        os.close(fd)
        return None
    empty = np.empty(0, np.uint32)
    seg = Segment(header["lo"], header["hi"], terms, offsets, empty, empty, doclen, path, file)
    weakref.finalize(seg, os.close, fd)
    return seg
