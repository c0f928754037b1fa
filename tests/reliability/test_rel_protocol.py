"""(c) Bad queries and tool arguments over stdio, HTTP and the CLI: never an ``INTERNAL_ERROR``, a traceback or a
``-32603``; (d) JSON-RPC abuse over both transports: every malformed message answered with the right code
(``-32700`` parse error, ``-32600`` invalid request, ``-32602`` invalid params), in time, and the session
still works afterwards. Real ``zhiku serve`` processes on a private copy of the MCP fixture index."""

from __future__ import annotations

import itertools
import json
import queue
import random
import subprocess
import threading
import time
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from rel_common import SIZES, percentiles, report, vm_hwm_mb
from typer.testing import CliRunner

from mcp_fixtures import (
    PYTHON,
    ROOT,
    Fixture,
    HttpServer,
    http_request,
    serve_args,
    server_env,
)
from zhiku.cli.app import app

BAD_VALUES: list[Any] = [
    None, "", " ", "\x00", "a\x00b", "x" * 100_000, -1, 0, 10**20, 1.5, True, [], {}, ["x"], {"a": 1},
    "../../../etc/passwd", "zhiku://doc/x", "*", "[", "%s%s%n", "' OR 1=1 --", "　", "\u202e",
]  # fmt: skip
TOOLS = {
    "query_knowledge_hub": ({"query": "试用期"}, ["query", "top_k", "collection", "filters", "max_chars"]),
    "list_collections": ({}, ["include_stats"]),
    "get_document_summary": ({"doc_id": "dd028d7587dd6833"}, ["doc_id", "collection"]),
    "ingest_documents": ({"paths": ["nothing-here.md"]}, ["paths", "collection"]),
    "delete_document": ({"doc_id": "ffffffffffffffff"}, ["doc_id"]),
}
EXTRA = [{"filters": {"source": "["}}, {"filters": {"doc_type": "exe"}}, {"filters": {"nope": 1}}, {"paths": ["\x00"]}]

# (raw message, expected error code, expected id) for the JSON-RPC abuse part
ABUSE: list[tuple[str, int, Any]] = [
    ("not json", -32700, None),
    ("{", -32700, None),
    ('{"jsonrpc": "2.0", "id": 1, "method": "ping"', -32700, None),
    ("[" * 100_000 + "]" * 100_000, -32700, None),
    ("[]", -32600, None),
    ('[{"jsonrpc": "2.0", "id": 2, "method": "ping"}]', -32600, None),
    ("null", -32600, None),
    ("1", -32600, None),
    ('"ping"', -32600, None),
    ("true", -32600, None),
    ('{"jsonrpc": "1.0", "id": 5, "method": "ping"}', -32600, 5),
    ('{"id": 6, "method": "ping"}', -32600, 6),
    ('{"jsonrpc": 2.0, "id": 7, "method": "ping"}', -32600, 7),
    ('{"jsonrpc": "2.0", "id": {}, "method": "ping"}', -32600, None),
    ('{"jsonrpc": "2.0", "id": [], "method": "ping"}', -32600, None),
    ('{"jsonrpc": "2.0", "id": null, "method": "ping"}', -32600, None),
    ('{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}', -32600, None),
    ('{"jsonrpc": "2.0", "id": true, "method": "ping"}', -32600, None),
    ('{"jsonrpc": "2.0", "id": 8, "method": 5}', -32600, 8),
    ('{"jsonrpc": "2.0", "id": 9, "method": ""}', -32600, 9),
    ('{"jsonrpc": "2.0", "id": 10}', -32600, None),
    ('{"jsonrpc": "2.0"}', -32600, None),
    ('{"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {"name": ["x"]}}', -32602, 11),
    ('{"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": []}', -32602, 12),
    ('{"jsonrpc": "2.0", "id": 13, "method": "tools/call", "params": {"name": "list_collections", "arguments": "x"}}', -32602, 13),
    ('{"jsonrpc": "2.0", "id": 14, "method": "resources/read", "params": {"uri": 5}}', -32602, 14),
    ('{"jsonrpc": "2.0", "id": 15, "method": "resources/read", "params": {"uri": "zhiku://image/.png"}}', -32602, 15),
    ('{"jsonrpc": "2.0", "id": 16, "method": "resources/read", "params": {"uri": "zhiku://doc/\\u0000"}}', -32602, 16),
    ('{"jsonrpc": "2.0", "id": 17, "method": "tools/call", "params": {"name": "nope", "arguments": {}}}', -32602, 17),
    ('{"jsonrpc": "2.0", "id": 18, "method": "no/such/method"}', -32601, 18),
    ('{"jsonrpc": "2.0", "id": 19, "method": "tools/call", "params": {"name": "get_document_summary", "arguments": {"doc_id": "\\ud800"}}}', -32600, 19),
    ('{"jsonrpc": "2.0", "id": "\\udfff", "method": "ping"}', -32600, None),
]  # fmt: skip
INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "abuse", "version": "0"}},
}


