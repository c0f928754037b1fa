"""Progress while a large batch is embedded: a note every ``EMBED_NOTE_EVERY`` chunks, so a long ingest (one big
PDF is hundreds of chunks) says how far it is even between two documents."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from zhiku.embedding.base import Embedder

EMBED_NOTE_EVERY = 128
NOTE_SUFFIX = " chunks embedded"


def chunk_note(done: int, total: int) -> str:
    return f"{done}/{total}{NOTE_SUFFIX}"


def is_chunk_note(text: str) -> bool:
    return text.endswith(NOTE_SUFFIX)


def notes(
    on_progress: Callable[[int, int, str], None] | None, done: Callable[[], int], total: int
) -> Callable[[str], None] | None:
    """A note callback for ``embed_with_notes`` that reports through an ingest's ``on_progress`` (documents done
    so far, of ``total``), or None without one."""
    if on_progress is None:
        return None
    return lambda text: on_progress(done(), total, text)


def embed_with_notes(embedder: Embedder, texts: Sequence[str], note: Callable[[str], None] | None) -> np.ndarray:
    """``embedder.embed_documents(texts)`` (an empty ``(0, dim)`` array for no texts: scanned pages), in steps of
    ``EMBED_NOTE_EVERY`` with a ``note`` after each when there is more than one step."""
    if not texts:
        return np.zeros((0, embedder.dim), np.float32)
    if note is None or len(texts) <= EMBED_NOTE_EVERY:
        return embedder.embed_documents(list(texts))
    parts = []
    for i in range(0, len(texts), EMBED_NOTE_EVERY):
        parts.append(embedder.embed_documents(list(texts[i : i + EMBED_NOTE_EVERY])))
        note(chunk_note(min(i + EMBED_NOTE_EVERY, len(texts)), len(texts)))
    return np.concatenate(parts)
