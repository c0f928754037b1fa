"""Live folders: a debounced batch of file events at a time, handed to a sync; a failing sync is retried, never fatal."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from zhiku.errors import MissingDependency

log = logging.getLogger("zhiku.watch")
DEBOUNCE_MS = 1600  # a burst (a `git checkout` of 1,000 files) arrives in batches at most this far apart
STEP_MS = 300  # quiet time that ends a batch: an editor's write-temp-then-rename is one batch
RETRY_MS = 5000  # a batch whose sync failed (the index locked by another writer) is tried again after this


def watch_folders(
    folders: Sequence[Path], sync: Callable[[Collection[Path] | None], None], stop: threading.Event
) -> None:
    """``sync(None)``, then until ``stop`` is set ``sync(changed paths)`` after each batch of changes under ``folders``
    (``None``: walk them all, as when a folder itself moved or went)."""
    batches = require_watchfiles().watch(
        *folders,
        stop_event=stop,
        debounce=DEBOUNCE_MS,
        step=STEP_MS,
        rust_timeout=RETRY_MS,
        yield_on_timeout=True,
        raise_interrupt=False,
    )
    pending: set[Path] | None = None  # None: walk every folder, as the first sync does
    for changes in itertools.chain([set[tuple[Any, str]]()], batches):
        changed = {Path(p) for _, p in changes}
        whole = pending is None or any(p.is_dir() or not p.suffix for p in changed)
        pending = None if whole else (pending or set()) | changed
        if pending == set():
            continue
        try:
            sync(pending)
        except Exception as e:  # one bad batch never stops the watcher: its files are tried again
            log.warning("syncing the changed files failed (tried again in %d s): %s", RETRY_MS // 1000, e)
        else:
            pending = set()


def require_watchfiles() -> Any:
    try:
        import watchfiles
    except ImportError:
        raise MissingDependency("live folders need watchfiles: pip install 'zhiku[watch]'") from None
    return watchfiles
