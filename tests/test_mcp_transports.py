"""Real `zhiku serve` processes: the SDK client over stdio and Streamable HTTP, and HTTP security on the wire."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcp_fixtures import DOCS, PYTHON, ROOT, Fixture, HttpServer, http_request, serve_args, server_env, start_http
from zhiku.mcp.http_security import MAX_REQUEST_BYTES

TOKEN = "s3cret-token-0123456789"
CORS = '["https://app.example.com", "vscode-webview://*"]'
SECTION_19_20 = "劳动合同法 > 第二章 劳动合同的订立 > 第十九条、第二十条"
DOC_ID_LABOR = "dd028d7587dd6833"


async def scenario(c: Client) -> None:
    """The same checks over every transport."""
    assert [t.name for t in (await c.list_tools()).tools] == [
        "query_knowledge_hub",
        "list_collections",
        "get_document_summary",
    ]  # served --read-only
    q = {"query": "试用期最长不得超过几个月？", "top_k": 2}
    first, second = await c.call_tool("query_knowledge_hub", q), await c.call_tool("query_knowledge_hub", q)
    top = first.structured_content["citations"][0]
    assert (top["source"], top["section"], top["text"][:22]) == (
        "劳动合同法.md",
        SECTION_19_20,
        "第十九条 劳动合同期限三个月以上不满一年的，",
    )
    assert top["text"].endswith("并不得低于用人单位所在地的最低工资标准。")
    assert (first.structured_content["cache"], second.structured_content["cache"]) == ("miss", "hit")
    assert first.content[0].text.startswith("**检索问题 / Query:** 试用期最长不得超过几个月？")
    stats = await c.call_tool("list_collections", {})
    assert stats.structured_content["collections"] == [{"name": "laws", "documents": 3, "chunks": 5, "chars": 648}]
    summary = await c.call_tool("get_document_summary", {"doc_id": DOC_ID_LABOR})
    assert (summary.structured_content["title"], summary.structured_content["chunk_count"]) == ("劳动合同法", 2)
    doc = await c.read_resource(f"zhiku://doc/{DOC_ID_LABOR}")
    assert doc.contents[0].text == DOCS["劳动合同法.md"].strip()
    chunk = await c.read_resource(top["uri"])
    assert f'\n\n<document source="劳动合同法.md" section="{SECTION_19_20}">\n' in chunk.contents[0].text
    with pytest.raises(MCPError) as missing:
        await c.read_resource("zhiku://doc/ffffffffffffffff")
    assert missing.value.error.code == -32602
    prompt = await c.get_prompt("answer_with_citations", {"question": "年休假几天？"})
    assert prompt.messages[0].content.text.endswith("问题 / Question: 年休假几天？")
    bad = await c.call_tool("query_knowledge_hub", {"query": "试用期", "top_k": 21})
    assert bad.is_error and bad.meta["zhiku/error"]["code"] == "INVALID_INPUT"
    after = await c.call_tool("query_knowledge_hub", {"query": "女职工产假有多少天", "top_k": 1})
    assert after.structured_content["citations"][0]["source"] == "女职工劳动保护特别规定.md"


# -- stdio ----------------------------------------------------------------------------------------
def test_stdio_sdk_client(mcp_index: Fixture) -> None:
    params = StdioServerParameters(
        command=PYTHON, args=serve_args(mcp_index, "--read-only"), env=server_env(), cwd=str(ROOT)
    )

    async def main() -> None:
        async with Client(params) as c:
            await scenario(c)
        async with Client(params, mode="legacy") as c:  # the handshake era (desktop clients today)
            assert c.protocol_version == "2025-11-25"
            r = await c.call_tool("query_knowledge_hub", {"query": "年休假有几天", "top_k": 1})
            assert r.structured_content["citations"][0]["source"] == "职工带薪年休假条例.md"

    anyio.run(main)


def test_stdio_stdout_carries_only_protocol(mcp_index: Fixture) -> None:
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "query_knowledge_hub", "arguments": {"query": "经济补偿怎么计算", "top_k": 1}},
        },
    ]
    proc = subprocess.Popen(
        [PYTHON, *serve_args(mcp_index)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=server_env(),
        cwd=ROOT,
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
        proc.stdin.flush()
        replies = [json.loads(proc.stdout.readline()) for _ in range(2)]  # each stdout line is a JSON-RPC message
        rest, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rest == "" and proc.returncode == 0
    assert [r.get("id") for r in replies] == [1, 2] and all(r["jsonrpc"] == "2.0" for r in replies)
    assert replies[1]["result"]["structuredContent"]["citations"][0]["section"] == (
        "劳动合同法 > 第四章 劳动合同的解除和终止 > 第四十七条"
    )
    assert "zhiku.mcp.server" in stderr  # logs went to stderr
    assert "WARNING" not in stderr


def run_serve(fx: Fixture, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`zhiku serve ARGS` to its end (stdin closed at once), with only the given ZHIKU_* variables."""
    return subprocess.run(
        [PYTHON, *serve_args(fx, *args)],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        env=server_env(**env),
        cwd=ROOT,
    )


