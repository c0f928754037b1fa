"""Shared fixtures for the MCP tests: a tiny Chinese law index built once per test session, and helpers to
run real `zhiku serve` processes (stdio and HTTP) against it.

The index holds three short Markdown documents (5 chunks with ``chunking.size_chars: 200``, one article split in two overlapping chunks), embedded with the
real bundled embedder into a session-local embedding cache.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from zhiku.settings import Settings, load_settings

DOCS = {
    "劳动合同法.md": """# 劳动合同法

## 第二章 劳动合同的订立

第十九条 劳动合同期限三个月以上不满一年的，试用期不得超过一个月；劳动合同期限一年以上不满三年的，试用期不得超过二个月；三年以上固定期限和无固定期限的劳动合同，试用期不得超过六个月。

第二十条 劳动者在试用期的工资不得低于本单位相同岗位最低档工资或者劳动合同约定工资的百分之八十，并不得低于用人单位所在地的最低工资标准。

## 第四章 劳动合同的解除和终止

第四十七条 经济补偿按劳动者在本单位工作的年限，每满一年支付一个月工资的标准向劳动者支付。六个月以上不满一年的，按一年计算；不满六个月的，向劳动者支付半个月工资的经济补偿。
""",
    "职工带薪年休假条例.md": """# 职工带薪年休假条例

第三条 职工累计工作已满1年不满10年的，年休假5天；已满10年不满20年的，年休假10天；已满20年的，年休假15天。

第四条 国家法定休假日、休息日不计入年休假的假期。
""",
    "女职工劳动保护特别规定.md": """# 女职工劳动保护特别规定

第七条 女职工生育享受98天产假，其中产前可以休假15天；难产的，增加产假15天；生育多胞胎的，每多生育1个婴儿，增加产假15天。女职工怀孕未满4个月流产的，享受15天产假；怀孕满4个月流产的，享受42天产假。女职工产假期间的生育津贴，对已经参加生育保险的，按照用人单位上年度职工月平均工资的标准由生育保险基金支付；对未参加生育保险的，按照女职工产假前工资的标准由用人单位支付。用人单位不得因女职工怀孕、生育、哺乳降低其工资、予以辞退、与其解除劳动或者聘用合同。女职工在孕期不能适应原劳动的，用人单位应当根据医疗机构的证明，予以减轻劳动量或者安排其他能够适应的劳动。
""",
}
COLLECTION = "laws"
ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable


@dataclass(frozen=True)
class Fixture:
    root: Path
    docs: Path  # the Markdown files
    inbox: Path  # the ingest root the server may read
    index: Path
    config: Path  # zhiku.yaml pointing at all of the above
    settings: Settings

    def doc_path(self, name: str) -> Path:
        return self.docs / name


def _write_config(root: Path, index: Path, inbox: Path, cache: Path) -> Path:
    config = root / "zhiku.yaml"
    config.write_text(
        f"index: {index}\ncollection: {COLLECTION}\n"
        f"cache_dir: {cache}\n"
        "chunking:\n  size_chars: 200\n"
        f"server:\n  ingest_roots: [{inbox}]\n"
        "  structured_passages: true\n",  # the tests read passages from structuredContent (default: compact)
        encoding="utf-8",
    )
    return config


_BUILT: dict[str, Fixture] = {}


def build_fixture(root: Path) -> Fixture:
    """Write the documents and ingest them (once per process; later calls return the same fixture)."""
    if "main" in _BUILT:
        return _BUILT["main"]
    from zhiku.api import KnowledgeBase

    docs, inbox, index, cache = root / "docs", root / "inbox", root / "index", root / "embed-cache"
    for d in (docs, inbox):
        d.mkdir(parents=True)
    for name, text in DOCS.items():
        (docs / name).write_text(text, encoding="utf-8")
    config = _write_config(root, index, inbox, cache)
    settings = load_settings(config)
    with KnowledgeBase(settings) as kb:
        report = kb.ingest([docs], collection=COLLECTION)
    assert not report.failed, report.failed
    fx = Fixture(root=root, docs=docs, inbox=inbox, index=index, config=config, settings=settings)
    _BUILT["main"] = fx
    return fx


def copy_fixture(fx: Fixture, dest: Path) -> Fixture:
    """A private, writable copy of the index (for tests that ingest or delete)."""
    index, inbox = dest / "index", dest / "inbox"
    shutil.copytree(fx.index, index)
    inbox.mkdir(parents=True)
    config = _write_config(dest, index, inbox, fx.settings.cache_dir)
    return Fixture(root=dest, docs=fx.docs, inbox=inbox, index=index, config=config, settings=load_settings(config))


def serve_args(fx: Fixture, *extra: str) -> list[str]:
    return ["-m", "zhiku.cli", "serve", "--config", str(fx.config), *extra]


def server_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZHIKU_")}
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class HttpServer:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/mcp"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_http(
    fx: Fixture,
    log: Path,
    *extra: str,
    env: dict[str, str] | None = None,
    timeout_s: float = 60,
    script: Path | None = None,
) -> HttpServer:
    """Start `zhiku serve --transport http` (or a server ``script`` taking the same flags) on a free port and wait
    for GET /healthz → 200."""
    port = free_port()
    command = [str(script), "--config", str(fx.config)] if script else serve_args(fx)
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [PYTHON, *command, "--transport", "http", "--port", str(port), *extra],
            env=env or server_env(),
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    server = HttpServer(proc, port, log)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {log.read_text(errors='replace')[-2000:]}")
        try:
            with urllib.request.urlopen(f"{server.base}/healthz", timeout=1) as r:
                if r.status == 200:
                    return server
        except OSError:
            time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"server not ready after {timeout_s}s: {log.read_text(errors='replace')[-2000:]}")


def http_request(
    url: str, *, method: str = "GET", headers: dict[str, str] | None = None, body: bytes | None = None
) -> tuple[int, dict[str, str], bytes]:
    """(status, lower-cased headers, body) without raising on 4xx/5xx."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


@pytest.fixture(scope="session")
def mcp_index(tmp_path_factory: pytest.TempPathFactory) -> Fixture:
    """The shared read-only fixture index (re-exported by tests/conftest.py)."""
    return build_fixture(tmp_path_factory.getbasetemp() / "mcp-fixture")
