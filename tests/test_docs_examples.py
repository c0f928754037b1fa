"""The `zhiku …` commands in README.md and docs/*.md are true: every one parses against the real command line
(fast), and the blocks marked ``<!-- docs-test: run -->`` run as written, in order, from a fresh folder (slow:
it embeds the sample documents of `zhiku init`)."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import anyio
import pytest
import typer
from typer.testing import CliRunner

from mcp_fixtures import PYTHON, Fixture, server_env
from zhiku.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN_MARK = "<!-- docs-test: run -->"
FENCE = re.compile(r"^```(\w*)\s*$")


def code_blocks(path: Path) -> list[tuple[bool, list[str]]]:
    """Shell code blocks of a Markdown file: (marked to run, lines)."""
    out: list[tuple[bool, list[str]]] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m and m.group(1) in ("bash", "sh", "console", ""):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            marked = i > 0 and lines[i - 1].strip() == RUN_MARK
            out.append((marked, lines[i + 1 : end]))
            i = end
        elif m:  # another language: skip the block
            i = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        i += 1
    return out


def commands(lines: list[str]) -> list[list[str]]:
    """Each shell line's commands (split at ``&&``), comments dropped."""
    out = []
    joined = "\n".join(lines).replace("\\\n", " ").splitlines()  # continuation lines
    for line in joined:
        if not line.strip().startswith(("zhiku ", "cd ")):
            continue  # other shell (exports, pip, make, curl…) is not run or checked here
        words = shlex.split(line, comments=True)
        while words:
            cut = words.index("&&") if "&&" in words else len(words)
            out.append(words[:cut])
            words = words[cut + 1 :]
    return out


def doc_commands() -> list[tuple[str, list[str]]]:
    found = []
    for path in DOC_FILES:
        for _, lines in code_blocks(path):
            found += [(path.name, c) for c in commands(lines) if c and c[0] == "zhiku"]
    return found


def parse(args: list[str]) -> None:
    """Resolve ``args`` through the real click command tree and parse every level's options (invokes nothing)."""
    cmd = typer.main.get_command(app)  # typer's own click: groups are told apart by their `commands`
    ctx = cmd.make_context("zhiku", list(args))
    while hasattr(cmd, "commands"):
        rest = [*(getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", None) or []), *ctx.args]
        name, sub, rest = cmd.resolve_command(ctx, rest)
        assert sub is not None, args
        cmd = sub
        ctx = cmd.make_context(name or "", rest, parent=ctx)


@pytest.mark.parametrize(("doc", "args"), doc_commands(), ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_every_documented_command_parses(doc: str, args: list[str]) -> None:
    parse(args[1:])


def test_the_docs_name_no_machine_specific_paths() -> None:
    for path in DOC_FILES:
        text = path.read_text(encoding="utf-8")
        assert "/work/" not in text and "/home/" not in text, path.name


@pytest.mark.slow
def test_marked_blocks_run_as_written_from_a_fresh_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, embed_cache_dir: Path
) -> None:
    for key in [k for k in os.environ if k.startswith("ZHIKU_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("ZHIKU_CACHE_DIR", str(embed_cache_dir))  # where vectors are cached, nothing else
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    ran = []
    for path in DOC_FILES:
        for marked, lines in code_blocks(path):
            for args in commands(lines) if marked else []:
                if args[0] == "cd":
                    monkeypatch.chdir(Path.cwd() / args[1])
                    continue
                assert args[0] == "zhiku", (path.name, args)
                r = runner.invoke(app, args[1:], catch_exceptions=False)
                assert r.exit_code == 0, (path.name, args, r.stdout[-2000:], r.stderr[-2000:])
                ran.append(" ".join(args))
    assert len(ran) >= 15 and ran[0] == "zhiku init myproject", ran


# --- the MCP client snippets ---------------------------------------------------------------------------------
def json_blocks(path: Path) -> list[tuple[str, dict[str, object]]]:
    """Every ```json block of a Markdown file, parsed, with the `##` heading it sits under ("" before any)."""
    out, heading = [], ""
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if line.startswith("## "):
            heading = line[3:].strip()
        if line.strip() == "```json":
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            out.append((heading, json.loads("\n".join(lines[i + 1 : end]))))
    return out


def test_client_snippets_are_valid_json_in_each_clients_shape() -> None:
    """VS Code reads `servers` (with a `type`), Claude Desktop and Cursor `mcpServers`: README once said all three
    "take the same shape" above an `mcpServers` block, which VS Code ignores."""
    shapes = {"Claude Desktop": "mcpServers", "Cursor": "mcpServers", "VS Code": "servers"}
    seen = []
    for heading, block in json_blocks(ROOT / "docs" / "mcp.md"):
        if heading in shapes:
            assert list(block)[-1] == shapes[heading], (heading, block)
            seen.append(heading)
    assert seen == ["Claude Desktop", "Claude Desktop", "Cursor", "Cursor", "VS Code", "VS Code"]
    readme = ROOT / "README.md"
    (_, snippet), *_ = [b for b in json_blocks(readme) if "mcpServers" in b[1]]
    assert snippet == {
        "mcpServers": {
            "zhiku": {
                "command": "/abs/path/zhiku/.venv/bin/zhiku",
                "args": ["serve", "--index", "/abs/path/demo-index", "--read-only"],
            }
        }
    }
    said = " ".join(readme.read_text(encoding="utf-8").split())
    assert 'VS Code\'s `.vscode/mcp.json` calls the map `servers` and adds `"type": "stdio"`' in said


def test_the_readme_client_command_starts_the_server(mcp_index: Fixture, tmp_path: Path) -> None:
    """README's snippet, its placeholders filled in, run the way a desktop client runs it (from a folder of its
    own, no zhiku.yaml there): a server that answers with the read-only tools over stdio."""
    from mcp import Client, StdioServerParameters

    (_, snippet), *_ = [b for b in json_blocks(ROOT / "README.md") if "mcpServers" in b[1]]
    entry = snippet["mcpServers"]["zhiku"]  # type: ignore[index]
    args = [a.replace("/abs/path/demo-index", str(mcp_index.index)) for a in entry["args"]]
    assert entry["command"].endswith("/.venv/bin/zhiku")  # the script `make demo` installs; here: this interpreter
    env = {**server_env(), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    params = StdioServerParameters(command=PYTHON, args=["-m", "zhiku.cli", *args], env=env, cwd=str(tmp_path))

    async def main() -> tuple[list[str], object]:
        async with Client(params) as c:
            tools = [t.name for t in (await c.list_tools()).tools]
            stats = await c.call_tool("list_collections", {})
            return tools, stats.structured_content["collections"]  # type: ignore[index]

    tools, collections = anyio.run(main)
    assert tools == ["query_knowledge_hub", "list_collections", "get_document_summary"]
    assert collections == [{"name": "laws", "documents": 3, "chunks": 5, "chars": 648}]


def test_every_code_block_ends_with_a_bare_fence() -> None:
    """A closing fence with text after it (docs/evaluation.md: "``` A variant that cannot run …") does not close
    the block on GitHub: the rest of the page rendered as code."""
    wrong = []
    for path in DOC_FILES:
        inside = False
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.lstrip().startswith("```"):
                if inside and line.strip() != "```":
                    wrong.append(f"{path.name}:{n}")
                inside = not inside
        if inside:
            wrong.append(f"{path.name}: a block is never closed")
    assert wrong == []
