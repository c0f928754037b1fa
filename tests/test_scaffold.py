"""`zhiku init` and `zhiku doctor`, in-process through typer's CliRunner on real files."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner, Result

from zhiku.access import add_token
from zhiku.cli.app import app
from zhiku.evaluation.datasets import load_dataset
from zhiku.scaffold import doctor as doctor_mod
from zhiku.scaffold.init import CLIENTS, command_of
from zhiku.settings import ChunkingSettings, Settings, load_settings

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = [
    "女职工劳动保护特别规定(2012-04-28).md",
    "工资支付暂行规定(1994-12-06).md",
    "职工带薪年休假条例(2007-12-14).md",
]


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    for key in [k for k in os.environ if k.startswith("ZHIKU_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)

    def run(*args: object) -> Result:
        return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)

    return run


def uncomment(text: str) -> str:
    """Every setting of a generated zhiku.yaml switched on: drop the '# ' in front of keys and section lines."""
    return "\n".join(re.sub(r"^(\s*)# (?!#)", r"\1", line) for line in text.splitlines())


def test_init_in_a_folder_with_documents_adds_no_samples(cli, tmp_path: Path) -> None:
    """`zhiku init .` in a team's folder used to put three labour-law samples (and an eval.yaml about them) into
    its docs/, to be ingested and served with the team's documents."""
    team = tmp_path / "team"
    (team / "docs" / "制度").mkdir(parents=True)
    (team / "docs" / "制度" / "考勤.md").write_text("# 考勤\n\n九点上班。\n", encoding="utf-8")
    report = json.loads(cli("init", team, "--json").stdout)
    assert (report["samples"], report["kept"]) == (False, [])
    assert report["written"] == [
        "zhiku.yaml",
        "mcp-clients/claude_desktop_config.json",
        ".cursor/mcp.json",
        ".vscode/mcp.json",
        "mcp-clients/cline_mcp_settings.json",
        "mcp-clients/cherry-studio.json",
        "mcp-clients/README.md",
    ]
    assert report["next"] == [
        f"cd {team}",
        "zhiku ingest docs",
        'zhiku query "一个你的文档能回答的问题"',
        "zhiku serve",
    ]
    assert [p.relative_to(team).as_posix() for p in sorted(team.rglob("*.md"))] == [
        "docs/制度/考勤.md",
        "mcp-clients/README.md",
    ]
    assert not (team / "eval.yaml").exists()
    text = cli("init", tmp_path / "empty", "--no-samples").stdout  # asked for: none, an empty docs/ to fill
    assert "  (no sample documents: docs/ is yours; put the files to serve there)\n" in text
    assert list((tmp_path / "empty" / "docs").iterdir()) == []
    forced = json.loads(cli("init", team, "--samples", "--json").stdout)  # asked for: beside the team's files
    assert forced["samples"] is True
    assert forced["written"] == ["SOURCES.md", *(f"docs/{name}" for name in SAMPLES), "eval.yaml"]
    fresh = tmp_path / "fresh"  # a new repository's placeholder and a Finder file are no documents: samples
    (fresh / "docs" / ".git").mkdir(parents=True)
    for hidden in (".gitkeep", ".DS_Store", ".git/HEAD"):
        (fresh / "docs" / hidden).write_text("x", encoding="utf-8")
    assert json.loads(cli("init", fresh, "--json").stdout)["samples"] is True


