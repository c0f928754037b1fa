"""Live folders under a burst: `zhiku serve --watch` while a `git checkout` writes N files (some of them bad) at
once, then deletes them all; over the MCP client, the server never restarted."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import anyio
from mcp import Client
from rel_common import SIZES, report

from mcp_fixtures import Fixture, copy_fixture, start_http

FIXTURE_DOCS = 3


async def documents(c: Client) -> int:
    r = await c.call_tool("list_collections", {})
    return int(r.structured_content["collections"][0]["documents"])


async def until(c: Client, want: int, limit_s: float) -> float:
    started = time.monotonic()
    while (n := await documents(c)) != want:
        assert time.monotonic() - started < limit_s, f"{n} documents, want {want}"
        await anyio.sleep(0.5)
    return time.monotonic() - started


@SIZES
def test_watch_burst(full: bool, mcp_index: Fixture, tmp_path: Path) -> None:
    n, bad = (1000, 20) if full else (10, 1)
    fx = copy_fixture(mcp_index, tmp_path)
    server = start_http(fx, tmp_path / "server.log", "--watch", str(fx.inbox))
    checkout = fx.inbox / "repo"
    try:

        async def main() -> dict[str, float]:
            async with Client(server.url) as c:
                await until(c, FIXTURE_DOCS, 30)
                checkout.mkdir()
                started = time.monotonic()
                for i in range(n):
                    (checkout / f"note{i:04d}.md").write_text(f"# 笔记 {i}\n\n编号 NOTE-{i:04d} 的远程办公规定。\n")
                for i in range(bad):
                    (checkout / f"broken{i}.pdf").write_bytes(b"%PDF-1.4 truncated")
                written = time.monotonic() - started
                indexed = await until(c, FIXTURE_DOCS + n, 900 if full else 120)
                shutil.rmtree(checkout)
                removed = await until(c, FIXTURE_DOCS, 120)
                return {"written_s": written, "indexed_s": indexed, "removed_s": removed}

        took = anyio.run(main)
        assert server.proc.poll() is None
    finally:
        server.stop()
    report("watch", files=n, bad_files=bad, **{k: round(v, 2) for k, v in took.items()})
