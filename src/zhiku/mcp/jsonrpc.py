"""JSON-RPC 2.0 checks in front of the MCP SDK, on both transports (it leaves some malformed messages unanswered)."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

MAX_REQUEST_BYTES = 1_048_576  # largest message, either transport: a tool call is small; a bigger one is refused unread
_LEADING_ID = re.compile(rb'\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*(-?\d{1,15}|"[^"\\]{0,100}")\s*,')
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


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


class JsonRpcGuard:
    """A POST to ``path`` that :func:`check_message` rejects gets HTTP 400; others reach ``app``, body replayed."""

    def __init__(self, app: ASGIApp, path: str) -> None:
        self.app = app
        self.path = path.rstrip("/") or "/"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"].rstrip("/") != self.path:
            await self.app(scope, receive, send)
            return
        body, trailing = bytearray(), []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                trailing.append(message)
                break
            body.extend(message.get("body", b""))
            if not message.get("more_body", False):
                break
        rejection = check_message(bytes(body))
        if rejection is not None:
            await send_json(send, 400, json.dumps(rejection.response(), ensure_ascii=False).encode())
            return
        queue: list[Message] = [{"type": "http.request", "body": bytes(body), "more_body": False}, *trailing]

        async def replay() -> Message:
            return queue.pop(0) if queue else await receive()

        await self.app(scope, replay, send)
