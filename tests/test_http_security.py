"""The HTTP security stack (``build_http_app``) in front of a plain ASGI app, driven as ASGI; the bind check;
and the two facts about the SDK's own Host/Origin check that keep ours in place."""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_fixtures import free_port
from zhiku.access import add_token, revoke_token
from zhiku.errors import ConfigError
from zhiku.mcp.http_security import (
    MAX_REQUEST_BYTES,
    build_http_app,
    check_bind,
    check_port_free,
    http_protocol,
    is_loopback,
)
from zhiku.settings import ServerSettings

TOKEN = "a-token-of-24-characters"
SERVER = ServerSettings(allowed_origins=("https://app.example.com", "vscode-webview://*"), token=TOKEN)
BODY = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'


async def echo_app(scope: Any, receive: Any, send: Any) -> None:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    host = dict(scope["headers"]).get(b"host", b"").decode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": f"got {len(body)} for {host}".encode()})


def call(
    method: str = "POST",
    path: str = "/mcp",
    headers: dict[str, str] | None = None,
    chunks: tuple[bytes, ...] = (BODY,),
    server: ServerSettings = SERVER,
    repeated: tuple[tuple[str, str], ...] = (),
    index: Path | None = None,
) -> tuple[int, dict[str, str], bytes]:
    all_headers = {"Host": "127.0.0.1:8765", **(headers or {})}
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "headers": [(k.lower().encode(), v.encode()) for k, v in [*all_headers.items(), *repeated]],
    }
    incoming = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    anyio.run(build_http_app(echo_app, server, index), scope, receive, send)
    start = sent[0]
    return (
        start["status"],
        {k.decode(): v.decode() for k, v in start["headers"]},
        b"".join(m.get("body", b"") for m in sent[1:]),
    )


AUTH = {"Authorization": f"Bearer {TOKEN}"}


def error(response: tuple[int, dict[str, str], bytes]) -> tuple[int, str]:
    status, headers, body = response
    assert headers["content-type"] == "application/json"
    return status, json.loads(body)["error"]["code"]


def test_host_is_checked_strictly_and_without_case() -> None:
    assert error(call(headers={**AUTH, "Host": "127.0.0.1:1@evil.example"})) == (421, "MISDIRECTED_REQUEST")
    assert error(call(headers={**AUTH, "Host": "evil.example:80"})) == (421, "MISDIRECTED_REQUEST")
    assert error(call(headers={**AUTH, "Host": "127.0.0.1.evil.example"})) == (421, "MISDIRECTED_REQUEST")
    assert call(headers={**AUTH, "Host": "LOCALHOST:8765"})[2] == b"got 45 for localhost:8765"
    assert call(headers={**AUTH, "Host": "[::1]:80"})[0] == 200
    public = ServerSettings(host="10.0.0.5", token=TOKEN, allowed_hosts=("KB.example.com:*", "a.b:8443"))
    hosts = ("kb.example.com:443", "10.0.0.5:1", "a.b:8443", "a.b:8444", "kb.example.com:443/x", "")
    assert [call(headers={**AUTH, "Host": h}, server=public)[0] for h in hosts] == [200, 200, 200, 421, 421, 421]


def test_foreign_origin_is_403_before_anything_else() -> None:
    for path in ("/mcp", "/healthz"):
        assert error(call(path=path, headers={"Origin": "http://evil.example"})) == (403, "FORBIDDEN_ORIGIN")
    assert error(call(method="OPTIONS", headers={"Origin": "https://evil.example"})) == (403, "FORBIDDEN_ORIGIN")
    assert error(call(headers={**AUTH, "Origin": "http://127.0.0.1:80@evil.com"})) == (403, "FORBIDDEN_ORIGIN")
    two = (("Origin", "http://127.0.0.1:3000"), ("Origin", "http://evil.example"))  # every one is checked
    assert error(call(headers=AUTH, repeated=two)) == (403, "FORBIDDEN_ORIGIN")
    assert call(headers=AUTH, repeated=two[:1] * 2)[0] == 200


def test_preflight_is_starlettes_cors() -> None:
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}
    status, headers, _ = call(method="OPTIONS", headers={"Origin": "vscode-webview://x1", **preflight})
    assert status == 200 and headers["access-control-allow-origin"] == "vscode-webview://x1"
    assert headers["access-control-allow-methods"] == "GET, POST, DELETE, OPTIONS" and headers["vary"].startswith(
        "Origin"
    )
    assert "authorization" in headers["access-control-allow-headers"]
    # a loopback origin is accepted (no 403) but is not a CORS origin unless listed
    assert error(call(method="OPTIONS", headers={"Origin": "http://localhost:3000", **preflight})) == (
        400,
        "BAD_REQUEST",
    )


