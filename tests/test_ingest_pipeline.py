"""The ingest pipeline: chunks embedded in calls of
``ingest.batch_chunks`` across documents, documents written in order, progress after every call, and a bad file
or a failed embedding that costs only its own document. Embedding calls are counted by a wrapper around the real
(cached) bundled embedder."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from helpers_kb import CORPUS_CHUNKS, SEC_LEAVE, SEC_PROBATION, SEC_SEVERANCE, write_corpus
from zhiku.ingest import pipeline
from zhiku.ingest.pipeline import index_text
from zhiku.types import SourceDoc

SOURCES = ("劳动合同法.md", "年休假条例.md", "规章/工资支付规定.txt")
# A document of five one-sentence articles: five short chunks (cheap to embed for real).
ARTICLES = "# 五条\n\n" + "\n\n".join(
    f"## 第{n}条\n\n{text}"
    for n, text in zip(
        "一二三四五",
        (
            "劳动者享有平等就业的权利。",
            "用人单位应当依法建立规章制度。",
            "工资应当以货币形式按月支付。",
            "劳动者每日工作时间不超过八小时。",
            "女职工享受产假。",
        ),
        strict=True,
    )
)


class Counting:
    """The real embedder, with each ``embed_documents`` call's size recorded; a text holding ``fail_on`` makes
    the call raise (a fault in one document's text, not in the service)."""

    def __init__(self, inner: Any, fail_on: str | None = None) -> None:
        self.inner = inner
        self.fail_on = fail_on
        self.calls: list[int] = []
        self.failed: list[int] = []

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def computed(self) -> int:
        return self.inner.computed

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if self.fail_on is not None and any(self.fail_on in t for t in texts):
            self.failed.append(len(texts))
            raise ValueError(f"cannot embed a text holding {self.fail_on}")
        self.calls.append(len(texts))
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)


def _stored(index: Path) -> list[tuple[str, str, np.ndarray]]:
    """(source, section, vector) of every stored chunk, in rowid (write) order, read from the SQLite file."""
    with sqlite3.connect(index / "zhiku.db") as db:
        rows = db.execute(
            "SELECT d.source, c.section, c.vector FROM chunks c JOIN documents d USING (doc_id) ORDER BY c.rowid"
        ).fetchall()
    return [(s, sec, np.frombuffer(v, dtype=np.float32)) for s, sec, v in rows]


