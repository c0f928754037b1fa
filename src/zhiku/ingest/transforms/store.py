"""Where transform outputs live: ``<index>/enrichments.sqlite`` beside the index (any store backend): per chunk its
enrichment, per document the LLM's metadata, and each ingest's LLM usage and issues (``zhiku history``)."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from zhiku.ingest.transforms.base import DocMeta, DocumentBatch, Enrichment
from zhiku.types import LLMUsage, TransformIssue

ENRICH_FILE = "enrichments.sqlite"
SCHEMA = """
CREATE TABLE IF NOT EXISTS chunk_enrichment (chunk_id TEXT PRIMARY KEY, doc_id TEXT NOT NULL, context TEXT NOT NULL,
    refined TEXT NOT NULL, title TEXT NOT NULL, summary TEXT NOT NULL, tags TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS chunk_enrichment_by_doc ON chunk_enrichment (doc_id);
CREATE TABLE IF NOT EXISTS doc_meta (doc_id TEXT PRIMARY KEY, title TEXT NOT NULL, summary TEXT NOT NULL,
    tags TEXT NOT NULL, kind TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS llm_usage (id INTEGER PRIMARY KEY, at REAL NOT NULL, collection TEXT NOT NULL,
    source TEXT NOT NULL, transforms TEXT NOT NULL, calls INTEGER NOT NULL, cached INTEGER NOT NULL,
    prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL, cost REAL NOT NULL, currency TEXT NOT NULL,
    issues TEXT NOT NULL, setup TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS llm_usage_by_source ON llm_usage (collection, source, id);
"""


@dataclass(frozen=True)
class UsageRecord:
    at: float
    collection: str
    source: str
    transforms: tuple[str, ...]
    usage: LLMUsage
    issues: tuple[TransformIssue, ...]
    setup: str = ""  # ``TransformStage.setup`` of that ingest ("": not known)


class EnrichmentStore:
    """Thread-safe; opened read-only it never creates the file (an index without transforms has none)."""

    def __init__(self, index_dir: Path, *, read_only: bool = False) -> None:
        self.path = Path(index_dir) / ENRICH_FILE
        self.read_only = read_only
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._migrated = False  # ``llm_usage.setup`` checked (by the first write: a read never writes the file)

    def _conn(self, write: bool = False) -> sqlite3.Connection | None:
        if self._db is None:
            if not self.path.exists() and (self.read_only or not write):
                return None
            if self.read_only:
                self._db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._db = sqlite3.connect(str(self.path), timeout=30, check_same_thread=False)
                self._db.executescript(SCHEMA)
        if write and not self._migrated:  # an older file gains ``llm_usage.setup`` (not by a reader: read-only mounts)
            if "setup" not in [row[1] for row in self._db.execute("PRAGMA table_info(llm_usage)")]:
                with self._db:
                    self._db.execute("ALTER TABLE llm_usage ADD COLUMN setup TEXT NOT NULL DEFAULT ''")
            self._migrated = True
        return self._db

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def put(self, batch: DocumentBatch) -> None:
        rows = [
            (c.chunk_id, batch.doc_id, e.context, e.refined, e.title, e.summary, _json(list(e.tags)))
            for c, e in zip(batch.chunks, batch.enrichments, strict=True)
            if e != Enrichment()
        ]
        if not rows and batch.meta is None and not self.path.exists():  # nothing to write, nothing to clear
            return
        with self._lock:
            db = self._conn(write=True)
            if db is None or (not rows and batch.meta is None and not self._has(db, batch.doc_id)):
                return
            with db:
                self._delete(db, batch.doc_id)
                db.executemany("INSERT OR REPLACE INTO chunk_enrichment VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
                if (m := batch.meta) is not None:
                    row = (batch.doc_id, m.title, m.summary, _json(list(m.tags)), m.kind)
                    db.execute("INSERT INTO doc_meta VALUES (?, ?, ?, ?, ?)", row)

    def delete(self, doc_id: str) -> None:
        with self._lock:
            if self.path.exists() and (db := self._conn(write=True)) is not None:
                with db:
                    self._delete(db, doc_id)

    @staticmethod
    def _has(db: sqlite3.Connection, doc_id: str) -> bool:
        sql = (
            "SELECT 1 FROM chunk_enrichment WHERE doc_id = ? UNION ALL SELECT 1 FROM doc_meta WHERE doc_id = ? LIMIT 1"
        )
        return db.execute(sql, (doc_id, doc_id)).fetchone() is not None

    @staticmethod
    def _delete(db: sqlite3.Connection, doc_id: str) -> None:
        db.execute("DELETE FROM chunk_enrichment WHERE doc_id = ?", (doc_id,))
        db.execute("DELETE FROM doc_meta WHERE doc_id = ?", (doc_id,))

    def record_usage(self, record: UsageRecord) -> None:
        u, issues = record.usage, _json([i.__dict__ for i in record.issues])
        head = (record.at or time.time(), record.collection, record.source, ",".join(record.transforms))
        row = (*head, u.calls, u.cached, u.prompt_tokens, u.completion_tokens, u.cost, u.currency, issues, record.setup)
        with self._lock:
            if (db := self._conn(write=True)) is not None:
                with db:
                    db.execute(
                        f"INSERT INTO llm_usage ({USAGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row
                    )

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            db = self._conn()
            return db.execute(sql, list(args)).fetchall() if db is not None else []

    def chunk_enrichments(self, chunk_ids: Sequence[str]) -> dict[str, Enrichment]:
        if not chunk_ids:
            return {}
        marks = ",".join("?" * len(chunk_ids))
        sql = (
            f"SELECT chunk_id, context, refined, title, summary, tags FROM chunk_enrichment WHERE chunk_id IN ({marks})"
        )
        return {r[0]: Enrichment(r[1], r[2], r[3], r[4], tuple(json.loads(r[5]))) for r in self._rows(sql, chunk_ids)}

    def chunk_labels(self, places: Mapping[str, tuple[str, str, int | None]]) -> dict[str, dict[str, Any]]:
        found = self.chunk_enrichments(list(places))
        return {
            i: {"chunk_id": i, "source": p[0], "section": p[1], "page": p[2]} | enrichment_row(found.get(i))
            for i, p in places.items()
        }

    def doc_meta(self, doc_id: str) -> DocMeta | None:
        rows = self._rows("SELECT title, summary, tags, kind FROM doc_meta WHERE doc_id = ?", (doc_id,))
        return DocMeta(rows[0][0], rows[0][1], tuple(json.loads(rows[0][2])), rows[0][3]) if rows else None

    def tagged(self, tags: Sequence[str]) -> tuple[set[str], set[str]]:
        want = {t.strip().lower() for t in tags if t.strip()}

        def having(rows: list[Any]) -> set[str]:
            return {i for i, tag_json in rows if want <= {t.lower() for t in json.loads(tag_json)}}

        chunks = self._rows("SELECT chunk_id, tags FROM chunk_enrichment WHERE tags != '[]'")
        return having(chunks), having(self._rows("SELECT doc_id, tags FROM doc_meta"))

    def usage_history(self, limit: int = 100) -> list[UsageRecord]:
        rows = self._rows("SELECT * FROM llm_usage ORDER BY at DESC, id DESC LIMIT ?", (limit,))
        return [_usage_record(r) for r in rows]

    def recent_usage(self, collection: str, source: str, n: int) -> list[UsageRecord]:
        sql = "SELECT * FROM llm_usage WHERE collection = ? AND source = ? ORDER BY id DESC LIMIT ?"
        return [_usage_record(r) for r in self._rows(sql, (collection, source, n))]


def _usage_record(r: Sequence[Any]) -> UsageRecord:
    issues = tuple(TransformIssue(**d) for d in json.loads(r[11]))
    setup = r[12] if len(r) > 12 else ""  # (a file written before the column, opened read-only)
    return UsageRecord(r[1], r[2], r[3], tuple(t for t in r[4].split(",") if t), LLMUsage(*r[5:11]), issues, setup)


USAGE_COLUMNS = (
    "at, collection, source, transforms, calls, cached, prompt_tokens, completion_tokens, cost, currency, issues, setup"
)


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def enrichment_row(e: Enrichment | None) -> dict[str, object]:
    if e is None:
        return {}
    row: dict[str, object] = {"context": e.context, "refined": e.refined, "title": e.title, "summary": e.summary}
    row = {k: v for k, v in row.items() if v}
    return {**row, "tags": list(e.tags)} if e.tags else row


def transform_rows(report: object) -> dict[str, object]:
    t = getattr(report, "transforms", None)
    return {} if t is None else {"transforms": asdict(t)}
