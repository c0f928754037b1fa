"""MCP round trips through a real SDK client to a real `zhiku serve` subprocess, stdio and Streamable HTTP.

    make bench-latency      # python bench/mcp_latency.py --index demo-index --json

Per transport, one server process: the cold start (process start to the first answer), `query_knowledge_hub`
(new questions, never from the result cache), `list_collections` (`trivial`: the protocol's own share) and the
first question again (`cache_hit`). Prints one JSON line per transport.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import numpy as np
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

QUESTIONS = (
    "试用期最长不得超过几个月？",
    "女职工产假有多少天",
    "经济补偿怎么计算",
    "年休假有几天",
    "加班工资的标准是什么",
)


def summary(ms: list[float]) -> dict[str, float]:
    p50, p95, p99 = np.percentile(ms, [50, 95, 99])
    return {"p50_ms": round(p50, 3), "p95_ms": round(p95, 3), "p99_ms": round(p99, 3), "n": len(ms)}


async def call(client: Any, tool: str, args: dict[str, Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = await client.call_tool(tool, args)
    if result.is_error:
        raise SystemExit(f"{tool} failed: {result.content[0].text}")
    return (time.perf_counter() - t0) * 1000, result


async def connect(index: Path, transport: str, stack: AsyncExitStack) -> tuple[Any, float]:
    """A client of a fresh `zhiku serve` and when the process was started."""
    env = {k: v for k, v in os.environ.items() if k not in ("ZHIKU_TRANSPORT", "ZHIKU_HOST", "ZHIKU_PORT")}
    serve = [sys.executable, "-m", "zhiku.cli", "serve", "--index", str(index), "--read-only", "--transport", transport]
    started = time.perf_counter()
    if transport == "stdio":
        params = StdioServerParameters(command=serve[0], args=serve[1:], env=env)
        client = Client(stdio_client(params, errlog=subprocess.DEVNULL))
        return await stack.enter_async_context(client), started
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([*serve, "--port", str(port)], env=env, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stack.callback(proc.wait)
    stack.callback(proc.terminate)
    for _ in range(3000):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                break
        except OSError:
            await anyio.sleep(0.02)
    return await stack.enter_async_context(Client(f"http://127.0.0.1:{port}/mcp")), started


async def bench(index: Path, transport: str, calls: int) -> dict[str, Any]:
    """Every measured question is a new one (numbered), so only the cache-hit series meets the result cache."""
    out: dict[str, Any] = {"transport": transport, "calls": calls}
    async with AsyncExitStack() as stack:
        client, started = await connect(index, transport, stack)
        first = {"query": QUESTIONS[0]}
        await call(client, "query_knowledge_hub", first)
        out["cold_start_ms"] = round((time.perf_counter() - started) * 1000, 1)
        ask = [{"query": f"{QUESTIONS[i % len(QUESTIONS)]}（{i}）"} for i in range(calls)]
        out["query"] = summary([(await call(client, "query_knowledge_hub", a))[0] for a in ask])
        out["trivial"] = summary([(await call(client, "list_collections", {}))[0] for _ in range(calls)])
        hits = [await call(client, "query_knowledge_hub", first) for _ in range(calls)]
        if any(r.structured_content["cache"] != "hit" for _, r in hits):
            raise SystemExit("no result-cache hits: is answer.min_score above the answers' confidence?")
        out["cache_hit"] = summary([ms for ms, _ in hits])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--json", action="store_true", help="also save the figures for the results page")
    args = ap.parse_args()
    figures = {t: anyio.run(bench, args.index, t, args.calls) for t in ("stdio", "http")}
    for row in figures.values():
        print(json.dumps(row))
    if args.json:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from report import save

        save("latency", figures, "make bench-latency")


if __name__ == "__main__":
    main()
