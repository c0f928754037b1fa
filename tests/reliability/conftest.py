"""The reliability suite's shared HTTP server: one `zhiku serve --transport http` on a private, writable copy of
the MCP fixture index (its inbox holds the concurrency writer's document), for the protocol and concurrency parts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mcp_fixtures import Fixture, HttpServer, copy_fixture, server_env, start_http

WRITER_DOC = "潜水艇.md"
WRITER_TEXT = "# 潜水艇保养手册\n\n第一条 潜水艇的压载水舱每季度检查一次，螺旋桨每年更换密封圈。\n"


@pytest.fixture(scope="session")
def served(mcp_index: Fixture, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Fixture, HttpServer]]:
    fx = copy_fixture(mcp_index, tmp_path_factory.mktemp("reliability-server"))
    (fx.inbox / WRITER_DOC).write_text(WRITER_TEXT, encoding="utf-8")
    # 100 sessions at most: the short sessions part fills them; 51 clients of the concurrency part stay under it
    server = start_http(fx, fx.root / "http.log", env=server_env(ZHIKU_SERVER__MAX_SESSIONS="100"))
    try:
        yield fx, server
    finally:
        server.stop()