def _cases(full: bool) -> list[tuple[str, dict[str, Any]]]:
    cases = []
    for tool, (base, params) in TOOLS.items():
        for param, value in itertools.product(params, BAD_VALUES):
            cases.append((tool, {**base, param: value}))
        cases.append((tool, {**base, "unexpected": 1}))
        cases.append((tool, {}))
    cases += [("query_knowledge_hub", {"query": "试用期", **e}) for e in EXTRA[:3]]
    cases += [("ingest_documents", e) for e in EXTRA[3:]]
    return cases if full else random.Random(12).sample(cases, 25)


async def _matrix(client: Client, cases: list[tuple[str, dict[str, Any]]]) -> tuple[list[str], list[float]]:
    bad, seconds = [], []
    for tool, args in cases:
        started = time.monotonic()
        try:
            result = await client.call_tool(tool, args)
            code = (result.meta or {}).get("zhiku/error", {}).get("code") if result.is_error else "ok"
        except MCPError as e:
            code = f"jsonrpc {e.error.code}"
        seconds.append(time.monotonic() - started)
        if code in (None, "INTERNAL_ERROR", "jsonrpc -32603"):
            bad.append(f"{tool} {json.dumps(args, ensure_ascii=True)[:120]} -> {code}")
    return bad, seconds


def _stdio_params(fx: Fixture) -> StdioServerParameters:
    return StdioServerParameters(command=PYTHON, args=serve_args(fx), env=server_env(), cwd=str(ROOT))


@SIZES
def test_bad_arguments_over_stdio_and_http(full: bool, served: tuple[Fixture, HttpServer]) -> None:
    fx, server = served
    cases = _cases(full)

    async def both() -> dict[str, tuple[list[str], list[float]]]:
        out = {}
        async with Client(stdio_client(_stdio_params(fx), errlog=open(fx.root / "stdio.log", "a"))) as c:  # noqa: SIM115
            out["stdio"] = await _matrix(c, cases)
        async with Client(server.url) as c:
            out["http"] = await _matrix(c, cases)
        return out

    results = anyio.run(both)
    cli_bad, cli_cases = _cli_matrix(fx, full)
    for transport, (bad, seconds) in results.items():
        report(
            f"bad_arguments_{transport}" + ("" if full else " (short)"),
            cases=len(cases),
            internal_errors=len(bad),
            **percentiles(seconds),
        )
    report("bad_arguments_cli" + ("" if full else " (short)"), cases=cli_cases, failures=len(cli_bad))
    assert results["stdio"][0] == [] and results["http"][0] == [] and cli_bad == []
    assert "Traceback" not in (fx.root / "http.log").read_text(errors="replace")


def _cli_matrix(fx: Fixture, full: bool) -> tuple[list[str], int]:
    """Bad queries and arguments to the CLI, in process: exit 1 with one ``error:`` line, or 2 (usage)."""
    index = str(fx.index)
    long_query = "试用期" * 20_000
    cases = [
        ["query", ""], ["query", " "], ["query", long_query], ["query", "试用期", "-k", "0"], ["query", "试用期", "-k", "-1"],
        ["query", "试用期", "-k", "101"], ["query", "试用期", "--mode", "nonsense"], ["query", "试用期", "--type", "exe"],
        ["query", "试用期", "--source", "["], ["query", "试用期", "-c", ""], ["query", "试用期", "-c", "../x"],
        ["query", "试用期", "-c", "a/b"], ["query", "\u202e\u3000"], ["query", "%s%n", "--json"], ["documents", "-c", ""],
        ["delete", ""], ["delete", "--glob", ""], ["delete", "*"], ["delete", "../../etc/passwd"], ["history", "--limit", "-1"],
        ["history", "--limit", "x"], ["ingest", "/nonexistent/path"], ["ingest", "-c", "", str(fx.docs)],
        ["ingest", "-c", "a" * 100, str(fx.docs)], ["collections", "--json", "--index", "/dev/null"],
        ["query", "试用期", "--index", "/proc/self"], ["config", "show", "--config", "/dev/null"],
    ]  # fmt: skip
    cases = cases if full else cases[::3]
    bad = []
    runner = CliRunner()
    for args in cases:
        extra = [] if "--index" in args else ["--index", index]
        r = runner.invoke(app, [*args, *extra], catch_exceptions=True)
        lines = r.stderr.strip().splitlines()
        one_line_error = r.exit_code == 1 and len(lines) >= 1 and lines[-1].startswith("error: ")
        if r.exception is not None and not isinstance(r.exception, SystemExit):
            bad.append(f"{args[:3]}: {type(r.exception).__name__}: {r.exception}")
        elif r.exit_code not in (0, 2) and not one_line_error:
            bad.append(f"{args[:3]}: exit {r.exit_code}: {r.stderr[-300:]}")
    return bad, len(cases)


