"""Extending the MCP server: a team's own tools, resources and prompts next to the built-in ones, the tool
conventions (checked when the server is built, for built-in tools too), hooks around every call, and
examples/custom_server.py run as a real process over stdio and Streamable HTTP with the SDK client."""

from __future__ import annotations

import logging
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, Field

import zhiku
from mcp_fixtures import DOCS, PYTHON, ROOT, Fixture, free_port, server_env, start_http
from zhiku import KnowledgeBase
from zhiku.errors import NotFound
from zhiku.mcp import text as mcp_text
from zhiku.mcp.registry import ToolDefinitionError
from zhiku.mcp.server import build_server
from zhiku.settings import merge

EXAMPLE = ROOT / "examples" / "custom_server.py"
sys.path.insert(0, str(EXAMPLE.parent))
import custom_server  # noqa: E402  (examples/ is not a package)

BUILTIN = ["query_knowledge_hub", "list_collections", "get_document_summary", "ingest_documents", "delete_document"]
ARTICLE_19 = DOCS["劳动合同法.md"].split("\n\n")[2]
ARTICLE_47 = DOCS["劳动合同法.md"].split("\n\n")[5].strip()
LOOKUP_DESCRIPTION = """\
Return the exact text of one article (第N条) of a law in the knowledge base.

When to use / 何时使用: the user cites an article by its number ("劳动合同法第十九条") and needs its exact wording.

Example / 示例: {"law": "劳动合同法", "number": 19}"""


def run(server: Any, body: Any) -> Any:
    async def main() -> Any:
        async with Client(server) as client:
            return await body(client)

    return anyio.run(main)


def test_custom_tool_is_listed_described_and_callable(mcp_index: Fixture) -> None:
    server = build_server(mcp_index.settings, tools=[custom_server.lookup_article])

    async def body(c: Client) -> Any:
        tools = (await c.list_tools()).tools
        calls = [
            await c.call_tool("lookup_article", {"law": "劳动合同法", "number": 19}),
            await c.call_tool("lookup_article", {"law": "劳动合同法", "number": 47}),
            await c.call_tool("lookup_article", {"law": "劳动合同法", "number": 21}),
            await c.call_tool("lookup_article", {"law": "劳动合同法", "number": "x"}),
        ]
        return tools, calls

    tools, (a19, a47, missing, bad) = run(server, body)
    assert [t.name for t in tools] == [*BUILTIN, "lookup_article"]
    lookup = tools[-1]
    assert lookup.description == LOOKUP_DESCRIPTION
    assert lookup.input_schema["required"] == ["law", "number"]
    assert (
        lookup.input_schema["properties"]["number"]["description"] == "The article number, 1–99, e.g. 19 for 第十九条."
    )
    assert lookup.annotations.read_only_hint is True and lookup.annotations.destructive_hint is False
    assert a19.structured_content == {"law": "劳动合同法", "number": 19, "text": ARTICLE_19}
    assert a47.structured_content["text"] == ARTICLE_47
    assert missing.is_error and missing.meta["zhiku/error"] == {
        "code": "NOT_FOUND",
        "message": "劳动合同法 has no article 21 (第二十一条) in the knowledge base",
        "retryable": False,
    }
    assert bad.is_error and bad.meta["zhiku/error"]["code"] == "INVALID_INPUT"
    assert bad.meta["zhiku/error"]["message"].startswith("invalid arguments: number: Input should be a valid integer")


