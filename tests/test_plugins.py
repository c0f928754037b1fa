"""Plugins by entry points, installed for real: examples/zhiku-notebook by `pip install` into a temporary folder, and a
test kit (an embedder, a reranker, a transform, a tool breaking the conventions, a loader whose module is missing) as a
hand-written distribution. zhiku runs as subprocesses with those folders on PYTHONPATH, so this process never
sees the plugins."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from mcp_fixtures import DOCS, PYTHON, ROOT, server_env
from zhiku.errors import UnsupportedFormat
from zhiku.ingest.loaders import loader_for

TESTKIT = '''\
"""Test plugins: a character-hash embedder, a shortest-first reranker and a tool with a bad name."""
import hashlib

import numpy as np

from zhiku.retrieval.rerank import apply_scores


class CharEmbedder:
    name = "testkit-chars-64"
    dim = 64

    def embed_query(self, text):
        v = np.zeros(64, np.float32)
        for ch in text:
            v[int(hashlib.md5(ch.encode()).hexdigest(), 16) % 64] += 1
        n = np.linalg.norm(v)
        return v / n if n else v

    def embed_documents(self, texts):
        return np.stack([self.embed_query(t) for t in texts]) if texts else np.zeros((0, 64), np.float32)


def chars(settings):
    return CharEmbedder()


class Shortest:
    name = "testkit-shortest"

    def load(self):
        pass

    def rerank(self, query, hits, top_k):
        return apply_scores(hits, [-len(h.chunk.text) for h in hits], top_k)


def shortest(settings):
    return Shortest()


class Tagger:
    name = "tagger"
    needs_llm = False

    def apply(self, batch, ctx):
        for i in range(len(batch.chunks)):
            batch = batch.enrich(i, tags=("testkit", "第" + str(i)))
            ctx.on_chunk(self.name)
        return batch


def badTool() -> str:
    """Say hi.

    When to use: never.

    Example: {}
    """
    return "hi"
'''
TESTKIT_ENTRY_POINTS = """\
[zhiku.embedders]
chars = zhiku_testkit:chars

[zhiku.loaders]
broken = zhiku_no_such_module:Loader

[zhiku.rerankers]
shortest = zhiku_testkit:shortest

[zhiku.tools]
bad_tool = zhiku_testkit:badTool

