"""Decoded chunks kept in memory between reads (``chunk_cache``) never show: every read answers what the index holds
now, after this store's or another connection's commits."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from contracts.store_contract import LABOR, LABOR_V2, NOTE, WAGE, Doc
from zhiku.stores import SQLiteStore


def _moved(doc: Doc) -> Doc:
    """The same chunks (same ids: they hash source and text) under another heading."""
    chunks = [dataclasses.replace(c, section="第二章 > " + c.section) for c in doc.chunks]
    return Doc(doc.record, chunks, doc.tokens, doc.vectors)


def test_kept_chunks_follow_another_stores_commits(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "idx") as writer:
        LABOR.write(writer)
        with SQLiteStore(tmp_path / "idx", read_only=True) as reader:
            first = reader.get_chunks(LABOR.ids)
            assert first == LABOR.chunks and reader.document_chunks("doc-labor") == LABOR.chunks
            assert reader.get_chunks(LABOR.ids[::-1]) == first[::-1]  # in the order asked
            moved = _moved(LABOR)
            moved.write(writer)  # another connection commits: same chunk ids, new sections
            assert reader.get_chunks(LABOR.ids) == moved.chunks
            assert reader.document_chunks("doc-labor") == moved.chunks
            LABOR_V2.write(writer)  # the document replaced by one chunk with another id
            assert reader.get_chunks(LABOR.ids + LABOR_V2.ids) == LABOR_V2.chunks
            assert reader.document_chunks("doc-labor") == LABOR_V2.chunks
            writer.delete_document("doc-labor")
            assert reader.get_chunks(LABOR_V2.ids) == [] and reader.document_chunks("doc-labor") == []
            WAGE.write(writer)
            assert reader.get_chunks(WAGE.ids) == WAGE.chunks  # kept
            NOTE.write(writer)
            _moved(WAGE).write(writer)
            # one kept (now outdated), one read: the read rows are of a newer version, so all are read again
            assert reader.get_chunks(NOTE.ids + WAGE.ids) == NOTE.chunks + _moved(WAGE).chunks


def test_the_writer_sees_its_own_commits(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "idx") as store:
        WAGE.write(store)
        assert store.get_chunks(WAGE.ids) == WAGE.chunks
        _moved(WAGE).write(store)
        assert store.get_chunks(WAGE.ids) == _moved(WAGE).chunks