def test_hooks_run_around_every_tool_and_a_raising_hook_is_ignored(
    mcp_index: Fixture, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[tuple[str, str, Any]] = []

    def before(call: zhiku.ToolCall) -> None:
        seen.append(("before", call.name, dict(call.arguments)))

    async def after(call: zhiku.ToolCall) -> None:
        assert call.duration_s is not None and call.duration_s >= 0
        seen.append(("after", call.name, call.result_chars))

    def on_error(call: zhiku.ToolCall) -> None:
        seen.append(("error", call.name, call.error_code))

    def broken(call: zhiku.ToolCall) -> None:
        raise RuntimeError("hook bug")

    hooks = zhiku.Hooks(before_call=[broken, before], after_call=[after, broken], on_error=[on_error])
    server = build_server(mcp_index.settings, tools=[custom_server.lookup_article], hooks=hooks)

    async def body(c: Client) -> Any:
        return [
            await c.call_tool("list_collections", {"include_stats": False}),
            await c.call_tool("lookup_article", {"law": "劳动合同法", "number": 19}),
            await c.call_tool("lookup_article", {"law": "劳动合同法", "number": 21}),
            await c.call_tool("query_knowledge_hub", {"query": ""}),
        ]

    with caplog.at_level(logging.ERROR, logger="zhiku.mcp.hooks"):
        collections, article, missing, empty = run(server, body)
    assert not collections.is_error and article.structured_content["number"] == 19
    sizes = [x[2] for x in seen if x[0] == "after"]
    assert all(isinstance(n, int) and n > 0 for n in sizes)
    assert [(kind, name) for kind, name, _ in seen] == [
        ("before", "list_collections"),
        ("after", "list_collections"),
        ("before", "lookup_article"),
        ("after", "lookup_article"),
        ("before", "lookup_article"),
        ("error", "lookup_article"),
        ("before", "query_knowledge_hub"),
        ("error", "query_knowledge_hub"),
    ]
    assert seen[2][2] == {"law": "劳动合同法", "number": 19}
    assert [x[2] for x in seen if x[0] == "error"] == ["NOT_FOUND", "INVALID_INPUT"]
    raised = [r.getMessage() for r in caplog.records if "hook bug" in str(r.exc_info)]
    assert len(raised) == 6 and raised[0].startswith("before_call hook ")
    assert raised[0].endswith("broken raised on tool list_collections; ignored")


# -- conventions ----------------------------------------------------------------------------------
def lookupArticle(law: str) -> str:  # noqa: N802 - the bad name is the point
    """Look up an article.

    When to use: always.

    Example: {"law": "劳动合同法"}

    Args:
        law: The law.
    """
    return law


def no_when(law: str) -> str:
    """Look up an article.

    Example: {"law": "劳动合同法"}

    Args:
        law: The law.
    """
    return law


def no_example(law: str) -> str:
    """Look up an article.

    When to use: always.

    Args:
        law: The law.
    """
    return law


def undocumented(law: str, number: int) -> str:
    """Look up an article.

    When to use: always.

    Example: {"law": "劳动合同法", "number": 1}

    Args:
        law: The law.
    """
    return law


def bad_example(number: Annotated[int, Field(ge=1, description="The article number.")]) -> str:
    """Look up an article.

    When to use: always.

    Example: {"number": 0}
    """
    return str(number)


def too_long(law: Annotated[str, Field(description="The law.")]) -> str:
    return law


too_long.__doc__ = "Look up.\n\nWhen to use: " + "总是使用。" * 420 + '\n\nExample: {"law": "x"}'


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (
            lookupArticle,
            "the name must be snake_case ([a-z0-9_], starting with a letter, at most 64 characters), "
            "e.g. 'lookup_article'",
        ),
        (no_when, "no when-to-use: add a 'When to use:' line to its docstring (or tool(when_to_use=...))"),
        (
            no_example,
            "no example: add an 'Example:' line with JSON arguments to its docstring (or tool(examples=[...]))",
        ),
        (
            undocumented,
            "parameter 'number' is not documented: add 'number: ...' under 'Args:' in its docstring or annotate "
            "it Annotated[..., Field(description=...)]",
        ),
        (
            bad_example,
            'example 1 {"number": 0} has invalid arguments: number: Input should be greater than or equal to 1 (got 0)',
        ),
        (
            too_long,
            "the composed description is 2158 characters, over the 2,048 limit; shorten the description, "
            "when-to-use or examples",
        ),
    ],
)
def test_a_tool_breaking_the_conventions_fails_when_the_server_is_built(
    mcp_index: Fixture, fn: Any, message: str
) -> None:
    with pytest.raises(ToolDefinitionError) as e:
        build_server(mcp_index.settings, tools=[fn])
    where, _, what = str(e.value).partition("): ")
    line = fn.__code__.co_firstlineno
    assert where == f"tool {fn.__name__!r} (test_extending.py:{line}" and what == message
    assert "\n" not in str(e.value)


def test_builtin_tools_are_checked_on_the_same_path(mcp_index: Fixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mcp_text, "QUERY", replace(mcp_text.QUERY, when_to_use=" "))
    with pytest.raises(ToolDefinitionError, match=r"^tool 'query_knowledge_hub' \(built-in\): no when-to-use"):
        build_server(mcp_index.settings)


def test_a_signature_the_sdk_refuses_is_one_line_too(mcp_index: Fixture) -> None:
    def hidden(_secret: Annotated[str, Field(description="A secret.")]) -> str:
        """Reveal nothing.

        When to use: never.

        Example: reveal the secret x.
        """
        return ""

    with pytest.raises(ToolDefinitionError) as e:
        build_server(mcp_index.settings, tools=[hidden])
    assert str(e.value).endswith(
        "cannot be served: InvalidSignature: Parameter _secret of hidden cannot start with '_'"
    )


