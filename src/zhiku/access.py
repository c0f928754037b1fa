"""Who may use a served index and what they see: named tokens scoped to collections (stored hashed in
``<index>/tokens.json``), the single ``server.token`` (every collection) and an OAuth issuer's JWT access tokens."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import threading
import time
import urllib.request
from collections import deque
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zhiku.errors import ConfigError, InvalidInput, NotFound

log = logging.getLogger("zhiku.access")
TOKENS_FILE = "tokens.json"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
_DURATION = re.compile(r"(\d+)\s*([dhm])")
JWT_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
CLOCK_SKEW_S = 60
JWKS_KEEP_S = 3600.0  # keys are fetched again after this, or at once for an unknown key id (rotation)
JWKS_FETCHES_PER_MINUTE = 6  # tokens with made-up key ids cannot make the server flood the issuer
READ, WRITE = "zhiku.read", "zhiku.write"  # OAuth scopes; `zhiku.read.<collection>` reads one collection


@dataclass(frozen=True)
class Access:
    """A caller: its name ("" for the local user), the collections it sees (None: all), whether it may write."""

    name: str = ""
    collections: tuple[str, ...] | None = None
    write: bool = True

    def sees(self, collection: str) -> bool:
        return self.collections is None or collection in self.collections


ACCESS: ContextVar[Access] = ContextVar("zhiku_access", default=Access())  # noqa: B039 (frozen)


def parse_duration(text: str) -> int:
    m = _DURATION.fullmatch(text.strip())
    if not m or not int(m.group(1)):
        raise InvalidInput(f"invalid duration {text!r}: use e.g. 90d, 12h or 30m")
    return int(m.group(1)) * {"d": 86400, "h": 3600, "m": 60}[m.group(2)]


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "replace")).digest()


def _path(index: Path) -> Path:
    return Path(index) / TOKENS_FILE


def _read(index: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(_path(index).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read {_path(index)}: {e}") from None
    return data if isinstance(data, dict) else {}


def _write(index: Path, tokens: dict[str, dict[str, Any]]) -> None:
    path = _path(index)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(tokens, f, ensure_ascii=False, indent=1)
    os.replace(tmp, path)


def _shown(name: str, record: dict[str, Any]) -> dict[str, Any]:
    shown = {k: record.get(k) for k in ("collections", "write", "created", "expires")}
    return {"name": name, **shown, "expired": shown["expires"] is not None and shown["expires"] <= time.time()}


def add_token(
    index: Path, name: str, collections: list[str] | None, *, write: bool = False, expires_s: int | None = None
) -> dict[str, Any]:
    """A new token (in ``["token"]``, shown this once; only its SHA-256 is kept)."""
    if not _NAME.fullmatch(name):
        raise InvalidInput(f"invalid token name {name!r}: 1–64 letters, digits, '_', '.', '@' or '-'")
    if collections is not None and not collections:
        raise InvalidInput("--collections names no collection: give e.g. hr,policies (or leave it out for all)")
    tokens = _read(index)
    if name in tokens:
        raise InvalidInput(f"a token named {name!r} exists: revoke it first (zhiku tokens revoke {name})")
    token, now = "zk_" + secrets.token_urlsafe(32), int(time.time())
    record = {"sha256": _digest(token).hex(), "collections": collections, "write": write}
    tokens[name] = {**record, "created": now, "expires": now + expires_s if expires_s else None}
    _write(index, tokens)
    return {**_shown(name, tokens[name]), "token": token}


def list_tokens(index: Path) -> list[dict[str, Any]]:
    return [_shown(name, record) for name, record in sorted(_read(index).items())]


def revoke_token(index: Path, name: str) -> dict[str, Any]:
    tokens = _read(index)
    if name not in tokens:
        raise NotFound(f"no token named {name!r}; `zhiku tokens list` shows them")
    record = tokens.pop(name)
    _write(index, tokens)
    return {**_shown(name, record), "revoked": True}


class Gate:
    """Checks a bearer token (named, ``server.token`` or an issuer's JWT); required as soon as one exists."""

    def __init__(self, index: Path | None, token: str | None = None, issuer: Issuer | None = None) -> None:
        self.index, self.issuer = index, issuer
        self._static = _digest(token) if token else None
        self._seen: tuple[int, int] | None = None
        self._tokens: dict[str, dict[str, Any]] = {}

    def _named(self) -> dict[str, dict[str, Any]]:
        if self.index is None:
            return {}
        try:
            st = _path(self.index).stat()
            seen = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            seen = (0, 0)
        if seen != self._seen:
            self._tokens, self._seen = (_read(self.index) if seen != (0, 0) else {}), seen
        return self._tokens

    def required(self) -> bool:
        return self._static is not None or self.issuer is not None or bool(self._named())

    def check(self, bearer: str) -> Access | None:
        if self.issuer is not None and bearer.count(".") == 2 and (by_issuer := self.issuer.verify(bearer)):
            return by_issuer
        digest, found = _digest(bearer), None
        if self._static is not None and hmac.compare_digest(digest, self._static):
            found = Access("server.token")
        for name, record in self._named().items():  # every one compared: no early exit to time
            if hmac.compare_digest(digest.hex().encode(), str(record.get("sha256")).encode()):
                t = _shown(name, record)
                scope = None if t["collections"] is None else tuple(t["collections"])
                found = None if t["expired"] else Access(name, scope, bool(t["write"]))
        return found


def _get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=5) as r:
        data = json.loads(r.read(1 << 20))
    if not isinstance(data, dict):
        raise ValueError(f"{url} did not answer a JSON object")
    return data


