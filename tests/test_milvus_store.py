"""``MilvusStore`` beyond the shared contract: versioned replace that readers never see half-done, two
processes sharing one index, connection failures, settings and Milvus-specific choices.

Runs against the session's milvus-lite gRPC server (tests/milvus_fixtures.py), each test on its own prefix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from contracts.store_contract import LABOR, LABOR_V2, NOTE, WAGE, ids, make_doc
from milvus_fixtures import LiteServer, milvus_store, require_milvus, unique_prefix
from zhiku.errors import IndexNotFound, ReadOnlyIndex, StoreError
from zhiku.settings import StoreSettings, load_settings
from zhiku.stores import milvus
from zhiku.types import Filters

require_milvus()

from zhiku.stores.milvus import MilvusStore  # noqa: E402

Open = Callable[..., MilvusStore]


@pytest.fixture
def open_store(milvus_uri: str) -> Iterator[Open]:
    """``open_store(read_only=False, **settings)`` on this test's own prefix; closes everything afterwards."""
    prefix = unique_prefix()
    opened: list[MilvusStore] = []

    def make(*, read_only: bool = False, **extra: object) -> MilvusStore:
        opened.append(MilvusStore(milvus_store(milvus_uri, prefix, **extra), read_only=read_only))
        return opened[-1]

    yield make
    for store in opened:
        store.close()


def raw_rows(store: MilvusStore, expr: str = "version >= 0") -> list[dict]:
    """Every physical chunk row, visible or not."""
    return store.conn.client.query(store.chunks_name, filter=expr, output_fields=["chunk_id", "doc_id", "version"])


def test_replace_leaves_exactly_the_live_rows_and_bumps_the_version(open_store: Open) -> None:
    store = open_store()
    LABOR.write(store)
    first = store.index_version()
    LABOR_V2.write(store)
    assert store.index_version() > first > 0
    assert sorted(r["chunk_id"] for r in raw_rows(store)) == LABOR_V2.ids  # the old version is gone physically
    assert {r["version"] for r in raw_rows(store)} == {store.index_version()}


