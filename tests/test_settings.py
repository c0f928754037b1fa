import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from zhiku.errors import ConfigError
from zhiku.settings import FIXED, MOVED, Settings, load_settings, merge


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch, tmp_path):
    for key in list(__import__("os").environ):
        if key.startswith("ZHIKU_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


def flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return out


def test_defaults():
    s = load_settings()
    assert s.index == Path(".zhiku")
    assert (s.retrieval.fusion, s.retrieval.mode, s.retrieval.top_k, s.answer.min_score) == (
        "zscore",
        "hybrid",
        5,
        0.88,
    )
    assert s.chunking.size_chars == 200
    assert s.store.kind == "sqlite"
    assert len(flat(s.model_dump(mode="json"))) == 60  # what `zhiku config show --json` prints


def test_every_endpoint_section_has_the_same_four_keys():
    s = Settings()
    for section in (s.embedding, s.rerank, s.llm, s.judge):
        assert {"base_url", "model", "api_key_env", "timeout_s"} <= set(section.model_dump())
    assert (s.embedding.timeout_s, s.rerank.timeout_s, s.llm.timeout_s, s.judge.timeout_s) == (60.0, 10.0, 60.0, 60.0)


def test_yaml_then_env_then_overrides(tmp_path, monkeypatch):
    (tmp_path / "zhiku.yaml").write_text("retrieval:\n  mode: bm25\n  top_k: 7\nindex: from-yaml\n", encoding="utf-8")
    assert load_settings().retrieval.mode == "bm25"
    monkeypatch.setenv("ZHIKU_RETRIEVAL__MODE", "dense")
    monkeypatch.setenv("ZHIKU_STORE__KIND", "sqlite")
    s = load_settings()
    assert (s.retrieval.mode, s.retrieval.top_k, s.index) == ("dense", 7, Path("from-yaml"))
    s = load_settings(index=Path("flag"), retrieval={"mode": "hybrid"})
    assert (s.retrieval.mode, s.retrieval.top_k, s.index) == ("hybrid", 7, Path("flag"))


def test_explicit_config_file(tmp_path):
    cfg = tmp_path / "other.yaml"
    cfg.write_text("collection: 劳动法规\n", encoding="utf-8")
    assert load_settings(cfg).collection == "劳动法规"
    with pytest.raises(ConfigError, match="config file not found: .*missing.yaml"):
        load_settings(tmp_path / "missing.yaml")


def _message(**kwargs: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        load_settings(**kwargs)
    return str(caught.value)


def test_invalid_values_name_key_value_and_where_it_came_from(tmp_path, monkeypatch):
    """The message names the layer that holds the bad value, not "zhiku.yaml or the env" for every one."""
    monkeypatch.setenv("ZHIKU_RETRIEVAL__TOP_K", "0")
    assert _message() == (
        "invalid settings: retrieval.top_k: Input should be greater than or equal to 1 (got '0' from ZHIKU_RETRIEVAL__TOP_K)"
    )
    monkeypatch.delenv("ZHIKU_RETRIEVAL__TOP_K")
    (tmp_path / "zhiku.yaml").write_text("retrieval: {top_k: 0}\n", encoding="utf-8")
    assert _message() == (
        "invalid settings: retrieval.top_k: Input should be greater than or equal to 1 (got 0 in zhiku.yaml)"
    )
    assert _message(server={"port": "abc"}) == (
        "invalid settings: retrieval.top_k: Input should be greater than or equal to 1 (got 0 in zhiku.yaml); "
        "server.port: Input should be a valid integer, unable to parse string as an integer (got 'abc' from the "
        "command line)"
    )
    (tmp_path / "zhiku.yaml").unlink()
    monkeypatch.setenv("ZHIKU_PORT", "http")
    assert _message() == (
        "invalid settings: server.port: Input should be a valid integer, unable to parse string as an integer "
        "(got 'http' from ZHIKU_PORT)"
    )


def test_unknown_keys_say_what_was_meant(tmp_path, monkeypatch):
    (tmp_path / "zhiku.yaml").write_text("retrieval:\n  topk: 10\n", encoding="utf-8")
    assert _message() == (
        "invalid settings: unknown setting retrieval.topk in zhiku.yaml "
        "(did you mean retrieval.top_k? every key: docs/settings.md)"
    )
    (tmp_path / "zhiku.yaml").write_text("retreival:\n  top_k: 2\n", encoding="utf-8")
    assert _message() == (
        "invalid settings: unknown setting retreival in zhiku.yaml (did you mean retrieval? every key: docs/settings.md)"
    )
    (tmp_path / "zhiku.yaml").write_text("retrieval:\n  xyzzy: 1\n", encoding="utf-8")
    assert _message() == "invalid settings: unknown setting retrieval.xyzzy in zhiku.yaml (every key: docs/settings.md)"
    (tmp_path / "zhiku.yaml").unlink()
    monkeypatch.setenv("ZHIKU_RETRIEVAL__TOPK", "1")
    assert _message() == (
        "invalid settings: unknown setting retrieval.topk from ZHIKU_RETRIEVAL__TOPK "
        "(did you mean ZHIKU_RETRIEVAL__TOP_K? every key: docs/settings.md)"
    )


def test_env_variables_that_would_be_ignored_are_refused(monkeypatch):
    """pydantic-settings skips an unknown section and a single underscore without a word: the setting silently
    stays at its default."""
    monkeypatch.setenv("ZHIKU_RETRIVAL__TOP_K", "1")
    assert _message() == (
        "invalid settings: unknown setting section 'retrival' in ZHIKU_RETRIVAL__TOP_K (did you mean "
        "ZHIKU_RETRIEVAL__TOP_K? sections: store, text, chunking, loaders, embedding, retrieval, rerank, answer, "
        "server, tracing, judge, llm, transforms; every key: docs/settings.md)"
    )
    monkeypatch.delenv("ZHIKU_RETRIVAL__TOP_K")
    monkeypatch.setenv("ZHIKU_RETRIEVAL_TOP_K", "3")
    assert _message() == (
        "invalid settings: ZHIKU_RETRIEVAL_TOP_K is not read: a key inside a section takes two underscores, "
        "ZHIKU_RETRIEVAL__TOP_K (every key: docs/settings.md)"
    )
    monkeypatch.delenv("ZHIKU_RETRIEVAL_TOP_K")
    # secrets' default variables, the server's short forms and other tools' ZHIKU_* variables are not settings typos
    for name in ("ZHIKU_EMBEDDING_API_KEY", "ZHIKU_LLM_API_KEY", "ZHIKU_RERANK_API_KEY", "ZHIKU_INSPECTOR"):
        monkeypatch.setenv(name, "x")
    monkeypatch.setenv("ZHIKU_PORT", "9000")
    s = load_settings()
    assert (s.server.port, s.retrieval.top_k) == (9000, 5)
    assert s.embedding.api_key is not None and s.embedding.api_key.get_secret_value() == "x"


def test_api_keys_come_from_the_variable_each_section_names_and_are_never_shown(monkeypatch):
    monkeypatch.setenv("ZHIKU_JUDGE_API_KEY", "judge-key")
    monkeypatch.setenv("DASHSCOPE_API_KEY", "llm-key")
    s = load_settings(llm={"api_key_env": "DASHSCOPE_API_KEY"})
    assert (s.judge.api_key, s.llm.api_key) == (SecretStr("judge-key"), SecretStr("llm-key"))
    assert s.embedding.api_key is None
    shown = flat(s.model_dump(mode="json"))
    assert "llm.api_key" not in shown and shown["llm.api_key_env"] == "DASHSCOPE_API_KEY"
    assert merge(s, retrieval={"top_k": 3}).llm.api_key == SecretStr("llm-key")  # a copy keeps the keys


def test_unknown_key_and_bad_choice(tmp_path):
    (tmp_path / "zhiku.yaml").write_text("retrieval:\n  rrf: 10\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"unknown setting retrieval.rrf in zhiku.yaml"):
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


def test_merge_validates():
    s = Settings()
    assert merge(s, retrieval={"mode": "bm25"}).retrieval.mode == "bm25"
    assert merge(s, retrieval={"mode": "bm25"}).retrieval.top_k == 5
    with pytest.raises(ConfigError, match="retrieval.mode"):
        merge(s, retrieval={"mode": "fuzzy"})


def test_settings_reference_is_up_to_date():
    from zhiku.settings import settings_reference

    doc = Path(__file__).resolve().parent.parent / "docs" / "settings.md"
    assert doc.read_text(encoding="utf-8") == settings_reference(), "run `python -m zhiku.settings > docs/settings.md`"


def test_relative_paths_in_a_settings_file_are_taken_from_its_folder(tmp_path, monkeypatch):
    """A desktop client runs `zhiku serve --config /abs/project/zhiku.yaml` from a folder of its own: the file's
    relative paths used to be looked up there (the server then failed on `text.user_dict: terms.dict`)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "zhiku.yaml").write_text(
        "index: .zhiku\ntext: {user_dict: terms.dict, synonyms: /etc/syn.txt}\n"
        "server: {ingest_roots: [docs, /srv/shared]}\ncache_dir: ~/cache\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path / "project")  # the file in the current folder: exactly as written
    here = load_settings()
    assert (here.index, here.text.user_dict, here.server.ingest_roots) == (
        Path(".zhiku"),
        Path("terms.dict"),
        (Path("docs"), Path("/srv/shared")),
    )
    monkeypatch.chdir(tmp_path)
    for config in (project / "zhiku.yaml", Path("project/zhiku.yaml")):
        s = load_settings(config)
        base = config.parent
        assert (s.index, s.text.user_dict, s.text.synonyms) == (
            base / ".zhiku",
            base / "terms.dict",
            Path("/etc/syn.txt"),
        )
        assert s.server.ingest_roots == (base / "docs", Path("/srv/shared"))
        assert s.cache_dir == Path("~/cache")  # ~ is the home folder (expanded where used), not the file's
    monkeypatch.setenv("ZHIKU_INDEX", "elsewhere")  # the environment and flags stay relative to the current folder
    assert load_settings(project / "zhiku.yaml").index == Path("elsewhere")
    assert load_settings(project / "zhiku.yaml", index=Path("flag")).index == Path("flag")


def test_a_model_folder_in_a_settings_file_is_taken_from_its_folder(tmp_path, monkeypatch):
    """`embedding.model` / `rerank.model` name a Hugging Face id or a local folder: a folder written relative to the
    settings file was looked up in the client's own folder (index and user_dict were anchored, the model not), so
    `zhiku serve --config /abs/zhiku.yaml` could not find it. Ids and served names stay as written."""
    project = tmp_path / "project"
    (project / "models" / "bge").mkdir(parents=True)
    (project / "zhiku.yaml").write_text(
        "embedding: {provider: sentence-transformers, model: models/bge}\n"
        "rerank: {provider: cross-encoder, model: ./models/reranker}\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    s = load_settings(project / "zhiku.yaml")
    assert (s.embedding.model, s.rerank.model) == (str(project / "models/bge"), str(project / "models/reranker"))
    (project / "zhiku.yaml").write_text(
        "embedding: {provider: sentence-transformers, model: BAAI/bge-large-zh-v1.5}\n"
        "rerank: {provider: llm, model: qwen-plus, base_url: 'http://127.0.0.1:9/v1'}\n",
        encoding="utf-8",
    )
    s = load_settings(project / "zhiku.yaml")
    assert (s.embedding.model, s.rerank.model) == ("BAAI/bge-large-zh-v1.5", "qwen-plus")
    monkeypatch.chdir(project)  # the file in the current folder: exactly as written
    assert load_settings().embedding.model == "BAAI/bge-large-zh-v1.5"


FIXTURE = Path(__file__).resolve().parent / "fixtures" / "zhiku_init_v0.yaml"  # by `zhiku init` before the tiers


def uncommented(text: str) -> str:
    """Every setting of a generated zhiku.yaml switched on: drop the '# ' in front of keys and section lines."""
    return "\n".join(re.sub(r"^(\s*)# (?!#)", r"\1", line) for line in text.splitlines())


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "zhiku.settings"]


def test_a_zhiku_yaml_of_the_previous_init_loads_as_written(tmp_path, caplog):
    (tmp_path / "zhiku.yaml").write_text(FIXTURE.read_text(encoding="utf-8"), encoding="utf-8")
    s = load_settings()
    assert (s.index, s.collection, s.server.ingest_roots) == (Path(".zhiku"), "docs", (Path("/tmp/kb/docs"),))
    assert _warnings(caplog) == []


def test_every_key_of_the_previous_init_loads_with_one_warning_per_moved_or_removed_key(tmp_path, caplog):
    (tmp_path / "zhiku.yaml").write_text(uncommented(FIXTURE.read_text(encoding="utf-8")), encoding="utf-8")
    s = load_settings()
    said = _warnings(caplog)
    assert len(said) == len(set(said)) == len(MOVED) + len(FIXED) == 87
    assert "zhiku.yaml: server.min_score is now answer.min_score (read as that; rename it)" in said
    assert "zhiku.yaml: embedding.timeout is now embedding.timeout_s (read as that; rename it)" in said
    assert "zhiku.yaml: embedding.cache_dir is now cache_dir (read as that; rename it)" in said
    assert (
        "zhiku.yaml: retrieval.compiled_core is no longer a setting (removed with the compiled search core); remove it"
        in said
    )
    assert "zhiku.yaml: retrieval.per_source_k is no longer a setting (100); remove it" in said
    assert "zhiku.yaml: llm.rewrite_timeout is no longer a setting (8 s); remove it" in said
    assert (s.answer.min_score, s.embedding.timeout_s, s.cache_dir) == (0.88, 60.0, Path("/root/.cache/zhiku"))
    assert (s.embedding.api_key_env, s.judge.api_key_env) == ("ZHIKU_EMBEDDING_API_KEY", None)  # as it was
    unset = {section: {"api_key_env": None} for section in ("embedding", "rerank", "llm")}
    rest = merge(s, index=".zhiku", collection="default", server={"ingest_roots": []}, cache_dir=None, **unset)
    assert rest == Settings(cache_dir=None)  # every other key at its default


def test_a_moved_key_keeps_its_value_and_the_new_name_wins(tmp_path, caplog):
    (tmp_path / "zhiku.yaml").write_text(
        "server: {min_score: 0.5, port: 9000}\nllm: {timeout: 5}\nrerank: {timeout: 3, timeout_s: 4}\n",
        encoding="utf-8",
    )
    s = load_settings()
    assert (s.answer.min_score, s.server.port, s.llm.timeout_s, s.rerank.timeout_s) == (0.5, 9000, 5.0, 4.0)
    assert _warnings(caplog) == [
        "zhiku.yaml: rerank.timeout is now rerank.timeout_s (read as that; rename it)",
        "zhiku.yaml: llm.timeout is now llm.timeout_s (read as that; rename it)",
        "zhiku.yaml: server.min_score is now answer.min_score (read as that; rename it)",
    ]


def test_the_hnsw_dense_search_of_an_older_file_becomes_int8_with_one_warning(tmp_path, caplog):
    (tmp_path / "zhiku.yaml").write_text("store: {dense_search: hnsw}\n", encoding="utf-8")
    assert load_settings().store.dense_search == "int8"
    assert _warnings(caplog) == [
        "zhiku.yaml: store.dense_search hnsw is no longer offered; int8 is used (docs/settings.md)"
    ]


def test_environment_variables_of_older_keys_are_read_with_one_warning_each(monkeypatch, caplog):
    monkeypatch.setenv("ZHIKU_EMBEDDING__TIMEOUT", "5")
    monkeypatch.setenv("ZHIKU_SERVER__MIN_SCORE", "0.5")
    monkeypatch.setenv("ZHIKU_EMBEDDING__CACHE_DIR", "/srv/cache")
    monkeypatch.setenv("ZHIKU_RETRIEVAL__COMPILED_CORE", "false")
    monkeypatch.setenv("ZHIKU_INGEST__WORKERS", "2")
    s = load_settings()
    assert (s.embedding.timeout_s, s.answer.min_score, s.cache_dir) == (5.0, 0.5, Path("/srv/cache"))
    assert _warnings(caplog) == [
        "the environment: ZHIKU_INGEST__WORKERS is no longer a setting (one reader thread); remove it",
        "the environment: ZHIKU_EMBEDDING__TIMEOUT is now ZHIKU_EMBEDDING__TIMEOUT_S (read as that; rename it)",
        "the environment: ZHIKU_SERVER__MIN_SCORE is now ZHIKU_ANSWER__MIN_SCORE (read as that; rename it)",
        "the environment: ZHIKU_EMBEDDING__CACHE_DIR is now ZHIKU_CACHE_DIR (read as that; rename it)",
        "the environment: ZHIKU_RETRIEVAL__COMPILED_CORE is no longer a setting (removed with the compiled search "
        "core); remove it",
    ]
