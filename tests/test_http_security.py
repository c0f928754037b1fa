"""The HTTP security middleware as a pure ASGI app, and the bind check."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from zhiku.errors import ConfigError
from zhiku.mcp.http_security import (
    Policy,
    SecurityMiddleware,
    check_bind,
    is_loopback,
    is_loopback_origin,
    origin_matches,
    sdk_host_patterns,
    sdk_origin_patterns,
)
from zhiku.settings import ServerSettings

POLICY = Policy(cors_origins=("https://app.example.com", "vscode-webview://*"), token="tok", max_body=100)


async def echo_app(scope: Any, receive: Any, send: Any) -> None:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"got " + str(len(body)).encode()})


def call(
    method: str = "POST",
    path: str = "/mcp",
    headers: dict[str, str] | None = None,
    chunks: tuple[bytes, ...] = (b"{}",),
    policy: Policy = POLICY,
) -> tuple[int, dict[str, str], bytes]:
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
    }
    incoming = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    anyio.run(SecurityMiddleware(echo_app, policy), scope, receive, send)
    start = sent[0]
    return (
        start["status"],
        {k.decode(): v.decode() for k, v in start["headers"]},
        b"".join(m.get("body", b"") for m in sent[1:]),
    )


AUTH = {"Authorization": "Bearer tok"}


def test_foreign_origin_is_403_before_anything_else() -> None:
    for path in ("/mcp", "/healthz"):
        status, _, body = call(path=path, headers={"Origin": "http://evil.example"})
        assert status == 403 and json.loads(body)["error"]["code"] == "FORBIDDEN_ORIGIN"
    assert call(method="OPTIONS", headers={"Origin": "https://evil.example"})[0] == 403


def test_preflight_echoes_the_allowed_origin() -> None:
    status, headers, body = call(method="OPTIONS", headers={"Origin": "vscode-webview://x1"})
    assert (status, body) == (204, b"")
    assert headers["access-control-allow-origin"] == "vscode-webview://x1" and headers["vary"] == "Origin"
    assert headers["access-control-allow-methods"] == "GET, POST, DELETE, OPTIONS"
    status, headers, _ = call(method="OPTIONS", headers={"Origin": "http://localhost:3000"})
    assert status == 204 and "access-control-allow-origin" not in headers  # accepted, but not a CORS origin


def test_token_is_required_except_for_healthz() -> None:
    assert call()[0] == 401
    assert call(headers={"Authorization": "Bearer nope"})[0] == 401
    assert call(headers={"Authorization": "Basic tok"})[0] == 401
    assert call(headers=AUTH) == (200, {"content-type": "text/plain"}, b"got 2")
    assert call(method="GET", path="/healthz", chunks=(b"",))[0] == 200
    no_token = Policy(cors_origins=(), token=None, max_body=100)
    assert call(policy=no_token)[0] == 200
    status, headers, _ = call(headers={"Origin": "https://app.example.com"})
    assert status == 401 and headers["access-control-allow-origin"] == "https://app.example.com"
    assert headers["www-authenticate"] == 'Bearer realm="zhiku"'


def test_cors_headers_on_normal_responses() -> None:
    status, headers, _ = call(headers={**AUTH, "Origin": "https://app.example.com"})
    assert status == 200 and headers["access-control-allow-origin"] == "https://app.example.com"
    assert "mcp-session-id" in headers["access-control-expose-headers"]


def test_body_limit_by_header_and_by_stream() -> None:
    assert call(headers={**AUTH, "Content-Length": "101"}, chunks=(b"x" * 101,))[0] == 413
    assert call(headers=AUTH, chunks=(b"x" * 60, b"y" * 41))[0] == 413  # chunked, no Content-Length
    assert call(headers=AUTH, chunks=(b"x" * 60, b"y" * 40)) == (200, {"content-type": "text/plain"}, b"got 100")


def test_origin_helpers() -> None:
    assert origin_matches("vscode-webview://abc", ("vscode-webview://*",))
    assert not origin_matches("vscode-webview://", ("vscode-webview://*",))
    assert not origin_matches("https://app.example.com.evil", ("https://app.example.com",))
    assert is_loopback_origin("http://127.0.0.1:6274") and is_loopback_origin("http://[::1]:80")
    assert is_loopback_origin("http://localhost") and not is_loopback_origin("http://localhost.evil.com")
    assert not is_loopback_origin("http://127.0.0.1:80@evil.com")
    assert [is_loopback(h) for h in ("127.0.0.1", "::1", "localhost", "127.0.0.2", "0.0.0.0", "example.com")] == [
        True,
        True,
        True,
        True,
        False,
        False,
    ]


def test_sdk_patterns() -> None:
    s = ServerSettings(
        host="10.0.0.5",
        token="t",
        allowed_origins=("https://a.example", "chrome-extension://*"),
        allowed_hosts=("kb.example.com:*",),
    )
    assert sdk_origin_patterns(s)[-2:] == ["https://a.example", "chrome-extension:*"]
    hosts = sdk_host_patterns(s, s.allowed_hosts)
    assert hosts[-3:] == ["10.0.0.5", "10.0.0.5:*", "kb.example.com:*"] and "127.0.0.1:*" in hosts
    assert "0.0.0.0:*" not in sdk_host_patterns(ServerSettings(host="0.0.0.0", token="t"))


def test_check_bind() -> None:
    check_bind(ServerSettings(host="127.0.0.1"))
    check_bind(ServerSettings(host="0.0.0.0", token="t"))
    with pytest.raises(ConfigError, match="without a bearer token: set ZHIKU_TOKEN"):
        check_bind(ServerSettings(host="0.0.0.0"))
    with pytest.raises(ConfigError, match="never '\\*'"):
        check_bind(ServerSettings(allowed_origins=("*",)))
