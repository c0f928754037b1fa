"""Decoded chunks kept in memory between reads (``ChunkCache``): served while the index version stands, dropped
when any store commits a change, bounded."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from contracts.store_contract import LABOR, LABOR_V2, NOTE, WAGE, Doc
from zhiku.stores import SQLiteStore
from zhiku.stores._sqlite_read import ChunkCache


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
            assert reader.get_chunks(LABOR.ids[::-1])[1] is first[0]  # from memory, in the order asked
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


def test_the_cache_holds_one_version_and_at_most_its_size() -> None:
    cache = ChunkCache(size=3, weight=lambda c: 1)  # (counted: one each)
    a, b = LABOR.chunks
    (w,), (n,) = WAGE.chunks, NOTE.chunks
    assert cache.chunks([a.chunk_id]) == (-1, {})
    cache.add(5, [a, b])
    assert cache.chunks([a.chunk_id, w.chunk_id]) == (5, {a.chunk_id: a})
    cache.add(4, [w])  # read by a reader behind a commit: not added
    assert cache.chunks([w.chunk_id]) == (5, {})
    cache.add(5, [w], doc=("doc-labor", (a, b)))  # 3 chunks + 2 in the list: the oldest go first
    assert cache.chunks([a.chunk_id, b.chunk_id, w.chunk_id]) == (5, {w.chunk_id: w})
    assert cache.document("doc-labor") == (5, (a, b))
    cache.add(5, [n])  # still over: single chunks go before the older list
    assert cache.chunks([w.chunk_id, n.chunk_id]) == (5, {n.chunk_id: n})
    assert cache.document("doc-labor") == (5, (a, b))
    cache.add(6, [w])  # a newer version empties it first
    assert cache.chunks([n.chunk_id, w.chunk_id]) == (6, {w.chunk_id: w}) and cache.document("doc-labor") == (6, None)
    off = ChunkCache(size=0)
    off.add(1, [a], doc=("doc-labor", (a, b)))
    assert off.chunks([a.chunk_id]) == (1, {}) and off.document("doc-labor") == (1, None)


def test_an_index_gone_back_to_an_older_version_forgets_its_kept_chunks(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "idx") as store:
        LABOR.write(store)
        NOTE.write(store)
        assert store.get_chunks(NOTE.ids) == NOTE.chunks  # kept at version 2
        assert store.bm25_search(["会议"], 5) and store.bm25.snap is not None
        version = store.index_version()
        # as if the file now held another index's past: its searches' snapshot and its kept chunks are 2 ahead,
        # and that other index kept NOTE's chunk id under another heading
        other = _moved(NOTE).chunks
        store.bm25.snap = dataclasses.replace(store.bm25.snap, version=version + 2)
        store.catalogue.cache.add(version + 2, other, doc=("doc-note", tuple(other)))
        assert store.bm25_search(["会议"], 5)  # the search sees the version go back
        WAGE.write(store)
        LABOR_V2.write(store)  # this index now reaches the version the other one's chunks were kept at
        assert store.index_version() == version + 2
        assert store.get_chunks(NOTE.ids) == NOTE.chunks
        assert store.document_chunks("doc-note") == NOTE.chunks


def test_a_stores_cache_is_bounded_by_the_texts_it_holds() -> None:
    """The store weighs each kept chunk by its text (and ``CHUNK_WEIGHT``): many short chunks, or a few long ones."""
    from zhiku.stores._sqlite_read import CHUNK_WEIGHT

    a, b = LABOR.chunks
    cache = ChunkCache(size=2 * CHUNK_WEIGHT + len(a.text) + len(b.text))  # (text_weight: the default)
    cache.add(1, [a, b])
    assert cache.chunks([a.chunk_id, b.chunk_id]) == (1, {a.chunk_id: a, b.chunk_id: b})
    (w,) = WAGE.chunks
    cache.add(1, [w])  # over by w's weight: the oldest (a), and b too when w is longer than a
    kept = cache.chunks([a.chunk_id, b.chunk_id, w.chunk_id])[1]
    assert a.chunk_id not in kept and w.chunk_id in kept
    assert (b.chunk_id in kept) == (len(w.text) <= len(a.text))
    cache.add(1, doc=("doc-labor", (a, b)))  # a list weighs its chunks: never kept beside anything here
    assert cache.document("doc-labor") == (1, (a, b)) and cache.chunks([w.chunk_id, b.chunk_id]) == (1, {})
