"""zhiku as an installed tool: build the wheel, install it into a fresh virtual environment (base install, no
extras), then the newcomer's path — `zhiku init` → `zhiku ingest docs` → `zhiku query` → `zhiku doctor` — and an
MCP client talking to `zhiku serve` from that install over stdio.

Slow (it installs the dependencies into a new venv): `pytest -m slow tests/test_packaging.py`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import anyio
import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def run(*cmd: str | Path, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZHIKU_", "PYTHONPATH", "VIRTUAL_ENV"))}
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    if check:
        assert r.returncode == 0, f"{cmd}: {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin folder of a fresh venv with the built wheel installed (base install)."""
    tmp = tmp_path_factory.mktemp("pkg")
    src = tmp / "src-copy"  # build from a copy: the build leaves build/ and *.egg-info behind
    shutil.copytree(
        ROOT,
        src,
        ignore=shutil.ignore_patterns(
            ".venv",
            ".git",
            "build",
            "*.egg-info",
            "__pycache__",
            ".zhiku",
            "demo-index",
            ".cache",
            "tests",
        ),
    )
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        tmp / "dist",
        src,
        cwd=tmp,
    )
    (wheel,) = (tmp / "dist").glob("zhiku-*.whl")
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name  # pure Python: no compiler needed
    venv.create(tmp / "venv", with_pip=True)
    bin_dir = tmp / "venv" / "bin"
    run(bin_dir / "python", "-m", "pip", "install", "-q", wheel, cwd=tmp)
    return bin_dir


def test_init_ingest_query_doctor_and_serve_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    zhiku = installed / "zhiku"
    run(zhiku, "init", "myproject", cwd=tmp_path)
    project = tmp_path / "myproject"
    ingest = json.loads(run(zhiku, "ingest", "docs", "--json", cwd=project).stdout)
    assert (ingest["added"], ingest["failed"], ingest["failures"]) == (3, 0, [])
    answer = json.loads(run(zhiku, "query", "女职工产假有多少天？", "--json", cwd=project).stdout)
    assert (
        answer["hits"][0]["source"] == "女职工劳动保护特别规定(2012-04-28).md" and "98天" in answer["hits"][0]["text"]
    )

    doctor = run(zhiku, "doctor", "--json", cwd=project, check=False)
    assert doctor.returncode == 0, doctor.stdout
    checks = json.loads(doctor.stdout)["checks"]
    assert [c["status"] for c in checks if c["area"] in ("settings", "index", "models", "clients")] == ["ok"] * 8
    assert {c["detail"] for c in checks if c["status"] == "off"} >= {"pdf: not installed", "dashboard: not installed"}

    config = json.loads((project / ".vscode" / "mcp.json").read_text(encoding="utf-8"))["servers"]["zhiku"]
    assert config["command"] == str(zhiku)
    text, structured = anyio.run(query_over_stdio, [config["command"], *config["args"]], tmp_path)
    assert text.startswith("**检索问题 / Query:** 女职工产假有多少天？") and "98天" in text
    chars = len(json.dumps(structured, ensure_ascii=False, separators=(",", ":")))
    # each citation's chunk id, uri, source and section below the title beside short law articles: measured 1.63
    assert len(structured["citations"]) == 5 and len(text) + chars <= 1.7 * len(text), (len(text), chars)

    (project / "zhiku.yaml").write_text("chunking:\n  size_chars: 10\n", encoding="utf-8")
    broken = run(zhiku, "doctor", cwd=project, check=False)
    assert broken.returncode == 1 and "FAIL  settings invalid settings: chunking.size" in broken.stdout
    assert "fix: fix zhiku.yaml" in broken.stdout


async def query_over_stdio(command: list[str], cwd: Path) -> tuple[str, dict]:
    """query_knowledge_hub top_k 5 through the MCP SDK client, against the server the client config starts
    (from an unrelated folder, as a desktop client would)."""
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZHIKU_", "PYTHONPATH"))}
    params = StdioServerParameters(command=command[0], args=command[1:], env=env, cwd=str(cwd))
    async with Client(stdio_client(params)) as client:
        r = await client.call_tool("query_knowledge_hub", {"query": "女职工产假有多少天？", "top_k": 5})
    assert not r.is_error, r
    return r.content[0].text, r.structured_content
