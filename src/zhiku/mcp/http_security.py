"""The checks in front of the SDK's Streamable HTTP app, outermost first:

1. **Host and Origin** (:class:`HostOriginGuard`): a ``Host`` that is not loopback, the bind address or in
   ``server.allowed_hosts`` gets **421**; an ``Origin`` that is neither loopback nor in ``server.allowed_origins``
   gets **403** (the spec's MUST); requests without ``Origin`` pass. Ours, because the SDK's
   ``TransportSecurityMiddleware`` matches ``name:*`` as a prefix (``127.0.0.1:1@evil.example`` passes
   ``127.0.0.1:*``) and compares case-sensitively (``tests/test_http_security.py`` shows both).
2. **CORS**: Starlette's ``CORSMiddleware``: an origin in ``server.allowed_origins`` (exact, or ``scheme://*``) is
   echoed in ``Access-Control-Allow-Origin`` (never ``*``) and preflights are answered.
3. **Bearer token** (:class:`RequireToken`, constant-time compare): without it every path but ``GET /healthz``
   and preflights gets **401**.
4. **Size**: the SDK's ``RequestBodyLimitMiddleware`` (``MAX_REQUEST_BYTES``) gives **413**.
5. **JSON-RPC shape**: :class:`zhiku.mcp.jsonrpc.JsonRpcGuard` (400 with the JSON-RPC error).

Every error response is JSON, ``{"error": {"code", "message"}}`` (:class:`JsonErrors` rewrites the plain-text
ones the libraries send). :func:`check_bind` refuses a non-loopback bind without a token, and a blank or short
token anywhere.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import re
from http import HTTPStatus
from typing import Any

from zhiku.errors import ConfigError
from zhiku.mcp.jsonrpc import ASGIApp, JsonRpcGuard, Message, Receive, Scope, Send
from zhiku.settings import ServerSettings

PATH = "/mcp"  # the MCP endpoint's path, what clients expect
MAX_REQUEST_BYTES = 1_048_576  # largest request body: a tool call is small; a bigger body is refused unread
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
HEALTH_PATH = "/healthz"
MIN_TOKEN_CHARS = 16
_HOST_RE = re.compile(r"^(\[[0-9a-f:.]+\]|[a-z0-9.\-_]+)(?::(\d{1,5}))?$")
_LOOPBACK_ORIGIN = re.compile(r"https?://(127\.0\.0\.1|localhost|\[::1\])(:\d+)?")


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(server: ServerSettings) -> None:
    """Raise ``ConfigError`` when the HTTP settings would expose the index unauthenticated, or name a token no
    client could send (blank, with spaces) or guess too easily (under ``MIN_TOKEN_CHARS`` characters)."""
    token = server.token
    if token is not None and (len(token) < MIN_TOKEN_CHARS or token != token.strip() or " " in token):
        raise ConfigError(
            f"server.token (ZHIKU_TOKEN) must be at least {MIN_TOKEN_CHARS} characters without spaces "
            f"(got {len(token)} characters): e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
        )
    if not is_loopback(server.host) and not token:
        raise ConfigError(
            f"refusing to serve HTTP on non-loopback address {server.host!r} without a bearer token: "
            "set ZHIKU_TOKEN (or server.token), or bind 127.0.0.1"
        )
    for origin in server.allowed_origins:
        if origin == "*" or "://" not in origin or origin.endswith("/"):
            raise ConfigError(
                f"invalid server.allowed_origins entry {origin!r}: use an exact origin like "
                "'https://app.example.com' or 'scheme://*' (never '*')"
            )


def check_port_free(host: str, port: int, *, what: str, fix: str) -> None:
    """Fail before anything loads when ``host:port`` cannot be bound (a server would fail only after loading the
    models), naming the host when it is not this machine's."""
    import errno
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind: a closing socket is no clash
        try:
            probe.bind((host.strip("[]"), port))
        except OSError as e:
            if e.errno not in (errno.EADDRINUSE, errno.EACCES):  # the host, not the port: no name, not this machine's
                fix = (
                    f"{host} is not an address of this machine: set --host (server.host, ZHIKU_HOST) to 127.0.0.1, "
                    "0.0.0.0 (every interface) or one of this machine's addresses"
                )
            raise ConfigError(f"cannot serve {what} on {host}:{port}: {e.strerror or e}: {fix}") from None


async def _reply(send: Send, status: int, code: str, message: str, headers: list[Any] | None = None) -> None:
    body = json.dumps({"error": {"code": code, "message": message}}, ensure_ascii=False).encode()
    length = str(len(body)).encode()
    start_headers = [(b"content-type", b"application/json"), (b"content-length", length), *(headers or [])]
    await send({"type": "http.response.start", "status": status, "headers": start_headers})
    await send({"type": "http.response.body", "body": body})


def _code(status: int) -> str:
    try:
        return "REQUEST_TOO_LARGE" if status == 413 else HTTPStatus(status).name
    except ValueError:
        return "HTTP_ERROR"