def test_names_are_unique(mcp_index: Fixture) -> None:
    clash = zhiku.tool(name="list_collections")(custom_server.lookup_article)
    with pytest.raises(ToolDefinitionError) as e:
        build_server(mcp_index.settings, tools=[clash])
    assert str(e.value).endswith("the name is taken by built-in; rename one")


# -- options, resources, prompts ------------------------------------------------------------------
class Counted(BaseModel):
    calls: int
    documents: int


def test_write_tools_hide_on_read_only_servers_and_cache_is_per_index_version(mcp_index: Fixture) -> None:
    calls = []

    @zhiku.tool(cache=True, examples=['{"collection": "laws"}'])
    def count_documents(kb: KnowledgeBase, collection: Annotated[str, Field(description="A collection.")]) -> Counted:
        """Count the documents of a collection.

        When to use: to size a collection.
        """
        calls.append(collection)
        return Counted(calls=len(calls), documents=len(kb.documents(collection)))

    @zhiku.tool(read_only=False, destructive=True)
    def purge_cache() -> str:
        """Drop a cache.

        When to use: never, in this test.

        Example: {}
        """
        return "dropped"

    server = build_server(mcp_index.settings, tools=[count_documents, purge_cache])

    async def body(c: Client) -> Any:
        first = await c.call_tool("count_documents", {"collection": "laws"})
        again = await c.call_tool("count_documents", {"collection": "laws"})
        return [t.name for t in (await c.list_tools()).tools], first, again

    names, first, again = run(server, body)
    assert names[-2:] == ["count_documents", "purge_cache"]
    assert first.structured_content == again.structured_content == {"calls": 1, "documents": 3}
    assert calls == ["laws"]
    read_only = build_server(
        merge(mcp_index.settings, server={"read_only": True}), tools=[count_documents, purge_cache]
    )
    names = run(read_only, lambda c: c.list_tools())
    assert [t.name for t in names.tools] == [*BUILTIN[:3], "count_documents"]


def test_async_tool_gets_the_request_context(mcp_index: Fixture) -> None:
    @zhiku.tool(exclusive=False)
    async def whoami(ctx: Context, kb: KnowledgeBase, shout: Annotated[bool, Field(description="Upper case.")]) -> str:
        """Say which server answers.

        When to use: to check the connection.

        Example: {"shout": true}
        """
        await ctx.report_progress(1, 1)
        name = f"{type(ctx).__name__} {kb.settings.collection}"
        return name.upper() if shout else name

    result = run(build_server(mcp_index.settings, tools=[whoami]), lambda c: c.call_tool("whoami", {"shout": True}))
    assert result.structured_content == {"result": "CONTEXT LAWS"}


def test_custom_resource_and_prompt(mcp_index: Fixture) -> None:
    @zhiku.resource("law://article/{law}/{number}", mime_type="text/plain")
    def article(kb: KnowledgeBase, law: str, number: str) -> str:
        """One article of a law as plain text."""
        return custom_server.lookup_article(kb, law, int(number)).text

    @zhiku.resource("law://catalogue", mime_type="text/plain")
    def catalogue(kb: KnowledgeBase) -> str:
        """The laws in the knowledge base, one per line."""
        return "\n".join(sorted(d.title for d in kb.documents()))

    def cite_article(law: str, number: int) -> str:
        """Ask for one article, quoted exactly."""
        return f"Use lookup_article for {law} {number} and quote it exactly."

    server = build_server(mcp_index.settings, resources=[article, catalogue], prompts=[cite_article])

    async def body(c: Client) -> Any:
        templates = (await c.list_resource_templates()).resource_templates
        listed = (await c.list_resources()).resources
        text = await c.read_resource("law://article/劳动合同法/19")
        cat = await c.read_resource("law://catalogue")
        with pytest.raises(MCPError) as missing:
            await c.read_resource("law://article/劳动合同法/21")
        prompt = await c.get_prompt("cite_article", {"law": "劳动法", "number": "3"})
        return templates, listed, text, cat, missing.value.error.code, prompt

    templates, listed, text, cat, code, prompt = run(server, body)
    assert "law://article/{law}/{number}" in [t.uri_template for t in templates]
    assert listed[0].uri == "law://catalogue" and len(listed) == 4  # then the three documents
    assert text.contents[0].text == ARTICLE_19
    assert cat.contents[0].text == "劳动合同法\n女职工劳动保护特别规定\n职工带薪年休假条例"
    assert code == -32602
    assert prompt.messages[0].content.text == "Use lookup_article for 劳动法 3 and quote it exactly."


