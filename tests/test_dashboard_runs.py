"""The ingestion traces page opens on the newest run that changed something, not on a no-op re-run."""

from __future__ import annotations

from zhiku.dashboard.data import latest_busy
from zhiku.observability.trace import Trace


def run(trace_id: str, **counts: int) -> Trace:
    zero = {"added": 0, "updated": 0, "skipped": 0, "removed": 0, "failed": 0}
    return Trace(kind="ingest", trace_id=trace_id, started_at=0.0, data={"counts": {**zero, **counts}})


def test_latest_busy_skips_no_op_runs() -> None:
    assert latest_busy([run("noop", skipped=3), run("noop2"), run("busy", added=3), run("old", updated=1)]) == 2
    assert latest_busy([run("failed", failed=1), run("busy", added=1)]) == 0
    assert latest_busy([run("noop", skipped=3)]) == 0 and latest_busy([]) == 0