class _RawStdio:
    """A `zhiku serve` process spoken to line by line."""

    def __init__(self, fx: Fixture) -> None:
        self.proc = subprocess.Popen(
            [PYTHON, *serve_args(fx)], env=server_env(), cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=open(fx.root / "raw-stdio.log", "ab"),  # noqa: SIM115
        )  # fmt: skip
        self.lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(line) for line in self.proc.stdout], daemon=True).start()  # type: ignore[union-attr]

    def send(self, text: str) -> None:
        self.proc.stdin.write(text.encode() + b"\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def reply(self, timeout: float = 20) -> dict[str, Any]:
        return json.loads(self.lines.get(timeout=timeout))

    def close(self) -> None:
        self.proc.stdin.close()  # type: ignore[union-attr]
        self.proc.wait(20)


def _check(reply: dict[str, Any] | None, code: int, msg_id: Any) -> str | None:
    if reply is None:
        return "no reply"
    error = reply.get("error") or {}
    if error.get("code") != code or reply.get("id") != msg_id:
        return f"got {json.dumps(reply, ensure_ascii=False)[:200]}"
    return None


def _http_post(server: HttpServer, body: str, session: str | None = None) -> dict[str, Any] | None:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if session:
        headers.update({"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"})
    status, got, data = http_request(server.url, method="POST", headers=headers, body=body.encode())
    text = data.decode("utf-8", "replace")
    if got.get("content-type", "").startswith("text/event-stream"):
        # the first event with data: a 2025-11-25 stream opens with a priming event (an id, empty data)
        text = next((line[5:] for line in text.splitlines() if line.startswith("data:") and line[5:].strip()), "")
    try:
        return json.loads(text) if text.strip() else None
    except ValueError:
        return {"status": status, "body": text[:200]}


@SIZES
def test_jsonrpc_abuse_on_both_transports(full: bool, served: tuple[Fixture, HttpServer]) -> None:
    fx, server = served
    cases = ABUSE if full else [c for i, c in enumerate(ABUSE) if i % 3 == 0 or c[1] == -32602]
    wrong: list[str] = []
    raw = _RawStdio(fx)
    try:
        raw.send(json.dumps(INIT))
        assert raw.reply()["id"] == 0
        raw.send('{"jsonrpc": "2.0", "method": "notifications/initialized"}')
        for message, code, msg_id in cases:
            raw.send(message)
            try:
                problem = _check(raw.reply(), code, msg_id)
            except queue.Empty:
                problem = "no reply within 20 s"
            if problem:
                wrong.append(f"stdio {message[:60]}: {problem}")
        before = vm_hwm_mb(raw.proc.pid)
        big_line = _send_big_line(raw, 200 if full else 3)
        big_line_growth_mb = round(vm_hwm_mb(raw.proc.pid) - before, 1)
        raw.send('{"jsonrpc": "2.0", "id": 99, "method": "ping"}')
        alive_stdio = raw.reply() == {"jsonrpc": "2.0", "id": 99, "result": {}}
    finally:
        raw.close()
    status, headers, _ = http_request(
        server.url, method="POST", body=json.dumps(INIT).encode(),
        headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"},
    )  # fmt: skip
    session = headers["mcp-session-id"]
    _http_post(server, '{"jsonrpc": "2.0", "method": "notifications/initialized"}', session)
    for message, code, msg_id in cases:
        problem = _check(_http_post(server, message, session), code, msg_id)
        if problem:
            wrong.append(f"http {message[:60]}: {problem}")
    alive_http = _http_post(server, '{"jsonrpc": "2.0", "id": 99, "method": "ping"}', session)
    report(
        "jsonrpc_abuse" + ("" if full else " (short)"),
        cases=2 * len(cases),
        wrong_answers=len(wrong),
        alive_after=[alive_stdio, (alive_http or {}).get("result") == {}],
        stdio_big_line_mb=200 if full else 3,
        stdio_big_line_peak_growth_mb=big_line_growth_mb,
    )
    assert wrong == [] and alive_stdio and (alive_http or {}).get("result") == {}
    assert big_line == {
        "jsonrpc": "2.0",
        "id": 20,
        "error": {"code": -32600, "message": "invalid request: a message is at most 1,048,576 bytes"},
    }
    assert big_line_growth_mb <= 50  # refused after reading 1 MiB: the rest is never kept


def _send_big_line(raw: _RawStdio, megabytes: int) -> dict[str, Any]:
    """A tool call of ``megabytes`` MB on one line, written a MB at a time; the server's reply."""
    stdin = raw.proc.stdin
    assert stdin is not None
    stdin.write(b'{"jsonrpc": "2.0", "id": 20, "method": "tools/call", "params": {"name": "query_knowledge_hub", ')
    stdin.write(b'"arguments": {"query": "')
    for _ in range(megabytes):
        stdin.write(b"x" * 1_048_576)
    stdin.write(b'"}}}\n')
    stdin.flush()
    return raw.reply()