def test_token_is_required_except_for_healthz() -> None:
    assert error(call()) == (401, "UNAUTHORIZED")
    assert call(headers={"Authorization": "Bearer nope"})[0] == 401
    assert call(headers={"Authorization": f"Basic {TOKEN}"})[0] == 401
    assert call(headers=AUTH) == (200, {"content-type": "text/plain", "vary": "Origin"}, b"got 45 for 127.0.0.1:8765")
    assert call(method="GET", path="/healthz", chunks=(b"",))[0] == 200
    assert call(server=ServerSettings())[0] == 200  # no token configured
    status, headers, _ = call(headers={"Origin": "https://app.example.com"})
    assert status == 401 and headers["access-control-allow-origin"] == "https://app.example.com"
    assert headers["www-authenticate"] == 'Bearer realm="zhiku"'


def test_a_named_token_is_required_from_the_moment_one_exists(tmp_path: Path) -> None:
    open_server = ServerSettings()
    assert call(server=open_server, index=tmp_path)[0] == 200  # loopback, no token anywhere
    token = add_token(tmp_path, "bot", ["hr"])["token"]
    assert error(call(server=open_server, index=tmp_path)) == (401, "UNAUTHORIZED")
    assert call(server=open_server, index=tmp_path, headers={"Authorization": f"Bearer {token}"})[0] == 200
    assert (
        call(
            server=open_server,
            index=tmp_path,
            headers={"Authorization": f"Bearer {token[:-1]}{'y' if token[-1] == 'x' else 'x'}"},
        )[0]
        == 401
    )
    revoke_token(tmp_path, "bot")
    assert call(server=open_server, index=tmp_path)[0] == 200  # none left: open again


def test_cors_headers_on_normal_responses() -> None:
    status, headers, _ = call(headers={**AUTH, "Origin": "https://app.example.com"})
    assert status == 200 and headers["access-control-allow-origin"] == "https://app.example.com"
    assert "mcp-session-id" in headers["access-control-expose-headers"]
    status, headers, _ = call(headers={**AUTH, "Origin": "http://localhost:6274"})
    assert status == 200 and "access-control-allow-origin" not in headers


def test_body_limit_by_header_and_by_stream_answers_json() -> None:
    big = b'{"pad": "' + b"x" * MAX_REQUEST_BYTES + b'"}'
    assert error(call(headers={**AUTH, "Content-Length": str(len(big))}, chunks=(big,))) == (413, "REQUEST_TOO_LARGE")
    half = len(big) // 2
    assert error(call(headers=AUTH, chunks=(big[:half], big[half:]))) == (413, "REQUEST_TOO_LARGE")  # no length
    assert call(headers=AUTH, chunks=(BODY[:20], BODY[20:]))[0] == 200


def test_origins_allowed_exactly() -> None:
    origins = {
        "vscode-webview://abc": 200,
        "vscode-webview://": 403,
        "https://app.example.com.evil": 403,
        "http://127.0.0.1:6274": 200,
        "http://[::1]:80": 200,
        "http://localhost": 200,
        "http://localhost.evil.com": 403,
        "http://127.0.0.1:80@evil.com": 403,
        "http://localhost:80\n": 403,
    }
    assert {o: call(headers={**AUTH, "Origin": o})[0] for o in origins} == origins
    assert [is_loopback(h) for h in ("127.0.0.1", "::1", "localhost", "127.0.0.2", "0.0.0.0", "example.com")] == [
        True,
        True,
        True,
        True,
        False,
        False,
    ]


