"""A real, tiny OAuth authorization server on 127.0.0.1 for the tests: OpenID discovery metadata, a JWKS of the keys
it publishes (rotation: publish others), and JWT access tokens signed with real RSA / EC keys; and the one HTTP
server the access tests share, trusting it."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from mcp_fixtures import Fixture, HttpServer, copy_fixture, http_request, server_env, start_http


class LocalIssuer:
    def __init__(self) -> None:
        self.keys: dict[str, Any] = {
            "rsa-1": rsa.generate_private_key(public_exponent=65537, key_size=2048),
            "ec-2": ec.generate_private_key(ec.SECP256R1()),
            "rogue": rsa.generate_private_key(public_exponent=65537, key_size=2048),  # never published
        }
        self.published = ["rsa-1"]
        self.jwks_fetches = 0
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                if self.path == "/.well-known/openid-configuration":
                    body: dict[str, Any] = {"issuer": issuer.url, "jwks_uri": f"{issuer.url}/jwks"}
                elif self.path == "/jwks":
                    issuer.jwks_fetches += 1
                    body = {"keys": [issuer.jwk(kid) for kid in issuer.published]}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def jwk(self, kid: str) -> dict[str, Any]:
        key = self.keys[kid]
        algorithm = jwt.algorithms.RSAAlgorithm if kid.startswith(("rsa", "rogue")) else jwt.algorithms.ECAlgorithm
        jwk: dict[str, Any] = algorithm.to_jwk(key.public_key(), as_dict=True)
        return {**jwk, "kid": kid, "use": "sig", "alg": self.alg(kid)}

    @staticmethod
    def alg(kid: str) -> str:
        return "ES256" if kid.startswith("ec") else "RS256"

    def token(
        self, audience: str, scope: str, *, kid: str = "rsa-1", key: str = "", ttl_s: int = 300, **claims: Any
    ) -> str:
        """Signed with ``key`` (default: the one ``kid`` names); a claim given as None is left out."""
        now, key = int(time.time()), key or kid
        body = {"iss": self.url, "aud": audience, "sub": "alice", "iat": now, "exp": now + ttl_s, "scope": scope}
        claims = {k: v for k, v in {**body, **claims}.items() if v is not None}
        return jwt.encode(claims, self.keys[key], algorithm=self.alg(key), headers={"kid": kid})

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


SERVER_TOKEN = "server-token-0123456789"
INIT = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
    }
).encode()


@dataclass
class TeamServer:
    """`zhiku serve --transport http` on a writable copy of the MCP fixture, with ``SERVER_TOKEN`` and a local
    issuer; tests add their own named tokens (a running server reads them from the next request on)."""

    fx: Fixture
    server: HttpServer
    issuer: LocalIssuer

    def post(self, bearer: str) -> tuple[int, dict[str, str], bytes]:
        """A raw ``initialize`` with ``Authorization: <bearer>``."""
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        return http_request(self.server.url, method="POST", headers={**headers, "Authorization": bearer}, body=INIT)


@pytest.fixture(scope="session")
def team_server(mcp_index: Fixture, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TeamServer]:
    """One server for the access tests and the reliability scopes part (re-exported by tests/conftest.py)."""
    fx = copy_fixture(mcp_index, tmp_path_factory.mktemp("team"))
    issuer = LocalIssuer()
    env = server_env(ZHIKU_TOKEN=SERVER_TOKEN, ZHIKU_SERVER__OAUTH_ISSUER=issuer.url)
    server = start_http(fx, fx.root / "server.log", env=env)
    try:
        yield TeamServer(fx, server, issuer)
    finally:
        server.stop()
        issuer.close()
