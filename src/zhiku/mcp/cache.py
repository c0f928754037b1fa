"""Result-cache keys; entries are kept by index version, so an ingest or a delete makes older ones unreachable."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def cache_key(tool: str, args: Mapping[str, Any]) -> str:
    """A stable key: the same arguments in any key order (and ``None`` vs. missing) give the same key."""
    canonical = {k: v for k, v in args.items() if v is not None}
    body = json.dumps(canonical, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return f"{tool}\x00{body}"
