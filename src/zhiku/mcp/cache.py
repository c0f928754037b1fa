"""Result-cache keys: tool results are kept in a ``zhiku.cache.Cache`` by index version, so an ingest or a delete
(each moves ``Store.index_version()``) makes every older entry unreachable without an explicit purge."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def cache_key(tool: str, args: Mapping[str, Any]) -> str:
    """A stable key: the same arguments in any key order (and ``None`` vs. missing) give the same key."""
    canonical = {k: v for k, v in args.items() if v is not None}
    body = json.dumps(canonical, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return f"{tool}\x00{body}"