def test_init_writes_a_ready_project(cli, tmp_path: Path) -> None:
    r = cli("init", "proj", "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    root = (tmp_path / "proj").resolve()
    assert report["root"] == str(root) and report["kept"] == []
    assert report["next"] == [
        f"cd {root}",
        "zhiku ingest docs",
        'zhiku query "女职工产假有多少天？"',
        "zhiku eval",  # eval.yaml: hit@k, MRR, nDCG of the sample questions
        "zhiku serve",
    ]
    assert sorted(p.name for p in (root / "docs").iterdir()) == sorted(SAMPLES)  # only documents to ingest
    for name in SAMPLES:  # the sample documents ship inside the package, byte-for-byte the repository's examples
        assert (root / "docs" / name).read_bytes() == (ROOT / "examples" / "laws" / name).read_bytes()
    assert "PRC Copyright Law art. 5" in (root / "SOURCES.md").read_text(encoding="utf-8")
    evals = load_dataset(root / "eval.yaml")
    assert len(evals.queries) == 8 and {q.category for q in evals.queries} == {"女职工", "工资", "年休假"}

    text = (root / "zhiku.yaml").read_text(encoding="utf-8")
    settings = load_settings(root / "zhiku.yaml")
    assert (settings.index, settings.collection) == (root / ".zhiku", "docs")  # from the file's folder
    assert settings.server.ingest_roots == (root / "docs",)
    assert (
        settings.model_copy(update={"index": Path(".zhiku"), "collection": "default", "server": Settings().server})
        == Settings()
    )
    # every key of the settings tree is there, at its default: uncommenting all of it changes nothing
    everything = yaml.safe_load(uncomment(text))
    assert set(everything) == set(Settings.model_fields)
    assert Settings.model_validate(everything).model_copy(update={"index": root / ".zhiku"}) == settings
    size = ChunkingSettings.model_fields["size_chars"]
    first = (size.description or "").split(":")[0]  # the comment may wrap after it
    assert f"## {first}" in text and f"#   size_chars: {size.default}" in text

    serve = report["serve"]
    assert serve[1:] == ["serve", "--config", str(root / "zhiku.yaml"), "--index", str(root / ".zhiku"), "--read-only"]
    assert Path(serve[0]).is_absolute()
    for c in CLIENTS:
        assert command_of(c.client, (root / c.path).read_text(encoding="utf-8")) == serve, c.client
    assert json.loads((root / ".vscode/mcp.json").read_text())["servers"]["zhiku"]["type"] == "stdio"
    assert json.loads((root / "mcp-clients/cherry-studio.json").read_text())["mcpServers"]["zhiku"]["isActive"]


def test_init_keeps_existing_files_unless_forced(cli, tmp_path: Path) -> None:
    assert cli("init", "p").exit_code == 0
    (tmp_path / "p" / "zhiku.yaml").write_text("collection: mine\n", encoding="utf-8")
    again = cli("init", "p")
    assert again.exit_code == 0 and "kept 12 existing files" in again.stderr
    assert (tmp_path / "p" / "zhiku.yaml").read_text() == "collection: mine\n"
    assert cli("init", "p", "--force").exit_code == 0
    assert (tmp_path / "p" / "zhiku.yaml").read_text().startswith("## zhiku.yaml — the settings of this zhiku project")
    (tmp_path / "file").write_text("x")
    bad = cli("init", "file")
    assert bad.exit_code == 1 and "exists and is not a folder: choose another DIR" in bad.stderr


def test_doctor_passes_on_a_fresh_project_and_names_the_fix_when_broken(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli("init", "p").exit_code == 0
    monkeypatch.chdir(tmp_path / "p")
    good = cli("doctor", "--json")
    assert good.exit_code == 0, good.output
    checks = json.loads(good.stdout)["checks"]
    by_area = {(c["area"], c["status"]) for c in checks}
    assert ("settings", "ok") in by_area and ("models", "ok") in by_area
    assert [c["status"] for c in checks if c["area"] == "clients"] == ["ok"] * 5
    assert {"area": "serving", "status": "ok", "detail": "stdio", "fix": ""} in checks
    # write tools: a client config made with --write says so; HTTP settings or write tokens warn
    assert cli("init", ".", "--write", "--force").exit_code == 0
    assert "ok    clients  .cursor/mcp.json (cursor) starts " in (text := cli("doctor").stdout)
    assert text.count(", with ingest_documents and delete_document\n") == 5
    Path("zhiku.yaml").write_text("server:\n  transport: http\n", encoding="utf-8")
    fix = "server.read_only: true (or `zhiku serve --read-only`); writers get their own `zhiku tokens add NAME --write`"
    assert doctor_mod.check_serving(load_settings(Path("zhiku.yaml"))) == [
        doctor_mod.Check(
            "serving", "warn", "HTTP serves ingest_documents and delete_document to anyone reaching 127.0.0.1:8765", fix
        )
    ]
    add_token(Path(".zhiku"), "ops", None, write=True)
    Path("zhiku.yaml").write_text("server:\n  transport: http\n  read_only: true\n", encoding="utf-8")
    assert doctor_mod.check_serving(load_settings(Path("zhiku.yaml"))) == [
        doctor_mod.Check("serving", "warn", "HTTP serves ingest_documents and delete_document to tokens ops", fix)
    ]
    assert {
        "area": "index",
        "status": "warn",
        "detail": f"no index at {tmp_path.resolve()}/p/.zhiku yet",
        "fix": "zhiku ingest docs (or any folder)",
    } in checks

    Path(".cursor/mcp.json").write_text(
        json.dumps({"mcpServers": {"zhiku": {"command": "/nowhere/zhiku", "args": ["serve"]}}}), encoding="utf-8"
    )
    broken = cli("doctor")
    assert broken.exit_code == 1
    assert "FAIL  clients  .cursor/mcp.json (cursor): /nowhere/zhiku does not exist" in broken.stdout
    assert "fix: zhiku init --force . rewrites the client configs with this install's paths" in broken.stdout

    Path("zhiku.yaml").write_text("retrieval:\n  top_k: 0\n", encoding="utf-8")
    bad = cli("doctor")
    assert bad.exit_code == 1 and "FAIL  settings invalid settings: retrieval.top_k" in bad.stdout
    assert "fix: fix zhiku.yaml (reference: docs/settings.md)" in bad.stdout

    Path("zhiku.yaml").write_text("store:\n  kind: milvus\n", encoding="utf-8")
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "pymilvus", None)  # as if not installed: it cannot be imported
        checks = doctor_mod.check_extras(load_settings(Path("zhiku.yaml")))
    assert (
        doctor_mod.Check(
            "extras",
            "fail",
            "milvus: missing, and the settings need it (to use the Milvus store)",
            "pip install 'zhiku[milvus]'",
        )
        in checks
    )
    assert checks[0] == doctor_mod.Check("extras", "ok", "pdf: installed, to read PDFs")
    assert checks[2:4] == [
        doctor_mod.Check(
            "extras", "ok", "sheets: installed, to read .xlsx .xlsm .xls .ods workbooks (.csv .tsv need nothing)"
        ),
        doctor_mod.Check("extras", "ok", "slides: installed, to read PowerPoint .pptx decks"),
    ]
    # the scale extra (numkong) is listed, and needed by the int8 dense search
    Path("zhiku.yaml").write_text("store:\n  dense_search: int8\n", encoding="utf-8")
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "numkong", None)
        checks = doctor_mod.check_extras(load_settings(Path("zhiku.yaml")))
    assert checks[-1] == doctor_mod.Check(
        "extras",
        "fail",
        "scale: missing, and the settings need it (to search 10,000+ chunks faster by int8 screening)",
        "pip install 'zhiku[scale]'",
    )
