"""Who may use a served index: named tokens scoped to collections and OAuth JWTs of a real local issuer, against a
real `zhiku serve --transport http` and the SDK's HTTP client; `zhiku tokens` on the command line."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.auth.utils import extract_resource_metadata_from_www_auth
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import PromptReference, ResourceTemplateReference
from typer.testing import CliRunner

from mcp_fixtures import Fixture, HttpServer, http_request
from oauth_issuer import SERVER_TOKEN, LocalIssuer, TeamServer
from zhiku.access import add_token, revoke_token
from zhiku.cli.app import app
from zhiku.dashboard.data import trace_label
from zhiku.observability.trace import TRACE_FILE, read_traces

HR_DOC = "员工手册.md"
HR_TEXT = "# 员工手册\n\n第一条 员工每年享有带薪病假十二天，病假期间工资按基本工资的百分之八十发放。\n"
PROMPT, DOC_REF = PromptReference(name="answer_with_citations"), ResourceTemplateReference(uri="zhiku://doc/{doc_id}")
READ_TOOLS = ["query_knowledge_hub", "list_collections", "get_document_summary"]
ALL_TOOLS = [*READ_TOOLS, "ingest_documents", "delete_document"]


@dataclass
class Team:
    fx: Fixture
    server: HttpServer
    issuer: LocalIssuer
    post: Callable[[str], tuple[int, dict[str, str], bytes]]
    tokens: dict[str, str]


@pytest.fixture(scope="module")
def team(team_server: TeamServer) -> Team:
    fx = team_server.fx
    (fx.inbox / HR_DOC).write_text(HR_TEXT, encoding="utf-8")
    tokens = {
        "laws-reader": add_token(fx.index, "laws-reader", ["laws"])["token"],
        "hr-writer": add_token(fx.index, "hr-writer", ["hr"], write=True)["token"],
        "brief": add_token(fx.index, "brief", None, expires_s=-1)["token"],  # expired a second ago
    }
    return Team(fx, team_server.server, team_server.issuer, team_server.post, tokens)


@asynccontextmanager
async def client(url: str, token: str, mode: str = "auto") -> AsyncIterator[Client]:
    timeout = httpx2.Timeout(30, read=300)
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=timeout) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as c:  # type: ignore[arg-type]
            yield c


async def tool_names(c: Client) -> list[str]:
    return [t.name for t in (await c.list_tools()).tools]


async def collections(c: Client) -> list[str]:
    return [x["name"] for x in (await c.call_tool("list_collections", {})).structured_content["collections"]]


async def sources(c: Client, query: str, **args: Any) -> list[str]:
    result = await c.call_tool("query_knowledge_hub", {"query": query, **args})
    return [x["source"] for x in result.structured_content["citations"]]


async def missing(c: Client, uri: str) -> str:
    with pytest.raises(MCPError) as e:
        await c.read_resource(uri)
    assert e.value.error.code == -32602
    return e.value.error.message


def test_a_token_sees_and_changes_only_its_collections(team: Team) -> None:
    url, tokens = team.server.url, team.tokens

    async def main() -> None:
        async with client(url, tokens["hr-writer"]) as hr:
            assert await tool_names(hr) == ALL_TOOLS
            refused = await hr.call_tool("ingest_documents", {"paths": [HR_DOC]})  # into the default: laws
            assert refused.is_error and refused.meta["zhiku/error"]["message"] == (
                "this caller may not write to collection 'laws'; it may write to: hr"
            )
            added = await hr.call_tool("ingest_documents", {"paths": [HR_DOC], "collection": "hr"})
            assert added.structured_content["added"] == [HR_DOC]
            assert await collections(hr) == ["hr"]
            roots = (await hr.call_tool("list_collections", {})).structured_content["ingest_roots"]
            assert roots == [str(team.fx.inbox.resolve())]
            assert set(await sources(hr, "病假工资怎么发", top_k=3)) <= {HR_DOC, "薪酬制度.md"}  # hr's only
            hit = (await hr.call_tool("query_knowledge_hub", {"query": "病假工资"})).structured_content["citations"][0]
            assert (await hr.complete(DOC_REF, {"name": "doc_id", "value": "员工"})).completion.values == [
                hit["doc_id"]
            ]
        async with client(url, tokens["laws-reader"]) as laws:
            assert await tool_names(laws) == READ_TOOLS
            with pytest.raises(MCPError, match="unknown tool 'ingest_documents'; available: query_knowledge_hub, "):
                await laws.call_tool("ingest_documents", {"paths": [HR_DOC], "collection": "hr"})
            assert await collections(laws) == ["laws"]
            # completions offer only what the caller may see
            assert (await laws.complete(PROMPT, {"name": "collection", "value": ""})).completion.values == ["laws"]
            assert (await laws.complete(DOC_REF, {"name": "doc_id", "value": "员工"})).completion.values == []
            assert HR_DOC not in await sources(laws, "病假工资怎么发", top_k=5)
            # another collection's chunk, document or name reads exactly as one that does not exist
            chunk, doc = hit["chunk_id"], hit["doc_id"]
            fake_chunk, fake_doc = "0" * len(chunk), "f" * len(doc)
            absent = await missing(laws, f"zhiku://chunk/{fake_chunk}")
            assert await missing(laws, hit["uri"]) == absent.replace(fake_chunk, chunk)
            absent = await missing(laws, f"zhiku://doc/{fake_doc}")
            assert await missing(laws, f"zhiku://doc/{doc}") == absent.replace(fake_doc, doc)
            assert (
                absent == f"no document '{fake_doc}'; doc ids come from query_knowledge_hub citations or resources/list"
            )
            summary = await laws.call_tool("get_document_summary", {"doc_id": HR_DOC})
            assert summary.meta["zhiku/error"]["code"] == "NOT_FOUND"
            errors = []
            for name in ("hr", "nope"):
                r = await laws.call_tool("query_knowledge_hub", {"query": "病假", "collection": name})
                errors.append(r.meta["zhiku/error"]["message"])
            assert errors == [f"no collection '{n}' in this knowledge base; available: laws" for n in ("hr", "nope")]
            listed = (await laws.list_resources()).resources
            assert len(listed) == 3 and all("laws ·" in r.description for r in listed)
            stats = (await laws.call_tool("list_collections", {})).structured_content
            assert stats.get("ingest_roots") is None  # a reader is not told the server's folders
        async with client(url, tokens["laws-reader"], mode="legacy") as legacy:  # the handshake era: the same
            assert (legacy.protocol_version, await tool_names(legacy)) == ("2025-11-25", READ_TOOLS)
            assert await collections(legacy) == ["laws"]
        async with client(url, SERVER_TOKEN) as every:  # server.token: every collection, and write
            assert await tool_names(every) == ALL_TOOLS
            assert await collections(every) == ["hr", "laws"]
            assert (await sources(every, "病假期间工资怎么发", top_k=1)) == [HR_DOC]

    anyio.run(main)
    # who asked and who ingested, in the traces and the dashboard (never a token)
    traces = read_traces(team.fx.index / TRACE_FILE, limit=100)
    who = {(t.kind, t.attrs.get("caller")) for t in traces}
    assert {("ingest", "hr-writer"), ("query", "hr-writer"), ("query", "laws-reader")} <= who
    ingest = next(t for t in traces if t.kind == "ingest" and t.attrs.get("caller") == "hr-writer")
    assert f" ms · by hr-writer · {team.fx.inbox / HR_DOC}" in trace_label(ingest)
    listed = CliRunner().invoke(app, ["traces", "--index", str(team.fx.index)], env={"COLUMNS": "250"}).stdout
    assert "laws-reader: 病假工资怎么发" in listed
    written = (team.fx.index / TRACE_FILE).read_text(encoding="utf-8")
    assert not any(secret in written for secret in tokens.values())
    # expired and revoked tokens are refused at once, the server still running
    assert team.post(f"Bearer {tokens['brief']}")[0] == 401
    assert team.post(f"Bearer {tokens['laws-reader']}")[0] == 200
    revoke_token(team.fx.index, "laws-reader")
    assert team.post(f"Bearer {tokens['laws-reader']}")[0] == 401


def test_oauth_resource_server_against_a_local_issuer(team: Team) -> None:
    issuer, base, url = team.issuer, team.server.base, team.server.url
    status, _, body = http_request(f"{base}/.well-known/oauth-protected-resource/mcp")
    assert status == 200 and json.loads(body) == {
        "resource": url,
        "authorization_servers": [issuer.url],
        "scopes_supported": ["zhiku.read", "zhiku.write"],
        "bearer_methods_supported": ["header"],
    }
    challenge = f'Bearer realm="zhiku", resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"'
    status, headers, _ = team.post("")
    assert status == 401 and headers["www-authenticate"] == challenge + ', scope="zhiku.read"'
    found = extract_resource_metadata_from_www_auth(httpx2.Response(401, headers=headers))  # as the SDK's OAuth does
    assert found == f"{base}/.well-known/oauth-protected-resource/mcp"

    async def main() -> None:
        async with client(url, issuer.token(url, "zhiku.read.laws")) as c:
            assert (await tool_names(c), await collections(c)) == (READ_TOOLS, ["laws"])
        async with client(url, issuer.token(url, "zhiku.read zhiku.write")) as c:
            assert await tool_names(c) == ALL_TOOLS

    anyio.run(main)
    refused = {
        "expired": issuer.token(url, "zhiku.read", ttl_s=-120),  # past the 60 s clock skew
        "wrong audience": issuer.token("https://other.example/mcp", "zhiku.read"),
        "other issuer": issuer.token(url, "zhiku.read", iss="https://evil.example"),
        "unknown key": issuer.token(url, "zhiku.read", kid="rogue"),
        "no zhiku scope": issuer.token(url, "openid profile"),
    }
    for why, token in refused.items():
        status, headers, _ = team.post(f"Bearer {token}")
        assert (why, status, headers["www-authenticate"]) == (
            why,
            401,
            challenge + ', scope="zhiku.read", error="invalid_token"',
        )
    assert team.post(f"Bearer {issuer.token(url, 'zhiku.read', ttl_s=-30)}")[0] == 200  # within the skew
    # the issuer rotates its key: a token signed with the new one works at once (its keys are fetched again)
    issuer.published = ["ec-2"]
    fetches = issuer.jwks_fetches
    assert team.post(f"Bearer {issuer.token(url, 'zhiku.read', kid='ec-2')}")[0] == 200
    assert issuer.jwks_fetches == fetches + 1


def test_tokens_cli(tmp_path: Any) -> None:
    cli = CliRunner()
    index = ["--index", str(tmp_path / "idx")]
    added = cli.invoke(
        app, ["tokens", "add", "bot", "--collections", "hr, policies", "--expires", "90d", "--json", *index]
    )
    t = json.loads(added.stdout)
    assert (t["name"], t["collections"], t["write"], t["expired"]) == ("bot", ["hr", "policies"], False, False)
    assert t["token"].startswith("zk_") and len(t["token"]) == 46 and t["expires"] - t["created"] == 90 * 86400
    stored = (tmp_path / "idx" / "tokens.json").read_text(encoding="utf-8")
    assert t["token"] not in stored and (tmp_path / "idx" / "tokens.json").stat().st_mode & 0o777 == 0o600
    again = cli.invoke(app, ["tokens", "add", "bot", *index])
    assert again.exit_code == 1 and "a token named 'bot' exists: revoke it first" in again.stderr
    bad = cli.invoke(app, ["tokens", "add", "x", "--expires", "soon", *index])
    assert bad.exit_code == 1 and "invalid duration 'soon': use e.g. 90d, 12h or 30m" in bad.stderr
    listed = json.loads(cli.invoke(app, ["tokens", "list", "--json", *index]).stdout)["tokens"]
    assert [(x["name"], "token" in x) for x in listed] == [("bot", False)]
    assert cli.invoke(app, ["tokens", "list", *index]).stdout.startswith("bot: collections hr, policies; read-only")
    assert json.loads(cli.invoke(app, ["tokens", "revoke", "bot", "--json", *index]).stdout)["revoked"] is True
    assert cli.invoke(app, ["tokens", "list", *index]).stdout.startswith("no tokens")
