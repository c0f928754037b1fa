"""Every dashboard page rendered by headless Chromium against a running `zhiku dashboard` (127.0.0.1).

Streamlit renders in the browser (React over a websocket), so a fixed wait or Chromium's virtual-time budget
is not enough (it ends while the websocket is still streaming the page). Chromium runs with its DevTools
protocol on a loopback port; each test navigates, polls ``document.body.innerText`` until the page's key texts
are visible (table cells are drawn on a canvas, so those texts are titles, captions, metrics and widgets),
then takes a screenshot. Skipped when `chromium` is absent, except under CI=true (.ci/run installs it), where
that fails. Screenshots are kept when ZHIKU_SCREENSHOTS names a folder.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers_kb import CACHE_FILE, make_settings, write_corpus
from test_dashboard import EVAL_SET
from zhiku.api import KnowledgeBase
from zhiku.dashboard import PAGE_LIST
from zhiku.embedding import CachedEmbedder, EmbeddingCache
from zhiku.evaluation.datasets import load_yaml_set
from zhiku.evaluation.runner import append_history, evaluate, history_entry
from zhiku.observability.tracing import Tracer

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WHY = "headless Chromium is not installed (apt-get install chromium)"
# .ci/run installs it: in strict mode (tests/strict_skips.py) this skip fails the run
pytestmark = [pytest.mark.browser, pytest.mark.skipif(CHROMIUM is None, reason=WHY)]
pytest.importorskip("streamlit")

# url path -> texts that must be visible on that page
EXPECTED = {
    "overview": ["概览 Overview", "集合 Collections", "近期健康 Recent health", "文档 documents"],
    "data": ["数据浏览 Data browser", "段落 Chunks of", "劳动合同法.md"],
    "ingestion": ["导入管理 Ingestion", "上传 Upload", "从所有索引删除 Delete from every index"],
    "ingest_traces": ["导入追踪 Ingestion traces", "文档 Documents", "added"],
    "query_traces": ["查询追踪 Query traces", "BM25 vs dense", "排名变化 Rank changes (fusion)", "moved_up"],
    "evaluation": ["评测 Evaluation", "历史趋势 History"],
}


LOGS: dict[str, Path] = {}  # dashboard url -> its server log


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory, e5, embed_cache_dir: Path) -> Iterator[str]:
    root = tmp_path_factory.mktemp("dashboard")
    corpus = write_corpus(root / "docs")
    settings = make_settings(root / "idx", embed_cache_dir)
    with KnowledgeBase(settings, embedder=CachedEmbedder(e5, EmbeddingCache(embed_cache_dir / CACHE_FILE))) as kb:
        kb.ingest([corpus])
        kb.query("试用期最长多久", top_k=3)
        kb.ingest([corpus])  # a no-op re-run: the ingestion traces page still opens on the run that added documents
        (root / "劳动.yaml").write_text(EVAL_SET, encoding="utf-8")
        kb.tracer = Tracer()
        append_history(root / "idx", history_entry(evaluate(kb, load_yaml_set(root / "劳动.yaml"), mode="bm25")))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZHIKU_")}
    env["ZHIKU_CACHE_DIR"] = str(embed_cache_dir)
    log = (root / "dashboard.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "zhiku.cli", "dashboard", "--index", str(root / "idx"), "--port", str(port)],
        cwd=root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    LOGS[url] = root / "dashboard.log"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.read() == b"ok":
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the dashboard did not start: {(root / 'dashboard.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)  # our own child, by PID
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


class Browser:
    """Headless Chromium driven over the DevTools protocol (one page, one websocket)."""

    def __init__(self, profile: Path) -> None:
        from websockets.sync.client import connect  # a Streamlit dependency

        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                CHROMIUM,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--disable-dev-shm-usage",
                f"--user-data-dir={profile}",
                "--window-size=1400,1600",
                f"--remote-debugging-port={self.port}",
                "--remote-allow-origins=*",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list", timeout=2) as r:
                    pages = [t for t in json.loads(r.read()) if t["type"] == "page"]
                if pages:
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.2)
        self._stack = contextlib.ExitStack()
        self.ws = self._stack.enter_context(
            connect(pages[0]["webSocketDebuggerUrl"], max_size=64 * 2**20, open_timeout=10)
        )
        self.next_id = 0

    def call(self, method: str, **params: object) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:  # events arrive in between: skip them
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def text(self) -> str:
        r = self.call("Runtime.evaluate", expression="document.body ? document.body.innerText : ''", returnByValue=True)
        return str(r["result"].get("value", ""))

    def show(self, url: str, expected: list[str], timeout: float = 60) -> str:
        """Navigate and wait until every expected text is visible (or the timeout); returns the page's text."""
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.text()
            if all(t in text for t in expected) and "Running..." not in text:
                time.sleep(1.0)  # let charts finish drawing before the screenshot
                return self.text()
            time.sleep(0.3)
        return text

    def screenshot(self, out: Path) -> None:
        out.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))

    def close(self) -> None:
        self._stack.close()
        self.proc.terminate()  # our own child, by PID
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    b = Browser(tmp_path_factory.mktemp("chromium-profile"))
    yield b
    b.close()


@pytest.mark.parametrize(("url_path", "title"), [(u, t) for _, u, t in PAGE_LIST])
def test_page_renders_in_chromium(dashboard: str, browser: Browser, tmp_path: Path, url_path: str, title: str) -> None:
    shot = tmp_path / f"{url_path}.png"
    address = f"{dashboard}/" if url_path == PAGE_LIST[0][1] else f"{dashboard}/{url_path}"  # the default page is /
    text = browser.show(address, EXPECTED[url_path])
    browser.screenshot(shot)
    keep = os.environ.get("ZHIKU_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / shot.name)
    missing = [t for t in EXPECTED[url_path] if t not in text]
    assert not missing, f"{url_path}: not visible: {missing}"
    for bad in ("Traceback", "Page not found", "Error"):
        assert bad not in text, f"{url_path} shows {bad!r}: {text[:500]}"
    assert title in text  # the sidebar names every page
    assert shot.stat().st_size > 20_000  # a real rendering, not a blank page


def test_no_traceback_in_the_server_log_after_every_page(dashboard: str, browser: Browser) -> None:
    """Streamlit logs what a page raised (even when it recovers, like pyarrow's ArrowInvalid on a mixed
    int/str column) to the server log, not to the page: visit every page, then read the log."""
    for _, url_path, _ in PAGE_LIST:
        browser.show(f"{dashboard}/{url_path}", EXPECTED[url_path])
    log = LOGS[dashboard].read_text(encoding="utf-8", errors="replace")
    assert "Traceback" not in log and "ArrowInvalid" not in log, log[-3000:]


def test_ingestion_traces_open_on_the_latest_run_that_did_something(dashboard: str, browser: Browser) -> None:
    text = browser.show(f"{dashboard}/ingest_traces", EXPECTED["ingest_traces"])
    assert "added\n\n3" in text and "skipped\n\n0" in text, text[:1500]
