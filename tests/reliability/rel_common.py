"""Shared pieces of the reliability suite: figures, percentiles, child processes with peak RSS, settings.

Every part prints one line ``RELIABILITY <part> {figures as JSON}`` (run with ``-s`` to see it; ``make
reliability`` does) and appends it to ``$ZHIKU_RELIABILITY_OUT`` when that is set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

PYTHON = sys.executable
ROOT = Path(__file__).resolve().parents[2]


# Every part runs twice: "short" inside `make test`, "full" (marked ``reliability``, deselected by default)
# in `make reliability`. Tests take the ``full`` parameter.
SIZES = pytest.mark.parametrize(
    "full", [pytest.param(False, id="short"), pytest.param(True, id="full", marks=pytest.mark.reliability)]
)


def report(part: str, **figures: object) -> None:
    line = f"RELIABILITY {part} {json.dumps(figures, ensure_ascii=False, sort_keys=True)}"
    print(line)
    out = os.environ.get("ZHIKU_RELIABILITY_OUT")
    if out:
        with open(out, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def percentiles(values: Sequence[float]) -> dict[str, float | None]:
    """p50/p95/p99/max in milliseconds of ``values`` (seconds); None when empty."""
    if not values:
        return {"p50_ms": None, "p95_ms": None, "p99_ms": None, "max_ms": None}
    a = np.asarray(values) * 1000
    return {
        "p50_ms": round(float(np.percentile(a, 50)), 1),
        "p95_ms": round(float(np.percentile(a, 95)), 1),
        "p99_ms": round(float(np.percentile(a, 99)), 1),
        "max_ms": round(float(a.max()), 1),
    }


def zhiku_env(cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZHIKU_")}
    env.update({"ZHIKU_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT / "src"), **extra})
    return env


def vm_hwm_mb(pid: int | str = "self") -> float:
    """The peak resident memory of a process since its exec (``VmHWM``), in MB; 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


@dataclass(frozen=True)
class Finished:
    rc: int
    stdout: str
    stderr: str
    seconds: float
    peak_rss_mb: float
    timed_out: bool


def run(args: Sequence[str], env: dict[str, str], timeout_s: float, cwd: Path | None = None) -> Finished:
    """``python -m zhiku.cli *args`` (or ``python *args`` when args[0] ends with .py), killed after
    ``timeout_s``; its peak RSS is the child's own ``VmHWM``, read every 20 ms while it runs (``wait4``'s
    ``ru_maxrss`` would count the pages it shared with this process between fork and exec)."""
    cmd = [PYTHON, *args] if args[0].endswith(".py") else [PYTHON, "-m", "zhiku.cli", *args]
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd, env=env, cwd=cwd or ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    chunks: dict[str, bytes] = {}
    readers = [
        threading.Thread(target=lambda k=k, f=f: chunks.__setitem__(k, f.read()), daemon=True)
        for k, f in (("out", proc.stdout), ("err", proc.stderr))
    ]
    for t in readers:
        t.start()
    timed_out = False
    peak_mb = 0.0
    while True:
        peak_mb = max(peak_mb, vm_hwm_mb(proc.pid))
        pid, status, _ = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - started > timeout_s and not timed_out:
            proc.kill()
            timed_out = True
        time.sleep(0.02)
    proc.returncode = os.waitstatus_to_exitcode(status)
    for t in readers:
        t.join(10)
    return Finished(
        proc.returncode,
        chunks.get("out", b"").decode("utf-8", "replace"),
        chunks.get("err", b"").decode("utf-8", "replace"),
        time.monotonic() - started,
        peak_mb,
        timed_out,
    )