def test_chunks_are_embedded_in_counted_batches_with_progress_per_call(
    kb_factory, cached_embedder, corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counting = Counting(cached_embedder())
    monkeypatch.setattr(pipeline, "BATCH_CHUNKS", 3)
    kb = kb_factory(tmp_path / "idx", embedder=counting)
    events: list[tuple[int, int, str]] = []
    report = kb.ingest([corpus], on_progress=lambda d, t, name: events.append((d, t, name)))
    assert report.added == SOURCES and report.chunks_written == CORPUS_CHUNKS == 4
    assert counting.calls == [3, 1]  # 2 + 1 chunks in one call, the last chunk at the end
    assert events == [
        (0, 3, ""),  # the count first, before a document is prepared
        (0, 3, "劳动合同法.md"),
        (1, 3, "年休假条例.md"),
        (2, 3, "3/3 chunks embedded"),
        (2, 3, "规章/工资支付规定.txt"),
        (3, 3, "4/4 chunks embedded"),
        (3, 3, ""),
    ]
    assert [(s, sec) for s, sec, _ in _stored(tmp_path / "idx")] == [
        ("劳动合同法.md", SEC_PROBATION),
        ("劳动合同法.md", SEC_SEVERANCE),
        ("年休假条例.md", SEC_LEAVE),
        ("规章/工资支付规定.txt", ""),
    ]
    assert [r.status for r in kb.history()] == ["added"] * 3


def test_a_large_document_is_spread_over_several_calls_and_keeps_its_vectors_in_order(
    kb_factory, cached_embedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = write_corpus(
        tmp_path / "docs", {"a_五条.md": ARTICLES, "b_工资.txt": "工资应当按月足额支付给劳动者本人。\n"}
    )
    counting = Counting(cached_embedder())
    monkeypatch.setattr(pipeline, "BATCH_CHUNKS", 2)
    kb = kb_factory(tmp_path / "idx", embedder=counting)
    notes: list[str] = []
    report = kb.ingest([docs], on_progress=lambda d, t, name: notes.append(name) if "chunks" in name else None)
    assert (report.added, report.chunks_written) == (("a_五条.md", "b_工资.txt"), 6)
    assert counting.calls == [2, 2, 2]  # the five articles over three calls, the last shared with the other file
    assert notes == ["2/5 chunks embedded", "4/5 chunks embedded", "6/6 chunks embedded"]
    stored = _stored(tmp_path / "idx")
    assert [sec for _, sec, _ in stored] == [f"五条 > 第{n}条" for n in "一二三四五"] + [""]
    texts = [index_text(d.title, c.section, c.text) for d in kb.documents() for c in kb.store.document_chunks(d.doc_id)]
    alone = cached_embedder().embed_documents(texts)
    for (_, _, vec), expected in zip(stored, alone, strict=True):  # each chunk got its own text's vector
        assert float(vec @ expected) > 0.999


def test_a_bad_file_in_the_middle_of_a_batch_fails_alone(
    kb_factory, cached_embedder, corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (corpus / "劳动合同法.md").rename(corpus / "a_劳动合同法.md")
    (corpus / "b_坏.md").write_bytes(b"\x00\x01binary\x00")
    (corpus / "c_空.md").write_text("# 只有标题\n", encoding="utf-8")
    (corpus / "年休假条例.md").rename(corpus / "d_年休假条例.md")
    counting = Counting(cached_embedder())
    monkeypatch.setattr(pipeline, "BATCH_CHUNKS", 100)
    kb = kb_factory(tmp_path / "idx", embedder=counting)
    report = kb.ingest([corpus])
    bad, empty = str((corpus / "b_坏.md").resolve()), str((corpus / "c_空.md").resolve())
    assert report.added == ("a_劳动合同法.md", "d_年休假条例.md", "规章/工资支付规定.txt")
    assert [(f.path, f.reason) for f in report.failed] == [
        (bad, f"binary file, not text (it contains NUL bytes): {bad}"),
        (empty, "no text to index in c_空.md (the file holds no words)"),
    ]
    assert counting.calls == [4]  # the good files' chunks in one call
    assert [(r.status, Path(r.path).name) for r in reversed(kb.history())] == [
        ("failed", "b_坏.md"),
        ("failed", "c_空.md"),
        ("added", "a_劳动合同法.md"),
        ("added", "d_年休假条例.md"),
        ("added", "工资支付规定.txt"),
    ]


def test_a_document_whose_embedding_fails_is_lost_alone(
    kb_factory, cached_embedder, corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counting = Counting(cached_embedder(), fail_on="年休假")
    monkeypatch.setattr(pipeline, "BATCH_CHUNKS", 100)
    kb = kb_factory(tmp_path / "idx", embedder=counting)
    report = kb.ingest([corpus])
    leave = str((corpus / "年休假条例.md").resolve())
    assert report.added == ("劳动合同法.md", "规章/工资支付规定.txt") and report.chunks_written == 3
    assert [(f.path, f.reason) for f in report.failed] == [
        (leave, "embedding failed: ValueError: cannot embed a text holding 年休假")
    ]
    assert (counting.failed, counting.calls) == ([4, 1], [2, 1])  # the shared call, then each document alone
    assert [d.source for d in kb.documents()] == ["劳动合同法.md", "规章/工资支付规定.txt"]


def test_in_memory_documents_are_batched_by_chunks_too(
    kb_factory, cached_embedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from helpers_kb import CORPUS

    docs = [SourceDoc(source=s, doc_type="markdown", title=s, text=t) for s, t in CORPUS.items()]
    counting = Counting(cached_embedder())
    monkeypatch.setattr(pipeline, "BATCH_CHUNKS", 2)
    kb = kb_factory(tmp_path / "idx", embedder=counting)
    events: list[tuple[int, int, str]] = []
    report = kb.ingest_documents(docs, on_progress=lambda d, t, name: events.append((d, t, name)))
    assert (report.added, report.chunks_written) == (tuple(CORPUS), 4)
    assert counting.calls == [2, 2]
    assert [e for e in events if "chunks" in e[2]] == [(1, 3, "2/2 chunks embedded"), (3, 3, "4/4 chunks embedded")]
    again = kb.ingest_documents(docs)
    assert (again.skipped, again.chunks_written, counting.calls) == (tuple(CORPUS), 0, [2, 2])
