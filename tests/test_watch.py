"""Live folders: `zhiku serve --watch FOLDER` over the real MCP client; the server is never restarted."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from mcp_fixtures import Fixture, copy_fixture, start_http

NEW = "# 远程办公制度\n\n第一条 员工每周可申请远程办公两天，须提前一日经直属主管批准。\n"


async def sources(c: Client, query: str) -> list[str]:
    r = await c.call_tool("query_knowledge_hub", {"query": query, "top_k": 3})
    return [x["source"] for x in r.structured_content["citations"]]


async def until(c: Client, query: str, want: bool, source: str, limit_s: float = 10) -> float:
    """Seconds until ``source`` is (``want``) or is not among the query's citations; fails after ``limit_s``."""
    started = time.monotonic()
    while (source in await sources(c, query)) != want:
        assert time.monotonic() - started < limit_s, f"{source} still {'missing' if want else 'there'}"
        await anyio.sleep(0.2)
    return time.monotonic() - started


def test_a_saved_file_is_searchable_and_a_deleted_one_gone_within_10_s(mcp_index: Fixture, tmp_path: Path) -> None:
    fx = copy_fixture(mcp_index, tmp_path)
    folder = fx.inbox
    (folder / "bad.pdf").write_bytes(b"%PDF-1.4 not really")  # one bad file never stops the watcher
    server = start_http(fx, tmp_path / "server.log", "--watch", str(folder))
    query = "远程办公每周几天"
    try:

        async def main() -> dict[str, Any]:
            async with Client(server.url) as c:
                assert "远程办公制度.md" not in await sources(c, query)
                # an editor's atomic save: write a temporary file, then rename it over the name
                tmp = folder / ".远程办公制度.md.swp"
                tmp.write_text(NEW, encoding="utf-8")
                os.replace(tmp, folder / "远程办公制度.md")
                saved = await until(c, query, True, "远程办公制度.md")
                (folder / "远程办公制度.md").rename(folder / "远程办公.md")  # a move: the old name goes
                moved = await until(c, query, True, "远程办公.md")
                assert "远程办公制度.md" not in await sources(c, query)
                (folder / "远程办公.md").unlink()
                deleted = await until(c, query, False, "远程办公.md")
                return {"saved_s": saved, "moved_s": moved, "deleted_s": deleted}

        took = anyio.run(main)
        assert server.proc.poll() is None  # the same process throughout
    finally:
        server.stop()
    print("watch", {k: round(v, 2) for k, v in took.items()})


def test_watching_a_missing_folder_or_a_file_is_one_line(tmp_path: Path) -> None:
    import subprocess

    from mcp_fixtures import PYTHON, server_env

    (tmp_path / "file.md").write_text("# x\n", encoding="utf-8")
    for given, command in (("nope", ["watch", "nope"]), ("file.md", ["serve", "--watch", "file.md"])):
        proc = subprocess.run(
            [PYTHON, "-m", "zhiku.cli", *command, "--index", "idx"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=server_env(),
            timeout=60,
        )
        assert proc.returncode == 1
        assert proc.stderr == f"error: watch existing folders (not files): {tmp_path.resolve() / given}\n"
