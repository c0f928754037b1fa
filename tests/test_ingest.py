"""Incremental ingestion through ``KnowledgeBase.ingest``: skip unchanged files, replace changed ones, ``sync``,
``delete``, ``dry_run``, ``force``, and bad files that fail alone without losing what is stored."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers_kb import CORPUS, CORPUS_CHUNKS, LEAVE_RULES, LEAVE_RULES_V2, SEC_LEAVE, SEC_PROBATION
from zhiku.errors import InvalidInput, NotFound
from zhiku.types import CollectionStats

SOURCES = ("劳动合同法.md", "年休假条例.md", "规章/工资支付规定.txt")  # walk order: files of a folder, then sub-folders
ALL_COUNTS = {"added": 3, "updated": 0, "skipped": 0, "removed": 0, "failed": 0}
MODES = ("bm25", "dense", "hybrid")


def _leave_chunk_text(markdown: str) -> str:
    """The chunk text of a one-section leave document: its paragraphs after the H1, blank-line separated."""
    return markdown.split("\n", 2)[2].strip() if markdown else ""


def _chars(files: dict[str, str]) -> int:
    """Characters of every chunk of the corpus: the bodies of its sections/paragraph groups."""
    law = CORPUS["劳动合同法.md"]
    return (
        len(law.split("\n\n")[2])
        + len(law.split("\n\n")[4].strip())
        + len(_leave_chunk_text(files["年休假条例.md"]))
        + len(files["规章/工资支付规定.txt"].strip())
    )


def test_first_ingest_then_unchanged_folder_writes_nothing(kb_factory, corpus: Path, tmp_path: Path) -> None:
    kb = kb_factory(tmp_path / "idx")
    first = kb.ingest([corpus])
    assert first.counts() == ALL_COUNTS
    assert first.added == SOURCES
    assert (first.chunks_written, first.failed, first.dry_run) == (CORPUS_CHUNKS, (), False)
    assert kb.store.index_version() == 3  # one transaction per document
    assert kb.collections() == [CollectionStats("hr", 3, CORPUS_CHUNKS, _chars(CORPUS))]
    history = kb.history()
    assert sorted((r.status, r.path, r.chunk_count, r.error) for r in history) == sorted(
        ("added", str((corpus / s).resolve()), n, None) for s, n in zip(SOURCES, (2, 1, 1), strict=False)
    )

    for again in (kb, kb_factory(tmp_path / "idx")):  # the same object, and a fresh one on the same index
        report = again.ingest([corpus])
        assert report.counts() == {"added": 0, "updated": 0, "skipped": 3, "removed": 0, "failed": 0}
        assert report.skipped == SOURCES
        assert (report.chunks_written, report.chunks_embedded) == (0, 0)
        assert again.store.index_version() == 3
        assert again.history() == history
        assert again.collections() == [CollectionStats("hr", 3, CORPUS_CHUNKS, _chars(CORPUS))]


def test_editing_one_file_reindexes_only_that_file(kb_factory, corpus: Path, tmp_path: Path) -> None:
    kb = kb_factory(tmp_path / "idx")
    kb.ingest([corpus])
    old = kb.documents()[1]
    assert old.source == "年休假条例.md"
    old_ids = {c.chunk_id for c in kb.store.document_chunks(old.doc_id)}
    assert kb.retrieve("应休未休", mode="bm25").hits[0].chunk.source == "年休假条例.md"
    assert kb.retrieve("疗养假期", mode="bm25").hits == ()

    (corpus / "年休假条例.md").write_text(LEAVE_RULES_V2, encoding="utf-8")
    report = kb.ingest([corpus])
    assert report.counts() == {"added": 0, "updated": 1, "skipped": 2, "removed": 0, "failed": 0}
    assert (report.updated, report.skipped) == (("年休假条例.md",), ("劳动合同法.md", "规章/工资支付规定.txt"))
    assert report.chunks_written == 1
    assert kb.store.index_version() == 4

    new = kb.store.find_document("hr", "年休假条例.md")
    assert new is not None and new.doc_id == old.doc_id and new.sha256 != old.sha256
    new_chunks = kb.store.document_chunks(new.doc_id)
    assert [(c.section, c.text) for c in new_chunks] == [
        ("职工带薪年休假条例 > 第三条", _leave_chunk_text(LEAVE_RULES_V2))
    ]
    assert kb.collections() == [
        CollectionStats("hr", 3, CORPUS_CHUNKS, _chars({**CORPUS, "年休假条例.md": LEAVE_RULES_V2}))
    ]

    for searcher in (kb, kb_factory(tmp_path / "idx", read_only=True)):  # patched vectors, and freshly loaded ones
        assert searcher.retrieve("应休未休", mode="bm25").hits == ()
        top = searcher.retrieve("疗养假期", mode="bm25").hits
        assert [(h.chunk.source, h.chunk.section) for h in top] == [("年休假条例.md", "职工带薪年休假条例 > 第三条")]
        for mode in ("dense", "hybrid"):
            hits = searcher.retrieve("应休未休的年休假怎么补偿", mode=mode, top_k=10).hits
            assert len(hits) == CORPUS_CHUNKS
            assert not old_ids & {h.chunk.chunk_id for h in hits}
            assert not any("应休未休" in h.chunk.text for h in hits)
            assert new_chunks[0].chunk_id in {h.chunk.chunk_id for h in hits}
        assert searcher.retrieve("疗养假期", mode="dense").hits[0].chunk.chunk_id == new_chunks[0].chunk_id


def test_sync_removes_documents_whose_files_are_gone(kb_factory, corpus: Path, tmp_path: Path) -> None:
    kb = kb_factory(tmp_path / "idx")
    kb.ingest([corpus])
    (corpus / "年休假条例.md").unlink()

    without = kb.ingest([corpus])  # without sync a vanished file is left alone
    assert without.counts() == {"added": 0, "updated": 0, "skipped": 2, "removed": 0, "failed": 0}
    assert [d.source for d in kb.documents()] == list(SOURCES)

    report = kb.ingest([corpus], sync=True)
    assert report.counts() == {"added": 0, "updated": 0, "skipped": 2, "removed": 1, "failed": 0}
    assert report.removed == ("年休假条例.md",)
    assert [d.source for d in kb.documents()] == ["劳动合同法.md", "规章/工资支付规定.txt"]
    assert [d.source for d in kb.documents("hr")] == ["劳动合同法.md", "规章/工资支付规定.txt"]
    remaining = {**CORPUS, "年休假条例.md": ""}
    assert kb.collections() == [CollectionStats("hr", 2, 3, _chars(remaining))]
    row = kb.history(1)[0]
    assert (row.status, row.path, row.error) == ("removed", str((corpus / "年休假条例.md").resolve()), None)

    for searcher in (kb, kb_factory(tmp_path / "idx", read_only=True)):
        assert searcher.retrieve("年休假有几天", mode="bm25").hits == ()
        for mode in ("dense", "hybrid"):
            hits = searcher.retrieve("年休假有几天", mode=mode, top_k=10).hits
            assert sorted(h.chunk.source for h in hits) == ["劳动合同法.md", "劳动合同法.md", "规章/工资支付规定.txt"]

    again = kb.ingest([corpus], sync=True)  # nothing left to remove
    assert again.counts() == {"added": 0, "updated": 0, "skipped": 2, "removed": 0, "failed": 0}


def test_sync_only_touches_the_given_folders_and_collection(kb_factory, corpus: Path, tmp_path: Path) -> None:
    kb = kb_factory(tmp_path / "idx")
    kb.ingest([corpus])
    other = tmp_path / "other"
    other.mkdir()
    (other / "笔记.txt").write_text(CORPUS["规章/工资支付规定.txt"], encoding="utf-8")
    kb.ingest([other], collection="notes")
    (corpus / "年休假条例.md").unlink()
    report = kb.ingest([other], sync=True)  # collection hr, folder "other": hr's documents live elsewhere
    assert report.counts() == {"added": 1, "updated": 0, "skipped": 0, "removed": 0, "failed": 0}
    assert kb.ingest([corpus], collection="notes", sync=True).removed == ()
    assert [(d.collection, d.source) for d in kb.documents()] == [
        ("hr", "劳动合同法.md"),
        ("hr", "年休假条例.md"),
        ("hr", "笔记.txt"),
        ("hr", "规章/工资支付规定.txt"),
        ("notes", "劳动合同法.md"),
        ("notes", "笔记.txt"),
        ("notes", "规章/工资支付规定.txt"),
    ]


def test_deleted_document_never_comes_back_in_results(kb_factory, corpus: Path, tmp_path: Path) -> None:
    kb = kb_factory(tmp_path / "idx")
    kb.ingest([corpus])
    doc = kb.delete("年休假条例.md")
    assert (doc.source, doc.collection, doc.chunk_count) == ("年休假条例.md", "hr", 1)
    assert kb.store.get_document(doc.doc_id) is None
    assert kb.store.document_chunks(doc.doc_id) == []
    assert [d.source for d in kb.documents()] == ["劳动合同法.md", "规章/工资支付规定.txt"]
    assert kb.collections() == [CollectionStats("hr", 2, 3, _chars({**CORPUS, "年休假条例.md": ""}))]
    for searcher in (kb, kb_factory(tmp_path / "idx", read_only=True)):
        for query in ("年休假有几天", "職工帶薪年休假", "应休未休"):
            for mode in MODES:
                hits = searcher.retrieve(query, mode=mode, top_k=100).hits
                assert "年休假条例.md" not in {h.chunk.source for h in hits}
                assert doc.doc_id not in {h.chunk.doc_id for h in hits}

    by_id = kb.delete(kb.documents()[0].doc_id)  # by id as well
    assert by_id.source == "劳动合同法.md"
    assert [d.source for d in kb.documents()] == ["规章/工资支付规定.txt"]
    assert kb.retrieve("试用期最长多久", mode="bm25").hits == ()


def test_delete_refuses_unknown_and_ambiguous_references(kb_factory, corpus: Path, tmp_path: Path) -> None:
    idx = tmp_path / "idx"
    kb = kb_factory(idx)
    kb.ingest([corpus])
    with pytest.raises(NotFound) as e:
        kb.delete("不存在.md")
    assert str(e.value) == f"no document '不存在.md' in {idx} (list them with `zhiku documents`)"
    with pytest.raises(NotFound) as e:
        kb.delete("劳动合同法.md", collection="notes")
    assert str(e.value) == f"no document '劳动合同法.md' in {idx} collection 'notes' (list them with `zhiku documents`)"
    with pytest.raises(NotFound) as e:  # literal: a pattern is a name here
        kb.delete("*.md")
    assert "(a name, not a pattern: see `zhiku delete --glob`)" in str(e.value)
    with pytest.raises(InvalidInput) as e:
        kb.delete("  ")
    assert str(e.value) == "name a document: its id (see `zhiku documents`) or its path"
    assert len(kb.documents()) == 3


def test_dry_run_reports_changes_and_writes_nothing(kb_factory, corpus: Path, tmp_path: Path) -> None:
    kb = kb_factory(tmp_path / "idx")
    kb.ingest([corpus])
    version, history, docs = kb.store.index_version(), kb.history(), kb.documents()
    (corpus / "年休假条例.md").write_text(LEAVE_RULES_V2, encoding="utf-8")
    (corpus / "规章/工资支付规定.txt").unlink()
    (corpus / "新规定.md").write_text("# 新规定\n\n第一条 本规定自发布之日起施行。\n", encoding="utf-8")

    report = kb.ingest([corpus], dry_run=True, sync=True)
    assert report.dry_run is True
    assert report.counts() == {"added": 1, "updated": 1, "skipped": 1, "removed": 1, "failed": 0}
    assert (report.added, report.updated, report.skipped, report.removed) == (
        ("新规定.md",),
        ("年休假条例.md",),
        ("劳动合同法.md",),
        ("规章/工资支付规定.txt",),
    )
    assert (report.chunks_written, report.chunks_embedded) == (0, 0)
    assert kb.store.index_version() == version
    assert kb.history() == history
    assert kb.documents() == docs
    assert kb.retrieve("应休未休", mode="bm25").hits[0].chunk.section == SEC_LEAVE
    assert kb.retrieve("疗养假期", mode="bm25").hits == ()

    missing = kb.ingest([corpus / "不存在.md"], dry_run=True)  # a failure is reported, not recorded
    assert [(f.path, f.reason) for f in missing.failed] == [(str(corpus / "不存在.md"), "no such file or directory")]
    assert kb.history() == history


def test_force_reindexes_unchanged_files_from_the_embedding_cache(kb_factory, corpus: Path, tmp_path: Path) -> None:
    kb_factory(tmp_path / "idx").ingest([corpus])
    kb = kb_factory(tmp_path / "idx")  # a fresh CachedEmbedder: computed == 0
    report = kb.ingest([corpus], force=True)
    assert report.counts() == {"added": 0, "updated": 3, "skipped": 0, "removed": 0, "failed": 0}
    assert report.updated == SOURCES
    assert (report.chunks_written, report.chunks_embedded) == (CORPUS_CHUNKS, 0)
    assert kb.embedder.computed == 0
    assert kb.store.index_version() == 6
    assert [r.status for r in kb.history(3)] == ["updated", "updated", "updated"]
    assert kb.collections() == [CollectionStats("hr", 3, CORPUS_CHUNKS, _chars(CORPUS))]
    hit = kb.retrieve("试用期最长多久").hits[0]
    assert (hit.chunk.source, hit.chunk.section) == ("劳动合同法.md", SEC_PROBATION)


# --- bad input: each file fails alone, with the reason; the rest of the batch is ingested ------------------
def test_bad_files_fail_alone_with_reasons(kb_factory, tmp_path: Path) -> None:
    folder = tmp_path / "混合"
    folder.mkdir()
    (folder / "劳动合同法.md").write_text(CORPUS["劳动合同法.md"], encoding="utf-8")
    (folder / "空文件.md").write_bytes(b"")
    (folder / "空白.txt").write_text(" \n\t\n", encoding="utf-8")
    (folder / "二进制.md").write_bytes(b"\x00\x01\x02\x03binary\x00")
    (folder / "乱码.txt").write_bytes(b"\xff\xff\x81\xff\xfe\xfe")
    (folder / "只有标题.md").write_text("# 只有标题\n\n## 小节\n", encoding="utf-8")
    (folder / "伪装.md").write_bytes(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    pdf = tmp_path / "报告.pdf"
    pdf.write_bytes(b"%PDF-1.4\n")
    missing = tmp_path / "不存在.md"

    kb = kb_factory(tmp_path / "idx")
    report = kb.ingest([folder, pdf, missing])
    assert report.added == ("劳动合同法.md",)
    assert report.counts() == {"added": 1, "updated": 0, "skipped": 0, "removed": 0, "failed": 8}
    assert report.chunks_written == 2
    p = {name: str((folder / name).resolve()) for name in os.listdir(folder)}
    expected = {
        str(missing): "no such file or directory",
        str(pdf): f"cannot open PDF {pdf}: it is corrupt or truncated (not a readable PDF structure)",
        p["空文件.md"]: f"empty file (0 bytes): {p['空文件.md']}",
        p["空白.txt"]: f"no text in file (only whitespace): {p['空白.txt']}",
        p["二进制.md"]: f"binary file, not text (it contains NUL bytes): {p['二进制.md']}",
        p["乱码.txt"]: f"{p['乱码.txt']} holds 6 bytes that are not UTF-8: too short to tell its encoding; "
        "convert the file to UTF-8",
        p["只有标题.md"]: "no text to index in 只有标题.md (the file holds no words)",
        p["伪装.md"]: f"content is PDF, not text: the file name's suffix is wrong ({p['伪装.md']})",
    }
    assert {f.path: f.reason for f in report.failed} == expected
    failed_rows = {r.path: (r.error, r.chunk_count, r.collection) for r in kb.history() if r.status == "failed"}
    assert failed_rows == {path: (reason, 0, "hr") for path, reason in expected.items()}
    assert [(r.status, r.path) for r in kb.history() if r.status != "failed"] == [("added", p["劳动合同法.md"])]
    assert [d.source for d in kb.documents()] == ["劳动合同法.md"]
    assert kb.retrieve("试用期最长多久", mode="bm25").hits[0].chunk.section == SEC_PROBATION


def test_a_file_that_turns_bad_keeps_its_stored_version(kb_factory, corpus: Path, tmp_path: Path) -> None:
    kb = kb_factory(tmp_path / "idx")
    kb.ingest([corpus])
    before = kb.store.find_document("hr", "年休假条例.md")
    (corpus / "年休假条例.md").write_bytes(b"\x00\x00garbage")
    report = kb.ingest([corpus], sync=True)
    bad = str((corpus / "年休假条例.md").resolve())
    assert report.counts() == {"added": 0, "updated": 0, "skipped": 2, "removed": 0, "failed": 1}
    assert [(f.path, f.reason) for f in report.failed] == [
        (bad, f"binary file, not text (it contains NUL bytes): {bad}")
    ]
    assert kb.store.find_document("hr", "年休假条例.md") == before
    assert kb.retrieve("年休假有几天", mode="bm25").hits[0].chunk.text == _leave_chunk_text(LEAVE_RULES)
    assert kb.collections() == [CollectionStats("hr", 3, CORPUS_CHUNKS, _chars(CORPUS))]


def test_a_same_named_file_of_another_folder_does_not_replace_a_document(
    kb_factory, corpus: Path, tmp_path: Path
) -> None:
    """Two folders ingested into one collection both hold `劳动合同法.md`: the second used to replace the first
    ("1 updated"), whose text then vanished from the answers. It fails with the fix instead; a folder that moved
    (its old file gone) still replaces its documents."""
    kb = kb_factory(tmp_path / "idx")
    kb.ingest([corpus])
    before = kb.store.find_document("hr", "劳动合同法.md")
    other = tmp_path / "分公司"
    other.mkdir()
    (other / "劳动合同法.md").write_text("# 分公司劳动合同补充规定\n\n第一条 分公司员工的试用期为两个月。\n", "utf-8")
    (other / "附件.md").write_text("# 附件\n\n分公司的考勤以企业微信打卡为准。\n", encoding="utf-8")
    report = kb.ingest([other])
    first = str((corpus / "劳动合同法.md").resolve())
    assert report.counts() == {"added": 1, "updated": 0, "skipped": 0, "removed": 0, "failed": 1}
    assert [(f.path, f.reason) for f in report.failed] == [
        (
            str((other / "劳动合同法.md").resolve()),
            f"{first} is already indexed as '劳动合同法.md' in collection 'hr'; this file would replace it: ingest "
            "the two folders into different collections (-c NAME), or ingest their common parent folder so that "
            "their names differ",
        )
    ]
    assert kb.store.find_document("hr", "劳动合同法.md") == before
    assert kb.ingest([other], collection="分公司").counts()["added"] == 2  # another collection: both kept

    moved = tmp_path / "moved"
    corpus.rename(moved)
    again = kb.ingest([moved])
    assert again.counts() == {"added": 0, "updated": 0, "skipped": 3, "removed": 0, "failed": 0}


def test_two_same_named_files_of_one_run_do_not_replace_each_other(kb_factory, tmp_path: Path) -> None:
    """`zhiku ingest A B`, both holding `说明.md`: both were prepared before either was stored, so the check
    against stored documents saw neither and B's silently replaced A's ("2 added", one document). The second
    fails before it is read; when one of them is already stored, that one is kept."""
    a, b = tmp_path / "A", tmp_path / "B"
    for folder, text in ((a, "甲公司的年假为十天。"), (b, "乙公司的年假为十五天。")):
        folder.mkdir()
        (folder / "说明.md").write_text(f"# 说明\n\n{text}\n", encoding="utf-8")
    first, second = str((a / "说明.md").resolve()), str((b / "说明.md").resolve())
    fix = "ingest the two folders into different collections (-c NAME), or ingest their common parent folder so that "
    fix += "their names differ"
    kb = kb_factory(tmp_path / "idx")
    report = kb.ingest([a, b])
    assert report.counts() == {"added": 1, "updated": 0, "skipped": 0, "removed": 0, "failed": 1}
    assert [(f.path, f.reason) for f in report.failed] == [
        (second, f"{first} is also named '说明.md' in this run; this file would replace it in collection 'hr': {fix}")
    ]
    assert [(d.source, d.path) for d in kb.store.list_documents("hr")] == [("说明.md", first)]
    named = kb.ingest([b / "说明.md", a / "说明.md"], sync=True)  # files named one by one; the stored one is kept
    assert named.counts() == {"added": 0, "updated": 0, "skipped": 1, "removed": 0, "failed": 1}
    assert [f.path for f in named.failed] == [second]
    assert [(d.source, d.path) for d in kb.store.list_documents("hr")] == [("说明.md", first)]


def test_invalid_collection_name_is_refused(kb_factory, corpus: Path, tmp_path: Path) -> None:
    kb = kb_factory(tmp_path / "idx")
    with pytest.raises(InvalidInput) as e:
        kb.ingest([corpus], collection="a/b")
    assert str(e.value) == "invalid collection name 'a/b': use 1–64 characters without slashes"
    assert kb.documents() == []
