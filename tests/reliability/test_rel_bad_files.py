"""(b) A generated corpus of ≥ 300 hostile files (``badfiles.py``): each file alone (no traceback, no hang over
30 s outside the embedding model, peak RSS ≤ 1 GB, every file indexed or refused with a reason as expected), then all of them in one CLI
batch (the good files are indexed: no batch lost; no traceback on stderr). The short version takes a seeded
sample of 25 files."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from badfiles import make_corpus
from rel_common import SIZES, percentiles, report, run, zhiku_env

from zhiku.ingest.files import printable

HANG_S = 30
RSS_MB = 1024


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, str]:
    return make_corpus(tmp_path_factory.mktemp("badfiles"))[1]


def _cases(expect: dict[Path, str], full: bool) -> dict[Path, str]:
    """All files, or (short) the good ones plus a seeded sample of 20 bad ones."""
    if full:
        return expect
    good = [p for p in expect if p.parent.name == "good"]
    bad = sorted((p for p in expect if p.parent.name != "good"), key=str)
    return {p: expect[p] for p in [*good, *random.Random(12).sample(bad, 20)]}


@SIZES
def test_each_bad_file_alone(full: bool, corpus: dict[Path, str], tmp_path: Path, embed_cache_dir: Path) -> None:
    expect = _cases(corpus, full)
    listing = tmp_path / "list"
    listing.write_bytes(b"\0".join(os.fsencode(p) for p in expect))
    driver = str(Path(__file__).with_name("ingest_each.py"))
    done = run([driver, str(tmp_path / "idx"), str(listing)], zhiku_env(embed_cache_dir), 20 * len(expect) + 300)
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    by_path = {row["path"]: row for row in rows}
    mismatches, unexpected = [], []
    for path, want in expect.items():
        row = by_path.get(printable(str(path)))
        if row is None or "raised" in row or row.get("hang"):
            mismatches.append(f"{path}: {row}")
            continue
        if row.get("reason") and "unexpected error" in row["reason"]:
            unexpected.append(f"{path}: {row['reason']}")
        got = "ok" if row["added"] else "fail" if row.get("reason") else "nothing"
        if got == "nothing" or (want != "either" and got != want):
            mismatches.append(f"{path}: expected {want}, got {got} ({row.get('reason')})")
    seconds = [row["seconds"] for row in rows]
    working = [row["seconds"] - row.get("embed_seconds", 0.0) for row in rows]  # all but the embedding model
    peak = max((row["peak_rss_mb"] for row in rows), default=0.0)
    report(
        "bad_files_alone" if full else "bad_files_alone (short)",
        cases=len(expect),
        rows=len(rows),
        refused=sum(1 for r in rows if r.get("reason")),
        indexed=sum(1 for r in rows if r.get("added")),
        failures=len(mismatches) + len(unexpected),
        tracebacks=sum(1 for r in rows if "raised" in r),
        hangs=sum(1 for r in rows if r.get("hang")) + sum(1 for w in working if w > HANG_S),
        max_s_without_embedding=round(max(working, default=0.0), 2),
        embed_s_total=round(sum(r.get("embed_seconds", 0.0) for r in rows), 1),
        peak_rss_mb=peak,
        slowest=sorted((r["seconds"], r.get("embed_seconds"), r["path"].rsplit("/", 1)[-1]) for r in rows)[-3:],
        **percentiles(seconds),
    )
    assert done.rc == 0 and not done.timed_out, done.stderr[-3000:]
    assert (mismatches, unexpected) == ([], [])
    assert max(working) <= HANG_S and peak <= RSS_MB


@SIZES
def test_one_batch_of_all_of_them(full: bool, corpus: dict[Path, str], tmp_path: Path, embed_cache_dir: Path) -> None:
    expect = _cases(corpus, full)
    args = ["ingest", *map(str, expect), "--index", str(tmp_path / "idx"), "--json"]
    done = run(args, zhiku_env(embed_cache_dir), HANG_S * len(expect) + 60)
    result = json.loads(done.stdout)
    good = {str(p) for p in expect if p.parent.name == "good"}
    lost = sorted(good & {f["path"] for f in result["failures"]})
    report(
        "bad_files_batch" if full else "bad_files_batch (short)",
        cases=len(expect),
        added=result.get("added"),
        failed=result.get("failed"),
        data_lost=len(lost),
        tracebacks=done.stderr.count("Traceback"),
        seconds=round(done.seconds, 1),
        peak_rss_mb=round(done.peak_rss_mb, 1),
    )
    assert done.rc == 1 and not done.timed_out  # some files failed, the batch did not
    assert lost == [] and result["added"] >= len(good) and "Traceback" not in done.stderr
    assert result["added"] + result["failed"] == len(expect)
    assert done.peak_rss_mb <= RSS_MB
