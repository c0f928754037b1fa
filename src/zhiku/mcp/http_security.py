"""The Streamable HTTP app and its security, built from library pieces where they hold.

For every HTTP request, outermost first:

1. **Host and Origin** (ours, :class:`HostOriginGuard`): a ``Host`` that is not loopback, the bind address or
   in ``server.allowed_hosts`` gets **421**; an ``Origin`` that is neither loopback nor in
   ``server.allowed_origins`` gets **403** (the spec's MUST). Requests without ``Origin`` pass. Kept by hand
   because the SDK's ``TransportSecurityMiddleware`` matches ``name:*`` as a *prefix* (``127.0.0.1:1@evil.example``
   passes ``127.0.0.1:*``, and so does ``http://127.0.0.1:80@evil.com`` for origins) and compares case-sensitively
   (``LOCALHOST:8765`` is refused); ``tests/test_http_security.py`` shows both on the SDK class itself. The SDK
   check still runs behind ours (on the lower-cased Host), as a second line.
2. **CORS**: Starlette's ``CORSMiddleware``: an origin in ``server.allowed_origins`` (exact, or ``scheme://*``)
   is echoed in ``Access-Control-Allow-Origin`` (never ``*``) and preflights are answered.
3. **Bearer token**: Starlette's ``AuthenticationMiddleware`` with the SDK's ``BearerAuthBackend`` over a
   :class:`StaticTokenVerifier` (the SDK's ``TokenVerifier`` protocol, constant-time compare); without a valid
   token every path but ``GET /healthz`` and preflights gets **401**.
4. **Size**: the SDK's ``RequestBodyLimitMiddleware`` (``server.max_request_bytes``) gives **413**.
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
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from zhiku.errors import ConfigError
from zhiku.mcp.jsonrpc import JsonRpcGuard
from zhiku.settings import ServerSettings

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PATH = "/mcp"  # the MCP endpoint's path, what clients expect
MAX_REQUEST_BYTES = 1_048_576  # largest request body: a tool call is small; a bigger body is refused unread
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
HEALTH_PATH = "/healthz"
MIN_TOKEN_CHARS = 16
ALLOW_METHODS = ("GET", "POST", "DELETE", "OPTIONS")
ALLOW_HEADERS = (
    "authorization, content-type, accept, last-event-id, mcp-session-id, mcp-protocol-version, mcp-method, mcp-name"
).split(", ")
EXPOSE_HEADERS = ("mcp-session-id", "mcp-protocol-version", "www-authenticate")
ERROR_CODES = {
    400: "BAD_REQUEST",
    401: "UNAUTHORIZED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    406: "NOT_ACCEPTABLE",
    413: "REQUEST_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    421: "MISDIRECTED_REQUEST",
}
_HOST_RE = re.compile(r"^(\[[0-9a-f:.]+\]|[a-z0-9.\-_]+)(?::(\d{1,5}))?$")


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
    """Fail before anything loads when ``host:port`` is taken (uvicorn printed `[Errno 98]` and exited 3 after the
    models had loaded; Streamlit says "Port N is not available")."""
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


def origin_matches(origin: str, patterns: tuple[str, ...]) -> bool:
    """``origin`` equals a pattern, or a ``scheme://*`` pattern names its scheme."""
    for p in patterns:
        if p.endswith("://*"):
            if origin.startswith(p[:-1]) and len(origin) > len(p) - 1:
                return True
        elif origin == p:
            return True
    return False


def is_loopback_origin(origin: str) -> bool:
    for name in LOOPBACK_NAMES:
        for scheme in ("http://", "https://"):
            base = scheme + name
            if origin == base or (origin.startswith(base + ":") and origin[len(base) + 1 :].isdigit()):
                return True
    return False


def host_names(server: ServerSettings) -> tuple[set[str], set[str]]:
    """``(names accepted with any port, exact name:port values)`` for the ``Host`` header, lower case."""
    names = set(LOOPBACK_NAMES)
    host = server.host.lower() if ":" not in server.host or server.host.startswith("[") else f"[{server.host}]"
    if host not in ("0.0.0.0", "[::]"):
        names.add(host)
    exact = set()
    for entry in server.allowed_hosts:
        entry = entry.lower()
        if entry.endswith(":*"):
            names.add(entry[:-2])
        elif _HOST_RE.match(entry) and _HOST_RE.match(entry).group(2):  # type: ignore[union-attr]
            exact.add(entry)
        else:
            names.add(entry)
    return names, exact


def host_allowed(host: str, names: set[str], exact: set[str]) -> bool:
    """``host`` is ``name`` or ``name:port`` (digits only) for an accepted name, or an exact entry."""
    m = _HOST_RE.match(host.lower())
    if m is None:
        return False
    return m.group(1) in names or host.lower() in exact


