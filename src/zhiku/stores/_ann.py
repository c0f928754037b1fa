"""An HNSW index over the vector file's rows, for ``store.dense_search: hnsw`` (usearch, float16 vectors).

It covers the first ``rows`` rows of one generation of the vector file and is saved beside it as
``vectors.<dim>[.g<N>].hnsw``, which a process maps instead of loading. It is a cache: the vector files stay the
truth. A search asks it for more rows than it needs (``k`` over the fraction of rows that are live and pass the
filters), drops those that are deleted or filtered out, adds the best rows written since it was built (scored
exactly), and scores all of them exactly in float32. When the filters leave too few rows for that, the caller
searches without it. So a deleted chunk is never returned, and a filtered search never misses because of the
index. It is rebuilt, in a background thread, when the rows written since outgrow ``REBUILD_DELTA`` of it or a
compaction starts a new generation (its file goes with the old generation's).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from zhiku.stores._vector_files import Layout

MIN_ALLOWED = 0.05  # filters passing fewer of the indexed rows than this: search without the index
REBUILD_DELTA = 0.2  # rows written since the build above this fraction of it: build it again
SYNC_ROWS = 2_000  # up to this many rows (~0.3 s) a search builds the index itself; past it, a background thread
_BATCH = 65536


def usearch() -> Any:
    """The ``usearch.index`` module, or None when usearch is not installed."""
    try:
        return importlib.import_module("usearch.index")
    except ImportError:
        return None


def ann_path(layout: Layout, index_dir: Path) -> Path:
    return layout.path(index_dir).with_suffix(".hnsw")


@dataclass(frozen=True)
class Ann:
    """The HNSW index of rows ``0…rows-1`` of generation ``gen`` of the ``dim``-dimensional vector file."""

    dim: int
    gen: int
    rows: int
    index: Any
    lock: threading.Lock = field(default_factory=threading.Lock, compare=False)  # one search at a time

    @classmethod
    def open(cls, layout: Layout, index_dir: Path) -> Ann | None:
        """The saved index of this generation, mapped; None when there is none (or it is unreadable)."""
        path, module = ann_path(layout, index_dir), usearch()
        if module is None or not path.is_file():
            return None
        try:
            meta = module.Index.metadata(str(path))
            if not meta or meta["dimensions"] != layout.dim:
                return None
            index = module.Index.restore(str(path), view=True)
        except (OSError, RuntimeError, ValueError):
            return None
        return None if index is None else cls(layout.dim, layout.gen, len(index), index)

    @classmethod
    def build(cls, layout: Layout, index_dir: Path, matrix: np.ndarray, rows: int, threads: int = 1) -> Ann:
        """Index rows ``0…rows-1`` of ``matrix`` (dead rows too: searches drop them) and save it (if the index
        directory is writable; else it lives in memory only)."""
        index = usearch().Index(ndim=layout.dim, metric="ip", dtype="f16", connectivity=16, expansion_add=128)
        for start in range(0, rows, _BATCH):
            stop = min(start + _BATCH, rows)
            index.add(np.arange(start, stop, dtype=np.uint64), np.asarray(matrix[start:stop]), threads=threads)
        path = ann_path(layout, index_dir)
        tmp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
        with contextlib.suppress(OSError):
            index.save(str(tmp))
            os.replace(tmp, path)
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        return cls(layout.dim, layout.gen, rows, index)

    def fresh_for(self, layout: Layout, rows: int) -> bool:
        """Whether it indexes this generation and the rows written since are few enough."""
        return self.gen == layout.gen and self.dim == layout.dim and rows - self.rows <= REBUILD_DELTA * self.rows

    def search(
        self,
        matrix: np.ndarray,
        gather: Callable[[np.ndarray], np.ndarray],
        rows: int,
        unit: np.ndarray,
        k: int,
        allowed: np.ndarray,
        dots: Callable[[np.ndarray, np.ndarray], np.ndarray] = lambda rows, unit: np.einsum("ij,j->i", rows, unit),
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """``(rows, float32 scores)`` of the best ``k`` allowed rows of ``matrix[:rows]`` (``gather`` reads given
        rows; ``dots(rows, unit)`` scores them, as every other dense product of the store: ``_vectors.dot_rows``),
        or None when the filters pass too few of the indexed rows (the caller then scores every row)."""
        head = allowed[: self.rows]
        passing = int(head.sum())
        if passing < MIN_ALLOWED * self.rows:
            return None
        fetch = min(self.rows, int(k * self.rows / passing * 2) + 16)
        with self.lock:
            self.index.expansion_search = max(fetch, 64)
            keys = np.asarray(self.index.search(unit, fetch, threads=1).keys, dtype=np.int64).reshape(-1)
        found = keys[(keys >= 0) & (keys < self.rows)]
        found = found[head[found]]
        if found.size < min(k, passing):
            return None
        tail = np.empty(0, np.int64)
        if rows > self.rows:  # written since the build: scored exactly (a contiguous slice, no copy)
            scores = dots(matrix[self.rows : rows], unit)
            scores[~allowed[self.rows : rows]] = -np.inf
            best = np.argpartition(-scores, k - 1)[:k] if k < scores.size else np.arange(scores.size)
            tail = self.rows + best[np.isfinite(scores[best])]
        candidates = np.sort(np.concatenate([found, tail]))
        return candidates, dots(gather(candidates), unit)


class AnnCache:
    """A store's HNSW index: opened from its file, or built (inline when small, else by a background thread,
    searches going without it meanwhile), and built again when it is no longer fresh."""

    def __init__(self, index_dir: Path, threads: int = 1) -> None:
        self.index_dir = index_dir
        self.threads = threads
        self._ann: Ann | None = None
        self._building = False
        self._lock = threading.Lock()

    def get(self, layout: Layout, matrix: np.ndarray, rows: int) -> Ann | None:
        """An index usable for a snapshot of ``rows`` rows of this generation, or None (not built yet)."""
        ann = self._ann
        if ann is not None and ann.fresh_for(layout, rows):
            return ann
        with self._lock:
            ann = self._ann
            if ann is None or ann.gen != layout.gen or ann.dim != layout.dim:
                ann = self._ann = Ann.open(layout, self.index_dir)
            if ann is not None and ann.rows > rows:  # built by another process at a later version
                return None
            if ann is not None and ann.fresh_for(layout, rows):
                return ann
            if rows <= SYNC_ROWS:
                self._ann = Ann.build(layout, self.index_dir, matrix, rows, self.threads)
                return self._ann
            if not self._building:
                self._building = True
                threading.Thread(target=self._build, args=(layout, matrix, rows), daemon=True).start()
            return ann

    def _build(self, layout: Layout, matrix: np.ndarray, rows: int) -> None:
        try:
            built = Ann.build(layout, self.index_dir, matrix, rows, self.threads)
            with self._lock:
                current = self._ann
                if current is None or (current.gen, current.rows) <= (built.gen, built.rows):
                    self._ann = built
        finally:
            self._building = False
