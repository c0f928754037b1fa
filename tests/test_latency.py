"""The latency harness: percentiles against hand-computed values, the report, and (slow) a real run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_fixtures import Fixture
from zhiku.mcp.latency import compare, run_bench, save_and_compare, summarize
from zhiku.numeric import percentile


def test_percentile_interpolates_like_numpy() -> None:
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert [percentile(values, q) for q in (0, 50, 95, 99, 100)] == [1.0, 3.0, 4.8, 4.96, 5.0]
    assert percentile([7.0], 99) == 7.0
    assert summarize([1.0, 2.0, 3.0, 4.0]) == {
        "p50_ms": 2.5,
        "p95_ms": 3.85,
        "p99_ms": 3.97,
        "mean_ms": 2.5,
        "min_ms": 1.0,
        "max_ms": 4.0,
        "n": 4,
    }


def result(p50: float) -> dict:
    s = {"p50_ms": p50, "p95_ms": p50 * 2, "p99_ms": p50 * 3}
    return {
        "transport": "stdio",
        "calls": 3,
        "cold_start_ms": 1500.0,
        "query": s,
        "trivial": s,
        "cache_hit": s,
        "index": {"path": "idx", "documents": 3, "chunks": 5, "mode": "hybrid"},
        "measured_at": "t",
        "env": {"cpu": "cpu", "cores": 2, "load_avg_1m": 1.0, "python": "3.11", "versions": {"mcp": "2.3.0"}},
    }


def test_compare_prints_deltas() -> None:
    lines = compare(result(12.0), result(10.0))
    assert lines[1] == "query           12.0      24.0      36.0   +2.0 (+20%) / +4.0 (+20%) / +6.0 (+20%)"
    assert compare(result(12.0), None)[1].endswith("no baseline")


def test_save_and_compare_keeps_one_entry_per_transport(tmp_path: Path) -> None:
    out, base = tmp_path / "latest.json", tmp_path / "baseline.json"
    out.write_text(json.dumps({"http": {"keep": True}}))
    report = save_and_compare(result(12.0), out=out, baseline=base, update_baseline=True)
    assert "no baseline" in report and f"baseline updated: {base}" in report
    assert set(json.loads(out.read_text())) == {"http", "stdio"}
    assert "+2.4 (+20%)" in save_and_compare(result(14.4), out=out, baseline=base)


def test_only_a_baseline_of_the_same_index_and_machine_is_compared(tmp_path: Path) -> None:
    out, base = tmp_path / "latest.json", tmp_path / "baseline.json"
    save_and_compare(result(12.0), out=out, baseline=base, update_baseline=True)
    demo = result(14.4)
    demo["index"] = {**demo["index"], "chunks": 41}
    report = save_and_compare(demo, out=out, baseline=base)
    assert (
        f"baseline {base} not compared: another index (chunks 5 there, 41 here); these are absolute figures" in report
    )
    assert "no baseline" in report and "+20%" not in report
    other_cpu = result(14.4)
    other_cpu["env"] = {**other_cpu["env"], "cpu": "AMD EPYC"}
    report = save_and_compare(other_cpu, out=out, baseline=base)
    assert "not compared: another machine (cpu 'cpu' there, 'AMD EPYC' here)" in report and "+20%" not in report
    assert "+2.4 (+20%)" in save_and_compare(result(14.4), out=out, baseline=base)


@pytest.mark.slow
def test_real_run_over_stdio(mcp_index: Fixture) -> None:
    r = run_bench(mcp_index.settings, transport="stdio", calls=5, warmup=1, config=mcp_index.config)
    assert r["index"]["chunks"] == 5 and r["query"]["n"] == 5 and r["cache_hit"]["n"] == 5
    assert 0 < r["cache_hit"]["p50_ms"] and r["cold_start_ms"] > r["query"]["p50_ms"]
