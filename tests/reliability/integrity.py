"""Consistency checks of a SQLite index after a crash (the reliability suite's kill runs).

``problems(index, versions)`` lists every violation: the database fails ``PRAGMA integrity_check``, or a vector file
its checksums (``zhiku doctor``'s check); token rows
≠ chunks; a chunk without a vector or a vector of the wrong size; a chunk whose document is gone; a document
whose ``chunk_count`` differs from its chunks; a document that is neither an old nor a new version (its
SHA-256 and its chunk texts must equal one of the ``versions`` recorded for its ``doc_id``).
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from pathlib import Path

from zhiku.stores import index_damage

Version = tuple[str, tuple[str, ...]]  # (sha256, chunk texts in order)


def snapshot(index: Path) -> dict[str, Version]:
    """``doc_id -> (sha256, chunk texts)`` of a finished index (a reference version)."""
    with sqlite3.connect(f"file:{index / 'zhiku.db'}?mode=ro", uri=True) as conn:
        docs = dict(conn.execute("SELECT doc_id, sha256 FROM documents"))
        texts: dict[str, list[str]] = defaultdict(list)
        for doc_id, text in conn.execute("SELECT doc_id, text FROM chunks ORDER BY doc_id, ordinal"):
            texts[doc_id].append(text)
    return {d: (sha, tuple(texts[d])) for d, sha in docs.items()}


def problems(index: Path, versions: dict[str, set[Version]], dim: int) -> list[str]:
    out: list[str] = []
    conn = sqlite3.connect(index / "zhiku.db")  # read-write: a crashed writer's WAL is recovered on open
    try:
        if (ok := conn.execute("PRAGMA integrity_check").fetchone()[0]) != "ok":
            out.append(f"integrity_check: {ok}")
        chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        fts = conn.execute("SELECT count(*) FROM chunk_tokens").fetchone()[0]
        if fts != chunks:
            out.append(f"{fts} token rows for {chunks} chunks")
        orphan_fts = conn.execute(
            "SELECT count(*) FROM chunk_tokens WHERE rowid NOT IN (SELECT rowid FROM chunks)"
        ).fetchone()[0]
        if orphan_fts:
            out.append(f"{orphan_fts} token rows without a chunk")
        bad_vectors = conn.execute("SELECT count(*) FROM chunks WHERE length(vector) != ?", (4 * dim,)).fetchone()[0]
        if bad_vectors:
            out.append(f"{bad_vectors} chunks without a {dim}-d vector")
        orphans = conn.execute("SELECT count(*) FROM chunks WHERE doc_id NOT IN (SELECT doc_id FROM documents)")
        if (n := orphans.fetchone()[0]) > 0:
            out.append(f"{n} orphan chunks")
        counted = conn.execute(
            "SELECT d.doc_id FROM documents d LEFT JOIN chunks c ON c.doc_id = d.doc_id "
            "GROUP BY d.doc_id HAVING count(c.rowid) != max(d.chunk_count)"
        ).fetchall()
        if counted:
            out.append(f"{len(counted)} documents whose chunk_count differs from their chunks")
    finally:
        conn.close()
    if (damage := index_damage(index)) is not None:
        out.append(damage)
    for doc_id, version in snapshot(index).items():
        if version not in versions.get(doc_id, set()):
            out.append(f"document {doc_id} is neither an old nor a new version")
    return out
