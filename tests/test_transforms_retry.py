"""An unchanged document is ingested again when its enrichment is owed: the endpoint gave no answer for some of
its chunks last time (down, rate-limited, timed out), or a transform was switched on since. Without that, the
next ``zhiku ingest`` skipped it and its chunks stayed without the transform for good. Refused or malformed
replies are not asked again (the model would answer the same)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from fake_openai import FakeOpenAI, prompt_of
from helpers_kb import CORPUS_CHUNKS
from test_transforms import _llm_client_constants, llm_settings, open_kb  # noqa: F401 (an autouse fixture)
from zhiku import llm as llm_service
from zhiku.embedding import OpenAIEmbedder
from zhiku.openai_http import OpenAICompatibleClient

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

    plan = kb.plan_transforms([corpus])  # the dry run decides as the ingest does
    assert (plan.documents, plan.requests, plan.cached) == (DOCS, CORPUS_CHUNKS + DOCS, 0)

    fake_openai.always = None  # the endpoint is back: the same command, no --force
    back = kb.ingest([corpus])
    assert (len(back.updated), len(back.skipped)) == (DOCS, 0)
    assert (back.transforms.usage.calls, back.transforms.issues) == (CORPUS_CHUNKS + DOCS, ())
    assert dict(back.transforms.applied) == {"metadata": CORPUS_CHUNKS + DOCS}
    assert len(kb.retrieve("劳动法规", mode="bm25", top_k=10).hits) == CORPUS_CHUNKS  # a tag only the LLM wrote

    settled = kb.ingest([corpus])  # nothing owed any more: skipped, nothing sent
    assert (len(settled.skipped), settled.transforms.usage.calls) == (DOCS, 0)
    assert kb.plan_transforms([corpus]).documents == 0


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


def cli_ingest(tmp_path: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, **llm: Any) -> Any:
    """``zhiku ingest docs --transform X`` through the CLI (no terminal: log lines), embedder and LLM the fake."""
    from typer.testing import CliRunner

    from helpers_kb import write_corpus
    from test_transforms import llm_reply
    from zhiku.cli.app import app

    for key in [k for k in os.environ if k.startswith("ZHIKU_")]:
        monkeypatch.delenv(key)
    transform = llm.pop("transform", "contextual")
    write_corpus(tmp_path / "docs")
    fake.chat_reply = llm_reply
    embedding = {"provider": "openai", "model": "fake-embed", "base_url": fake.url}
    config = tmp_path / "zhiku.yaml"
    monkeypatch.setattr(llm_service, "CONCURRENCY", 1)
    monkeypatch.setattr(llm_service, "MAX_RETRIES", llm.pop("max_retries", llm_service.MAX_RETRIES))
    settings = {
        "index": str(tmp_path / "idx"),
        "embedding": embedding,
        "cache_dir": str(tmp_path / "cache") if llm.pop("cache", True) else None,
        "llm": {"base_url": fake.url, **llm},
    }
    config.write_text(json.dumps(settings), encoding="utf-8")
    return CliRunner().invoke(
        app, ["ingest", str(tmp_path / "docs"), "--config", str(config), "--transform", transform]
    )


def test_log_progress_shows_the_transforms_of_a_long_document(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a terminal (CI logs), progress lines came once per document: an LLM ingest of one long file printed
    nothing for its whole duration, and its first line said ``0/0 documents``."""
    import zhiku.cli.common

    monkeypatch.setattr(zhiku.cli.common, "PROGRESS_SECONDS", 0.0)  # every changed note, not one per 15 s
    r = cli_ingest(tmp_path, fake_openai, monkeypatch, model="m-progress")
    assert r.exit_code == 0, r.output
    lines = [ln.split(" · ") for ln in r.stderr.splitlines() if ln.startswith("ingesting: ")]
    assert " · ".join(lines[0][:1] + lines[0][2:]) == "ingesting: 0/3 documents"
    assert [" · ".join(ln[:1] + ln[2:]) for ln in lines if "contextual" in ln[-2]] == [
        "ingesting: 0/3 documents · contextual 1/2 chunks · 劳动合同法.md",
        "ingesting: 0/3 documents · contextual 2/2 chunks · 劳动合同法.md",
        "ingesting: 0/3 documents · contextual 1/1 chunks · 年休假条例.md",
        "ingesting: 1/3 documents · contextual 1/1 chunks · 规章/工资支付规定.txt",
    ]


