"""The BM25 index behind ``SQLiteStore``: postings segments beside ``zhiku.db``, scored in memory.

SQLite keeps the durable copy: ``chunk_tokens`` holds every live chunk's index tokens, written in the document's
transaction. The segment files in ``bm25/`` are a rebuildable acceleration structure: each holds the postings of
one range of rowids, built from committed rows only, written atomically (temporary file, rename), so after
``kill -9`` a file is whole or absent and every committed document is its old or its new version. Rowids are
never reused (``_vectors``): a segment stays valid for the life of the index (``meta.index_id``); deleted rows
are masked by the live rowids read from ``chunks``.

A writer appends a segment once ``FLUSH_ROWS`` rowids lie past the files, and merges the trailing segments when
``MERGE_FANIN`` of one size tier have piled up (each row is rewritten O(log n) times). A reader reads the files
tiling ``1…hi`` and builds the rest (fewer than ``FLUSH_ROWS`` rows, or everything for an index no writer has
opened since the upgrade) from ``chunk_tokens``; another process's commits are applied incrementally (new
rowids' tokens, newer tombstones), the same way as the vector file.

Scoring follows SQLite FTS5's ``bm25()`` (the ranking this index replaced): ``k1 = 1.2``, ``b = 0.75``,
``idf = log((N − n + 0.5) / (n + 0.5))`` floored at 10⁻⁶. Each query term's postings are scored once per snapshot
(then kept, ``TermCache``) and a query's terms are added into one float64 score per row by one ``bincount``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from zhiku.cache import Cache
from zhiku.numeric import best
from zhiku.stores._bm25_segment import Segment, build, merge, query_key, read, read_header, write
from zhiku.stores._sqlite_conn import Database, read_rowids, top_rowid, version_of
from zhiku.stores._vector_files import pid_alive

log = logging.getLogger(__name__)

K1 = 1.2  # FTS5's bm25() constants: changing them changes every ranking
B = 0.75
IDF_FLOOR = 1e-6
# query-term pruning: a term found in more than MAX_DF of the chunks and in more than MIN_DF chunks is left out of
# the query (the 2 rarest terms always stay)
MAX_DF = 0.5  # above N/2 a term's IDF is <= 0 (floored at 1e-6): lossless on every dev set
MIN_DF = 1000
# a ``rare`` query term (a character pair) is scored only where it is in at most this share of the rows: the best
# of 0.2–3 % on half of each dev set's questions (a common pair costs time and adds noise)
RARE_DF = 0.005
RARE_SIZES = 100_000  # ``rare`` terms whose postings a snapshot counted, kept
CACHE_POSTINGS = 2_000_000  # postings of query terms a snapshot keeps (scored: 16 bytes each)
FLUSH_ROWS = 2000  # a writer saves a segment once this many rowids lie past the saved ones
BUILD_ROWS = 50_000  # rows per segment built from the table in one go (bounds memory)
MERGE_FANIN = 4  # trailing segments of one size tier merged into one
_TIER_UNIT = 256
_SEG_NAME = re.compile(r"seg-(\d+)-(\d+)\.bin")


def index_id(conn: sqlite3.Connection) -> str:
    row = conn.execute("SELECT value FROM meta WHERE key = 'index_id'").fetchone()
    return str(row[0]) if row else ""


def _tier(size: int) -> int:
    return int(math.log(size / _TIER_UNIT, MERGE_FANIN)) if size > _TIER_UNIT else 0


def settle(segments: list[Segment], folder: Path | None = None, ident: str = "") -> list[Segment]:
    """Merge trailing segments while ``MERGE_FANIN`` of them share a size tier; with ``folder``, the merged
    segment is saved and read back (the inputs' files are removed by ``save_segments``). Without it (a reader's
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
        found = next((end for end, path in candidates if not verify or read_header(path, ident) is not None), None)
        if found is None:
            break
        hi = found
    return hi


def table_segments(conn: sqlite3.Connection, lo: int, hi: int) -> Iterator[Segment]:
    """Segments of rowids ``lo…hi`` built from ``chunk_tokens`` (``BUILD_ROWS`` rowids each), one at a time."""
    for start in range(lo, hi + 1, BUILD_ROWS):
        stop = min(start + BUILD_ROWS - 1, hi)
        rows = conn.execute("SELECT rowid, tokens FROM chunk_tokens WHERE rowid BETWEEN ? AND ?", (start, stop))
        yield build(start, stop, rows)


def save_segments(
    conn: sqlite3.Connection, index_dir: Path, *, min_rows: int | None = None, verify: bool = False
) -> int:
    """Save the committed rows past the saved segments as new segments, once there are ``min_rows`` of them
    (default ``FLUSH_ROWS``; ``conn`` in a read transaction), merge tiers, and remove files no longer part of the
    tiling. Without ``verify`` the files are trusted by name until there is something to save (a write's case:
    this process saved them); with it their headers and sizes are checked first (opening an index a crash may
    have left). Returns how many rowids then lie past the saved segments."""
    folder, ident, top = index_dir / "bm25", index_id(conn), top_rowid(conn)
    least = max(FLUSH_ROWS if min_rows is None else min_rows, 1)
    if (unsaved := top - _covered(folder, ident, top, verify)) < least:
        return unsaved
    segs = saved_segments(folder, ident, top)
    covered = segs[-1].hi if segs else 0
    if top - covered < least:
        return top - covered
    for seg in table_segments(conn, covered + 1, top):
        segs.append(read(write(seg, folder, ident), ident) or seg)
        segs = settle(segs, folder, ident)
    keep = {s.path for s in segs}
    for path in folder.iterdir():  # (a live writer's ``.seg-….<pid>.tmp`` is left alone)
        tmp = path.name.endswith(".tmp")
        if (tmp and not pid_alive(path.name.rsplit(".", 2)[-2])) or (
            not tmp and _SEG_NAME.fullmatch(path.name) and path not in keep
        ):
            with contextlib.suppress(OSError):
                path.unlink()
    return 0


@dataclass(frozen=True)
class QueryTerm:
    """A query term's postings over the segments (``(rows, tfs)`` per segment, rows ascending, segments in rowid
    order) and how many live rows contain it."""

    term: str
    parts: tuple[tuple[np.ndarray, np.ndarray], ...]
    df: int
    memo: list[tuple[object, ...]] = field(default_factory=list, compare=False, repr=False)  # see ``scored``

    @property
    def size(self) -> int:
        """Postings over every segment (live or not)."""
        return sum(r.size for r, _ in self.parts)

    def idf(self, n: int) -> float:
        idf = math.log((n - self.df + 0.5) / (self.df + 0.5))
        return idf if idf > 0 else IDF_FLOOR

    def scored(self, n: int, norm: np.ndarray, live: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """All live rows containing the term (int64) and its score in each, kept for the next query with the same
        ``n``, ``norm`` and ``live`` (a snapshot's: ``BM25Snapshot`` keeps its terms); read-only, as concurrent
        queries share them."""
        memo = self.memo[0] if self.memo else None
        if memo is not None and memo[0] is norm and memo[1] is live and memo[2] == n:
            return memo[3], memo[4]  # type: ignore[return-value]
        rows = np.concatenate([r for r, _ in self.parts]).astype(np.int64)
        tfs = np.concatenate([t for _, t in self.parts]).astype(np.float64)
        if live is not None:
            keep = live[rows]
            rows, tfs = rows[keep], tfs[keep]
        each = self.idf(n) * (tfs * (K1 + 1.0)) / (tfs + norm[rows])
        rows.setflags(write=False)
        each.setflags(write=False)
        self.memo[:] = [(norm, live, n, rows, each)]
        return rows, each


class TermCache(Cache[QueryTerm]):
    """A snapshot's query terms (postings, df and their scores once computed), kept for the next queries: the
    snapshot is immutable, so they stay right for its life (a new version is a new snapshot, with a new cache).
    Bounded by postings held (``budget``; 16 bytes each once scored); a term longer than 1/16 of the budget is not
    kept."""

    def __init__(self, budget: int = CACHE_POSTINGS) -> None:
        super().__init__(budget, lambda t: t.size if t.size * 16 <= budget else budget + 1)


def score(
    terms: Sequence[QueryTerm],
    n: int,
    norm: np.ndarray,
    live: np.ndarray | None,
    mask: np.ndarray | None,
    top_k: int,
    weights: Mapping[str, float] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(rowids, scores)`` of the best ``top_k`` rows (every row tied with the k-th included), unordered.
    ``terms``: each with ``df > 0``; ``norm`` by rowid; ``live``/``mask`` (by rowid, None: all) the rows allowed;
    ``weights``: each term's score times its weight (by term)."""
    parts = [t.scored(n, norm, live) for t in terms]
    if weights is not None:
        parts = [(r, w * weights[t.term]) for (r, w), t in zip(parts, terms, strict=True)]
    if not parts:
        return np.empty(0, np.int64), np.empty(0, np.float64)
    rows = np.concatenate([r for r, _ in parts])
    each = np.concatenate([w for _, w in parts])
    scores = np.bincount(rows, weights=each, minlength=norm.size)
    hits = (scores > 0).nonzero()[0]  # the rows matched (every term's score is positive; faster than != 0)
    if mask is not None:
        hits = hits[mask[hits]]
    found = scores[hits]
    if hits.size > top_k:
        top = best(found, top_k)
        hits, found = hits[top], found[top]
    return hits, found


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
    terms: TermCache = field(default_factory=TermCache, compare=False, repr=False)  # query terms seen
    sizes: Cache[int] = field(default_factory=lambda: Cache(RARE_SIZES), compare=False, repr=False)  # (``_rare``)
    dfs: Cache[int] = field(default_factory=lambda: Cache(RARE_SIZES), compare=False, repr=False)  # (``df``)

    @classmethod
    def of(
        cls, version: int, top: int, segments: Sequence[Segment], live: np.ndarray, doclen: np.ndarray
    ) -> BM25Snapshot:
        n_live = int(live.sum())
        total = float(doclen[live].sum())
        avgdl = total / n_live if total > 0 else 1.0  # no live term at all: nothing matches, any value will do
        norm = K1 * (1 - B + B * doclen / avgdl)
        return cls(version, top, tuple(segments), live, doclen, norm, n_live, avgdl)

    @classmethod
    def load(cls, conn: sqlite3.Connection, index_dir: Path, version: int) -> BM25Snapshot:
        """Read the saved segments and build the rest from the table (``conn`` in a read transaction)."""
        top = top_rowid(conn)
        segs = saved_segments(index_dir / "bm25", index_id(conn), top)
        segs = settle([*segs, *table_segments(conn, segs[-1].hi + 1 if segs else 1, top)])
        live = np.zeros(top + 1, bool)
        live[read_rowids(conn, "SELECT rowid FROM chunks")] = True
        doclen = np.zeros(top + 1, np.float64)
        if segs:
            doclen[1:] = np.concatenate([s.doclen for s in segs])
        return cls.of(version, top, segs, live, doclen)

    def refreshed(self, conn: sqlite3.Connection, version: int) -> BM25Snapshot:
        """This snapshot moved to ``version`` by commits since (``conn`` in a read transaction)."""
        top = max(self.top, top_rowid(conn))
        new = list(table_segments(conn, self.top + 1, top))
        live = np.zeros(top + 1, bool)
        live[: self.top + 1] = self.live
        live[read_rowids(conn, "SELECT rowid FROM tombstones WHERE version > ?", self.version)] = False
        live[read_rowids(conn, "SELECT rowid FROM chunks WHERE rowid > ?", self.top)] = True
        doclen = np.concatenate([self.doclen, *(s.doclen.astype(np.float64) for s in new)])
        return BM25Snapshot.of(version, top, settle([*self.segments, *new]), live, doclen)

    def prefetch(self) -> None:
        """Ask the OS to read the segment files into the page cache (a hint; returns at once)."""
        for seg in self.segments:
            if seg.file is not None and hasattr(os, "posix_fadvise"):
                with contextlib.suppress(OSError):
                    os.posix_fadvise(seg.file[0], 0, 0, os.POSIX_FADV_WILLNEED)

    def term(self, term: str) -> QueryTerm:
        """``term``'s postings in every segment (as FTS5 would match it) and how many live rows contain it; kept
        for the next queries (``TermCache``)."""
        cached = self.terms.get(term)
        if cached is not None:
            return cached
        key = query_key(term)
        found = [p for p in (s.postings(key) for s in self.segments) if p is not None] if key else []
        df = sum(int(np.count_nonzero(self.live[r])) for r, _ in found)
        out = QueryTerm(term, tuple(found), df)
        self.terms.put(term, out)
        self.dfs.put(term, df)
        return out

    def df(self, term: str) -> int:
        """How many live rows hold ``term``: the last ``RARE_SIZES`` terms' counts are kept even when their postings
        are too many to keep (``TermCache``), as every search asks how many chunks hold 的 (1M chunks: nearly all)."""
        n = self.dfs.get(term)
        return self.term(term).df if n is None else n

    def search(
        self,
        terms: Sequence[str],
        top_k: int,
        mask: np.ndarray | None,
        max_df: float = 1.0,
        weights: Mapping[str, float] | None = None,
        rare: Sequence[str] = (),
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(rowids, scores)`` of the ``top_k`` best rows matching any of ``terms`` (distinct), unordered; rows
        tied with the ``top_k``-th are all returned. ``mask`` (by rowid − 1): rows allowed by filters. Terms in
        more than ``max_df`` of the rows and in more than ``MIN_DF`` rows are left out, except the two rarest.
        ``weights``: by term (``score``). ``rare``: more terms, each scored only in at most ``RARE_DF`` of the
        rows (not with ``weights``)."""
        found = self._pruned(terms, max_df)
        found += self._rare([t for t in rare if t not in terms])
        if not found or top_k < 1:
            return np.empty(0, np.int64), np.empty(0, np.float64)
        allowed = None if mask is None else np.concatenate([[False], mask[: self.top]])
        live = None if self.n_live == self.top else self.live
        return score(found, self.n_live, self.norm, live, allowed, top_k, weights)

    def _rare(self, terms: Sequence[str]) -> list[QueryTerm]:
        """``terms`` in at most ``RARE_DF`` of the rows, deleted ones counted too (a common pair's live rows are
        never counted: that costs more than scoring the rare ones)."""
        out = []
        for t in terms:
            if (n := self.sizes.get(t)) is None:
                key = query_key(t)
                self.sizes.put(t, n := sum(s.count(key) for s in self.segments))
            if 0 < n <= RARE_DF * self.n_live and (q := self.term(t)).df > 0:
                out.append(q)
        return out

    def _pruned(self, terms: Sequence[str], max_df: float) -> list[QueryTerm]:
        """The query terms scored, in query order: those found, less the too common ones (``search``'s ``max_df``)."""
        found = [self.term(t) for t in terms]
        limit = max(max_df * self.n_live, MIN_DF)
        if len(found) > 2 and max_df < 1 and max([t.df for t in found]) > limit:
            rarest = {t.term for t in sorted(found, key=lambda t: (t.df, t.term))[:2]}
            found = [t for t in found if t.term in rarest or t.df <= limit]
        return [t for t in found if t.df > 0]


class BM25Index:
    """The BM25 part of ``SQLiteStore``: the snapshot at the index's current version (loaded once, then moved
    forward by the commits since) and the segment files a writer saves."""

    def __init__(self, index_dir: Path, max_df: float = MAX_DF) -> None:
        self.index_dir, self.max_df = index_dir, max_df
        self.snap: BM25Snapshot | None = None
        self._lock = threading.Lock()
        self._unsaved = 0  # rows past the saved segments (as far as this process knows)

    def current(
        self, conn: sqlite3.Connection, version: int, forget: Callable[[], None], *, check: bool = True
    ) -> BM25Snapshot:
        """The snapshot at ``version`` (read on ``conn`` in one transaction when it moved); ``forget()`` is called
        when the index went back to an older version (another index's past: what rowids meant is void).
        ``check``: stat the segment files (``_whole``; a search does it once, ``Database.once``)."""
        snap = self.snap
        if snap is not None and snap.version == version and (not check or self._whole(snap)):
            return snap
        with self._lock:
            conn.execute("BEGIN")  # one snapshot for the version, the rows and the tombstones
            snap, now = self.snap, version_of(conn)
            if snap is None or snap.version > now or not self._whole(snap):
                if snap is not None and snap.version > now:
                    forget()
                snap = BM25Snapshot.load(conn, self.index_dir, now)
            elif snap.version != now:
                snap = snap.refreshed(conn, now)
            conn.execute("COMMIT")
            self.snap = snap
        return snap

    @staticmethod
    def _whole(snap: BM25Snapshot) -> bool:
        """Whether no segment file was cut shorter in place (its postings would not read): a snapshot with one is
        loaded anew, the torn file ignored. An fstat per segment."""
        return not any(s.cut() for s in snap.segments)

    def written(self, db: Database, rows: int) -> None:
        """After a commit that added ``rows`` rows: save segments once ``FLUSH_ROWS`` lie past the saved ones."""
        self._unsaved += rows
        if self._unsaved >= FLUSH_ROWS:  # else no need to look at the files
            self.save(db)

    def save(self, db: Database, *, verify: bool = False) -> None:
        """Save committed rows past the segment files as new segments (``save_segments``). The files only speed up
        opening: a failure is logged, the committed write stands."""
        try:
            with db.snapshot() as conn:
                self._unsaved = save_segments(conn, self.index_dir, verify=verify)
        except (OSError, sqlite3.Error) as e:
            log.warning("could not save the BM25 segments of %s: %s", self.index_dir, e)
