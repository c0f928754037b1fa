"""The checks in front of the SDK: JSON-RPC 2.0 shapes on both transports (it leaves some malformed messages
unanswered); for Streamable HTTP, host, origin and token checks, every error as JSON, and the connection limits."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import re
import time
import urllib.parse
from collections import Counter
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from zhiku.access import READ, WRITE, Gate, Issuer
from zhiku.errors import ConfigError
from zhiku.settings import ServerSettings

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("zhiku.mcp.server")
PATH = "/mcp"  # the MCP endpoint's path, what clients expect
READ_TIMEOUT_S = 15.0  # a request's headers and body must arrive within this (slowloris)
MAX_CONNECTIONS_PER_ADDRESS = 256  # above 50 MCP clients on one machine, each with a stream and a request open
LIMIT_LOG_EVERY_S = 60.0
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
HEALTH_PATH = "/healthz"
WELL_KNOWN = "/.well-known/oauth-protected-resource"
ACCESS_KEY = "zhiku.access"  # the caller's Access in the ASGI scope (the SDK hands MCP handlers the request)
MIN_TOKEN_CHARS = 16
_HOST_RE = re.compile(r"^(\[[0-9a-f:.]+\]|[a-z0-9.\-_]+)(?::(\d{1,5}))?$")
_LOOPBACK_ORIGIN = re.compile(r"https?://(127\.0\.0\.1|localhost|\[::1\])(:\d+)?")
MAX_REQUEST_BYTES = 1_048_576  # largest message, either transport: a tool call is small; a bigger one is refused unread
_LEADING_ID = re.compile(rb'\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*(-?\d{1,15}|"[^"\\]{0,100}")\s*,')
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602


@dataclass(frozen=True)
class Rejection:
    code: int
    message: str
    id: str | int | None = None

    def response(self) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": self.id, "error": {"code": self.code, "message": self.message}}


def _valid_id(value: object) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _check_params(method: str, params: object, msg_id: str | int) -> Rejection | None:
    if params is not None and not isinstance(params, dict):
        return Rejection(INVALID_PARAMS, f"params of {method} must be an object", msg_id)
    p = params or {}
    if method == "tools/call":
        if not isinstance(p.get("name"), str):
            return Rejection(INVALID_PARAMS, f"tools/call needs params.name, a string (got {p.get('name')!r})", msg_id)
        if p.get("arguments") is not None and not isinstance(p["arguments"], dict):
            return Rejection(INVALID_PARAMS, "tools/call params.arguments must be an object", msg_id)
    if method == "resources/read" and not isinstance(p.get("uri"), str):
        return Rejection(INVALID_PARAMS, f"resources/read needs params.uri, a string (got {p.get('uri')!r})", msg_id)
    return None


def too_large(head: bytes) -> Rejection:
    """The answer to a message over ``MAX_REQUEST_BYTES``; its id when ``head`` starts the way SDKs write one."""
    m = _LEADING_ID.match(head)
    msg_id = json.loads(m.group(1)) if m else None
    return Rejection(INVALID_REQUEST, f"invalid request: a message is at most {MAX_REQUEST_BYTES:,} bytes", msg_id)


def check_message(raw: str | bytes) -> Rejection | None:
    """None when ``raw`` is one well-formed JSON-RPC 2.0 message; else the error to answer with."""
    try:
        msg = json.loads(raw)
    except (ValueError, RecursionError) as e:
        return Rejection(PARSE_ERROR, f"parse error: not JSON ({type(e).__name__}: {str(e)[:120]})")
    if isinstance(msg, list):
        return Rejection(INVALID_REQUEST, "invalid request: batches are not supported; send one JSON-RPC object")
    if not isinstance(msg, dict):
        return Rejection(INVALID_REQUEST, f"invalid request: a JSON-RPC message is an object, not {type(msg).__name__}")
    msg_id = msg.get("id")
    reply_id = msg_id if _valid_id(msg_id) else None
    if msg.get("jsonrpc") != "2.0":
        return Rejection(
            INVALID_REQUEST, f'invalid request: "jsonrpc" must be "2.0" (got {msg.get("jsonrpc")!r})', reply_id
        )
    if "id" in msg and not _valid_id(msg_id):
        return Rejection(INVALID_REQUEST, f"invalid request: id must be a string or an integer (got {msg_id!r})")
    try:  # a \ud800 escape parses, but no UTF-8 consumer (SQLite, the log, the reply) can take the string
        json.dumps(msg, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        surrogate_id = isinstance(reply_id, str) and not reply_id.isprintable()
        why = "invalid request: a string holds a lone UTF-16 surrogate (\\ud800-\\udfff)"
        return Rejection(INVALID_REQUEST, why, None if surrogate_id else reply_id)
    if "method" in msg:
        method = msg["method"]
        if not isinstance(method, str) or not method:
            return Rejection(INVALID_REQUEST, f"invalid request: method must be a string (got {method!r})", reply_id)
        return _check_params(method, msg.get("params"), reply_id) if reply_id is not None else None
    if reply_id is None or ("result" in msg) == ("error" in msg):
        return Rejection(INVALID_REQUEST, "invalid request: no method, and not a response (id plus result or error)")
    return None


async def send_json(send: Send, status: int, body: bytes, headers: list[Any] | None = None) -> None:
    start = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)), *(headers or [])]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": body})


def json_rpc_guard(app: ASGIApp) -> ASGIApp:
    """A POST to ``PATH`` that :func:`check_message` rejects gets HTTP 400; others reach ``app``, body replayed.
    Behind the SDK's ``RequestBodyLimitMiddleware``, whose first message holds the whole body."""

    async def guard(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"].rstrip("/") != PATH:
            await app(scope, receive, send)
            return
        first = await receive()
        rejection = check_message(first.get("body", b"") if first["type"] == "http.request" else b"")
        if rejection is not None:
            await send_json(send, 400, json.dumps(rejection.response(), ensure_ascii=False).encode())
            return
        held = [first]

        async def replay() -> Message:
            return held.pop() if held else await receive()

        await app(scope, replay, send)

    return guard


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(server: ServerSettings, index: Path | None = None) -> None:
    """Refuse an unauthenticated non-loopback bind, a weak token, a bad origin, an issuer without TLS."""
    token, issuer, named = server.token, server.oauth_issuer, Gate(index).required()  # a broken tokens file: here
    if token is not None and (len(token) < MIN_TOKEN_CHARS or token != token.strip() or " " in token):
        raise ConfigError(
            f"server.token (ZHIKU_TOKEN) must be at least {MIN_TOKEN_CHARS} characters without spaces "
            f"(got {len(token)} characters): e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
        )
    if issuer and not (issuer.startswith("https://") or is_loopback(urllib.parse.urlsplit(issuer).hostname or "")):
        raise ConfigError(f"server.oauth_issuer must be an https:// URL (got {issuer!r})")
    if issuer and not server.oauth_audience and not is_loopback(server.host):
        raise ConfigError("set server.oauth_audience to this server's URL as clients reach it (its tokens' `aud`)")
    if not is_loopback(server.host) and not (token or issuer or named):
        raise ConfigError(
            f"refusing to serve HTTP on non-loopback address {server.host!r} without a bearer token: "
            "set ZHIKU_TOKEN (or server.token), add one with `zhiku tokens add`, or bind 127.0.0.1"
        )
    for origin in server.allowed_origins:
        if origin == "*" or "://" not in origin or origin.endswith("/"):
            raise ConfigError(
                f"invalid server.allowed_origins entry {origin!r}: use an exact origin like "
                "'https://app.example.com' or 'scheme://*' (never '*')"
            )


def check_port_free(host: str, port: int, *, what: str, fix: str) -> None:
    """Fail before the models load when ``host:port`` cannot be bound."""
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
    await send_json(send, status, body, headers)


def _code(status: int) -> str:
    try:
        return "REQUEST_TOO_LARGE" if status == 413 else HTTPStatus(status).name
    except ValueError:
        return "HTTP_ERROR"


def host_origin_guard(app: ASGIApp, server: ServerSettings) -> ASGIApp:
    """421 for a foreign ``Host``, 403 for a foreign ``Origin`` (the SDK's check is looser)."""
    host = server.host.lower() if ":" not in server.host or server.host.startswith("[") else f"[{server.host}]"
    names = {*LOOPBACK_NAMES, *([host] if host not in ("0.0.0.0", "[::]") else [])}  # with any port
    exact = set()  # name:port
    for entry in (e.lower() for e in server.allowed_hosts):
        m = _HOST_RE.match(entry)
        if entry.endswith(":*"):
            names.add(entry[:-2])
        elif m and m.group(2):
            exact.add(entry)
        else:
            names.add(entry)

    def host_allowed(host: str) -> bool:
        m = _HOST_RE.match(host.lower())
        return m is not None and (m.group(1) in names or host.lower() in exact)

    def origin_allowed(origin: str) -> bool:
        return _LOOPBACK_ORIGIN.fullmatch(origin) is not None or any(
            origin.startswith(p[:-1]) and len(origin) > len(p) - 1 if p.endswith("://*") else origin == p
            for p in server.allowed_origins
        )

    async def guard(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = [(k.lower(), v) for k, v in scope.get("headers", [])]
        host = next((v.decode("latin-1") for k, v in headers if k == b"host"), "")
        if not host_allowed(host):
            await _reply(send, 421, "MISDIRECTED_REQUEST", f"Host {host!r} is not served here (server.allowed_hosts)")
            return
        for origin in (v.decode("latin-1") for k, v in headers if k == b"origin"):  # every one, not the first
            if not origin_allowed(origin):
                message = f"origin {origin!r} is not allowed (server.allowed_origins)"
                await _reply(send, 403, "FORBIDDEN_ORIGIN", message)
                return
        headers = [(k, v.lower() if k == b"host" else v) for k, v in headers]
        await app({**scope, "headers": headers}, receive, send)

    return guard


def resource_url(server: ServerSettings) -> str:
    """What OAuth tokens name as their audience: this server's MCP endpoint as clients reach it."""
    host = f"[{server.host}]" if ":" in server.host and not server.host.startswith("[") else server.host
    return server.oauth_audience or f"http://{host}:{server.port}{PATH}"


def authenticate(app: ASGIApp, gate: Gate, server: ServerSettings) -> ASGIApp:
    """401 without a token the gate accepts; the caller's ``Access`` goes on in the scope and as the SDK's user."""
    challenge, metadata, paths = 'Bearer realm="zhiku"', b"", set[str]()
    if gate.issuer is not None:
        resource = resource_url(server)
        scheme, _, rest = resource.partition("://")
        host, _, path = rest.partition("/")
        paths = {WELL_KNOWN, f"{WELL_KNOWN}/{path}".rstrip("/")}
        challenge += f', resource_metadata="{scheme}://{host}{max(paths, key=len)}", scope="{READ}"'
        about = {"resource": resource, "authorization_servers": [gate.issuer.issuer]}
        metadata = json.dumps(
            {**about, "scopes_supported": [READ, WRITE], "bearer_methods_supported": ["header"]}
        ).encode()

    async def check(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") == HEALTH_PATH or scope.get("method") == "OPTIONS":
            await app(scope, receive, send)
            return
        if scope.get("path") in paths:
            await send_json(send, 200, metadata)
            return
        auth = next((v for k, v in scope.get("headers", []) if k.lower() == b"authorization"), b"")
        given = auth[7:].strip().decode("latin-1") if auth[:7].lower() == b"bearer " else ""
        if gate.required():  # a stat of the tokens file; a JWT's keys may need fetching: in a thread
            access = await anyio.to_thread.run_sync(gate.check, given) if given else None
            if access is None:
                message = "missing or wrong bearer token (Authorization: Bearer <token>)"
                refused = challenge + (', error="invalid_token"' if given else "")
                await _reply(send, 401, "UNAUTHORIZED", message, [(b"www-authenticate", refused.encode())])
                return
            from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
            from mcp.server.auth.provider import AccessToken

            user = AuthenticatedUser(AccessToken(token="", client_id=access.name, scopes=[]))
            scope = {**scope, "user": user, ACCESS_KEY: access}
        await app(scope, receive, send)

    return check


def json_errors(app: ASGIApp) -> ASGIApp:
    """The libraries' plain-text error responses rewritten as JSON, status and other headers kept."""

    async def rewrite(scope: Scope, receive: Receive, send: Send) -> None:
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

        await app(scope, receive, send_json if scope["type"] == "http" else send)

    return rewrite


def build_http_app(sdk_app: ASGIApp, server: ServerSettings, index: Path | None = None) -> ASGIApp:
    from mcp.server.transport_security import RequestBodyLimitMiddleware
    from starlette.middleware.cors import CORSMiddleware

    app: ASGIApp = RequestBodyLimitMiddleware(json_rpc_guard(sdk_app), MAX_REQUEST_BYTES)
    issuer = Issuer(server.oauth_issuer, resource_url(server)) if server.oauth_issuer else None
    app = authenticate(app, Gate(index, server.token, issuer), server)
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
    return json_errors(host_origin_guard(app, server))


_hits: Counter[str] = Counter()
_logged: dict[str, float] = {}


def limit_hit(limit: str, message: str) -> None:
    """At most one log line a minute per limit, with the count since the last."""
    _hits[limit] += 1
    now = time.monotonic()
    if limit not in _logged or now - _logged[limit] >= LIMIT_LOG_EVERY_S:
        _logged[limit] = now
        log.warning("%s (%d× since the last such line)", message, _hits.pop(limit))


def http_protocol(
    per_address: int = MAX_CONNECTIONS_PER_ADDRESS, read_timeout_s: float = READ_TIMEOUT_S
) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with a read deadline per request (slowloris) and 503 over ``per_address``."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    too_many = (
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n"
        b'{"error": {"code": "TOO_MANY_CONNECTIONS", "message": "over %d connections from this address; close some '
        b'and retry"}}' % per_address
    )
    per: Counter[str] = Counter()

    class LimitedH11(H11Protocol):
        address = ""
        deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self.address = self.client[0] if self.client else ""
            per[self.address] += 1
            if per[self.address] > per_address:
                limit_hit("connections", f"over {per_address} connections from {self.address}: refused")
                transport.write(too_many)
                transport.close()
            else:
                self.deadline = self.loop.call_later(read_timeout_s, self.too_slow)

        def connection_lost(self, exc: Exception | None) -> None:
            per[self.address] -= 1
            if not per[self.address]:
                del per[self.address]
            if self.deadline:
                self.deadline.cancel()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            reading = self.conn.their_state in (h11.IDLE, h11.SEND_BODY)
            if reading and not self.deadline:
                self.deadline = self.loop.call_later(read_timeout_s, self.too_slow)
            elif not reading and self.deadline:
                self.deadline.cancel()
                self.deadline = None

        def too_slow(self) -> None:
            self.deadline = None
            message = f"a request from {self.address} not whole after {read_timeout_s:g} s: connection closed"
            limit_hit("read_timeout", message)
            self.transport.close()

    return LimitedH11