def test_one_line_per_shared_reason_and_what_the_next_ingest_does(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_openai.always = ("status", 500, {}, json.dumps({"error": {"message": "GPU fell over"}}))
    r = cli_ingest(tmp_path, fake_openai, monkeypatch, model="m-lines", max_retries=0, transform="metadata")
    assert r.exit_code == 0, r.output
    why = f"{fake_openai.url}/chat/completions failed after 1 attempt(s): HTTP 500: GPU fell over"
    docs = "劳动合同法.md, 年休假条例.md, 规章/工资支付规定.txt"
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("  ")] == [
        f"  metadata skipped for 3 documents ({docs}): document metadata: {why} (kept without it)",
        f"  metadata skipped for 4 chunks of {docs}: {why} (kept without it)",
        "  the endpoint gave no answer for some chunks: the next `zhiku ingest` of these files asks again "
        "(replies already received come from the cache)",
    ]


def test_mcp_ingest_says_what_the_transforms_did_and_what_failed(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    """ingest_documents over MCP reported the documents and chunks only: an agent could not tell that every chunk
    was indexed without its enrichment because the LLM endpoint was down."""
    from helpers_kb import write_corpus
    from test_transforms_surfaces import call_tools, fake_settings

    write_corpus(tmp_path / "docs")
    settings = fake_settings(tmp_path, fake_openai, "m-mcp-ingest", ["contextual"])
    fake_openai.always = ("status", 500, {}, json.dumps({"error": {"message": "GPU fell over"}}))
    [down] = call_tools(settings, [("ingest_documents", {"paths": [str(tmp_path / "docs")]})])
    why = f"contextual: {fake_openai.url}/chat/completions failed after 1 attempt(s): HTTP 500: GPU fell over"
    assert down.structured_content["transforms"] == {
        "applied": {"contextual": 0},
        "kept_without": CORPUS_CHUNKS,
        "reasons": [f"{why} (×{CORPUS_CHUNKS})"],
        "retried": True,
    }
    assert down.content[0].text.splitlines()[1:] == [
        "LLM transforms: contextual 0",
        f"- kept without a transform: {why} (×{CORPUS_CHUNKS})",
        "- the endpoint gave no answer for some: ingesting these files again retries them",
    ]
    fake_openai.always = None
    [back] = call_tools(settings, [("ingest_documents", {"paths": [str(tmp_path / "docs")]})])
    assert back.structured_content["transforms"] == {
        "applied": {"contextual": CORPUS_CHUNKS},
        "kept_without": 0,
        "reasons": [],
        "retried": False,
    }
    assert len(back.structured_content["updated"]) == DOCS


def test_a_document_rewritten_without_transforms_is_enriched_again_when_they_are_back(
    kb_factory: Any, corpus: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """Enriched, then edited and ingested without transforms (its contexts are cleared), then ingested with them
    again: its last usage record still listed contextual, so it was skipped without contexts."""
    kb = open_kb(kb_factory, tmp_path / "idx", fake_openai, "m-retry-off", ["contextual"])
    assert kb.ingest([corpus]).transforms.applied == (("contextual", CORPUS_CHUNKS),)
    kb.close()
    leave = corpus / "年休假条例.md"
    leave.write_text(leave.read_text(encoding="utf-8") + "\n第四条 年休假在1个年度内可以集中安排。\n", encoding="utf-8")
    plain = open_kb(kb_factory, tmp_path / "idx", fake_openai, "m-retry-off", [])
    assert plain.ingest([corpus]).updated == ("年休假条例.md",)
    plain.close()
    kb = open_kb(kb_factory, tmp_path / "idx", fake_openai, "m-retry-off", ["contextual"])
    again = kb.ingest([corpus])
    assert (again.updated, len(again.skipped)) == (("年休假条例.md",), DOCS - 1)
    hits = kb.retrieve("紫罗兰卷宗", mode="bm25", top_k=10).hits  # every chunk has its context again
    assert sorted({h.chunk.source for h in hits}) == ["劳动合同法.md", "年休假条例.md", "规章/工资支付规定.txt"]


def test_a_damaged_reply_cache_is_one_clear_error(tmp_path: Path) -> None:
    from zhiku.errors import ConfigError
    from zhiku.llm import ReplyCache

    damaged = tmp_path / "llm.sqlite"
    damaged.write_bytes(b"not a database " * 100)
    for read_only in (False, True):  # an ingest, a dry run
        with pytest.raises(ConfigError) as e:
            ReplyCache(damaged, read_only=read_only)
        assert str(e.value) == (  # was a sqlite3.DatabaseError traceback
            f"the LLM reply cache {damaged} cannot be opened (file is not a database): it is only a cache, delete "
            "the file (or set cache_dir: null)"
        )


def test_the_last_usage_of_a_document_is_found_by_an_index(tmp_path: Path) -> None:
    """Every unchanged document of every ingest with transforms looks up its last usage record: without an index
    that is a scan of the whole (growing) llm_usage table per document."""
    import sqlite3

    from zhiku.ingest.transforms.store import ENRICH_FILE, EnrichmentStore, UsageRecord
    from zhiku.types import LLMUsage

    store = EnrichmentStore(tmp_path)
    assert store.recent_usage("hr", "a.md", 1) == []  # no file yet: nothing read, nothing created
    assert store.usage_history() == [] and not (tmp_path / ENRICH_FILE).exists()
    record = UsageRecord(6.0, "hr", "a.md", ("contextual",), LLMUsage(), (), "abc")
    store.record_usage(record)
    assert store.recent_usage("hr", "a.md", 1) == [record]
    store.close()
    db = sqlite3.connect(tmp_path / ENRICH_FILE)
    plan = db.execute(
        "EXPLAIN QUERY PLAN SELECT * FROM llm_usage WHERE collection = ? AND source = ? ORDER BY id DESC LIMIT 1",
        ("hr", "a.md"),
    ).fetchall()
    assert len(plan) == 1 and "USING INDEX llm_usage_by_source (collection=? AND source=?)" in plan[0][3]


def test_without_the_reply_cache_a_plain_ingest_neither_asks_again_nor_loses_what_is_stored(
    kb_factory: Any, corpus: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """llm.cache off: the retry of a document with one unanswered chunk asked every chunk again (nothing comes from a
    cache) and, the endpoint still failing, rewrote it without the contexts stored by the first ingest."""
    down = ("status", 500, {}, json.dumps({"error": {"message": "GPU fell over"}}))
    kb = open_kb(
        kb_factory, tmp_path / "idx", fake_openai, "m-retry-nocache", ["contextual"], cache=False, concurrency=1
    )
    fake_openai.then(*down).then(*down)  # the first chunk's two attempts (llm.max_retries 1)
    first = kb.ingest([corpus])
    assert [(i.source, i.unreached) for i in first.transforms.issues] == [("劳动合同法.md", True)]
    assert not first.transforms.retried  # so the summary does not promise a retry
    assert len(kb.retrieve("紫罗兰卷宗", mode="bm25", top_k=10).hits) == CORPUS_CHUNKS - 1
    sent = len(fake_openai.chats())
    fake_openai.always = down
    again = kb.ingest([corpus])
    assert (len(again.skipped), len(fake_openai.chats())) == (DOCS, sent)
    assert len(kb.retrieve("紫罗兰卷宗", mode="bm25", top_k=10).hits) == CORPUS_CHUNKS - 1  # nothing lost


def test_a_chunk_never_answered_is_asked_again_a_bounded_number_of_times(
    kb_factory: Any, corpus: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """An endpoint that never answers for a document (a chunk it always times out on): every plain ingest
    re-ingested it and waited out llm.timeout x the retries again, for good. After RETRY_LIMIT ingests in a row
    without an answer, only --force asks again."""
    from zhiku.ingest.transforms.stage import RETRY_LIMIT

    fake_openai.always = ("status", 500, {}, json.dumps({"error": {"message": "GPU fell over"}}))
    kb = open_kb(kb_factory, tmp_path / "idx", fake_openai, "m-retry-bounded", ["contextual"], max_retries=0)
    runs = [kb.ingest([corpus]) for _ in range(RETRY_LIMIT + 1)]
    assert [(len(r.added), len(r.updated), len(r.skipped)) for r in runs] == [
        (DOCS, 0, 0),
        *[(0, DOCS, 0)] * (RETRY_LIMIT - 1),
        (0, 0, DOCS),
    ]
    assert [r.transforms.retried for r in runs[:RETRY_LIMIT]] == [True] * (RETRY_LIMIT - 1) + [False]
    assert len(fake_openai.chats()) == RETRY_LIMIT * CORPUS_CHUNKS  # the last run sent nothing
    assert kb.plan_transforms([corpus]).documents == 0  # the dry run agrees

    fake_openai.always = None
    forced = kb.ingest([corpus], force=True)
    assert (len(forced.updated), forced.transforms.issues) == (DOCS, ())
    leave = corpus / "年休假条例.md"  # edited: its one chunk is asked (the others' contexts come from the cache)
    leave.write_text(leave.read_text(encoding="utf-8") + "\n第四条 年休假在1个年度内可以集中安排。\n", encoding="utf-8")
    fake_openai.then("status", 500, {}, "{}")  # a new miss after an answer: the count starts again
    missed = kb.ingest([corpus])
    assert (missed.updated, missed.transforms.retried) == (("年休假条例.md",), True)
    assert kb.ingest([corpus]).updated == ("年休假条例.md",)


def test_the_summary_does_not_promise_a_retry_a_plain_ingest_will_not_make(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_openai.always = ("status", 500, {}, json.dumps({"error": {"message": "GPU fell over"}}))
    r = cli_ingest(tmp_path, fake_openai, monkeypatch, model="m-no-promise", max_retries=0, cache=False)
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines()[-1] == (
        "  the endpoint gave no answer for some chunks: a plain `zhiku ingest` does not ask again (no cache_dir, "
        "or 3 ingests in a row got none); run it with --force once the endpoint is back"
    )


def test_a_changed_model_or_prompt_enriches_unchanged_documents_again(
    kb_factory: Any, corpus: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """Changing ``llm.model`` or a transform's prompt needed ``zhiku ingest --force``: a plain ingest skipped the
    unchanged files and their chunks kept the old model's contexts for good."""
    first = open_kb(kb_factory, tmp_path / "idx", fake_openai, "m-setup-a", ["contextual"])
    assert len(first.ingest([corpus]).added) == DOCS
    first.close()
    other = open_kb(kb_factory, tmp_path / "idx", fake_openai, "m-setup-b", ["contextual"])
    assert other.plan_transforms([corpus]).documents == DOCS  # the dry run decides as the ingest does
    moved = other.ingest([corpus])
    assert (len(moved.updated), moved.transforms.usage.calls, moved.transforms.usage.cached) == (DOCS, CORPUS_CHUNKS, 0)
    settled = other.ingest([corpus])
    assert (len(settled.skipped), settled.transforms.usage.calls) == (DOCS, 0)
    other.close()

    prompts = tmp_path / "prompts"
    prompts.mkdir()
    from zhiku.llm import Prompts

    builtin = Prompts().text("contextual", "zh")
    (prompts / "contextual.zh.txt").write_text(builtin.replace("<chunk>", "请简洁。\n<chunk>", 1), encoding="utf-8")
    edited = open_kb(kb_factory, tmp_path / "idx", fake_openai, "m-setup-b", ["contextual"], prompts_dir=str(prompts))
    again = edited.ingest([corpus])
    assert (len(again.updated), again.transforms.usage.calls) == (DOCS, CORPUS_CHUNKS)
    assert all("请简洁" in prompt_of(c.body)[0] for c in fake_openai.chats()[-CORPUS_CHUNKS:])
    assert len(edited.ingest([corpus]).skipped) == DOCS


def test_a_transform_switched_off_leaves_unchanged_documents_as_they_are(
    kb_factory: Any, corpus: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """Switching a transform off (or ingesting without the ``--transform`` of an earlier ingest) re-ingests nothing:
    a plain ``zhiku ingest`` must not strip what an earlier one bought; ``--force`` does. Another model for a
    transform still on does re-enrich."""
    both = open_kb(kb_factory, tmp_path / "idx", fake_openai, "m-setup-off", ["contextual", "metadata"])
    assert len(both.ingest([corpus]).added) == DOCS
    both.close()
    tags = open_kb(kb_factory, tmp_path / "idx", fake_openai, "m-setup-off", ["metadata"])
    kept = tags.ingest([corpus])
    assert (len(kept.skipped), kept.transforms.usage.calls) == (DOCS, 0)
    assert len(tags.retrieve("紫罗兰卷宗", mode="bm25", top_k=10).hits) == CORPUS_CHUNKS  # the contexts stay
    tags.close()
    none = open_kb(kb_factory, tmp_path / "idx", fake_openai, "m-setup-off", [])
    assert len(none.ingest([corpus]).skipped) == DOCS
    assert len(none.enrichments.tagged(["劳动法规"])[0]) == CORPUS_CHUNKS
    none.close()
    embedder = OpenAIEmbedder(OpenAICompatibleClient(fake_openai.url, max_retries=0), "fake-embed")
    fewer = kb_factory(
        tmp_path / "idx",
        embedder=embedder,
        llm=llm_settings(fake_openai, "m-setup-off-b"),
        transforms={"enabled": ["metadata"]},
    )
    changed = fewer.ingest([corpus])
    assert (len(changed.updated), changed.transforms.usage.calls) == (DOCS, CORPUS_CHUNKS + DOCS)
    assert fewer.retrieve("紫罗兰卷宗", mode="bm25", top_k=10).hits == ()  # re-ingested with what is on now
    assert len(fewer.ingest([corpus]).skipped) == DOCS


def test_usage_recorded_before_the_setup_was_kept_is_read_and_owes_nothing(tmp_path: Path) -> None:
    """An ``enrichments.sqlite`` written by an older zhiku (no ``setup`` column) opens read-only and for writing; its
    records say ``setup ""``, which a stage does not take for a change (its documents are not all re-enriched)."""
    import sqlite3

    from zhiku.ingest.transforms.store import EnrichmentStore, UsageRecord
    from zhiku.types import LLMUsage

    path = tmp_path / "enrichments.sqlite"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE llm_usage (id INTEGER PRIMARY KEY, at REAL NOT NULL, collection TEXT NOT NULL, source TEXT "
            "NOT NULL, transforms TEXT NOT NULL, calls INTEGER NOT NULL, cached INTEGER NOT NULL, prompt_tokens "
            "INTEGER NOT NULL, completion_tokens INTEGER NOT NULL, cost REAL NOT NULL, currency TEXT NOT NULL, "
            "issues TEXT NOT NULL)"
        )
        db.execute("INSERT INTO llm_usage VALUES (NULL, 5.0, 'c', 'a.md', 'contextual', 1, 0, 9, 3, 0.0, 'USD', '[]')")
    db.close()
    old = EnrichmentStore(tmp_path, read_only=True).recent_usage("c", "a.md", 3)
    assert [(r.source, r.transforms, r.setup) for r in old] == [("a.md", ("contextual",), "")]
    store = EnrichmentStore(tmp_path)
    store.record_usage(UsageRecord(6.0, "c", "a.md", ("contextual",), LLMUsage(), (), "abc"))
    assert [(r.at, r.setup) for r in store.recent_usage("c", "a.md", 3)] == [(6.0, "abc"), (5.0, "")]
    store.close()


def test_a_prompt_file_that_cannot_be_read_does_not_stop_the_ingest(
    kb_factory: Any, corpus: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """A prompt file in ``llm.prompts_dir`` saved as GBK, not UTF-8, for a language none of the documents is in:
    the ingest stopped with a UnicodeDecodeError after writing its first document (the setup digest read every
    language's prompt). It is enriched as before, and not owed by the next ingest until the file changes."""
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    (prompts / "contextual.en.txt").write_bytes("Answer in Chinese: 请用中文回答。\n<chunk>".encode("gbk"))
    kb = open_kb(kb_factory, tmp_path / "idx", fake_openai, "m-setup-gbk", ["contextual"], prompts_dir=str(prompts))
    first = kb.ingest([corpus])
    assert (len(first.added), first.failed) == (DOCS, ())
    assert (first.transforms.applied, first.transforms.issues) == ((("contextual", CORPUS_CHUNKS),), ())
    assert len(kb.ingest([corpus]).skipped) == DOCS
    kb.close()
    (prompts / "contextual.en.txt").write_text("Answer in Chinese: 请用中文回答。\n<chunk>", encoding="utf-8")
    fixed = open_kb(kb_factory, tmp_path / "idx", fake_openai, "m-setup-gbk", ["contextual"], prompts_dir=str(prompts))
    again = fixed.ingest([corpus])  # a changed prompt text: enriched again, the Chinese replies from the cache
    assert (len(again.updated), again.transforms.usage.calls, again.transforms.usage.cached) == (DOCS, 0, CORPUS_CHUNKS)


def test_reading_an_enrichment_file_from_before_the_setup_column_does_not_write_it(tmp_path: Path) -> None:
    """A server (not opened read-only) reading an older zhiku's ``enrichments.sqlite`` added the ``setup`` column on
    its first read: on a read-only mount every search that labels its hits failed ("attempt to write a readonly
    database"). A read leaves the file as it is; the first write adds the column."""
    import sqlite3

    from zhiku.ingest.transforms.store import SCHEMA, EnrichmentStore, UsageRecord
    from zhiku.types import LLMUsage

    path = tmp_path / "enrichments.sqlite"
    with sqlite3.connect(path) as db:
        db.executescript(SCHEMA.replace(", setup TEXT NOT NULL DEFAULT ''", ""))
        db.execute("INSERT INTO chunk_enrichment VALUES ('c1', 'd1', '紫罗兰', '', '', '', '[]')")
        db.execute("INSERT INTO llm_usage VALUES (NULL, 5.0, 'c', 'a.md', 'contextual', 1, 0, 9, 3, 0.0, 'USD', '[]')")
    db.close()
    before = path.read_bytes()

    def columns() -> list[str]:
        with sqlite3.connect(path) as db:
            names = [row[1] for row in db.execute("PRAGMA table_info(llm_usage)")]
        db.close()
        return names

    store = EnrichmentStore(tmp_path)
    assert store.chunk_enrichments(["c1"])["c1"].context == "紫罗兰"
    assert [(r.at, r.setup) for r in store.recent_usage("c", "a.md", 3)] == [(5.0, "")]
    assert [r.source for r in store.usage_history()] == ["a.md"]
    assert (path.read_bytes() == before, "setup" in columns()) == (True, False)
    store.record_usage(UsageRecord(6.0, "c", "a.md", ("contextual",), LLMUsage(), (), "abc"))
    assert "setup" in columns()
    assert [(r.at, r.setup) for r in store.recent_usage("c", "a.md", 3)] == [(6.0, "abc"), (5.0, "")]
    store.close()


def test_ingests_without_an_answer_count_towards_the_limit_only_with_the_same_setup(
    kb_factory: Any, corpus: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """An endpoint down for RETRY_LIMIT ingests, then another ``llm.model`` while it is still down: the new model's
    ingest counted as the limit's fourth without an answer, so no plain ingest asked the new model again (the
    contexts stayed missing until ``--force``). The count starts again with the setup."""
    from zhiku.ingest.transforms.stage import RETRY_LIMIT

    fake_openai.always = ("status", 500, {}, json.dumps({"error": {"message": "GPU fell over"}}))
    kb = open_kb(kb_factory, tmp_path / "idx", fake_openai, "m-limit-a", ["contextual"], max_retries=0)
    assert [kb.ingest([corpus]).transforms.retried for _ in range(RETRY_LIMIT)] == [True] * (RETRY_LIMIT - 1) + [False]
    kb.close()
    other = open_kb(kb_factory, tmp_path / "idx", fake_openai, "m-limit-b", ["contextual"], max_retries=0)
    moved = other.ingest([corpus])
    assert (len(moved.updated), moved.transforms.retried) == (DOCS, True)
    fake_openai.always = None
    back = other.ingest([corpus])
    assert (len(back.updated), back.transforms.usage.calls, back.transforms.issues) == (DOCS, CORPUS_CHUNKS, ())
    assert len(other.retrieve("紫罗兰卷宗", mode="bm25", top_k=10).hits) == CORPUS_CHUNKS


def test_a_built_in_prompt_counts_by_name_a_prompt_file_by_its_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A zhiku release that words a built-in prompt better must not re-buy every enrichment on the next plain
    ingest; a user's prompt file that changes does re-enrich. Each transform's setup is its own: one whose file
    changed is owed, the others are not."""
    from zhiku.ingest.transforms.stage import build_stage
    from zhiku.llm import Prompts
    from zhiku.settings import load_settings, merge

    base = merge(
        load_settings(index=tmp_path / "idx"), llm={"model": "m"}, transforms={"enabled": ["contextual", "refine"]}
    )
    builtin = json.loads(build_stage(base, None, planning=True).setup)  # type: ignore[union-attr]
    assert sorted(builtin) == ["contextual", "refine"]
    real = Prompts.text
    monkeypatch.setattr(Prompts, "text", lambda self, name, lang: real(self, name, lang) + "（新版措辞）")
    assert json.loads(build_stage(base, None, planning=True).setup) == builtin  # type: ignore[union-attr]
    monkeypatch.setattr(Prompts, "text", real)

    folder = tmp_path / "prompts"
    folder.mkdir()
    (folder / "refine.zh.txt").write_text("改写：${chunk}", encoding="utf-8")
    mine = merge(base, llm={"prompts_dir": str(folder)})
    first = json.loads(build_stage(mine, None, planning=True).setup)  # type: ignore[union-attr]
    assert first["contextual"] == builtin["contextual"] and first["refine"] != builtin["refine"]
    (folder / "refine.zh.txt").write_text("请改写：${chunk}", encoding="utf-8")
    second = json.loads(build_stage(mine, None, planning=True).setup)  # type: ignore[union-attr]
    assert second["contextual"] == first["contextual"] and second["refine"] != first["refine"]
