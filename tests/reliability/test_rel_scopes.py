"""(scopes) A token scoped to one collection tries to reach another through every tool, resource and prompt;
token guessing (none accepted, a near miss answered as fast as a wild guess); revoked and expired tokens; forged
JWTs (alg none, HS256 with the public key, another issuer's key) and a flood of unknown key ids (the issuer's
JWKS fetched a bounded number of times). A real `zhiku serve --transport http` and a real local issuer."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
import pytest
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from rel_common import SIZES, report

from mcp_fixtures import Fixture, HttpServer
from oauth_issuer import SERVER_TOKEN, LocalIssuer, TeamServer
from zhiku.access import JWKS_FETCHES_PER_MINUTE, add_token, revoke_token

HR_DOC = "薪酬制度.md"
HR_TEXT = "# 薪酬制度\n\n第一条 高级工程师的月薪为三万二千元，年终奖为四个月工资。\n"
SECRET = "三万二千"  # what no laws token may ever read


@dataclass
class Scoped:
    fx: Fixture
    server: HttpServer
    issuer: LocalIssuer
    laws: str  # a laws-only read token
    laws_writer: str  # a laws-only write token
    hr_doc: str
    hr_chunks: list[str]
    post: Callable[[str], tuple[int, dict[str, str], bytes]]

    def status(self, bearer: str) -> int:
        return self.post(bearer)[0]


def _client(url: str, token: str) -> Any:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=300))
    return http, Client(streamable_http_client(url, http_client=http))


@pytest.fixture(scope="module")
def scoped(team_server: TeamServer) -> Scoped:
    fx, server = team_server.fx, team_server.server
    (fx.inbox / HR_DOC).write_text(HR_TEXT, encoding="utf-8")
    laws = add_token(fx.index, "laws", ["laws"])["token"]
    laws_writer = add_token(fx.index, "laws-writer", ["laws"], write=True)["token"]

    async def ingest_hr() -> tuple[str, list[str]]:
        http, client = _client(server.url, SERVER_TOKEN)
        async with http, client as c:
            added = await c.call_tool("ingest_documents", {"paths": [HR_DOC], "collection": "hr"})
            assert added.structured_content["added"] == [HR_DOC], added
            found = await c.call_tool("query_knowledge_hub", {"query": "高级工程师月薪", "collection": "hr"})
            cites = found.structured_content["citations"]
            return cites[0]["doc_id"], [x["chunk_id"] for x in cites]

    doc, chunks = anyio.run(ingest_hr)
    return Scoped(fx, server, team_server.issuer, laws, laws_writer, doc, chunks, team_server.post)


HOSTILE_COLLECTIONS = ["hr", "HR", " hr", "hr ", "hr\x00", "laws,hr", "*", "%", "hr' OR '1'='1", "../hr", "hr/"]
Attack = tuple[str, str, dict[str, Any]]


def _attacks(s: Scoped) -> tuple[list[Attack], list[Attack]]:
    """Searches (their answers must hold nothing of hr's), and reads of hr's ids, names and collection (their
    answers must read exactly as for ids and names that do not exist: no existence leak)."""
    searches: list[Attack] = [("tool", "list_collections", {}), ("list", "resources", {})]
    reads: list[Attack] = []
    for c in HOSTILE_COLLECTIONS:
        searches.append(("tool", "query_knowledge_hub", {"query": "高级工程师的月薪", "collection": c}))
        reads.append(("tool", "get_document_summary", {"doc_id": s.hr_doc, "collection": c}))
    for f in ({"source": "*"}, {"doc_type": "markdown"}, {"tags": ["薪酬"]}):
        searches.append(
            ("tool", "query_knowledge_hub", {"query": "高级工程师的月薪 年终奖", "filters": f, "top_k": 20})
        )
    for f in ({"source": HR_DOC}, {"source": "薪酬*"}, {"source": "*制度*"}):  # the hints name no hidden source
        reads.append(("tool", "query_knowledge_hub", {"query": "高级工程师的工资和年终奖", "filters": f, "top_k": 20}))
    searches.append(("prompt", "answer_with_citations", {"question": "高级工程师的月薪"}))
    for ref in (s.hr_doc, HR_DOC, f"hr/{HR_DOC}", s.hr_doc.upper(), "薪酬*", "[劳薪]*"):  # the last: one of laws too
        reads.append(("tool", "get_document_summary", {"doc_id": ref}))
    reads += [("tool", "delete_document", {"doc_id": s.hr_doc}), ("tool", "delete_document", {"doc_id": HR_DOC})]
    reads.append(("tool", "ingest_documents", {"paths": [HR_DOC], "collection": "hr"}))
    for chunk in s.hr_chunks:
        for suffix in ("", "?context=article", "?context=section"):
            reads.append(("resource", f"zhiku://chunk/{chunk}{suffix}", {}))
    reads.append(("resource", f"zhiku://doc/{s.hr_doc}", {}))
    return searches, reads


def _twin(s: Scoped) -> dict[str, str]:
    """hr's ids and names → ones that exist nowhere, of the same shape."""
    fake = {s.hr_doc: "f" * len(s.hr_doc), HR_DOC: "无此文件.md", s.hr_doc.upper(): "F" * len(s.hr_doc), "薪": "龘"}
    return {**fake, **{c: "0" * (len(c) - 1) + str(n) for n, c in enumerate(s.hr_chunks)}}


def _swap(text: str, pairs: dict[str, str]) -> str:
    for a, b in pairs.items():
        text = text.replace(a, b)
    return text


async def _try(c: Client, kind: str, name: str, args: dict[str, Any]) -> str:
    """What the caller gets back, as text (an error's message too)."""
    try:
        if kind == "tool":
            r = await c.call_tool(name, args)
            return json.dumps([r.structured_content, [b.model_dump() for b in r.content], r.meta], ensure_ascii=False)
        if kind == "resource":
            return json.dumps((await c.read_resource(name)).model_dump(), ensure_ascii=False)
        if kind == "list":
            return json.dumps((await c.list_resources()).model_dump(), ensure_ascii=False)
        return json.dumps((await c.get_prompt(name, args)).model_dump(), ensure_ascii=False)
    except MCPError as e:
        return f"{e.error.code} {e.error.message}"


@SIZES
def test_scope_escapes(full: bool, scoped: Scoped) -> None:
    searches, reads = _attacks(scoped)
    rounds, twin = (3 if full else 1), _twin(scoped)
    leaks: list[str] = []

    async def main() -> dict[str, int]:
        tools: dict[str, int] = {}
        for who, token in (("reader", scoped.laws), ("writer", scoped.laws_writer)):
            http, client = _client(scoped.server.url, token)
            async with http, client as c:
                tools[who] = len((await c.list_tools()).tools)
                for _ in range(rounds):
                    for kind, name, args in searches:
                        got = await _try(c, kind, name, args)
                        if (
                            SECRET in got
                            or scoped.hr_doc in got
                            or '"hr"' in got
                            or re.search(r"available: [^;\"]*\bhr\b", got)
                        ):
                            leaks.append(f"{who} {kind} {name} {args}: {got[:300]}")
                    for kind, name, args in reads:
                        got = await _try(c, kind, name, args)
                        fake_name, fake_args = (
                            _swap(name, twin),
                            json.loads(_swap(json.dumps(args, ensure_ascii=False), twin)),
                        )
                        if "collection" in args:
                            fake_args["collection"] = args["collection"].replace("hr", "zz")
                        answer = await _try(c, kind, fake_name, fake_args)
                        back = _swap(answer, {b: a for a, b in twin.items()})
                        back = back.replace("zz", "hr") if "collection" in args else back
                        named = HR_DOC in got and HR_DOC not in json.dumps(args, ensure_ascii=False)
                        if SECRET in got or named or got != back:
                            leaks.append(f"{who} {kind} {name} {args}: {got[:300]} ≠ {back[:300]}")
        return tools

    tools = anyio.run(main)

    async def still_there() -> str:  # the writer's delete and ingest attempts changed nothing
        http, client = _client(scoped.server.url, SERVER_TOKEN)
        async with http, client as c:
            return (await c.read_resource(f"zhiku://doc/{scoped.hr_doc}")).contents[0].text

    intact = SECRET in anyio.run(still_there)
    attempts = 2 * rounds * (len(searches) + 2 * len(reads))
    report("scopes escapes", attempts=attempts, leaks=len(leaks), hr_document_intact=intact)
    assert leaks == [], "\n".join(leaks)
    assert intact
    assert tools == {"reader": 3, "writer": 5}  # the reader never sees the write tools


def _forged_jwts(s: Scoped, audience: str) -> dict[str, str]:
    issuer = s.issuer
    good = issuer.token(audience, "zhiku.read zhiku.write")
    head, body, _ = good.split(".")
    pem = issuer.keys["rsa-1"].public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)

    def b64(d: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()

    hs_head = b64({"alg": "HS256", "kid": "rsa-1", "typ": "JWT"})
    hs_sig = hmac.new(pem, f"{hs_head}.{body}".encode(), hashlib.sha256).digest()
    return {
        "alg none": f"{b64({'alg': 'none', 'kid': 'rsa-1'})}.{body}.",
        "HS256 with the public key": f"{hs_head}.{body}.{base64.urlsafe_b64encode(hs_sig).rstrip(b'=').decode()}",
        "payload swapped": f"{head}.{b64({**json.loads(base64.urlsafe_b64decode(body + '==')), 'scope': 'zhiku.read'})}.{good.split('.')[2]}",
        "expired": issuer.token(audience, "zhiku.read", ttl_s=-3600),
        "not yet valid": issuer.token(audience, "zhiku.read", nbf=int(time.time()) + 3600),
        "no exp": issuer.token(audience, "zhiku.read", exp=None),
        "wrong audience": issuer.token(audience + "x", "zhiku.read"),
        "another issuer": issuer.token(audience, "zhiku.read", iss="https://evil.example"),
        "unpublished key": issuer.token(audience, "zhiku.read", kid="rogue"),
        "no zhiku scope": issuer.token(audience, "openid email"),
    }


@SIZES
def test_token_guessing_revocation_and_forged_jwts(full: bool, scoped: Scoped) -> None:
    s, guesses = scoped, (2000 if full else 200)
    assert s.status(f"Bearer {SERVER_TOKEN}") == 200
    accepted = sum(s.status(f"Bearer zk_{secrets.token_urlsafe(32)}") == 200 for _ in range(guesses))
    # timing: a guess one character off a real token against a wild one, interleaved
    near, wild = [], []
    almost = s.laws[:-1] + ("A" if s.laws[-1] != "A" else "B")
    for _ in range(guesses // 2):
        for bucket, token in ((near, almost), (wild, f"zk_{secrets.token_urlsafe(32)}")):
            started = time.perf_counter()
            assert s.status(f"Bearer {token}") == 401
            bucket.append(time.perf_counter() - started)
    near_ms, wild_ms = statistics.median(near) * 1000, statistics.median(wild) * 1000
    forged = _forged_jwts(s, s.server.url)
    refused = {why: s.status(f"Bearer {t}") for why, t in forged.items()}
    # made-up key ids: only the full run (the flood spends the minute's JWKS fetches the shared server has; the
    # access tests rotate the issuer's key and need one)
    fetches, made_up = s.issuer.jwks_fetches, 50 if full else 0
    flood = sum(
        s.status(f"Bearer {s.issuer.token(s.server.url, 'zhiku.read', kid=f'made-up-{n}', key='rogue')}") == 401
        for n in range(made_up)
    )
    flood_fetches = s.issuer.jwks_fetches - fetches
    # revoked and expired named tokens
    brief = add_token(s.fx.index, f"brief-{int(full)}", None, expires_s=-1)["token"]  # expired a second ago
    gone = add_token(s.fx.index, f"gone-{int(full)}", None)["token"]
    assert s.status(f"Bearer {gone}") == 200
    revoke_token(s.fx.index, f"gone-{int(full)}")
    after = {"revoked": s.status(f"Bearer {gone}"), "expired": s.status(f"Bearer {brief}")}
    report(
        "scopes tokens",
        guesses=guesses,
        accepted=accepted,
        near_miss_median_ms=round(near_ms, 2),
        wild_guess_median_ms=round(wild_ms, 2),
        forged_jwts_refused=f"{sum(v == 401 for v in refused.values())}/{len(refused)}",
        unknown_kid_flood=made_up,
        jwks_fetches_during_flood=flood_fetches,
        revoked_and_expired_refused=sum(v == 401 for v in after.values()),
    )
    assert accepted == 0
    assert refused == dict.fromkeys(forged, 401)
    assert flood == made_up and flood_fetches <= JWKS_FETCHES_PER_MINUTE
    assert after == {"revoked": 401, "expired": 401}
    assert abs(near_ms - wild_ms) < max(2.0, 0.5 * wild_ms), (near_ms, wild_ms)
