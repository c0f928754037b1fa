"""Protocol edges, each answered with the right code: JSON-RPC shapes (``check_message``), NUL bytes
in tool arguments, a malformed image URI, a GBK-named file through
``ingest_documents``; and concurrency helpers (``SingleFlight``, ``FairEmbedder``)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import numpy as np
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from mcp_fixtures import Fixture, copy_fixture
from test_mcp_server import error_of, with_client
from zhiku.errors import Busy
from zhiku.mcp.concurrency import CALLER, FairEmbedder, SingleFlight, deadline
from zhiku.mcp.http_security import check_message
from zhiku.mcp.server import build_server


@pytest.mark.parametrize(
    ("raw", "code", "msg_id"),
    [
        ("not json", -32700, None),
        ("", -32700, None),
        ("[" * 50_000, -32700, None),
        ("[]", -32600, None),
        ("null", -32600, None),
        ('{"jsonrpc": "1.0", "id": 5, "method": "ping"}', -32600, 5),
        ('{"jsonrpc": "2.0", "id": {}, "method": "ping"}', -32600, None),
        ('{"jsonrpc": "2.0", "id": null, "method": "ping"}', -32600, None),
        ('{"jsonrpc": "2.0", "id": true, "method": "ping"}', -32600, None),
        ('{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": ["x"]}}', -32602, 3),
        ('{"jsonrpc": "2.0", "id": 4, "method": "resources/read", "params": {}}', -32602, 4),
        ('{"jsonrpc": "2.0", "id": 6, "method": "ping", "params": {"s": "\\ud800"}}', -32600, 6),
        ('{"jsonrpc": "2.0", "id": 7}', -32600, None),
    ],
)
def test_malformed_messages_get_the_spec_error(raw: str, code: int, msg_id: Any) -> None:
    rejection = check_message(raw)
    assert rejection is not None and (rejection.code, rejection.id) == (code, msg_id)
    assert rejection.response()["error"]["code"] == code


@pytest.mark.parametrize(
    "raw",
    [
        '{"jsonrpc": "2.0", "id": 1, "method": "ping"}',
        '{"jsonrpc": "2.0", "id": "a", "method": "tools/call", "params": {"name": "x", "arguments": {}}}',
        '{"jsonrpc": "2.0", "method": "notifications/initialized"}',
        '{"jsonrpc": "2.0", "id": 2, "result": {}}',
        '{"jsonrpc": "2.0", "id": 2, "error": {"code": 1, "message": "m"}}',
    ],
)
def test_well_formed_messages_pass(raw: str) -> None:
    assert check_message(raw) is None


def test_nul_bytes_list_names_and_bad_uris_get_codes(mcp_index: Fixture, tmp_path: Any) -> None:
    fx = copy_fixture(mcp_index, tmp_path)
    with open(os.path.join(os.fsencode(fx.inbox), "劳动法.md".encode("gbk")), "w", encoding="utf-8") as f:
        f.write("# 劳动法\n\n第三十六条 国家实行劳动者每日工作时间不超过八小时的工时制度。\n")

    async def body(c: Client) -> list[Any]:
        out: list[Any] = [
            await c.call_tool("get_document_summary", {"doc_id": "\x00"}),
            await c.call_tool("ingest_documents", {"paths": ["\x00"]}),
            await c.call_tool("ingest_documents", {"paths": [str(fx.inbox)]}),
        ]
        for uri in ("zhiku://image/.png", "zhiku://doc/\x00", f"zhiku://image/{'a' * 64}.png"):
            try:
                await c.read_resource(uri)
            except MCPError as e:
                out.append(e.error.code)
                message = e.error.message
        return [*out, message]

    summary, nul_path, gbk, image, doc, unknown_image, message = with_client(build_server(fx.settings), body)
    assert (unknown_image, message) == (
        -32602,
        f"no image {'a' * 64}.png in this index (re-ingest the document that holds it)",
    )
    assert error_of(summary)["code"] == "NOT_FOUND"
    assert error_of(nul_path) == {
        "code": "INVALID_INPUT",
        "message": "invalid path '\\x00': it contains a NUL byte",
        "retryable": False,
    }
    assert (gbk.structured_content["added"], gbk.structured_content["failed"]) == (["劳动法.md"], [])
    assert (image, doc) == (-32602, -32602)


def test_single_flight_shares_one_computation() -> None:
    flights: SingleFlight[int] = SingleFlight()
    calls: list[int] = []
    gate = threading.Event()

    def slow() -> int:
        calls.append(1)
        gate.wait(5)
        return 42

    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(flights.run("k", slow))) for _ in range(5)]
    for t in threads:
        t.start()
    while not calls:
        time.sleep(0.001)
    time.sleep(0.05)  # the others are waiting on the first call now
    gate.set()
    for t in threads:
        t.join(5)
    assert (results, len(calls)) == ([42] * 5, 1)
    assert flights.run("k", lambda: 7) == 7  # a finished key is computed again


class _Counting:
    name, dim = "counting", 2

    def __init__(self) -> None:
        self.batches: list[int] = []
        self.queries = 0

    def embed_documents(self, texts: Any) -> np.ndarray:
        self.batches.append(len(texts))
        return np.ones((len(texts), 2), np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        self.queries += 1
        return np.ones(2, np.float32)


def test_fair_embedder_slices_documents_and_passes_queries_through() -> None:
    inner = _Counting()
    e = FairEmbedder(inner, slice_size=16)  # type: ignore[arg-type]
    assert e.embed_documents(["x"] * 40).shape == (40, 2) and inner.batches == [16, 16, 8]
    assert e.embed_documents([]).shape == (0, 2)
    e.embed_query("试用期")
    e.embed_query("试用期")
    assert inner.queries == 2  # question vectors are kept once, by the Searcher (tests/test_search_path.py)


class _Held:
    """An embedder whose calls record their text and wait for ``release`` (or meet at ``meet``, when set)."""

    name, dim = "held", 2

    def __init__(self, meet: threading.Barrier | None = None) -> None:
        self.order: list[str] = []
        self.release, self.meet = threading.Event(), meet

    def embed_documents(self, texts: Any) -> np.ndarray:
        self.order.append("documents")
        return np.ones((len(texts), 2), np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        if self.meet is not None:  # a BrokenBarrierError (nothing recorded) unless the other one runs meanwhile
            self.meet.wait(5)
        self.order.append(text)
        assert self.meet is not None or self.release.wait(5)
        return np.ones(2, np.float32)


def _ask(e: FairEmbedder, caller: str, text: str) -> threading.Thread:
    def run() -> None:
        CALLER.set(caller)
        e.embed_query(text)

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.2)  # queued before the next one
    return t


def test_fair_embedder_takes_callers_in_turn_not_first_come_first_served() -> None:
    inner = _Held()
    e = FairEmbedder(inner, workers=1)  # type: ignore[arg-type]
    threads = [_ask(e, "a", f"a{n}") for n in range(1, 4)] + [_ask(e, "b", "b1")]
    inner.release.set()
    for t in threads:
        t.join(5)
    assert inner.order == ["a1", "a2", "b1", "a3"]  # (first come, first served would run a3 before b1)


def test_a_question_waiting_past_its_deadline_fails_retryably_and_the_model_serves_on() -> None:
    inner = _Held()
    e = FairEmbedder(inner, workers=1)  # type: ignore[arg-type]
    holder = _ask(e, "a", "long")
    started = time.monotonic()
    with deadline(0.3), pytest.raises(Busy, match="busy with other clients") as failed:
        e.embed_query("short")
    assert 0.3 <= time.monotonic() - started < 2 and failed.value.retryable
    inner.release.set()
    holder.join(5)
    assert e.embed_query("again").shape == (2,) and inner.order == ["long", "again"]


def test_fair_embedder_runs_questions_of_two_callers_at_once_and_documents_alone() -> None:
    inner = _Held(meet=threading.Barrier(2))
    e = FairEmbedder(inner, workers=2)  # type: ignore[arg-type]
    threads = [_ask(e, "a", "a1"), _ask(e, "b", "b1")]
    for t in threads:
        t.join(5)
    assert e.embed_documents(["x"]).shape == (1, 2)
    assert sorted(inner.order[:2]) == ["a1", "b1"] and inner.order[2:] == ["documents"]
