"""The BM25 index behind ``SQLiteStore``: postings segments beside ``zhiku.db``, scored in memory.

SQLite keeps the durable copy: ``chunk_tokens`` holds every live chunk's index tokens, written in the document's
transaction. The segment files in ``bm25/`` are a rebuildable acceleration structure: each holds the postings of
one range of rowids, built from committed rows only, written atomically (temporary file, rename), so after
``kill -9`` a file is whole or absent and every committed document is its old or its new version. Rowids are
never reused (``_vectors``): a segment stays valid for the life of the index (``meta.index_id``); deleted rows
are masked by the live rowids read from ``chunks``.

A writer appends a segment once ``FLUSH_ROWS`` rowids lie past the files, and merges the trailing segments when
``MERGE_FANIN`` of one size tier have piled up (each row is rewritten O(log n) times). A reader maps the files
tiling ``1…hi`` and builds the rest (fewer than ``FLUSH_ROWS`` rows, or everything for an index no writer has
opened since the upgrade) from ``chunk_tokens``; another process's commits are applied incrementally (new
rowids' tokens, newer tombstones), the same way as the vector file.

Scoring reproduces SQLite FTS5's ``bm25()`` (the ranking this replaced): ``k1 = 1.2``, ``b = 0.75``,
``idf = log((N − n + 0.5) / (n + 0.5))`` floored at 10⁻⁶, summed over the query terms in order into one float64
score per row. Only the rows in the query terms' postings are touched.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from zhiku.stores._bm25_query import K1, B, QueryTerm, TermCache, dead_in, score
from zhiku.stores._bm25_segment import Segment, build, intact, merge, query_key, read, write
from zhiku.stores._vector_files import pid_alive, top_rowid

FLUSH_ROWS = 2000  # a writer saves a segment once this many rowids lie past the saved ones
BUILD_ROWS = 50_000  # rows per segment built from the table in one go (bounds memory)
MERGE_FANIN = 4  # trailing segments of one size tier merged into one
_TIER_UNIT = 256
_SEG_NAME = re.compile(r"seg-(\d+)-(\d+)\.bin")


def bm25_dir(index_dir: Path) -> Path:
    return index_dir / "bm25"


def index_id(conn: sqlite3.Connection) -> str:
    row = conn.execute("SELECT value FROM meta WHERE key = 'index_id'").fetchone()
    return str(row[0]) if row else ""


def _tier(size: int) -> int:
    return int(math.log(size / _TIER_UNIT, MERGE_FANIN)) if size > _TIER_UNIT else 0


def settle(segments: list[Segment], folder: Path | None = None, ident: str = "") -> list[Segment]:
    """Merge trailing segments while ``MERGE_FANIN`` of them share a size tier; with ``folder``, the merged
    segment is saved and mapped (the inputs' files are removed by ``save_segments``). Without it (a reader's
    tail, in memory) saved segments are never merged: that is the writer's work, on disk."""
    segs = list(segments)
    while len(segs) >= MERGE_FANIN:
        tier = _tier(segs[-1].size)
        k = 1
        while k < len(segs) and _tier(segs[-1 - k].size) == tier and (folder is not None or segs[-1 - k].path is None):
            k += 1
        if k < MERGE_FANIN:
            break
        merged = merge(segs[-k:])
        if folder is not None:
            merged = read(write(merged, folder, ident), ident) or merged
        segs[-k:] = [merged]
    return segs


def _by_start(folder: Path, top: int) -> dict[int, list[tuple[int, Path]]]:
    """Segment files by their first rowid (from their names), longest first; those past ``top`` left out."""
    starts: dict[int, list[tuple[int, Path]]] = {}
    with contextlib.suppress(OSError):
        for path in folder.iterdir():
            m = _SEG_NAME.fullmatch(path.name)
            if m and int(m[2]) <= top:
                starts.setdefault(int(m[1]), []).append((int(m[2]), path))
    return {start: sorted(found, reverse=True) for start, found in starts.items()}


def saved_segments(folder: Path, ident: str, top: int) -> list[Segment]:
    """Saved segments tiling rowids ``1…hi`` (``hi <= top``), the longest at each start that reads whole."""
    starts, out = _by_start(folder, top), list[Segment]()
    while (candidates := starts.get(out[-1].hi + 1 if out else 1)) is not None:
        seg = next((s for hi, p in candidates if (s := read(p, ident)) is not None and s.hi == hi), None)
        if seg is None:
            break
        out.append(seg)
    return out