def sdk_origin_patterns(server: ServerSettings) -> list[str]:
    """``allowed_origins`` for the SDK's own check (its ``:*`` suffix means "any continuation after ':'")."""
    out = [f"{scheme}://{name}:*" for name in LOOPBACK_NAMES for scheme in ("http", "https")]
    out += [f"{scheme}://{name}" for name in LOOPBACK_NAMES for scheme in ("http", "https")]
    for p in server.allowed_origins:
        out.append(p[: -len("://*")] + ":*" if p.endswith("://*") else p)
    return out


def sdk_host_patterns(server: ServerSettings) -> list[str]:
    """``allowed_hosts`` for the SDK's DNS-rebinding check (after ours, on the lower-cased ``Host``)."""
    names, exact = host_names(server)
    return sorted(p for n in names for p in (n, f"{n}:*")) + sorted(exact)


async def _reply(
    send: Send, status: int, code: str, message: str, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = json.dumps({"error": {"code": code, "message": message}}, ensure_ascii=False).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class HostOriginGuard:
    """421 for a foreign ``Host``, 403 for a foreign ``Origin``; the ``Host`` passed on is lower case."""

    def __init__(self, app: ASGIApp, server: ServerSettings) -> None:
        self.app = app
        self.names, self.exact = host_names(server)
        self.cors_origins = tuple(server.allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = [(k.lower(), v) for k, v in scope.get("headers", [])]
        host = next((v.decode("latin-1") for k, v in headers if k == b"host"), "")
        if not host_allowed(host, self.names, self.exact):
            await _reply(send, 421, "MISDIRECTED_REQUEST", f"Host {host!r} is not served here (server.allowed_hosts)")
            return
        origin = next((v.decode("latin-1") for k, v in headers if k == b"origin"), None)
        if origin is not None and not (is_loopback_origin(origin) or origin_matches(origin, self.cors_origins)):
            await _reply(send, 403, "FORBIDDEN_ORIGIN", f"origin {origin!r} is not allowed (server.allowed_origins)")
            return
        headers = [(k, v.lower() if k == b"host" else v) for k, v in headers]
        await self.app({**scope, "headers": headers}, receive, send)


class StaticTokenVerifier:
    """The SDK's ``TokenVerifier`` for one configured bearer token (constant-time compare)."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

    async def verify_token(self, token: str) -> Any:
        from mcp.server.auth.provider import AccessToken

        if hmac.compare_digest(token.strip().encode(), self._token):
            return AccessToken(token=token, client_id="zhiku-token", scopes=[])
        return None


class RequireToken:
    """401 unless the SDK's bearer backend authenticated the request (``GET /healthz`` and preflights pass)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        user = scope.get("user")
        exempt = scope.get("path") == HEALTH_PATH or scope.get("method") == "OPTIONS"
        if scope["type"] == "http" and not exempt and not getattr(user, "is_authenticated", False):
            challenge = [(b"www-authenticate", b'Bearer realm="zhiku"')]
            await _reply(
                send, 401, "UNAUTHORIZED", "missing or wrong bearer token (Authorization: Bearer <token>)", challenge
            )
            return
        await self.app(scope, receive, send)


class JsonErrors:
    """Rewrites error responses that are not JSON (the libraries' plain-text 400/403/413/421…) into
    ``{"error": {"code", "message"}}``, keeping status and other headers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
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
                keep = [
                    (k, v) for k, v in held["start"].get("headers", []) if k not in (b"content-type", b"content-length")
                ]
                text = held["body"].decode("utf-8", "replace").strip() or "error"
                await _reply(send, status, ERROR_CODES.get(status, "HTTP_ERROR"), text, keep)
                return
            await send(message)

        await self.app(scope, receive, send_json)


def build_http_app(sdk_app: ASGIApp, server: ServerSettings) -> ASGIApp:
    """``sdk_app`` (the SDK's Streamable HTTP app) behind the checks in the module docstring."""
    from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend
    from mcp.server.transport_security import RequestBodyLimitMiddleware
    from starlette.middleware.authentication import AuthenticationMiddleware
    from starlette.middleware.cors import CORSMiddleware

    app: ASGIApp = JsonRpcGuard(sdk_app, PATH)
    app = RequestBodyLimitMiddleware(app, MAX_REQUEST_BYTES)
    if server.token:
        app = AuthenticationMiddleware(RequireToken(app), BearerAuthBackend(StaticTokenVerifier(server.token)))
    exact = [o for o in server.allowed_origins if not o.endswith("://*")]
    schemes = [re.escape(o[: -len("*")]) + ".+" for o in server.allowed_origins if o.endswith("://*")]
    app = CORSMiddleware(
        app,
        allow_origins=exact,
        allow_origin_regex="|".join(schemes) or None,
        allow_methods=ALLOW_METHODS,
        allow_headers=ALLOW_HEADERS,
        expose_headers=EXPOSE_HEADERS,
        max_age=600,
    )
    return JsonErrors(HostOriginGuard(app, server))
