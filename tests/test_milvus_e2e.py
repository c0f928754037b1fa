"""End to end on Milvus: the same Chinese corpus ingested through ``KnowledgeBase`` into SQLite and into Milvus
gives the same hits in every mode; ``zhiku migrate --to milvus`` copies a SQLite index without re-embedding and
answers stay the same; CLI commands work with ``store.kind=milvus``.

Vectors come from the real bundled embedder through the session's shared embedding cache (helpers_kb).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers_kb import CORPUS, CORPUS_CHUNKS, SEC_LEAVE, SEC_PROBATION, SEC_SEVERANCE, make_settings, write_corpus
from milvus_fixtures import require_milvus, unique_prefix
from zhiku.api import KnowledgeBase
from zhiku.embedding import CachedEmbedder, EmbeddingCache
from zhiku.retrieval import search

require_milvus()

QUERIES = ["试用期最长多久", "年休假有几天", "经济补偿怎么计算", "加班工资", "拖欠劳动者的工资怎么办", "職工帶薪年休假"]
MODES = ["bm25", "dense", "hybrid"]


def milvus_overrides(uri: str, prefix: str) -> dict:
    return {"store": {"kind": "milvus", "uri": uri, "collection_prefix": prefix}}


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, e5, embed_cache_dir: Path, milvus_uri: str):
    """The corpus (collection ``hr``) plus the wage rules as collection ``notes``, in SQLite and in Milvus."""
    root = tmp_path_factory.mktemp("milvus-e2e")
    docs = write_corpus(root / "docs")
    notes = write_corpus(root / "notes", {"工资支付规定.txt": CORPUS["规章/工资支付规定.txt"]})
    kbs = []
    for overrides in ({}, milvus_overrides(milvus_uri, unique_prefix())):
        embedder = CachedEmbedder(e5, EmbeddingCache(embed_cache_dir / "embeddings.sqlite"))
        kb = KnowledgeBase(make_settings(root / f"idx-{len(kbs)}", embed_cache_dir, **overrides), embedder=embedder)
        assert kb.ingest([docs]).counts()["added"] == 3
        assert kb.ingest([notes], collection="notes").counts()["added"] == 1
        kbs.append(kb)
    yield tuple(kbs)
    for kb in kbs:
        kb.close()


def hits(kb: KnowledgeBase, query: str, mode: str, **kw) -> list[tuple[str, str, str]]:
    return [
        (h.chunk.collection, h.chunk.source, h.chunk.section)
        for h in kb.retrieve(query, mode=mode, top_k=10, **kw).hits
    ]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("query", QUERIES)
def test_milvus_gives_the_same_hits_as_sqlite(pair, query: str, mode: str) -> None:
    """Same best hit and same hit set in every mode; the same order in dense mode. BM25 orders may differ
    further down: Milvus scores with the Lucene IDF ``log(1 + (N - n + 0.5) / (n + 0.5))``, FTS5 without the
    ``1 +``, which matters on a five-chunk corpus."""
    sqlite, milvus = pair
    want, got = hits(sqlite, query, mode), hits(milvus, query, mode)
    assert got[0] == want[0]
    assert sorted(got) == sorted(want)
    if mode == "dense":  # exact cosine in SQLite, HNSW in Milvus: same order on five chunks
        assert got == want
        a = [h.dense_score for h in sqlite.retrieve(query, mode=mode, top_k=10).hits]
        b = [h.dense_score for h in milvus.retrieve(query, mode=mode, top_k=10).hits]
        assert b == pytest.approx(a, abs=1e-4)


@pytest.mark.parametrize("mode", MODES)
def test_expected_passages_and_filters_on_milvus(pair, mode: str) -> None:
    _, milvus = pair
    assert hits(milvus, "试用期最长多久", mode, collection="hr")[0] == ("hr", "劳动合同法.md", SEC_PROBATION)
    assert hits(milvus, "年休假有几天", mode, collection="hr")[0] == ("hr", "年休假条例.md", SEC_LEAVE)
    assert hits(milvus, "经济补偿怎么计算", mode, collection="hr")[0] == ("hr", "劳动合同法.md", SEC_SEVERANCE)
    assert {h[0] for h in hits(milvus, "工资", mode, collection="notes")} == {"notes"}
    assert {h[1] for h in hits(milvus, "工资", mode, source="规章/*")} == {"规章/工资支付规定.txt"}
    assert {h[1] for h in hits(milvus, "工资", mode, doc_type="text")} == {"规章/工资支付规定.txt", "工资支付规定.txt"}
    assert hits(milvus, "工资", mode, source="不存在/*") == []


def test_catalogue_matches_sqlite(pair) -> None:
    sqlite, milvus = pair
    assert milvus.collections() == sqlite.collections()
    assert [c.chunks for c in milvus.collections() if c.name == "hr"] == [CORPUS_CHUNKS]
    strip = lambda docs: [(d.doc_id, d.collection, d.source, d.sha256, d.chunk_count) for d in docs]  # noqa: E731
    assert strip(milvus.documents()) == strip(sqlite.documents())
    assert [(r.collection, r.status, r.chunk_count) for r in milvus.history()] == [
        (r.collection, r.status, r.chunk_count) for r in sqlite.history()
    ]
    assert {k: v for k, v in milvus.store.get_meta().items() if k in ("tokenizer", "embedder", "dim", "chunking")} == {
        k: v for k, v in sqlite.store.get_meta().items() if k in ("tokenizer", "embedder", "dim", "chunking")
    }


def test_ingest_update_sync_and_delete_on_milvus(kb_factory, corpus: Path, tmp_path: Path, milvus_uri: str) -> None:
    kb = kb_factory(tmp_path / "idx", **milvus_overrides(milvus_uri, unique_prefix()))
    assert kb.ingest([corpus]).counts()["added"] == 3
    version = kb.store.index_version()
    assert kb.ingest([corpus]).counts() == {"added": 0, "updated": 0, "skipped": 3, "removed": 0, "failed": 0}
    assert kb.store.index_version() == version  # an unchanged re-ingest writes nothing
    (corpus / "年休假条例.md").write_text(CORPUS["年休假条例.md"].replace("年休假5天", "年休假7天"), encoding="utf-8")
    (corpus / "规章/工资支付规定.txt").unlink()
    report = kb.ingest([corpus], sync=True)
    assert (report.updated, report.removed) == (("年休假条例.md",), ("规章/工资支付规定.txt",))
    assert kb.store.index_version() > version
    assert "年休假7天" in kb.query("年休假有几天", collection="hr").markdown
    assert {h.chunk.source for h in kb.retrieve("加班工资", top_k=10).hits} <= {"劳动合同法.md", "年休假条例.md"}
    assert kb.delete("劳动合同法.md").source == "劳动合同法.md"
    assert [d.source for d in kb.documents()] == ["年休假条例.md"]


def test_migrate_then_the_same_answers_without_re_embedding(
    kb_factory, corpus: Path, tmp_path: Path, milvus_uri: str, embed_cache_dir: Path
) -> None:
    from typer.testing import CliRunner

    from zhiku.cli.app import app

    source = kb_factory(tmp_path / "sqlite-idx")
    source.ingest([corpus])
    source.store.record_ingestion(source.history()[0])  # history rows are copied once each, duplicates included
    prefix = unique_prefix()
    args = [
        "migrate",
        "--to",
        "milvus",
        "--uri",
        milvus_uri,
        "--prefix",
        prefix,
        "--index",
        str(tmp_path / "sqlite-idx"),
        "--json",
    ]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    report = json.loads(first.stdout)
    assert (report["documents"], report["chunks"], report["skipped"], report["history"]) == (3, CORPUS_CHUNKS, 0, 4)
    again = json.loads(CliRunner().invoke(app, args).stdout)  # resumes: nothing left to copy
    assert (again["documents"], again["skipped"], again["history"]) == (0, 3, 0)

    embedder = CachedEmbedder(source.embedder.inner, EmbeddingCache(embed_cache_dir / "embeddings.sqlite"))
    target = KnowledgeBase(
        make_settings(tmp_path / "unused", embed_cache_dir, **milvus_overrides(milvus_uri, prefix)),
        read_only=True,
        embedder=embedder,
    )
    try:
        assert target.stale() == {}
        assert target.collections() == source.collections()
        assert target.documents() == source.documents()
        assert target.history() == source.history()
        for query in QUERIES:
            for mode in MODES:
                got, want = hits(target, query, mode), hits(source, query, mode)
                assert (got[0], sorted(got)) == (want[0], sorted(want)), (query, mode)
                if mode != "hybrid":  # dense: exact cosine both; BM25: the IDF formulas differ, not these orders
                    assert got == want, (query, mode)
                    continue
                # hybrid: both channels rank alike; the fused order below the top may differ, as z-scores of BM25
                # scores under the two IDF formulas differ
                rt, rs = (kb.retrieve(query, mode="hybrid", top_k=10) for kb in (target, source))
                for channel in ("bm25", "dense"):
                    assert [x.chunk_id for x in getattr(rt, channel)] == [x.chunk_id for x in getattr(rs, channel)]
        assert embedder.computed <= len(QUERIES)  # query vectors only: nothing was re-embedded
    finally:
        target.close()


def test_cli_reads_and_errors_with_store_kind_milvus(
    kb_factory, corpus: Path, tmp_path: Path, milvus_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from zhiku.cli.app import app

    prefix = unique_prefix()
    kb_factory(tmp_path / "idx", **milvus_overrides(milvus_uri, prefix)).ingest([corpus])
    monkeypatch.chdir(tmp_path)
    for name, value in {"KIND": "milvus", "URI": milvus_uri, "COLLECTION_PREFIX": prefix}.items():
        monkeypatch.setenv(f"ZHIKU_STORE__{name}", value)
    result = CliRunner().invoke(app, ["collections", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["collections"] == [
        {
            "name": "hr",
            "documents": 3,
            "chunks": CORPUS_CHUNKS,
            "chars": json.loads(result.stdout)["collections"][0]["chars"],
        }
    ]
    monkeypatch.setenv("ZHIKU_STORE__COLLECTION_PREFIX", unique_prefix())
    missing = CliRunner().invoke(app, ["documents"])
    assert missing.exit_code == 1
    assert missing.stderr.count("\n") == 1 and "no zhiku index in Milvus at" in missing.stderr
    monkeypatch.setenv("ZHIKU_STORE__URI", "http://127.0.0.1:9")
    down = CliRunner().invoke(app, ["history"])
    assert down.exit_code == 1
    assert down.stderr.startswith("error: cannot reach Milvus at http://127.0.0.1:9 ") and down.stderr.count("\n") == 1


def test_an_english_question_on_milvus_is_scored_on_the_index_scale(
    kb_factory, corpus: Path, tmp_path: Path, milvus_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Milvus counts no chunks holding a word: the language of its text is read from a sample of its chunks, and an
    English question's BM25 evidence is scaled by all its chunks, both read again when the index changes. Before,
    its text was taken to be Chinese and the evidence divided by ln 2: on stard_dev 7 % of off-topic English
    questions were flagged instead of 86 %; over English text every English question was cross-lingual, and a
    Chinese one met no English word."""
    monkeypatch.setattr(search, "RESAMPLE_S", 0.0)  # (each question looks at the index version)
    kb = kb_factory(tmp_path / "idx", **milvus_overrides(milvus_uri, unique_prefix()))
    assert kb.retrieve("試用期", top_k=3).query.index_language == ""  # (nothing in it yet)
    kb.ingest([corpus])
    asked = "How many days of annual leave does an employee get?"
    r = kb.retrieve(asked, top_k=3)
    assert (r.query.index_language, r.query.cross_lingual, r.query.index_chunks) == ("zh", True, CORPUS_CHUNKS)
    assert kb.query(asked, top_k=3).low_confidence is False
    for question in ("What should I make for dinner tonight?", "Who won the football match last night?"):
        assert kb.query(question, top_k=3).low_confidence is True
    notes = write_corpus(tmp_path / "notes", {"工资支付规定.txt": CORPUS["规章/工资支付规定.txt"]})
    kb.ingest([notes], collection="notes")
    assert kb.retrieve(asked, top_k=3).query.index_chunks == CORPUS_CHUNKS + 1
    english = kb_factory(tmp_path / "english-idx", **milvus_overrides(milvus_uri, unique_prefix()))
    leave = "An employee gets 10 days of annual leave after 10 years at the firm.\n"
    english.ingest([write_corpus(tmp_path / "en", {"leave.md": leave})])
    r = english.retrieve(asked, top_k=3)
    assert (r.query.index_language, r.query.cross_lingual, r.query.bridge) == ("en", False, ())
    assert english.query(asked, top_k=3).low_confidence is False
    r = english.retrieve("员工的年假", top_k=3)  # a Chinese question meets the English text's words, unweighted
    assert (r.query.index_language, r.query.cross_lingual) == ("en", True)
    assert r.query.bridge == ((("staff", "staff"), ("personnel", "personnel"), ("employee", "employee")),)
