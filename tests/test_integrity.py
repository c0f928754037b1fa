"""The vector files' checksums: appends across block boundaries stay whole for every reader; a file damaged,
truncated or rewritten (before or after an open) is never served, `index_damage` names it and a writable open
rewrites it; an index from before the checksums is searched from zhiku.db until it is opened for writing; a
deleted or replaced zhiku.db is refused; `zhiku repair` of damaged tables ingests the documents again from their files.
The attacks through the CLI and a server: tests/reliability."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from contracts.store_contract import Doc, ids, make_doc
from mcp_fixtures import ROOT, Fixture
from zhiku.api import KnowledgeBase
from zhiku.cli.app import app
from zhiku.errors import StoreError
from zhiku.settings import load_settings
from zhiku.stores import SQLiteStore, index_damage

DIM = 8
RNG = np.random.default_rng(30)
VECTORS = RNG.standard_normal((2600, DIM)).astype(np.float32)
VECTORS /= np.linalg.norm(VECTORS, axis=1, keepdims=True)
SIZES = (700, 700, 1, 1199)  # documents crossing the 1,024-row blocks of the checksums


def _docs() -> list[Doc]:
    out, start = [], 0
    for n, size in enumerate(SIZES):
        items = [(f"第{i}段。", [f"段{i}"], VECTORS[i].tolist()) for i in range(start, start + size)]
        out.append(make_doc(f"doc-{n}", "甲", f"{n}.md", "markdown", items))
        start += size
    return out


DOCS = _docs()
CHUNK = [c.chunk_id for d in DOCS for c in d.chunks]
PROBES = (0, 1023, 1024, 1400, 2599)  # CHUNK[i] is the best match of VECTORS[i]
ROWS = Path(f"vectors.{DIM}.f32")


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    path = tmp_path / "索引"
    with SQLiteStore(path) as store:
        for doc in DOCS:
            doc.write(store)
    return path


def _best(store: SQLiteStore) -> list[str]:
    return [ids(store.dense_search(VECTORS[i], 1))[0] for i in PROBES]


EXPECTED = [CHUNK[i] for i in PROBES]


def test_appends_by_another_process_stay_whole_for_a_reader(tmp_path: Path) -> None:
    path = tmp_path / "索引"
    with SQLiteStore(path) as writer, SQLiteStore(path, read_only=True, dense_search="exact") as reader:
        for doc in DOCS:
            doc.write(writer)
            assert reader.damage() is None and writer.damage() is None
        assert _best(reader) == _best(writer) == EXPECTED
    assert index_damage(path) is None


@pytest.mark.parametrize("when", ["before the open", "while open"])
@pytest.mark.parametrize("attack", ["zeros but the last row", "truncated", "rows moved by one"])
def test_a_damaged_vector_file_is_never_served(index_dir: Path, attack: str, when: str) -> None:
    rows = index_dir / ROWS

    def damage() -> None:
        data = np.fromfile(rows, "<f4").reshape(-1, DIM)
        if attack == "truncated":
            os.truncate(rows, rows.stat().st_size // 2)
        else:
            (np.roll(data, 1, axis=0) if attack == "rows moved by one" else np.where(np.arange(len(data))[:, None] < len(data) - 1, 0, data)).astype("<f4").tofile(rows)  # fmt: skip

    if when == "before the open":
        damage()
    with SQLiteStore(index_dir, read_only=True, dense_search="exact") as reader:
        assert _best(reader) == EXPECTED
        if when == "while open":
            damage()
            assert _best(reader) == EXPECTED
        assert f"{rows} is damaged" in (reader.damage() or "")
        assert f"{rows} is damaged" in (index_damage(index_dir) or "")
        with SQLiteStore(index_dir) as writer:  # a writable open rewrites it from zhiku.db
            assert writer.damage() is None and _best(writer) == EXPECTED
        assert reader.damage() is None and _best(reader) == EXPECTED
    assert index_damage(index_dir) is None


def test_flipped_codes_are_never_screened(index_dir: Path) -> None:
    codes = index_dir / ROWS.with_suffix(".i8")
    data = np.fromfile(codes, np.int8)
    (-data).tofile(codes)
    assert f"{codes} is damaged" in (index_damage(index_dir, quick=True) or "")
    with SQLiteStore(index_dir, read_only=True, dense_search="int8") as reader:
        assert _best(reader) == EXPECTED


def test_an_index_from_before_the_checksums_is_searched_from_the_blobs_until_opened_for_writing(
    index_dir: Path,
) -> None:
    with sqlite3.connect(index_dir / "zhiku.db") as conn:
        conn.execute("DROP TABLE vector_sums")
        conn.execute("DELETE FROM meta WHERE key = 'vector_stamp'")
    assert "has no checksums" in (index_damage(index_dir) or "")
    with SQLiteStore(index_dir, read_only=True) as reader:
        assert _best(reader) == EXPECTED and reader.damage() is None  # (served from zhiku.db: not damage)
    with SQLiteStore(index_dir) as writer:
        assert _best(writer) == EXPECTED
    assert index_damage(index_dir) is None


def test_a_deleted_or_replaced_index_is_refused(index_dir: Path, tmp_path: Path) -> None:
    spare = tmp_path / "spare"
    shutil.copytree(index_dir, spare)
    with SQLiteStore(index_dir, read_only=True) as reader:
        assert _best(reader) == EXPECTED
        shutil.rmtree(index_dir)
        shutil.copytree(spare, index_dir)
        with pytest.raises(StoreError, match="was deleted or replaced while open: restart"):
            reader.dense_search(VECTORS[0], 1)
        assert "deleted or replaced" in (reader.damage() or "")


def test_a_bm25_segment_cut_short_under_a_reader_is_read_again_from_zhiku_db(index_dir: Path) -> None:
    segments = sorted((index_dir / "bm25").glob("seg-*.bin"))
    with SQLiteStore(index_dir, read_only=True) as reader:
        assert set(ids(reader.bm25_search(["段5", "段2500"], 2))) == {CHUNK[5], CHUNK[2500]}
        for path in segments:
            os.truncate(path, 100)  # reading its mapping past the end now would be SIGBUS
        assert set(ids(reader.bm25_search(["段6", "段1500"], 2))) == {CHUNK[6], CHUNK[1500]}
    assert segments


QUESTIONS = ("试用期最长不得超过几个月？", "女职工产假有多少天", "加班工资怎么算", "经济补偿金怎么计算")


def _cli(config: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, [*args, "--config", str(config)])
    return result.exit_code, result.output


def _top(config: Path) -> list[str]:
    with KnowledgeBase(load_settings(config), read_only=True) as kb:
        return [kb.retrieve(q).hits[0].chunk.chunk_id for q in QUESTIONS]


def _smash(db: Path, table: str) -> None:
    """One page of ``table`` overwritten with random bytes."""
    with closing(sqlite3.connect(db)) as conn:
        pages = [p for (p,) in conn.execute("SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf'", (table,))]
    with open(db, "r+b") as f:
        f.seek(4096 * (pages[len(pages) // 2] - 1))
        f.write(RNG.bytes(4096))


def _rebuilds(tmp_path: Path, sources: Path, cache: Path, *, as_json: bool) -> None:
    docs, index = shutil.copytree(sources, tmp_path / "docs"), tmp_path / "idx"
    gone = docs / "其他.md"
    gone.write_text("# 其他\n\n第一条 本办法自公布之日起施行。\n", encoding="utf-8")
    config = tmp_path / "zhiku.yaml"
    config.write_text(f"index: {index}\ncache_dir: {cache}\nchunking:\n  size_chars: 200\n", encoding="utf-8")
    assert _cli(config, "ingest", str(docs))[0] == 0
    reference = _top(config)
    _smash(index / "zhiku.db", "chunks")
    gone.unlink()
    code, text = _cli(config, "repair", *["--json"] * as_json)
    assert code == 0, text
    (copy,) = tmp_path.glob("idx.damaged-*")
    assert (copy / "zhiku.db").is_file()
    kept = sorted(f"default/{p.name}" for p in docs.glob("*.md"))
    if as_json:
        report = json.loads(text)
        assert sorted(report["rebuilt"]) == kept and report["repaired"] == []
        assert report["lost"] == [str(gone)] and report["damaged_copy"] == str(copy)
    else:
        assert text == (
            f"{index}: zhiku.db's tables were damaged; {len(kept)} documents ingested again from their files\n"
            f"lost (its file is gone or unreadable): {gone}\nthe damaged index: {copy}\n"
        )
    assert _cli(config, "doctor")[0] == 0 and _top(config) == reference
    _smash(index / "zhiku.db", "documents")  # nothing readable names a source
    code, text = _cli(config, "repair")
    assert code == 1 and "ingest the documents again" in text, text


def test_repair_of_damaged_tables_ingests_the_documents_again(tmp_path: Path, mcp_index: Fixture) -> None:
    assert mcp_index.settings.cache_dir is not None
    _rebuilds(tmp_path, mcp_index.docs, mcp_index.settings.cache_dir, as_json=True)  # chunks in the fixture's cache


@pytest.mark.slow
def test_repair_of_damaged_tables_rebuilds_examples_laws(tmp_path: Path) -> None:
    _rebuilds(tmp_path, ROOT / "examples" / "laws", tmp_path / "cache", as_json=False)