def _covered(folder: Path, ident: str, top: int, verify: bool) -> int:
    """The last rowid the saved segments tile (``verify``: only whole files count; else trusted by name)."""
    starts, hi = _by_start(folder, top), 0
    while (candidates := starts.get(hi + 1)) is not None:
        found = next((end for end, path in candidates if not verify or intact(path, ident)), None)
        if found is None:
            break
        hi = found
    return hi


def table_segments(conn: sqlite3.Connection, lo: int, hi: int) -> list[Segment]:
    """Segments of rowids ``lo…hi`` built from ``chunk_tokens`` (``BUILD_ROWS`` rowids each)."""
    out = []
    for start in range(lo, hi + 1, BUILD_ROWS):
        stop = min(start + BUILD_ROWS - 1, hi)
        rows = conn.execute("SELECT rowid, tokens FROM chunk_tokens WHERE rowid BETWEEN ? AND ?", (start, stop))
        out.append(build(start, stop, rows))
    return out


def save_segments(
    conn: sqlite3.Connection, index_dir: Path, *, min_rows: int | None = None, verify: bool = False
) -> int:
    """Save the committed rows past the saved segments as new segments, once there are ``min_rows`` of them
    (default ``FLUSH_ROWS``; ``conn`` in a read transaction), merge tiers, and remove files no longer part of the
    tiling. Without ``verify`` the files are trusted by name until there is something to save (a write's case:
    this process saved them); with it their headers and sizes are checked first (opening an index a crash may
    have left). Returns how many rowids then lie past the saved segments."""
    folder, ident, top = bm25_dir(index_dir), index_id(conn), top_rowid(conn)
    least = max(FLUSH_ROWS if min_rows is None else min_rows, 1)
    if (unsaved := top - _covered(folder, ident, top, verify)) < least:
        return unsaved
    segs = saved_segments(folder, ident, top)
    covered = segs[-1].hi if segs else 0
    if top - covered < least:
        return top - covered
    for start in range(covered + 1, top + 1, BUILD_ROWS):
        (seg,) = table_segments(conn, start, min(start + BUILD_ROWS - 1, top))
        segs.append(read(write(seg, folder, ident), ident) or seg)
        segs = settle(segs, folder, ident)
    keep = {s.path for s in segs}
    for path in folder.iterdir():
        tmp = path.name.endswith(".tmp")
        if (tmp and not _writer_alive(path.name)) or (not tmp and _SEG_NAME.fullmatch(path.name) and path not in keep):
            with contextlib.suppress(OSError):
                path.unlink()
    return 0


def _writer_alive(tmp_name: str) -> bool:
    """Whether the process that is writing ``.seg-….<pid>.tmp`` still runs (its file is then left alone)."""
    return pid_alive(tmp_name.rsplit(".", 2)[-2])


def _rowids(conn: sqlite3.Connection, sql: str, *args: object) -> np.ndarray:
    return np.fromiter((r for (r,) in conn.execute(sql, args)), dtype=np.int64)