class HostOriginGuard:
    """421 for a foreign ``Host``, 403 for a foreign ``Origin``; the ``Host`` passed on is lower case."""

    def __init__(self, app: ASGIApp, server: ServerSettings) -> None:
        self.app = app
        self.cors_origins = tuple(server.allowed_origins)
        host = server.host.lower() if ":" not in server.host or server.host.startswith("[") else f"[{server.host}]"
        self.names = {*LOOPBACK_NAMES, *([host] if host not in ("0.0.0.0", "[::]") else [])}  # with any port
        self.exact = set()  # name:port
        for entry in (e.lower() for e in server.allowed_hosts):
            m = _HOST_RE.match(entry)
            if entry.endswith(":*"):
                self.names.add(entry[:-2])
            elif m and m.group(2):
                self.exact.add(entry)
            else:
                self.names.add(entry)

    def host_allowed(self, host: str) -> bool:
        m = _HOST_RE.match(host.lower())
        return m is not None and (m.group(1) in self.names or host.lower() in self.exact)

    def origin_allowed(self, origin: str) -> bool:
        """Loopback, or equal to an allowed origin, or of a ``scheme://*`` one's scheme."""
        return _LOOPBACK_ORIGIN.fullmatch(origin) is not None or any(
            origin.startswith(p[:-1]) and len(origin) > len(p) - 1 if p.endswith("://*") else origin == p
            for p in self.cors_origins
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = [(k.lower(), v) for k, v in scope.get("headers", [])]
        host = next((v.decode("latin-1") for k, v in headers if k == b"host"), "")
        if not self.host_allowed(host):
            await _reply(send, 421, "MISDIRECTED_REQUEST", f"Host {host!r} is not served here (server.allowed_hosts)")
            return
        origin = next((v.decode("latin-1") for k, v in headers if k == b"origin"), None)
        if origin is not None and not self.origin_allowed(origin):
            await _reply(send, 403, "FORBIDDEN_ORIGIN", f"origin {origin!r} is not allowed (server.allowed_origins)")
            return
        headers = [(k, v.lower() if k == b"host" else v) for k, v in headers]
        await self.app({**scope, "headers": headers}, receive, send)


class RequireToken:
    """401 without ``Authorization: Bearer <token>`` (``GET /healthz`` and preflights pass)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path") != HEALTH_PATH and scope.get("method") != "OPTIONS":
            auth = next((v for k, v in scope.get("headers", []) if k.lower() == b"authorization"), b"")
            given = auth[7:].strip() if auth[:7].lower() == b"bearer " else b""
            if not hmac.compare_digest(given, self.token):
                message = "missing or wrong bearer token (Authorization: Bearer <token>)"
                await _reply(send, 401, "UNAUTHORIZED", message, [(b"www-authenticate", b'Bearer realm="zhiku"')])
                return
        await self.app(scope, receive, send)


class JsonErrors:
    """Rewrites error responses that are not JSON (the libraries' plain-text 400/403/413/421…) into
    ``{"error": {"code", "message"}}``, keeping status and other headers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        held: dict[str, Any] = {}

        async def send_json(message: Message) -> None:
            if message["type"] == "http.response.start":
                ctype = dict(message.get("headers", [])).get(b"content-type", b"")
                if message["status"] >= 400 and not ctype.startswith(b"application/json"):
                    held.update(start=message, body=b"")
                    return
            elif held and message["type"] == "http.response.body":
                held["body"] += message.get("body", b"")
                if message.get("more_body", False):
                    return
                status = held["start"]["status"]
                drop = (b"content-type", b"content-length")
                keep = [(k, v) for k, v in held["start"].get("headers", []) if k not in drop]
                text = held["body"].decode("utf-8", "replace").strip() or "error"
                await _reply(send, status, _code(status), text, keep)
                return
            await send(message)

        await self.app(scope, receive, send_json if scope["type"] == "http" else send)


def build_http_app(sdk_app: ASGIApp, server: ServerSettings) -> ASGIApp:
    """``sdk_app`` (the SDK's Streamable HTTP app) behind the checks in the module docstring."""
    from mcp.server.transport_security import RequestBodyLimitMiddleware
    from starlette.middleware.cors import CORSMiddleware

    app: ASGIApp = RequestBodyLimitMiddleware(JsonRpcGuard(sdk_app, PATH), MAX_REQUEST_BYTES)
    if server.token:
        app = RequireToken(app, server.token)
    schemes = [re.escape(o[: -len("*")]) + ".+" for o in server.allowed_origins if o.endswith("://*")]
    app = CORSMiddleware(
        app,
        allow_origins=[o for o in server.allowed_origins if not o.endswith("://*")],
        allow_origin_regex="|".join(schemes) or None,
        allow_methods=("GET", "POST", "DELETE", "OPTIONS"),
        allow_headers=(
            "authorization, content-type, accept, last-event-id, mcp-session-id, mcp-protocol-version, mcp-method, "
            "mcp-name"
        ).split(", "),
        expose_headers=("mcp-session-id", "mcp-protocol-version", "www-authenticate"),
        max_age=600,
    )
    return JsonErrors(HostOriginGuard(app, server))
