"""HTTP security for the Streamable HTTP transport, as a pure ASGI middleware (no MCP SDK import).

In order, for every HTTP request:

1. **Origin.** A request carrying an ``Origin`` that is neither loopback (``http://127.0.0.1:*``,
   ``http://localhost:*``, ``http://[::1]:*``) nor in ``server.allowed_origins`` gets **403** (the MCP spec's
   MUST: servers validate Origin on every connection). Requests without ``Origin`` (non-browser clients) pass.
2. **CORS.** For an origin in ``server.allowed_origins`` (exact, or ``scheme://*`` for any origin of that
   scheme) the origin itself is echoed in ``Access-Control-Allow-Origin`` (never ``*``) and ``OPTIONS``
   preflights answer **204**. Loopback origins are accepted but get no CORS headers unless listed.
3. **Bearer token.** With ``server.token`` set, every request but ``GET /healthz`` and preflights needs
   ``Authorization: Bearer <token>``, else **401** (compared in constant time).
4. **Size.** A body over ``server.max_request_bytes`` gets **413**, by ``Content-Length`` or while reading.

:func:`check_bind` refuses a configuration that binds a non-loopback address without a token.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from zhiku.errors import ConfigError
from zhiku.settings import ServerSettings

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
HEALTH_PATH = "/healthz"
ALLOW_METHODS = "GET, POST, DELETE, OPTIONS"
ALLOW_HEADERS = (
    "authorization, content-type, accept, last-event-id, mcp-session-id, mcp-protocol-version, mcp-method, mcp-name"
)
EXPOSE_HEADERS = "mcp-session-id, mcp-protocol-version, www-authenticate"


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(server: ServerSettings) -> None:
    """Raise ``ConfigError`` when the HTTP settings would expose the index unauthenticated."""
    if not is_loopback(server.host) and not server.token:
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


def sdk_origin_patterns(server: ServerSettings) -> list[str]:
    """``allowed_origins`` for the SDK's own check (its ``:*`` suffix means "any continuation after ':'")."""
    out = [f"{scheme}://{name}:*" for name in LOOPBACK_NAMES for scheme in ("http", "https")]
    out += [f"{scheme}://{name}" for name in LOOPBACK_NAMES for scheme in ("http", "https")]
    for p in server.allowed_origins:
        out.append(p[: -len("://*")] + ":*" if p.endswith("://*") else p)
    return out


def sdk_host_patterns(server: ServerSettings, extra: tuple[str, ...] = ()) -> list[str]:
    """``allowed_hosts`` for the SDK's DNS-rebinding check: loopback names, the bind address, ``extra``."""
    names = list(LOOPBACK_NAMES)
    host = server.host if ":" not in server.host or server.host.startswith("[") else f"[{server.host}]"
    if host not in names and host not in ("0.0.0.0", "[::]"):
        names.append(host)
    return [p for n in names for p in (n, f"{n}:*")] + list(extra)


@dataclass(frozen=True)
class Policy:
    cors_origins: tuple[str, ...]
    token: str | None
    max_body: int

    @classmethod
    def from_settings(cls, server: ServerSettings) -> Policy:
        return cls(
            cors_origins=tuple(server.allowed_origins), token=server.token or None, max_body=server.max_request_bytes
        )

    def origin_allowed(self, origin: str) -> bool:
        return is_loopback_origin(origin) or origin_matches(origin, self.cors_origins)


class SecurityMiddleware:
    """Wraps an ASGI app with the checks in the module docstring."""

    def __init__(self, app: ASGIApp, policy: Policy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        origin = headers.get("origin")
        if origin is not None and not self.policy.origin_allowed(origin):
            await _reply(send, 403, "FORBIDDEN_ORIGIN", f"origin {origin!r} is not allowed (server.allowed_origins)")
            return
        cors = origin is not None and origin_matches(origin, self.policy.cors_origins)
        extra = _cors_headers(origin) if cors and origin else []
        if scope["method"] == "OPTIONS":
            pre = (
                [
                    (b"access-control-allow-methods", ALLOW_METHODS.encode()),
                    (b"access-control-allow-headers", ALLOW_HEADERS.encode()),
                    (b"access-control-max-age", b"600"),
                ]
                if cors
                else []
            )
            await send({"type": "http.response.start", "status": 204, "headers": extra + pre})
            await send({"type": "http.response.body", "body": b""})
            return
        if self.policy.token and scope.get("path") != HEALTH_PATH and not self._authorized(headers):
            await _reply(
                send,
                401,
                "UNAUTHORIZED",
                "missing or wrong bearer token (Authorization: Bearer <token>)",
                extra + [(b"www-authenticate", b'Bearer realm="zhiku"')],
            )
            return
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.policy.max_body:
            await _reply(send, 413, "REQUEST_TOO_LARGE", f"request body over {self.policy.max_body} bytes", extra)
            return
        body_receive = await self._buffer(receive) if scope["method"] in ("POST", "PUT", "PATCH") else receive
        if body_receive is None:
            await _reply(send, 413, "REQUEST_TOO_LARGE", f"request body over {self.policy.max_body} bytes", extra)
            return

        async def send_with_cors(message: Message) -> None:
            if extra and message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, body_receive, send_with_cors)

    def _authorized(self, headers: dict[str, str]) -> bool:
        scheme, _, given = headers.get("authorization", "").partition(" ")
        assert self.policy.token is not None
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self.policy.token.encode())

    async def _buffer(self, receive: Receive) -> Receive | None:
        """Read the whole body (at most ``max_body`` bytes) and replay it; None when it is too large."""
        body = bytearray()
        messages: deque[Message] = deque()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                messages.append(message)
                break
            body.extend(message.get("body", b""))
            if len(body) > self.policy.max_body:
                return None
            if not message.get("more_body", False):
                break
        messages.appendleft({"type": "http.request", "body": bytes(body), "more_body": False})

        async def replay() -> Message:
            return messages.popleft() if messages else await receive()

        return replay


def _cors_headers(origin: str) -> list[tuple[bytes, bytes]]:
    return [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"vary", b"Origin"),
        (b"access-control-expose-headers", EXPOSE_HEADERS.encode()),
    ]


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