def test_a_write_that_dies_before_the_switch_is_never_seen_and_is_cleaned_up(
    open_store: Open, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store()
    for doc in (LABOR, WAGE):
        doc.write(store)
    version = store.index_version()
    reader = open_store()  # another process's view of the same index
    client = store.conn.client
    real_upsert = client.upsert

    def lost_at_the_switch(name: str, rows: list[dict], **kwargs: object) -> object:
        if name == store.catalog_name and rows[0]["key"].startswith("doc:"):
            raise RuntimeError("connection lost (simulated)")
        return real_upsert(name, rows, **kwargs)

    def dead(*args: object, **kwargs: object) -> None:  # as if the process died: no cleanup either
        raise RuntimeError("no process left to send this (simulated)")

    monkeypatch.setattr(client, "upsert", lost_at_the_switch)
    monkeypatch.setattr(client, "delete", dead)
    with pytest.raises(StoreError, match="simulated"):
        LABOR_V2.write(store)
    monkeypatch.undo()
    assert LABOR_V2.ids[0] in [r["chunk_id"] for r in raw_rows(store)]  # the new rows are there, but unreachable:
    for s in (store, reader):
        assert s.index_version() == version
        assert s.get_document("doc-labor") == LABOR.record
        assert s.document_chunks("doc-labor") == LABOR.chunks
        assert s.get_chunks(LABOR_V2.ids) == []
        assert s.bm25_search(["变更"], 10) == []
        assert ids(s.bm25_search(["解除"], 10)) == LABOR.ids[:1]
        assert ids(s.dense_search(np.array([0.0, 0.0, 1.0], np.float32), 1)) != LABOR_V2.ids
    LABOR_V2.write(store)  # the next write of the document removes the leftovers
    assert sorted(r["chunk_id"] for r in raw_rows(store, 'doc_id == "doc-labor"')) == LABOR_V2.ids
    assert ids(reader.bm25_search(["变更"], 10)) == LABOR_V2.ids


def test_a_write_that_dies_after_the_switch_shows_only_the_new_version(
    open_store: Open, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store()
    LABOR.write(store)

    def dead(*args: object, **kwargs: object) -> None:  # the process died before deleting the old rows
        raise RuntimeError("no process left to send this (simulated)")

    monkeypatch.setattr(store.conn.client, "delete", dead)
    LABOR_V2.write(store)
    monkeypatch.undo()
    assert len(raw_rows(store)) == 3
    assert store.document_chunks("doc-labor") == LABOR_V2.chunks
    assert store.get_chunks(LABOR.ids) == []
    assert store.bm25_search(["解除"], 10) == []
    assert ids(store.bm25_search(["劳动"], 10)) == LABOR_V2.ids  # over-fetching skips the stale rows
    assert ids(store.dense_search(np.array([1.0, 0.0, 0.0], np.float32), 1)) == LABOR_V2.ids


def test_two_processes_share_documents_history_meta_and_versions(open_store: Open) -> None:
    writer, reader = open_store(), open_store(read_only=True)
    assert reader.index_version() == 0 and reader.bm25_search(["劳动者"], 5) == []
    for doc in (LABOR, WAGE, NOTE):
        doc.write(writer)
    writer.set_meta({"embedder": "multilingual-e5-small"})
    assert reader.index_version() == writer.index_version() > 0
    assert reader.list_documents() == [LABOR.record, WAGE.record, NOTE.record]
    assert reader.get_meta()["embedder"] == "multilingual-e5-small"
    assert sorted(ids(reader.bm25_search(["劳动者"], 10))) == sorted(LABOR.ids + WAGE.ids)
    before = reader.index_version()
    assert writer.delete_document("doc-note")
    assert reader.index_version() > before
    assert reader.get_chunks(NOTE.ids) == []
    with pytest.raises(ReadOnlyIndex, match="read-only"):
        LABOR.write(reader)
    with pytest.raises(ReadOnlyIndex):
        reader.delete_document("doc-labor")


def test_read_only_on_a_missing_index_names_the_uri_and_the_fix(milvus_uri: str) -> None:
    with pytest.raises(IndexNotFound, match=f"no zhiku index in Milvus at {milvus_uri} .*zhiku ingest PATH"):
        MilvusStore(milvus_store(milvus_uri, unique_prefix()), read_only=True)


def test_sources_with_quotes_backslashes_and_globs(open_store: Open) -> None:
    store = open_store()
    odd = make_doc(
        "doc-odd",
        "法规",
        '法规/"引号"\\反斜杠\n.md',
        "markdown",
        [("第一条 劳动者权利", ["第一条", "劳动者", "权利"], [0.0, 1.0, 0.0])],
    )
    odd.write(store)
    WAGE.write(store)
    assert store.find_document("法规", odd.record.source) == odd.record
    assert ids(store.bm25_search(["劳动者"], 10, Filters(source_glob='*"引号"*'))) == odd.ids
    assert (
        ids(store.dense_search(np.array([0.0, 1.0, 0.0], np.float32), 10, Filters(source_glob="法规/*\\*"))) == odd.ids
    )
    assert store.bm25_search(['"; drop', "x\\"], 10) == []
    long = make_doc(
        "doc-long", "法规", "法规/长.md", "markdown", [("长段", [f"t{i}" for i in range(12000)], [1.0, 0, 0])]
    )
    long.write(store)  # its tokens past Milvus's 65,535-byte text field: cut at a token, the chunk still found
    assert ids(store.bm25_search(["t7"], 10)) == long.ids and store.document_chunks("doc-long") == long.chunks


def test_the_analyzer_is_standard_on_milvus_lite_whitespace_elsewhere_and_recorded(open_store: Open) -> None:
    store = open_store()
    LABOR.write(store)
    expected = "standard" if store.conn.server_version.startswith("milvus_lite") else "whitespace"
    assert store.get_meta()["milvus_analyzer"] == expected
    fields = {f["name"]: f for f in store.conn.client.describe_collection(store.chunks_name)["fields"]}
    assert fields["collection"].get("is_partition_key") is True
    assert f'"{expected}"' in str(fields["tokens"]["params"]["analyzer_params"])


def test_a_new_dimension_after_a_forced_reset(open_store: Open) -> None:
    store = open_store()
    LABOR.write(store)
    store.delete_document("doc-labor")
    store.set_meta({"dim": ""})  # what `zhiku ingest --force` does when the embedder changed
    wide = make_doc(
        "doc-wide", "法规", "法规/宽.md", "markdown", [("劳动者的权利", ["劳动者", "权利"], [0.5, 0.5, 0.5, 0.5])]
    )
    wide.write(store)
    assert store.get_meta()["dim"] == "4"
    assert ids(store.dense_search(np.ones(4, np.float32), 5)) == wide.ids


def test_unreachable_server_is_one_clear_line_fast() -> None:
    require_milvus()
    settings = StoreSettings(kind="milvus", uri="http://127.0.0.1:9")
    with pytest.MonkeyPatch.context() as mp, pytest.raises(StoreError) as e:
        mp.setattr(milvus, "TIMEOUT_S", 3)
        MilvusStore(settings)
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith("cannot reach Milvus at http://127.0.0.1:9 ")
    assert "fix store.uri (ZHIKU_STORE__URI)" in message


def test_a_server_that_goes_away_loses_nothing(tmp_path: Path) -> None:
    require_milvus()
    server = LiteServer(tmp_path / "data").start()
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(milvus, "TIMEOUT_S", 5)
            store = MilvusStore(milvus_store(server.uri, "restart_"))
        for doc in (LABOR, WAGE):
            doc.write(store)
        server.stop()
        with pytest.raises(StoreError, match=f"cannot reach Milvus at {server.uri} .*requests give up after 5s"):
            LABOR_V2.write(store)
        with pytest.raises(StoreError, match="cannot reach"):
            store.bm25_search(["劳动者"], 5)
        server.start()
        store.conn.timeout = 60  # a busy CI box may need more than 5 s to accept the reconnect
        assert sorted(ids(store.bm25_search(["劳动者"], 10))) == sorted(
            LABOR.ids + WAGE.ids
        )  # the same store reconnects
        store.close()
        again = MilvusStore(milvus_store(server.uri, "restart_"))
        assert again.get_document("doc-labor") == LABOR.record
        assert again.document_chunks("doc-labor") == LABOR.chunks  # the failed replace left the old version whole
        assert sorted(ids(again.bm25_search(["劳动者"], 10))) == sorted(LABOR.ids + WAGE.ids)
        LABOR_V2.write(again)
        assert again.document_chunks("doc-labor") == LABOR_V2.chunks
        again.close()
    finally:
        server.stop()


def test_store_settings_from_env_and_the_token_is_never_shown(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from zhiku.cli.app import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZHIKU_STORE__KIND", "milvus")
    monkeypatch.setenv("ZHIKU_STORE__URI", "http://milvus.internal:19530")
    monkeypatch.setenv("ZHIKU_STORE__TOKEN", "root:秘密-Milvus")
    s = load_settings().store
    assert (s.kind, s.uri, s.collection_prefix) == ("milvus", "http://milvus.internal:19530", "zhiku_")
    assert s.token is not None and s.token.get_secret_value() == "root:秘密-Milvus"
    for args in (["config", "show"], ["config", "show", "--json"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        assert "秘密" not in result.output and "http://milvus.internal:19530" in result.output
    monkeypatch.setenv("ZHIKU_STORE__COLLECTION_PREFIX", "bad-prefix")
    with pytest.raises(Exception, match="store.collection_prefix"):
        load_settings()
