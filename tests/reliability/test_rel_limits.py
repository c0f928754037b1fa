"""(f) Connection limits of `zhiku serve --transport http`: sessions opened and abandoned (memory bounded, a new
client still served, the limit logged once a minute, not once a request); connections sending nothing, their
headers or their body at 1 byte/s (closed within 30 s); more connections from one address than the cap (503);
two ``Origin`` headers, an unknown image URI and a link out of an ingest root."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from rel_common import SIZES, report, vm_hwm_mb

from mcp_fixtures import Fixture, HttpServer, copy_fixture, start_http
from zhiku.mcp.http_security import MAX_CONNECTIONS_PER_ADDRESS, READ_TIMEOUT_S

INIT = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "gone", "version": "0"}},
    }
).encode()
HEAD = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 45\r\n\r\n"
BODY = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'


def _open_session(port: int) -> int:
    """Initialize a session and walk away: no DELETE, the connection closed."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request(
        "POST", "/mcp", INIT, {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    )
    status = c.getresponse().status
    c.close()
    return status


def _served(url: str) -> bool:
    async def ask() -> bool:
        async with Client(url) as c:
            return not (await c.call_tool("list_collections", {})).is_error

    return anyio.run(ask)


def _log_lines(log: Path, start: int, needle: str) -> int:
    return sum(needle in line for line in log.read_text(errors="replace").splitlines()[start:])


@SIZES
def test_abandoned_sessions(full: bool, mcp_index: Fixture, tmp_path: Path, served: tuple[Fixture, HttpServer]) -> None:
    """Full: a server of its own at the default cap (1,000), 10,000 sessions; short: the shared one (cap 100), 200."""
    cap, sessions = (1000, 10_000) if full else (100, 200)
    if full:
        fx = copy_fixture(mcp_index, tmp_path)
        server = start_http(fx, fx.root / "http.log")
    else:
        server = served[1]
    try:
        assert _open_session(server.port) == 200  # the first session's own allocations are not a leak
        lines_before = len(server.log.read_text(errors="replace").splitlines())
        before = vm_hwm_mb(server.proc.pid)
        started = time.monotonic()
        statuses: dict[int, int] = {}
        growth_at_2000 = None
        for n in range(sessions):
            status = _open_session(server.port)
            statuses[status] = statuses.get(status, 0) + 1
            if n + 1 == 2000:
                growth_at_2000 = round(vm_hwm_mb(server.proc.pid) - before, 1)
        seconds = time.monotonic() - started
        growth = round(vm_hwm_mb(server.proc.pid) - before, 1)
        served_after = _served(server.url)
        log_lines = len(server.log.read_text(errors="replace").splitlines()) - lines_before
    finally:
        if full:
            server.stop()
    report(
        "limits_sessions" + ("" if full else " (short)"),
        sessions=sessions,
        max_sessions=cap,
        statuses=statuses,
        rss_growth_mb=growth,
        rss_growth_mb_at_2000=growth_at_2000,
        new_client_served=served_after,
        log_lines=log_lines,
        seconds=round(seconds, 1),
    )
    assert statuses == {200: sessions} and served_after
    assert growth <= 150 and (growth_at_2000 or 0) <= 150
    assert log_lines <= 1 + seconds // 60  # one line a minute at most


