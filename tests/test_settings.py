from pathlib import Path

import pytest

from zhiku.errors import ConfigError
from zhiku.settings import Settings, load_settings, merge


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch, tmp_path):
    for key in list(__import__("os").environ):
        if key.startswith("ZHIKU_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


def test_defaults():
    s = load_settings()
    assert s.index == Path(".zhiku")
    assert (s.retrieval.fusion, s.retrieval.rrf_k, s.retrieval.per_source_k, s.retrieval.mode) == (
        "zscore",
        60,
        100,
        "hybrid",
    )
    assert (s.chunking.size, s.chunking.overlap) == (200, 50)
    assert s.store.kind == "sqlite"


def test_yaml_then_env_then_overrides(tmp_path, monkeypatch):
    (tmp_path / "zhiku.yaml").write_text("retrieval:\n  rrf_k: 10\n  top_k: 7\nindex: from-yaml\n", encoding="utf-8")
    assert load_settings().retrieval.rrf_k == 10
    monkeypatch.setenv("ZHIKU_RETRIEVAL__RRF_K", "20")
    monkeypatch.setenv("ZHIKU_STORE__KIND", "sqlite")
    s = load_settings()
    assert (s.retrieval.rrf_k, s.retrieval.top_k, s.index) == (20, 7, Path("from-yaml"))
    s = load_settings(index=Path("flag"), retrieval={"rrf_k": 30})
    assert (s.retrieval.rrf_k, s.retrieval.top_k, s.index) == (30, 7, Path("flag"))


def test_explicit_config_file(tmp_path):
    cfg = tmp_path / "other.yaml"
    cfg.write_text("collection: 劳动法规\n", encoding="utf-8")
    assert load_settings(cfg).collection == "劳动法规"
    with pytest.raises(ConfigError, match="config file not found: .*missing.yaml"):
        load_settings(tmp_path / "missing.yaml")


def test_invalid_values_name_key_value_and_env(monkeypatch):
    monkeypatch.setenv("ZHIKU_RETRIEVAL__TOP_K", "0")
    with pytest.raises(
        ConfigError, match=r"retrieval.top_k: .*greater than or equal to 1 \(got '0'; .*ZHIKU_RETRIEVAL__TOP_K"
    ):
        load_settings()


def test_unknown_key_and_bad_choice(tmp_path):
    (tmp_path / "zhiku.yaml").write_text("retrieval:\n  rrf: 10\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="retrieval.rrf: Extra inputs are not permitted"):
        load_settings()
    (tmp_path / "zhiku.yaml").write_text("store:\n  kind: postgres\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="store.kind: Input should be 'sqlite'"):
        load_settings()


def test_malformed_yaml(tmp_path):
    (tmp_path / "zhiku.yaml").write_text("retrieval: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="cannot read settings from zhiku.yaml"):
        load_settings()
    (tmp_path / "zhiku.yaml").write_text("- a list\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_settings()


def test_chunk_overlap_must_be_below_half_the_size():
    with pytest.raises(ConfigError, match=r"chunking.overlap \(600\) must be less than half of chunking.size \(200\)"):
        load_settings(chunking={"overlap": 600})


def test_merge_validates():
    s = Settings()
    assert merge(s, retrieval={"mode": "bm25"}).retrieval.mode == "bm25"
    assert merge(s, retrieval={"mode": "bm25"}).retrieval.rrf_k == 60
    with pytest.raises(ConfigError, match="retrieval.mode"):
        merge(s, retrieval={"mode": "fuzzy"})


def test_settings_reference_is_up_to_date():
    from zhiku.settings import settings_reference

    doc = Path(__file__).resolve().parent.parent / "docs" / "settings.md"
    assert doc.read_text(encoding="utf-8") == settings_reference(), "run `python -m zhiku.settings > docs/settings.md`"
