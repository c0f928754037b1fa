"""Per-chunk progress of an ingest: after each embedding call (128 chunks), the pipeline
reports ``on_progress(documents done, documents, note)`` with the note ``"<embedded>/<queued> chunks embedded"``:
chunks embedded so far, of the chunks of the documents queued so far. A long ingest (one big PDF is hundreds of
chunks) thus says how far it is even between two documents."""

from __future__ import annotations

NOTE_SUFFIX = " chunks embedded"


def chunk_note(done: int, total: int) -> str:
    return f"{done}/{total}{NOTE_SUFFIX}"


def is_chunk_note(text: str) -> bool:
    return text.endswith(NOTE_SUFFIX)