@dataclass(frozen=True)
class BM25Snapshot:
    """The BM25 index at one ``index_version``. Immutable: searches run on it without a lock."""

    version: int
    top: int
    segments: tuple[Segment, ...]  # tiling rowids 1…top
    live: np.ndarray  # bool (top + 1,), by rowid
    doclen: np.ndarray  # float64 (top + 1,), terms per row
    norm: np.ndarray  # float64 (top + 1,): K1 * (1 - B + B * doclen / avgdl)
    n_live: int
    avgdl: float
    dead: np.ndarray  # int64, sorted: rowids 1…top that are not live
    terms: TermCache = field(default_factory=TermCache, compare=False, repr=False)  # query terms seen

    @classmethod
    def of(
        cls, version: int, top: int, segments: Sequence[Segment], live: np.ndarray, doclen: np.ndarray
    ) -> BM25Snapshot:
        n_live = int(live.sum())
        total = float(doclen[live].sum())
        avgdl = total / n_live if total > 0 else 1.0  # no live term at all: nothing matches, any value will do
        norm = K1 * (1 - B + B * doclen / avgdl)  # the order of FTS5's operations, for identical floats
        dead = np.flatnonzero(~live[1:]) + 1
        return cls(version, top, tuple(segments), live, doclen, norm, n_live, avgdl, dead)

    @classmethod
    def load(cls, conn: sqlite3.Connection, index_dir: Path, version: int) -> BM25Snapshot:
        """Map the saved segments and build the rest from the table (``conn`` in a read transaction)."""
        top = top_rowid(conn)
        segs = saved_segments(bm25_dir(index_dir), index_id(conn), top)
        segs = settle(segs + table_segments(conn, segs[-1].hi + 1 if segs else 1, top))
        live = np.zeros(top + 1, bool)
        live[_rowids(conn, "SELECT rowid FROM chunks")] = True
        doclen = np.zeros(top + 1, np.float64)
        if segs:
            doclen[1:] = np.concatenate([s.doclen for s in segs])
        return cls.of(version, top, segs, live, doclen)

    def refreshed(self, conn: sqlite3.Connection, version: int) -> BM25Snapshot:
        """This snapshot moved to ``version`` by commits since (``conn`` in a read transaction)."""
        top = max(self.top, top_rowid(conn))
        new = table_segments(conn, self.top + 1, top) if top > self.top else []
        live = np.zeros(top + 1, bool)
        live[: self.top + 1] = self.live
        live[_rowids(conn, "SELECT rowid FROM tombstones WHERE version > ?", self.version)] = False
        live[_rowids(conn, "SELECT rowid FROM chunks WHERE rowid > ?", self.top)] = True
        doclen = np.concatenate([self.doclen, *(s.doclen.astype(np.float64) for s in new)])
        return BM25Snapshot.of(version, top, settle([*self.segments, *new]), live, doclen)

    def prefetch(self) -> None:
        """Ask the OS to read the segment files into the page cache (a hint; returns at once). They are mapped
        for random access (no read-ahead at each page a query reads): this is their read-ahead, done once."""
        for seg in self.segments:
            if seg.path is not None and hasattr(os, "posix_fadvise"):
                with contextlib.suppress(OSError):
                    fd = os.open(seg.path, os.O_RDONLY)
                    try:
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
                    finally:
                        os.close(fd)

    def term(self, term: str) -> QueryTerm:
        """``term``'s postings in every segment (as FTS5 would match it) and how many live rows contain it; kept
        for the next queries (``TermCache``)."""
        cached = self.terms.get(term)
        if cached is not None:
            return cached
        key = query_key(term)
        found = [p for p in (s.postings(key) for s in self.segments) if p is not None] if key else []
        df = sum(r.size - dead_in(r, self.dead, self.live) for r, *_ in found)
        parts = tuple((r, t) for r, t, *_ in found)
        out = QueryTerm(term, parts, df, max((p[2] for p in found), default=0), min((p[3] for p in found), default=0))
        self.terms.put(term, out)
        return out

    def search(
        self, terms: Sequence[str], top_k: int, mask: np.ndarray | None, prune: tuple[float, int] = (1.0, 0)
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(rowids, scores)`` of the ``top_k`` best rows matching any of ``terms`` (distinct), unordered; rows
        tied with the ``top_k``-th are all returned. ``mask`` (by rowid − 1): rows allowed by filters.
        ``prune = (max_df, min_df)``: terms in more than ``max_df`` of the rows and in more than ``min_df``
        rows are left out, except the two rarest."""
        found = self._pruned(terms, prune)
        if not found or top_k < 1:
            return np.empty(0, np.int64), np.empty(0, np.float64)
        allowed = None if mask is None else np.concatenate([[False], mask[: self.top]])
        live = None if self.n_live == self.top else self.live
        return score(found, self.n_live, self.avgdl, self.norm, live, allowed, top_k)

    def scored_terms(self, terms: Sequence[str], prune: tuple[float, int]) -> list[tuple[np.ndarray, np.ndarray]]:
        """The live rows and scores of each query term ``search`` scores (the same pruning), in query order: what
        the compiled core sums (``_core``), kept per term for the next queries (``QueryTerm.scored``)."""
        live = None if self.n_live == self.top else self.live
        return [t.scored(self.n_live, self.norm, live) for t in self._pruned(terms, prune)]

    def _pruned(self, terms: Sequence[str], prune: tuple[float, int]) -> list[QueryTerm]:
        """The query terms scored, in query order: those found, less the too common ones (``search``'s ``prune``)."""
        found = [self.term(t) for t in terms]
        max_df, min_df = prune
        if len(found) > 2 and max_df < 1:
            limit = max(max_df * self.n_live, min_df)
            rarest = {t.term for t in sorted(found, key=lambda t: (t.df, t.term))[:2]}
            found = [t for t in found if t.term in rarest or t.df <= limit]
        return [t for t in found if t.df > 0]
