"""An unchanged document is ingested again when its enrichment is owed: the endpoint gave no answer for some of
its chunks last time (down, rate-limited, timed out), or a transform was switched on since. Without that, the
next ``zhiku ingest`` skipped it and its chunks stayed without the transform for good. Refused or malformed
replies are not asked again (the model would answer the same)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fake_openai import FakeOpenAI
from helpers_kb import CORPUS_CHUNKS
from test_transforms import open_kb

DOCS = 3  # helpers_kb.CORPUS: three files


def test_chunks_the_endpoint_never_answered_are_enriched_by_the_next_ingest(
    kb_factory: Any, corpus: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.always = ("status", 500, {}, json.dumps({"error": {"message": "GPU fell over"}}))
    kb = open_kb(kb_factory, tmp_path / "idx", fake_openai, "m-retry-down", ["metadata"])
    down = kb.ingest([corpus])
    assert len(down.added) == DOCS and down.chunks_written == CORPUS_CHUNKS
    assert len(down.transforms.issues) == CORPUS_CHUNKS + DOCS
    assert all(i.unreached for i in down.transforms.issues)

    fake_openai.always = None  # the endpoint is back: the same command, no --force
    back = kb.ingest([corpus])
    assert (len(back.updated), len(back.skipped)) == (DOCS, 0)
    assert (back.transforms.usage.calls, back.transforms.issues) == (CORPUS_CHUNKS + DOCS, ())
    assert dict(back.transforms.applied) == {"metadata": CORPUS_CHUNKS + DOCS}
    assert len(kb.retrieve("劳动法规", mode="bm25", top_k=10).hits) == CORPUS_CHUNKS  # a tag only the LLM wrote

    settled = kb.ingest([corpus])  # nothing owed any more: skipped, nothing sent
    assert (len(settled.skipped), settled.transforms.usage.calls) == (DOCS, 0)


def test_a_transform_switched_on_later_enriches_unchanged_documents(
    kb_factory: Any, corpus: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    plain = open_kb(kb_factory, tmp_path / "idx", fake_openai, "m-retry-later", [])
    assert len(plain.ingest([corpus]).added) == DOCS
    plain.close()
    kb = open_kb(kb_factory, tmp_path / "idx", fake_openai, "m-retry-later", ["contextual"])
    on = kb.ingest([corpus])
    assert (len(on.updated), on.transforms.usage.calls, on.transforms.issues) == (DOCS, CORPUS_CHUNKS, ())
    assert len(kb.retrieve("紫罗兰卷宗", mode="bm25", top_k=10).hits) == CORPUS_CHUNKS  # only the contexts hold it
    more = open_kb(kb_factory, tmp_path / "idx", fake_openai, "m-retry-later", ["contextual", "metadata"])
    added = more.ingest([corpus])  # one more transform: ingested again, the contexts come from the cache
    assert (len(added.updated), added.transforms.usage.cached) == (DOCS, CORPUS_CHUNKS)


def test_refused_replies_are_not_asked_again_by_a_plain_ingest(
    kb_factory: Any, corpus: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    fake_openai.always = ("refuse",)
    kb = open_kb(kb_factory, tmp_path / "idx", fake_openai, "m-retry-refused", ["contextual"])
    first = kb.ingest([corpus])
    assert len(first.transforms.issues) == CORPUS_CHUNKS
    assert not any(i.unreached for i in first.transforms.issues)
    sent = len(fake_openai.chats())
    again = kb.ingest([corpus])
    assert (len(again.skipped), len(fake_openai.chats())) == (DOCS, sent)