def _closed_after(port: int, first: bytes, trickle: bytes, limit_s: float) -> float | None:
    """Seconds until the server closes a connection sending ``first``, then ``trickle`` at 1 byte/s; None: open
    after ``limit_s``."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        started = time.monotonic()
        s.sendall(first)
        s.settimeout(1)
        for i in range(int(limit_s)):
            try:
                if trickle[i : i + 1]:
                    s.send(trickle[i : i + 1])
                if s.recv(1000) == b"":
                    return time.monotonic() - started
            except TimeoutError:
                pass
            except OSError:
                return time.monotonic() - started
    return None


@pytest.mark.reliability
def test_slow_and_crowded_connections(served: tuple[Fixture, HttpServer]) -> None:
    _, server = served
    lines_before = len(server.log.read_text(errors="replace").splitlines())
    modes = {"nothing": (b"", b""), "headers_1_byte_per_s": (b"", HEAD), "body_1_byte_per_s": (HEAD, BODY)}
    closed: dict[str, list[float | None]] = {mode: [] for mode in modes}

    def one(mode: str) -> None:
        closed[mode].append(_closed_after(server.port, *modes[mode], limit_s=40))

    threads = [threading.Thread(target=one, args=(mode,)) for mode in modes for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(MAX_CONNECTIONS_PER_ADDRESS + 44)]
    time.sleep(1)
    refused = 0
    for s in held:
        s.settimeout(0.05)
        try:
            refused += s.recv(100).startswith(b"HTTP/1.1 503 ")
        except TimeoutError:
            pass
        s.close()
    served_after = _served(server.url)
    log = server.log
    figures = {
        mode: {
            "connections": len(times),
            "still_open": times.count(None),
            "max_close_s": round(max((t for t in times if t is not None), default=-1), 1),
        }
        for mode, times in closed.items()
    }
    report(
        "limits_slow_connections",
        read_timeout_s=READ_TIMEOUT_S,
        **figures,
        crowd=len(held),
        crowd_refused_503=refused,
        read_timeout_log_lines=_log_lines(log, lines_before, "not whole after"),
        crowd_log_lines=_log_lines(log, lines_before, "connections from 127.0.0.1: refused"),
        new_client_served=served_after,
    )
    assert all(f["still_open"] == 0 and 0 < f["max_close_s"] <= 30 for f in figures.values())
    assert refused >= 44 and served_after
    assert _log_lines(log, lines_before, "not whole after") <= 1
    assert _log_lines(log, lines_before, "connections from 127.0.0.1: refused") <= 1


def _post_with_origins(port: int, origins: list[str]) -> int:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.putrequest("POST", "/mcp")
    accept = ("Accept", "application/json, text/event-stream")
    for name, value in [("Content-Type", "application/json"), ("Content-Length", str(len(INIT))), accept]:
        c.putheader(name, value)
    for origin in origins:
        c.putheader("Origin", origin)
    c.endheaders(INIT)
    status = c.getresponse().status
    c.close()
    return status


@pytest.mark.reliability
def test_origins_image_uri_and_links_out_of_a_root(served: tuple[Fixture, HttpServer], tmp_path: Path) -> None:
    fx, server = served
    origins = [
        _post_with_origins(server.port, o)
        for o in (
            ["http://127.0.0.1:3000", "http://evil.example"],
            ["http://evil.example", "http://127.0.0.1:3000"],
            ["http://127.0.0.1:3000"] * 2,
        )
    ]
    folder = fx.inbox / "limits"
    folder.mkdir()
    (folder / "工资.md").write_text("# 工资\n\n第五条 工资应当以法定货币支付。\n", encoding="utf-8")
    (tmp_path / "outside.md").write_text("# 外面\n\n不应被导入。\n", encoding="utf-8")
    (folder / "escape.md").symlink_to(tmp_path / "outside.md")

    async def ask() -> tuple[str, dict[str, object]]:
        async with Client(server.url) as c:
            try:
                await c.read_resource(f"zhiku://image/{'b' * 64}.jpg")
                message = "no error"
            except MCPError as e:
                message = e.error.message
            ingested = (await c.call_tool("ingest_documents", {"paths": [str(folder)]})).structured_content or {}
            for source in ingested.get("added", []):
                summary = await c.call_tool("get_document_summary", {"doc_id": source})
                await c.call_tool("delete_document", {"doc_id": summary.structured_content["doc_id"]})  # type: ignore[index]
            return message, ingested

    image_message, ingested = anyio.run(ask)
    names_folder = any(str(p) in image_message for p in (fx.root, fx.index, fx.index.resolve()))
    report(
        "limits_small",
        two_origins_one_foreign=origins[:2],
        two_loopback_origins=origins[2],
        image_error_names_folder=names_folder,
        link_out_of_root={"added": ingested.get("added"), "failed": ingested.get("failed")},
    )
    assert origins == [403, 403, 200] and not names_folder
    assert ingested["added"] == ["工资.md"]
    assert ingested["failed"] == [{"path": "escape.md", "reason": "links outside the allowed ingest roots: skipped"}]
