"""(a) ``kill -9`` at random points during ingest, replace (a changed file re-indexed), delete and migrate, then
the integrity and consistency checks of ``integrity.py``: FTS rows = chunks, a vector per chunk, no orphans,
every document an old or a new version, and the index still answers a query.

The short version (inside ``make test``) kills 3 runs; ``make reliability`` runs 70 (plus migrations to a
milvus-lite server when the ``milvus`` extra is installed).
"""

from __future__ import annotations

import random
import shutil
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from integrity import problems, snapshot
from rel_common import PYTHON, ROOT, SIZES, report, zhiku_env

from helpers_kb import make_settings
from zhiku.api import KnowledgeBase
from zhiku.errors import IndexNotFound

CHUNKING = {"size": 200}
ARTICLE = "第{n}条 用人单位应当依法建立和完善劳动规章制度，保障劳动者享有劳动权利、履行劳动义务。{extra}"
OPS = ("ingest", "replace", "delete")


def _write(folder: Path, names: range, extra: str) -> Path:
    folder.mkdir(parents=True)
    for i in names:
        body = "\n\n".join(ARTICLE.format(n=f"{i}-{k}", extra=extra) for k in range(3))
        (folder / f"规定{i:02d}.md").write_text(f"# 规定{i:02d}\n\n{body}\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, embed_cache_dir: Path) -> dict[str, object]:
    """Corpora v1 / v2 (same names, other text) / new, the template index (v1) and every reference version."""
    root = tmp_path_factory.mktemp("kill")
    v1 = _write(root / "v1" / "docs", range(8), "（旧版）")
    v2 = _write(root / "v2" / "docs", range(8), "（修订版，增加了新的内容）")
    new = _write(root / "new" / "docs", range(8, 16), "（新增）")
    template = root / "template"

    def kb(index: Path) -> KnowledgeBase:
        return KnowledgeBase(make_settings(index, embed_cache_dir, chunking=CHUNKING))

    with kb(template) as k:
        assert not k.ingest([v1], collection="hr").failed
    shutil.rmtree(root / "v1")  # v2 replaces v1's documents as a moved folder would (a same-named file of a folder
    # that still exists is refused, not swapped in: README "How an index stays honest")
    versions: dict[str, set[tuple[str, tuple[str, ...]]]] = {}
    for name, corpus in (("v1", None), ("v2", v2), ("new", new)):
        index = root / f"ref-{name}"
        shutil.copytree(template, index)
        if corpus is not None:
            with kb(index) as k:
                assert not k.ingest([corpus], collection="hr").failed
        for doc_id, version in snapshot(index).items():
            versions.setdefault(doc_id, set()).add(version)
    dim = KnowledgeBase(make_settings(template, embed_cache_dir)).embedder.dim
    return {
        "root": root, "v2": v2, "new": new, "template": template, "versions": versions, "dim": dim,
        "before": snapshot(template),
    }  # fmt: skip


def _command(op: str, world: dict[str, object], index: Path) -> list[str]:
    base = {"ingest": ["ingest", str(world["new"])], "replace": ["ingest", str(world["v2"])]}
    args = base.get(op, ["delete", "--glob", "*", "--yes"])
    if op != "delete":
        args += ["-c", "hr"]
    return [PYTHON, "-m", "zhiku.cli", *args, "--index", str(index)]


def _version(index: Path) -> int:
    try:
        with sqlite3.connect(f"file:{index / 'zhiku.db'}?mode=ro", uri=True, timeout=0.05) as conn:
            return int(conn.execute("SELECT value FROM meta WHERE key = 'index_version'").fetchone()[0])
    except sqlite3.Error:
        return -1


def _kill_run(op: str, world: dict[str, object], index: Path, delay: float | None, env: dict[str, str]) -> str:
    """Start ``op`` and SIGKILL it after ``delay`` s, or (``delay`` None) a few milliseconds after its first
    commit, so that the kill lands among the writes; "killed", or "finished" when it ended first."""
    proc = subprocess.Popen(
        _command(op, world, index), env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        if delay is not None:
            proc.wait(timeout=delay)
            return "finished"
        before = _version(index)
        while proc.poll() is None and _version(index) <= before:
            time.sleep(0.002)
        if proc.poll() is not None:
            return "finished"
        proc.wait(timeout=random.uniform(0, 0.01))
        return "finished"
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return "killed"


@SIZES
def test_kill_minus_nine_leaves_a_consistent_index(full: bool, world: dict[str, object], embed_cache_dir: Path) -> None:
    root, versions, dim = world["root"], world["versions"], world["dim"]
    env = zhiku_env(embed_cache_dir, **{f"ZHIKU_CHUNKING__{k.upper()}": str(v) for k, v in CHUNKING.items()})
    runs = 70 if full else 3
    rng = random.Random(1212)
    durations: dict[str, float] = {op: 3.5 for op in OPS}  # short: spread the kills over the first 3.5 s
    for op in OPS if full else ():  # how long each operation takes to the end, to spread the kills over it
        index = root / f"timing-{op}"  # type: ignore[operator]
        shutil.copytree(world["template"], index)  # type: ignore[arg-type]
        started = time.monotonic()
        assert _kill_run(op, world, index, 300, env) == "finished"
        durations[op] = time.monotonic() - started
    outcomes: Counter[str] = Counter()
    inconsistent: list[str] = []
    partial = 0  # runs killed in the middle of the writes: some documents changed, not all
    for n in range(runs):
        op = OPS[n % len(OPS)]
        index = root / f"run-{n}"  # type: ignore[operator]
        shutil.copytree(world["template"], index)  # type: ignore[arg-type]
        delay = None if n % 2 == 0 else rng.uniform(0.3, durations[op] * 1.05)  # half at the writes, half anywhere
        outcomes[_kill_run(op, world, index, delay, env)] += 1
        found = problems(index, versions, dim)  # type: ignore[arg-type]
        changed = {d for d, v in snapshot(index).items() if world["before"].get(d) != v}  # type: ignore[attr-defined]
        changed |= set(world["before"]) - set(snapshot(index))  # type: ignore[call-overload]
        partial += 0 < len(changed) < 8
        with KnowledgeBase(make_settings(index, embed_cache_dir, chunking=CHUNKING), read_only=True) as kb:
            kb.retrieve("劳动规章制度", top_k=3)  # the index still answers
        if found:
            inconsistent.append(f"run {n} ({op}): {'; '.join(found)}")
        shutil.rmtree(index)
    report(
        "kill" if full else "kill (short)",
        runs=runs,
        killed=outcomes["killed"],
        finished_before_kill=outcomes["finished"],
        killed_mid_write=partial,
        inconsistent=len(inconsistent),
        op_seconds={k: round(v, 2) for k, v in durations.items()},
    )
    assert inconsistent == []
    assert outcomes["killed"] >= runs * 2 // 3 or not full


@pytest.mark.reliability
def test_kill_minus_nine_during_migrate(world: dict[str, object], embed_cache_dir: Path, milvus_uri: str) -> None:
    """``zhiku migrate --to milvus`` killed at random points: each copied document is whole in the target, and
    running the migration again completes it (same documents and chunk counts as the source)."""
    from milvus_fixtures import milvus_store, unique_prefix

    rng = random.Random(77)
    env = zhiku_env(embed_cache_dir)
    source = KnowledgeBase(make_settings(world["template"], embed_cache_dir), read_only=True)  # type: ignore[arg-type]
    want = sorted((d.doc_id, d.chunk_count) for d in source.documents())
    runs, killed, partial, broken = 10, 0, 0, []

    def command(prefix: str) -> list[str]:
        args = [PYTHON, "-m", "zhiku.cli", "migrate", "--to", "milvus", "--uri", milvus_uri, "--prefix", prefix]
        return [*args, "--index", str(world["template"])]

    started = time.monotonic()
    subprocess.run(command(unique_prefix()), env=env, cwd=ROOT, capture_output=True, timeout=300, check=True)
    duration = time.monotonic() - started
    for n in range(runs):
        prefix = unique_prefix()
        args = command(prefix)
        proc = subprocess.Popen(args, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            proc.wait(timeout=rng.uniform(duration / 2, duration))  # the copy runs at the end
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            killed += 1
        store = milvus_store(milvus_uri, prefix).model_dump(mode="json")
        settings = make_settings(world["root"] / "unused", embed_cache_dir, store=store)  # type: ignore[operator]
        try:
            with KnowledgeBase(settings, read_only=True) as target:
                partial += 0 < len(target.documents()) < len(want)
                for d in target.documents():
                    if len(target.store.document_chunks(d.doc_id)) != d.chunk_count:
                        broken.append(
                            f"run {n}: {d.doc_id} has {len(target.store.document_chunks(d.doc_id))}/{d.chunk_count} chunks"
                        )
        except IndexNotFound:  # killed before the target's collections were created
            pass
        except Exception as e:  # noqa: BLE001 - a target that cannot be opened after a kill is a finding
            broken.append(f"run {n}: {type(e).__name__}: {e}")
        again = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, timeout=300)
        with KnowledgeBase(settings, read_only=True) as target:
            got = sorted((d.doc_id, d.chunk_count) for d in target.documents())
        if again.returncode != 0 or got != want:
            broken.append(f"run {n}: resumed migration rc={again.returncode}, {len(got)}/{len(want)} documents")
    source.close()
    report(
        "kill_migrate",
        runs=runs,
        killed=killed,
        killed_mid_copy=partial,
        inconsistent=len(broken),
        seconds=round(duration, 1),
    )
    assert broken == []