def test_bad_settings_fail_fast_with_one_line(mcp_index: Fixture, tmp_path: Path) -> None:
    cases = [
        (
            ["--transport", "carrier-pigeon"],
            {},
            "error: invalid settings: server.transport: Input should be 'stdio' or 'http'",
        ),
        (["--transport", "http", "--port", "http"], {}, "error: invalid settings: server.port"),
        (
            ["--transport", "http", "--host", "0.0.0.0"],
            {},
            "error: refusing to serve HTTP on non-loopback address '0.0.0.0' without a bearer token",
        ),
        (
            ["--transport", "http"],
            {"ZHIKU_HOST": "192.0.2.1"},
            "error: refusing to serve HTTP on non-loopback address '192.0.2.1'",
        ),
        (["--read-only", "--index", str(tmp_path / "none")], {}, "error: no index at"),
    ]
    for args, env, expected in cases:
        proc = run_serve(mcp_index, *args, **env)
        assert proc.returncode == 1 and proc.stdout == "", (args, proc)
        assert proc.stderr.startswith(expected) and len(proc.stderr.strip().splitlines()) == 1, (args, proc.stderr)


def test_a_taken_http_port_fails_fast_with_the_fix(mcp_index: Fixture) -> None:
    """uvicorn used to print `ERROR: [Errno 98] …` and exit 3, after the models had loaded."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run_serve(mcp_index, "--transport", "http", "--port", str(port))
        dashboard = subprocess.run(  # the same check before Streamlit takes the process over
            [PYTHON, "-m", "zhiku.cli", "dashboard", "--port", str(port), "--config", str(mcp_index.config)],
            capture_output=True,
            text=True,
            timeout=60,
            env=server_env(),
            cwd=ROOT,
        )
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == (
        f"error: cannot serve HTTP on 127.0.0.1:{port}: Address already in use: another `zhiku serve`? pass "
        "--port N (or set server.port), or stop what holds it\n"
    )
    assert (dashboard.returncode, dashboard.stdout) == (1, "")
    assert dashboard.stderr == (
        f"error: cannot serve the dashboard on 127.0.0.1:{port}: Address already in use: pass --port N, or stop "
        "what holds it\n"
    )


def test_serving_an_index_without_documents_warns(mcp_index: Fixture, tmp_path: Path) -> None:
    """A typo in a client configuration's --index used to start an empty index without a word: the agent then
    found nothing, every time. The server still starts (ingest_documents can fill it), with a warning in the log
    the client keeps."""
    typo = tmp_path / "typo-index"
    warning = (
        f"WARNING zhiku.mcp.server: the index at {typo} holds no documents: every query will find nothing. If the "
        "path is a typo, fix --index in the client's configuration; else add documents with "
        f"`zhiku ingest PATH --index {typo}` or the ingest_documents tool"
    )
    for _ in range(2):  # created by the first start, still empty at the second
        proc = run_serve(mcp_index, "--index", str(typo))
        assert (proc.returncode, proc.stdout) == (0, "")
        assert [line[9:] for line in proc.stderr.splitlines() if "WARNING" in line] == [warning]


def test_serve_run_by_a_person_in_a_terminal_says_what_it_waits_for(mcp_index: Fixture) -> None:
    """`zhiku init` lists `zhiku serve` among the next steps; run in a terminal it used to sit silent, waiting for
    JSON-RPC on stdin. A client (a pipe, as in every other test here) never sees the line."""
    import pty

    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [PYTHON, *serve_args(mcp_index)],
        stdin=terminal,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=server_env(),
        cwd=ROOT,
    )
    os.close(terminal)
    try:
        assert proc.stderr is not None
        first, second = proc.stderr.readline(), proc.stderr.readline()
        os.write(controller, b"\x04")  # Ctrl-D: end of input, the server stops
        _, rest = proc.communicate(timeout=60)
    finally:
        os.close(controller)
        if proc.poll() is None:
            proc.kill()
    assert first.endswith(f" INFO zhiku.mcp.server: zhiku: serving {mcp_index.index} over stdio\n")
    assert second[9:] == (
        "WARNING zhiku.mcp.server: waiting for an MCP client on stdin: MCP clients start this command themselves "
        "(see mcp-clients/README.md of a `zhiku init` project); to try it by hand, `zhiku serve --transport http` "
        "and the MCP Inspector. Ctrl-C stops it\n"
    )
    assert proc.returncode == 0 and "WARNING" not in rest


# -- HTTP -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def http_server(mcp_index: Fixture, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    env = server_env(ZHIKU_TOKEN=TOKEN, ZHIKU_SERVER__ALLOWED_ORIGINS=CORS, ZHIKU_SERVER__MAX_SESSIONS="3")
    server = start_http(mcp_index, tmp_path_factory.mktemp("http") / "server.log", "--read-only", env=env)
    yield server
    server.stop()


def test_http_sdk_client(http_server: HttpServer) -> None:
    async def main() -> None:
        async with httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {TOKEN}"}, timeout=httpx2.Timeout(30, read=300)
        ) as http:
            async with Client(streamable_http_client(http_server.url, http_client=http)) as c:
                await scenario(c)
            async with Client(streamable_http_client(http_server.url, http_client=http), mode="legacy") as c:
                assert c.protocol_version == "2025-11-25"
                assert len((await c.list_tools()).tools) == 3

    anyio.run(main)


INIT = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
    }
).encode()
JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_http_security(http_server: HttpServer) -> None:
    url, base = http_server.url, http_server.base
    status, _, body = http_request(f"{base}/healthz")
    health = json.loads(body)
    assert status == 200 and (health["status"], health["ready"], health["read_only"]) == ("ok", True, True)

    def post(headers: dict[str, str], body: bytes = INIT) -> tuple[int, dict[str, str], bytes]:
        return http_request(url, method="POST", headers={**JSON_HEADERS, **headers}, body=body)

    # Origin: foreign → 403, on every path and before auth
    for path, method in ((url, "POST"), (f"{base}/healthz", "GET")):
        status, _, body = http_request(
            path,
            method=method,
            headers={**JSON_HEADERS, **AUTH, "Origin": "http://evil.example"},
            body=INIT if method == "POST" else None,
        )
        assert status == 403 and json.loads(body)["error"]["code"] == "FORBIDDEN_ORIGIN"
    # CORS preflight: the allowed origin is echoed, never *
    for origin in ("https://app.example.com", "vscode-webview://abc123"):
        status, headers, _ = http_request(
            url,
            method="OPTIONS",
            headers={
                "Origin": origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization",
            },
        )
        assert status == 200 and headers["access-control-allow-origin"] == origin, headers
        assert "authorization" in headers["access-control-allow-headers"] and headers["vary"].startswith("Origin")
    # bearer token
    status, headers, body = post({})
    assert status == 401 and headers["www-authenticate"].startswith("Bearer")
    assert json.loads(body)["error"]["code"] == "UNAUTHORIZED"
    assert post({"Authorization": "Bearer wrong"})[0] == 401
    assert post({"Authorization": TOKEN})[0] == 401  # no scheme
    # request size: refused by its Content-Length, before the body is read
    status, _, body = post({**AUTH, "Content-Length": str(MAX_REQUEST_BYTES + 1)})
    assert status == 413 and json.loads(body)["error"]["code"] == "REQUEST_TOO_LARGE"
    # DNS rebinding: a foreign Host is refused
    assert post({**AUTH, "Host": "evil.example:80"})[0] == 421
    # all good: an allowed browser origin with the token initializes, and sees its origin echoed
    status, headers, _ = post({**AUTH, "Origin": "https://app.example.com"})
    assert status == 200 and headers["access-control-allow-origin"] == "https://app.example.com"
    status, headers, _ = post({**AUTH, "Origin": "http://localhost:6274"})
    assert status == 200 and "access-control-allow-origin" not in headers  # loopback: accepted, no CORS


def test_http_sessions_at_the_cap_close_the_idle_longest(http_server: HttpServer) -> None:
    """``server.max_sessions`` is 3 here: a new session closes the one idle longest; sessions holding a stream
    (an SDK client's GET) are never closed, so with three of them a new one gets 503."""

    def init() -> tuple[int, str | None]:
        status, headers, _ = http_request(http_server.url, method="POST", headers={**JSON_HEADERS, **AUTH}, body=INIT)
        return status, headers.get("mcp-session-id")

    def ping(session: str | None) -> int:
        headers = {**JSON_HEADERS, **AUTH, "mcp-session-id": session or "", "mcp-protocol-version": "2025-11-25"}
        return http_request(
            http_server.url, method="POST", headers=headers, body=b'{"jsonrpc": "2.0", "id": 2, "method": "ping"}'
        )[0]

    first = init()
    later = [init()[0] for _ in range(3)]

    async def three_clients() -> int:
        async with httpx2.AsyncClient(headers=AUTH, timeout=httpx2.Timeout(30, read=300)) as http:
            async with (
                Client(streamable_http_client(http_server.url, http_client=http), mode="legacy") as a,
                Client(streamable_http_client(http_server.url, http_client=http), mode="legacy"),
                Client(streamable_http_client(http_server.url, http_client=http), mode="legacy"),
            ):
                await anyio.sleep(1)  # their GET streams open
                full = init()[0]
                assert len((await a.list_tools()).tools) == 3
                return full

    assert (first[0], later, ping(first[1])) == (200, [200, 200, 200], 404)  # the first, idle longest, was closed
    assert (anyio.run(three_clients), init()[0]) == (503, 200)


def sse_events(lines: Iterator[str], until: str) -> list[dict[str, str]]:
    """The SSE events of a stream (``id``, ``retry``, ``data``), read up to the first whose data holds ``until``."""
    events: list[dict[str, str]] = []
    event: dict[str, str] = {}
    for line in lines:
        if line:
            field, _, value = line.partition(":")
            event[field] = value.strip()
            continue
        if event:
            events.append(event)
            if until in event.get("data", ""):
                break
        event = {}
    return events


def test_a_dropped_sse_stream_resumes_with_last_event_id(http_server: HttpServer) -> None:
    """A POST's SSE stream opens with a priming event (an id, empty data, ``retry``); a client that lost the rest
    reconnects with ``Last-Event-ID`` and gets what followed it."""
    _, headers, _ = http_request(http_server.url, method="POST", headers={**JSON_HEADERS, **AUTH}, body=INIT)
    session = {"mcp-session-id": headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25", **AUTH}
    ping = b'{"jsonrpc": "2.0", "id": 7, "method": "ping"}'
    with httpx2.Client(timeout=30) as http:
        with http.stream("POST", http_server.url, headers={**JSON_HEADERS, **session}, content=ping) as r:
            first = sse_events(r.iter_lines(), until='"id":7')
        assert first[0] == {"id": first[0]["id"], "data": "", "retry": "1000"} and len(first) == 2
        assert json.loads(first[1]["data"]) == {"jsonrpc": "2.0", "id": 7, "result": {}} and first[1]["id"]
        resume = {**session, "Accept": "text/event-stream", "Last-Event-ID": first[0]["id"]}
        with http.stream("GET", http_server.url, headers=resume) as r:
            assert r.status_code == 200
            again = sse_events(r.iter_lines(), until='"id":7')
    assert again[0] == first[1]