class Issuer:
    """An OAuth 2.1 issuer's JWT access tokens: JWKS signature, ``iss``, ``aud``, ``exp``/``nbf``."""

    def __init__(self, issuer: str, audience: str) -> None:
        self.issuer, self.audience = issuer, audience
        self._keys: dict[str | None, Any] = {}
        self._fetched = -JWKS_KEEP_S
        self._fetches: deque[float] = deque()
        self._lock = threading.Lock()

    def _metadata(self) -> dict[str, Any]:
        scheme, _, rest = self.issuer.rstrip("/").partition("://")
        host, _, path = rest.partition("/")
        urls = [  # OpenID Connect discovery, then RFC 8414's (the path after the well-known part)
            f"{scheme}://{rest}/.well-known/openid-configuration",
            f"{scheme}://{host}/.well-known/oauth-authorization-server" + (f"/{path}" if path else ""),
        ]
        for url in urls:
            try:
                meta = _get_json(url)
            except (OSError, ValueError):
                continue
            if meta.get("issuer") == self.issuer and meta.get("jwks_uri"):
                return meta
        raise ValueError(f"no authorization server metadata naming issuer {self.issuer} at {' or '.join(urls)}")

    def _key(self, kid: str | None) -> Any:
        import jwt

        with self._lock:
            now = time.monotonic()
            if kid not in self._keys or now - self._fetched > JWKS_KEEP_S:
                while self._fetches and now - self._fetches[0] > 60:
                    self._fetches.popleft()
                if len(self._fetches) < JWKS_FETCHES_PER_MINUTE:
                    self._fetches.append(now)
                    try:
                        keys = jwt.PyJWKSet.from_dict(_get_json(self._metadata()["jwks_uri"])).keys
                        self._keys = {k.key_id: k for k in keys if k.public_key_use in (None, "sig")}
                        if len(keys) == 1:
                            self._keys[None] = keys[0]
                        self._fetched = now
                    except (OSError, ValueError, jwt.PyJWTError) as e:
                        log.warning("cannot fetch the signing keys of %s: %s", self.issuer, e)
            return self._keys.get(kid)

    def verify(self, token: str) -> Access | None:
        import jwt

        try:
            key = self._key(jwt.get_unverified_header(token).get("kid"))
            if key is None:
                log.info("JWT refused: signed with a key the issuer does not publish")
                return None
            claims = jwt.decode(
                token,
                key,
                algorithms=[a for a in JWT_ALGORITHMS if a == (key.algorithm_name or a)],
                audience=self.audience,
                issuer=self.issuer,
                leeway=CLOCK_SKEW_S,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.PyJWTError as e:
            log.info("JWT refused: %s", e)
            return None
        granted = set(str(claims.get("scope") or "").split())
        for claim in ("scp", "roles"):  # Entra ID and Okta: a list, or a string of scopes
            value = claims.get(claim) or []
            granted.update(value.split() if isinstance(value, str) else map(str, value))
        names = tuple(sorted(s[len(READ) + 1 :] for s in granted if s.startswith(READ + ".")))
        if READ not in granted and not names:
            log.info("JWT refused: none of the scopes %s, %s.<collection>", READ, READ)
            return None
        who = claims.get("sub") or claims.get("client_id") or claims.get("azp") or "oauth"
        return Access(str(who), None if READ in granted else names, WRITE in granted)