def test_bad_resource_uri_and_missing_marker(mcp_index: Fixture) -> None:
    @zhiku.resource("zhiku://mine/{x}")
    def mine(x: str) -> str:
        """Mine."""
        return x

    with pytest.raises(ToolDefinitionError, match="the zhiku:// scheme is zhiku's own; use your team's"):
        build_server(mcp_index.settings, resources=[mine])
    with pytest.raises(TypeError, match=r"mark it with @zhiku.resource\('scheme://kind/\{id\}'\)"):
        build_server(mcp_index.settings, resources=[lambda: "x"])


def test_document_text_raises_not_found(mcp_index: Fixture) -> None:
    with KnowledgeBase(mcp_index.settings, read_only=True) as kb:
        assert kb.document_text("劳动合同法*") == DOCS["劳动合同法.md"].strip()
        with pytest.raises(NotFound):
            kb.document_text("刑法*")


# -- the example script as a real process -----------------------------------------------------------
def check_example(tools: list[str], article: Any) -> None:
    assert tools == [*BUILTIN[:3], "lookup_article"]
    assert article.structured_content == {"law": "劳动合同法", "number": 19, "text": ARTICLE_19}


def test_example_script_over_stdio(mcp_index: Fixture, tmp_path: Path) -> None:
    errlog = tmp_path / "stderr.log"
    params = StdioServerParameters(
        command=PYTHON,
        args=[str(EXAMPLE), "--config", str(mcp_index.config), "--read-only"],
        env=server_env(PYTHONPATH=str(ROOT / "src")),
        cwd=str(ROOT),
    )

    async def main() -> Any:
        with open(errlog, "w") as err:
            from mcp.client.stdio import stdio_client

            async with Client(stdio_client(params, errlog=err)) as c:
                names = [t.name for t in (await c.list_tools()).tools]
                return names, await c.call_tool("lookup_article", {"law": "劳动合同法", "number": 19})

    check_example(*anyio.run(main))
    assert "tool lookup_article took " in errlog.read_text()  # the script's after_call hook


def test_example_script_over_http(mcp_index: Fixture, tmp_path: Path) -> None:
    server = start_http(
        mcp_index, tmp_path / "server.log", "--read-only", script=EXAMPLE, env=server_env(PYTHONPATH=str(ROOT / "src"))
    )
    try:

        async def main() -> Any:
            async with Client(server.url) as c:
                names = [t.name for t in (await c.list_tools()).tools]
                return names, await c.call_tool("lookup_article", {"law": "劳动合同法", "number": 19})

        check_example(*anyio.run(main))
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (
            'name="lookupArticle"',
            "error: tool 'lookupArticle' (custom_server.py:{line}): the name must be snake_case ([a-z0-9_], "
            "starting with a letter, at most 64 characters), e.g. 'lookup_article'",
        ),
        pytest.param(
            'when_to_use=""',
            "error: tool 'lookup_article' (custom_server.py:{line}): no when-to-use: add a 'When to use:' line to "
            "its docstring (or tool(when_to_use=...))",
            marks=pytest.mark.slow,  # the same path as the bad name; in-process tests cover every convention
        ),
    ],
)
def test_a_bad_custom_tool_stops_the_script_with_one_line(
    mcp_index: Fixture, tmp_path: Path, options: str, expected: str
) -> None:
    script = tmp_path / "bad_server.py"
    script.write_text(
        "import zhiku\nfrom custom_server import lookup_article\n"
        f"zhiku.serve(tools=[zhiku.tool({options})(lookup_article)])\n",
        encoding="utf-8",
    )
    env = server_env(PYTHONPATH=f"{ROOT / 'src'}:{EXAMPLE.parent}")
    proc = subprocess.run(
        [PYTHON, str(script), "--config", str(mcp_index.config), "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    line = custom_server.lookup_article.__code__.co_firstlineno
    assert (proc.returncode, proc.stdout, proc.stderr) == (1, "", expected.format(line=line) + "\n")
    assert expected.format(line=line) in (ROOT / "docs" / "extending.md").read_text(encoding="utf-8")  # docs true


def test_import_zhiku_is_cheap_and_exports_the_api() -> None:
    code = (
        "import sys, zhiku; heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'numpy') "
        "or m.startswith('zhiku.')); print(heavy); print(zhiku.KnowledgeBase.__module__, zhiku.Settings.__module__, "
        "zhiku.serve.__module__, zhiku.build_server.__module__)"
    )
    proc = subprocess.run(
        [PYTHON, "-c", code], capture_output=True, text=True, env=server_env(PYTHONPATH=str(ROOT / "src")), timeout=60
    )
    assert proc.stdout.splitlines() == ["[]", "zhiku.api zhiku.settings zhiku.mcp.transport zhiku.mcp.server"], proc