[zhiku.transforms]
tagger = zhiku_testkit:Tagger
"""
CELLS = [
    ("markdown", "# 劳动法规选编\n\n" + DOCS["职工带薪年休假条例.md"].split("\n\n")[1]),
    ("code", "probation_months = {1: 1, 3: 2, 6: 6}"),
]


def make_notebook(path: Path, cells: list[tuple[str, str]]) -> None:
    """A notebook as Jupyter writes it (nbformat 4): its cells' sources as lists of lines."""
    nb = {
        "cells": [{"cell_type": k, "metadata": {}, "source": t.splitlines(keepends=True)} for k, t in cells],
        "metadata": {"language_info": {"name": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(nb, ensure_ascii=False, indent=1), encoding="utf-8")


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(where pip installed zhiku-notebook, where the test kit distribution lives)."""
    root = tmp_path_factory.mktemp("plugins")
    src = root / "zhiku-notebook"
    shutil.copytree(ROOT / "examples" / "zhiku-notebook", src)  # pip builds in place: keep examples/ clean
    notebook_site = root / "notebook-site"
    pip = [PYTHON, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index"]
    subprocess.run([*pip, "--target", str(notebook_site), str(src)], check=True, timeout=300, capture_output=True)
    kit = distribution(root / "testkit-site", "zhiku-testkit", "0.2.0", TESTKIT_ENTRY_POINTS, TESTKIT)
    return notebook_site, kit


def distribution(site: Path, name: str, version: str, entry_points: str, module: str) -> Path:
    """A hand-written installed distribution in ``site``: its metadata, entry points and one module."""
    snake = name.replace("-", "_")
    dist = site / f"{snake}-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text(entry_points, encoding="utf-8")
    (site / f"{snake}.py").write_text(module, encoding="utf-8")
    return site


def zhiku(args: list[str], sites: tuple[Path, Path], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = server_env(PYTHONPATH=":".join([str(sites[0]), str(sites[1]), str(ROOT / "src")]))
    return subprocess.run(
        [PYTHON, "-m", "zhiku.cli", *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd
    )


def test_plugins_lists_what_is_installed_and_where(sites: tuple[Path, Path], tmp_path: Path) -> None:
    proc = zhiku(["plugins", "--json"], sites, tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = [
        (p["group"], p["name"], p["value"], p["distribution"], p["version"], p["location"], p["error"])
        for p in json.loads(proc.stdout)["plugins"]
    ]
    notebook, kit = (str(s) for s in sites)
    assert rows == [
        ("zhiku.loaders", "broken", "zhiku_no_such_module:Loader", "zhiku-testkit", "0.2.0", kit,
         "ModuleNotFoundError: No module named 'zhiku_no_such_module'"),
        ("zhiku.loaders", "notebook", "zhiku_notebook:NotebookLoader", "zhiku-notebook", "0.1.0", notebook, None),
        ("zhiku.embedders", "chars", "zhiku_testkit:chars", "zhiku-testkit", "0.2.0", kit, None),
        ("zhiku.rerankers", "shortest", "zhiku_testkit:shortest", "zhiku-testkit", "0.2.0", kit, None),
        ("zhiku.transforms", "tagger", "zhiku_testkit:Tagger", "zhiku-testkit", "0.2.0", kit, None),
        ("zhiku.tools", "bad_tool", "zhiku_testkit:badTool", "zhiku-testkit", "0.2.0", kit,
         "tool 'badTool' (plugin zhiku-testkit): the name must be snake_case ([a-z0-9_], starting with a letter, at "
         "most 64 characters), e.g. 'bad_tool'"),  # refused by the server: listed as broken, not ok
        ("zhiku.tools", "list_notebooks", "zhiku_notebook:list_notebooks", "zhiku-notebook", "0.1.0", notebook, None),
    ]  # fmt: skip
    table = zhiku(["plugins"], sites, tmp_path)
    assert table.returncode == 0
    assert (
        table.stdout.splitlines()[1]
        == f"zhiku.loaders  notebook = zhiku_notebook:NotebookLoader  [zhiku-notebook 0.1.0, {notebook}]  ok"
    )
    assert table.stdout.splitlines()[0].endswith(
        "BROKEN (skipped): ModuleNotFoundError: No module named 'zhiku_no_such_module'"
    )


TEAMKIT = '''\
"""A second package: a reranker and a tool with names the test kit and zhiku-notebook already use, a transform with a
built-in's name."""


def shortest(settings):
    raise RuntimeError("never built: the name is ambiguous")


def list_notebooks() -> list[str]:
    """List the team's notebooks.

    When to use: never (a name clash).

    Example: {}
    """
    return ["团队"]


class Notes:
    doc_type = "note"
    suffixes = (".note", "note2")

    def __init__(self, settings):
        pass

    def load(self, path, source):
        raise NotImplementedError


class Archives(Notes):
    doc_type = "archive"
    suffixes = (".tar.gz",)


class Notebooks(Notes):
    doc_type = "notebook"
    suffixes = (".IPYNB",)


class Refine:
    name = "refine"
    needs_llm = False

    def apply(self, batch, ctx):
        return batch
'''
TEAMKIT_ENTRY_POINTS = """\
[zhiku.loaders]
archives = zhiku_teamkit:Archives
notebooks = zhiku_teamkit:Notebooks
notes = zhiku_teamkit:Notes

[zhiku.rerankers]
fragile = zhiku_teamkit:shortest
fragile = zhiku_teamkit:shortest
shortest = zhiku_teamkit:shortest
twice = zhiku_teamkit:shortest
twice = zhiku_teamkit:list_notebooks

[zhiku.tools]
list_notebooks = zhiku_teamkit:list_notebooks

[zhiku.transforms]
refine = zhiku_teamkit:Refine
"""


def test_two_plugins_with_one_name_are_both_refused_and_listed_so(sites: tuple[Path, Path], tmp_path: Path) -> None:
    team = distribution(tmp_path / "teamkit-site", "zhiku-teamkit", "1.0.0", TEAMKIT_ENTRY_POINTS, TEAMKIT)
    paths = ":".join([str(sites[0]), str(sites[1]), str(team), str(ROOT / "src")])
    env = server_env(PYTHONPATH=paths, ZHIKU_SERVER__CACHE_SIZE="abc")  # `zhiku plugins` reads no settings

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [PYTHON, "-m", "zhiku.cli", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)

    proc = run("plugins", "--json")
    assert proc.returncode == 0, proc.stderr
    errors = {(p["distribution"], p["group"], p["name"]): p["error"] for p in json.loads(proc.stdout)["plugins"]}
    clash = "the name {!r} is also declared by {}: uninstall one of the packages or rename an entry point"
    assert errors[("zhiku-testkit", "zhiku.rerankers", "shortest")] == clash.format(
        "shortest", "zhiku-teamkit 1.0.0 (zhiku_teamkit:shortest)"
    )
    assert errors[("zhiku-teamkit", "zhiku.rerankers", "shortest")] == clash.format(
        "shortest", "zhiku-testkit 0.2.0 (zhiku_testkit:shortest)"
    )
    assert errors[("zhiku-notebook", "zhiku.tools", "list_notebooks")] == clash.format(
        "list_notebooks", "zhiku-teamkit 1.0.0 (zhiku_teamkit:list_notebooks)"
    )
    assert errors[("zhiku-teamkit", "zhiku.rerankers", "twice")] == (  # one package, two values: not "uninstall"
        "the name 'twice' is also declared by zhiku-teamkit 1.0.0 (zhiku_teamkit:list_notebooks): rename one of its "
        "entry points"
    )
    assert errors[("zhiku-teamkit", "zhiku.rerankers", "fragile")] is None  # declared twice word for word: one
    assert errors[("zhiku-teamkit", "zhiku.transforms", "refine")] == (
        "the name 'refine' is a built-in transform's; rename the entry point"
    )
    assert errors[("zhiku-testkit", "zhiku.transforms", "tagger")] is None
    assert errors[("zhiku-teamkit", "zhiku.loaders", "notes")] == (  # "note2" was listed as readable, matched nothing
        "suffixes ['note2'] match no file name: write them with the dot ('.note2')"
    )
    assert errors[("zhiku-teamkit", "zhiku.loaders", "notebooks")] == (  # zhiku-notebook's loader won by name
        "the loader 'notebook' of zhiku-notebook (.ipynb) reads the same files: uninstall one of the packages"
    )
    assert errors[("zhiku-notebook", "zhiku.loaders", "notebook")] == (
        "the loader 'notebooks' of zhiku-teamkit (.ipynb) reads the same files: uninstall one of the packages"
    )
    assert errors[("zhiku-teamkit", "zhiku.loaders", "archives")] == (  # listed as readable, matched no file either
        "suffixes ['.tar.gz'] match no file name: a file's suffix is its last dot and what follows (declare '.gz' "
        "and check the rest of the name in load())"
    )
    build = "from zhiku.plugins import build_provider; build_provider('zhiku.rerankers', 'plugin:fragile', None)"
    built = subprocess.run([PYTHON, "-c", build], capture_output=True, text=True, timeout=60, env=env)
    assert built.stderr.strip().splitlines()[-1] == (  # `zhiku query` printed a traceback ending in RuntimeError
        "zhiku.errors.ConfigError: zhiku.rerankers plugin 'fragile' from zhiku-teamkit could not be built: "
        "RuntimeError: never built: the name is ambiguous"
    )
    choose = "from zhiku.plugins import provider; provider('zhiku.rerankers', 'plugin:shortest')"
    chosen = subprocess.run([PYTHON, "-c", choose], capture_output=True, text=True, timeout=60, env=env)
    assert chosen.stderr.strip().splitlines()[-1] == (
        "zhiku.errors.ConfigError: zhiku.rerankers plugin 'shortest' from zhiku-teamkit is broken: "
        + clash.format("shortest", "zhiku-testkit 0.2.0 (zhiku_testkit:shortest)")
    )


def test_without_the_plugin_a_notebook_is_unsupported() -> None:
    with pytest.raises(UnsupportedFormat, match=r"unsupported file type '\.ipynb' for a\.ipynb"):
        loader_for(Path("a.ipynb"))


def test_a_notebook_is_ingested_searched_and_served_with_plugin_models(
    sites: tuple[Path, Path], tmp_path: Path
) -> None:
    books = tmp_path / "books"
    books.mkdir()
    make_notebook(books / "选编.ipynb", CELLS)
    (books / "notes.md").write_text("# 笔记\n\n年休假按工作年限计算。\n", encoding="utf-8")
    config = tmp_path / "zhiku.yaml"
    config.write_text(
        f"index: {tmp_path / 'index'}\ncollection: books\nembedding:\n  provider: plugin:chars\n  cache: false\n"
        f"rerank:\n  provider: plugin:shortest\nserver:\n  ingest_roots: [{books}]\n",
        encoding="utf-8",
    )
    ingest = zhiku(["ingest", str(books), "--config", str(config), "--json", "--transform", "tagger"], sites, tmp_path)
    assert ingest.returncode == 0, ingest.stderr
    report = json.loads(ingest.stdout)
    assert (report["added"], report["failed"]) == (2, 0)
    assert (
        "plugin broken (zhiku.loaders, from zhiku-testkit) is broken and skipped: ModuleNotFoundError" in ingest.stderr
    )
    query = zhiku(
        ["query", "年休假几天", "--config", str(config), "--json", "-k", "2", "--tag", "testkit"], sites, tmp_path
    )
    assert query.returncode == 0, query.stderr
    answer = json.loads(query.stdout)
    assert answer["rerank"] == "ok"
    hits = [(h["source"], h["rerank_score"], -len(h["text"])) for h in answer["hits"]]
    assert hits == [("notes.md", -11.0, -11), ("选编.ipynb", -113.0, -113)]  # the plugin reranker: minus the length
    assert [h["tags"] for h in answer["hits"]] == [["testkit", "第0"], ["testkit", "第0"]]  # the plugin transform
    assert served_tools(sites, config, tmp_path) == (
        ["query_knowledge_hub", "list_collections", "get_document_summary", "list_notebooks"],
        ["劳动法规选编 (选编.ipynb)"],
    )
    log = (tmp_path / "serve.log").read_text()
    assert "plugin bad_tool (zhiku.tools, from zhiku-testkit) skipped: tool 'badTool' (plugin zhiku-testkit)" in log


def served_tools(sites: tuple[Path, Path], config: Path, cwd: Path) -> tuple[list[str], Any]:
    env = server_env(PYTHONPATH=":".join([str(sites[0]), str(sites[1]), str(ROOT / "src")]))
    params = StdioServerParameters(
        command=PYTHON, args=["-m", "zhiku.cli", "serve", "--config", str(config), "--read-only"], env=env, cwd=str(cwd)
    )

    async def main() -> tuple[list[str], Any]:
        with open(cwd / "serve.log", "w") as err:
            async with Client(stdio_client(params, errlog=err)) as c:
                names = [t.name for t in (await c.list_tools()).tools]
                books = await c.call_tool("list_notebooks", {})
                return names, books.structured_content["result"]

    return anyio.run(main)


def test_a_notebook_is_its_markdown_and_fenced_code(sites: tuple[Path, Path], tmp_path: Path) -> None:
    make_notebook(tmp_path / "b.ipynb", CELLS)
    (tmp_path / "bad.ipynb").write_text('{"cells": 3}', encoding="utf-8")
    code = (
        "from pathlib import Path; from zhiku_notebook import NotebookLoader as N; from zhiku.errors import LoaderError\n"
        "d = N().load(Path('b.ipynb'), 'b.ipynb'); print(repr(d.text)); print(d.title, d.doc_type)\n"
        "try: N().load(Path('bad.ipynb'), 'bad.ipynb')\nexcept LoaderError as e: print(e)\n"
    )
    env = server_env(PYTHONPATH=f"{sites[0]}:{ROOT / 'src'}")
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert proc.stdout.splitlines() == [
        repr(f"{CELLS[0][1]}\n\n```python\n{CELLS[1][1]}\n```"),
        "劳动法规选编 notebook",
        "not a readable Jupyter notebook: bad.ipynb (TypeError: 'int' object is not iterable)",
    ], proc.stderr


def test_a_missing_provider_plugin_is_one_clear_config_error() -> None:
    from zhiku.errors import ConfigError
    from zhiku.plugins import provider
    from zhiku.settings import EmbeddingSettings, RerankSettings

    assert EmbeddingSettings(provider="plugin:chars").model is None  # plugins need no model or endpoint
    assert RerankSettings(provider="plugin:shortest").provider == "plugin:shortest"
    with pytest.raises(ValueError, match="plugin:"):
        EmbeddingSettings(provider="plugin:")
    with pytest.raises(ConfigError) as e:
        provider("zhiku.embedders", "plugin:chars")
    assert str(e.value) == (
        "no zhiku.embedders plugin named 'chars' (available: none installed); `zhiku plugins` lists them"
    )