def test_check_bind(tmp_path: Path) -> None:
    check_bind(ServerSettings(host="127.0.0.1"))
    check_bind(ServerSettings(host="0.0.0.0", token=TOKEN))
    with pytest.raises(ConfigError, match="without a bearer token: set ZHIKU_TOKEN"):
        check_bind(ServerSettings(host="0.0.0.0"), tmp_path)
    add_token(tmp_path, "bot", None)  # a named token, or an OAuth issuer, authenticates as well
    check_bind(ServerSettings(host="0.0.0.0"), tmp_path)
    team = {"oauth_issuer": "https://sso.example.com/realms/team", "oauth_audience": "https://kb.example.com/mcp"}
    check_bind(ServerSettings(host="0.0.0.0", **team))
    with pytest.raises(ConfigError, match="set server.oauth_audience to this server's URL as clients reach it"):
        check_bind(ServerSettings(host="0.0.0.0", oauth_issuer=team["oauth_issuer"]))
    with pytest.raises(ConfigError, match="server.oauth_issuer must be an https:// URL"):
        check_bind(ServerSettings(oauth_issuer="http://sso.example.com"))
    (tmp_path / "tokens.json").write_text("{broken", encoding="utf-8")  # refused at start, not on a request
    with pytest.raises(ConfigError, match=f"cannot read {tmp_path / 'tokens.json'}: Expecting property name"):
        check_bind(ServerSettings(), tmp_path)
    with pytest.raises(ConfigError, match="never '\\*'"):
        check_bind(ServerSettings(allowed_origins=("*",)))
    for bad in (" ", "short-token", " " * 20, "a token with spaces in it"):
        with pytest.raises(ConfigError) as e:
            check_bind(ServerSettings(token=bad))
        assert str(e.value).startswith("server.token (ZHIKU_TOKEN) must be at least 16 characters without spaces")


def test_port_check_names_the_port_or_the_host_that_fails() -> None:
    """A taken port gets the caller's fix; a host that is not this machine's (a typo, a copied address) used to get
    the same "another `zhiku serve`? pass --port N" advice, which changes nothing."""
    fix = "pass --port N, or stop what holds it"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError) as e:
            check_port_free("127.0.0.1", port, what="HTTP", fix=fix)
    assert str(e.value) == f"cannot serve HTTP on 127.0.0.1:{port}: {os.strerror(errno.EADDRINUSE)}: {fix}"
    with pytest.raises(ConfigError) as e:  # TEST-NET-1: never an address of this machine
        check_port_free("192.0.2.1", 8765, what="HTTP", fix=fix)
    assert str(e.value) == (
        f"cannot serve HTTP on 192.0.2.1:8765: {os.strerror(errno.EADDRNOTAVAIL)}: 192.0.2.1 is not an address of "
        "this machine: set --host (server.host, ZHIKU_HOST) to 127.0.0.1, 0.0.0.0 (every interface) or one of this "
        "machine's addresses"
    )


def _closed_after(port: int, first: bytes, trickle: bytes) -> float:
    """Seconds until the server closes a connection that sends ``first``, then ``trickle`` a byte every 0.1 s."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        started = time.monotonic()
        s.sendall(first)
        s.settimeout(0.1)
        for i in range(100):
            try:
                s.send(trickle[i : i + 1])
                if s.recv(100) == b"":
                    break
            except TimeoutError:
                pass
            except OSError:
                break
        return time.monotonic() - started


def test_slow_and_crowded_connections_are_closed_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    """A connection sending nothing, its headers or its body too slowly is closed at the read deadline; one over
    the per-address cap is answered 503; each limit is logged once however often it is hit."""
    import uvicorn

    caplog.set_level(logging.WARNING, logger="zhiku.mcp.server")
    port = free_port()
    protocol = http_protocol(per_address=3, read_timeout_s=0.5)
    server = uvicorn.Server(uvicorn.Config(echo_app, port=port, http=protocol, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    head = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 45\r\n\r\n"
    try:
        closed = [_closed_after(port, b"", b""), _closed_after(port, b"", head), _closed_after(port, head, BODY)]
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        with socket.create_connection(("127.0.0.1", port)) as fourth, socket.create_connection(("127.0.0.1", port)):
            refused = fourth.recv(1000)
        for s in held:
            s.close()
        time.sleep(0.1)
        with socket.create_connection(("127.0.0.1", port)) as s:  # a whole request is served
            s.sendall(head.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n") + BODY)
            answered = b"".join(iter(lambda: s.recv(1000), b""))
    finally:
        server.should_exit = True
        thread.join(10)
    assert [0.5 <= c < 5 for c in closed] == [True, True, True], closed  # a loaded machine closes late, never early
    assert refused.startswith(b"HTTP/1.1 503 ") and refused.endswith(
        b'{"error": {"code": "TOO_MANY_CONNECTIONS", "message": "over 3 connections from this address; close some '
        b'and retry"}}'
    )
    assert answered.startswith(b"HTTP/1.1 200 ") and answered.endswith(b"got 45 for 127.0.0.1\r\n0\r\n\r\n")
    assert [r.getMessage() for r in caplog.records] == [
        "a request from 127.0.0.1 not whole after 0.5 s: connection closed (1× since the last such line)",
        "over 3 connections from 127.0.0.1: refused (1× since the last such line)",
    ]
