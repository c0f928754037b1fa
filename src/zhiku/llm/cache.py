"""The persistent cache of LLM replies: ``key → content`` in SQLite (the judge's and the transforms' files)."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import threading
from pathlib import Path
from typing import Any

from zhiku.errors import ConfigError

LLM_CACHE_FILE = "llm.sqlite"


def reply_key(*parts: Any) -> str:
    """SHA-256 over the JSON of ``parts`` (model, prompt id, messages…)."""
    return hashlib.sha256(json.dumps(list(parts), ensure_ascii=False, sort_keys=True).encode()).hexdigest()


class ReplyCache:
    """``responses(key, content)`` in SQLite; safe across threads and processes."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self._lock = threading.Lock()
        try:
            if read_only:
                self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30, check_same_thread=False)
                self._db.execute("select 1 from sqlite_master limit 1")
                return
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(path), timeout=30, check_same_thread=False, isolation_level=None)
            self._db.execute("create table if not exists responses(key text primary key, content text not null)")
        except sqlite3.DatabaseError as e:  # a damaged or foreign file: say which, and that it is only a cache
            raise ConfigError(
                f"the LLM reply cache {path} cannot be opened ({e}): it is only a cache, delete the file (or set "
                "cache_dir: null)"
            ) from None

    def get(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("select content from responses where key = ?", (key,)).fetchone()
        return str(row[0]) if row else None

    def put(self, key: str, content: str) -> None:
        with self._lock:
            self._db.execute("insert or replace into responses values (?, ?)", (key, content))

    def close(self) -> None:
        with self._lock:
            self._db.close()


def json_object_in(text: str) -> dict[str, Any]:
    """The JSON object in a model's reply."""
    body = text.strip()
    fence = re.search(r"```(?:json)?\s*(.*?)```", body, re.S)
    if fence:
        body = fence.group(1).strip()
    if not body.startswith("{"):
        start, end = body.find("{"), body.rfind("}")
        body = body[start : end + 1] if 0 <= start < end else body
    try:
        value = json.loads(body)
    except json.JSONDecodeError as e:
        raise ValueError(f"did not reply with JSON ({e.msg} at char {e.pos}): {text[:80]!r}") from None
    if not isinstance(value, dict):
        raise ValueError(f"replied with JSON {type(value).__name__}, not an object: {text[:80]!r}")
    return value
