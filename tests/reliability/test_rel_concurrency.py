"""(e) Many MCP clients at once while a writer ingests and deletes a document, over Streamable HTTP on 127.0.0.1:
0 errors, no request over 5 s, and a deleted document never comes back in a search that started after its
delete returned. The short version runs 5 clients for 5 s; ``make reliability`` 50 clients for 60 s."""

from __future__ import annotations

import random
import time
from pathlib import Path

import anyio
from mcp import Client
from mcp.types import CallToolResult
from rel_common import SIZES, percentiles, report, vm_hwm_mb

from mcp_fixtures import Fixture, HttpServer

QUERIES = [
    "试用期最长不得超过几个月？",
    "经济补偿怎么计算",
    "年休假有几天",
    "女职工产假多少天",
    "试用期工资",
    "法定休假日算不算年休假",
    "流产产假",
    "劳动合同解除",
]
WRITER_QUERY = "潜水艇压载水舱多久检查"
SLOW_S = 5.0


class Stats:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.writer_hits: list[tuple[float, bool]] = []  # (query started, the writer's document was returned)
        self.gone: list[tuple[float, float]] = []  # (delete returned, next ingest started)
        self.cycles = 0


async def _client(url: str, until: float, stats: Stats, seed: int) -> None:
    rng = random.Random(seed)
    async with Client(url) as c:
        while time.monotonic() < until:
            query = WRITER_QUERY if rng.random() < 0.3 else rng.choice(QUERIES)
            started = time.monotonic()
            try:
                if rng.random() < 0.1:
                    result = await c.call_tool("list_collections", {})
                else:
                    result = await c.call_tool("query_knowledge_hub", {"query": query, "top_k": 3})
            except Exception as e:  # noqa: BLE001 - every failure is counted
                stats.errors.append(f"{type(e).__name__}: {e}")
                continue
            _count(result, query, started, stats)


def _count(result: CallToolResult, query: str, started: float, stats: Stats) -> None:
    stats.latencies.append(time.monotonic() - started)
    if result.is_error:
        stats.errors.append(result.content[0].text[:200])  # type: ignore[union-attr]
    elif query == WRITER_QUERY and result.structured_content and "citations" in result.structured_content:
        sources = {h["source"] for h in result.structured_content["citations"]}
        stats.writer_hits.append((started, "潜水艇.md" in sources))


async def _ask(c: Client, query: str, stats: Stats) -> None:
    started = time.monotonic()
    _count(await c.call_tool("query_knowledge_hub", {"query": query, "top_k": 3}), query, started, stats)


async def _writer(url: str, inbox: Path, until: float, stats: Stats) -> None:
    async with Client(url) as c:
        while time.monotonic() < until:
            ingest_started = time.monotonic()
            if stats.gone:
                stats.gone[-1] = (stats.gone[-1][0], ingest_started)
            added = await c.call_tool("ingest_documents", {"paths": [str(inbox / "潜水艇.md")]})
            if added.is_error:
                stats.errors.append(f"writer: {added.content[0].text[:200]}")  # type: ignore[union-attr]
                return
            await _ask(c, WRITER_QUERY, stats)  # its own write is searchable once the ingest has answered
            await anyio.sleep(0.5)
            docs = await c.call_tool("get_document_summary", {"doc_id": "潜水艇.md"})
            deleted = await c.call_tool("delete_document", {"doc_id": docs.structured_content["doc_id"]})  # type: ignore[index]
            if deleted.is_error:
                stats.errors.append(f"writer: {deleted.content[0].text[:200]}")  # type: ignore[union-attr]
                return
            stats.gone.append((time.monotonic(), float("inf")))
            stats.cycles += 1
            await anyio.sleep(0.5)


@SIZES
def test_many_clients_and_a_writer(full: bool, served: tuple[Fixture, HttpServer]) -> None:
    fx, server = served
    clients, seconds = (50, 60) if full else (5, 5)
    stats = Stats()

    async def main() -> None:
        until = time.monotonic() + seconds
        async with anyio.create_task_group() as tg:
            tg.start_soon(_writer, server.url, fx.inbox, until, stats)
            for n in range(clients):
                tg.start_soon(_client, server.url, until, stats, n)

    anyio.run(main)
    stale = [
        started
        for started, hit in stats.writer_hits
        if hit and any(gone <= started < back for gone, back in stats.gone)
    ]
    slow = sum(1 for s in stats.latencies if s > SLOW_S)
    report(
        "concurrency" + ("" if full else " (short)"),
        clients=clients,
        seconds=seconds,
        requests=len(stats.latencies),
        requests_per_s=round(len(stats.latencies) / seconds, 1),
        errors=len(stats.errors),
        over_5s=slow,
        writer_cycles=stats.cycles,
        deleted_doc_returned=len(stale),
        server_peak_rss_mb=round(vm_hwm_mb(server.proc.pid), 1),
        **percentiles(stats.latencies),
    )
    assert stats.errors == [] and slow == 0 and stale == []
    assert stats.cycles >= 1 and any(hit for _, hit in stats.writer_hits)
