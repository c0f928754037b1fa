"""A Milvus server for the tests: ``milvus-lite server`` on a free 127.0.0.1 port, once per session.

``milvus_uri`` (session) starts it in a temporary data directory, waits until the port answers, yields
``http://127.0.0.1:PORT`` and stops the server by its PID at the end of the session, failures included.
``ZHIKU_TEST_MILVUS_URI`` points the tests at an external server instead (nothing is started then).
Each test uses its own ``store.collection_prefix`` (``unique_prefix``), so tests never see each other's data.

milvus-lite is a pure-Python re-implementation of Milvus's gRPC API: these tests exercise zhiku's client
code path, not a real cluster. Without the ``milvus`` extra the Milvus tests are skipped, except in
strict mode (tests/strict_skips.py: CI), where that skip fails the run.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from zhiku.settings import StoreSettings

URI_ENV = "ZHIKU_TEST_MILVUS_URI"
START_TIMEOUT_S = 90


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def require_milvus() -> None:
    """Skip when the ``milvus`` extra is not installed (in strict mode, tests/strict_skips.py, that fails)."""
    try:
        import milvus_lite  # noqa: F401
        import pymilvus  # noqa: F401
    except ImportError as e:
        pytest.skip(f"Milvus tests need `pip install -e '.[milvus]'` ({e})", allow_module_level=True)


class LiteServer:
    """One ``milvus-lite server`` process, stopped by its PID."""

    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        self.data_dir = data_dir
        self.port = port or _free_port()
        self.log = data_dir.parent / f"milvus-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = START_TIMEOUT_S) -> LiteServer:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "milvus_lite",
                    "server",
                    "--data-dir",
                    str(self.data_dir),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"milvus-lite exited with {self.proc.returncode}: {self.log.read_text(errors='replace')[-2000:]}"
                )
            if _port_open(self.port):
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(
            f"milvus-lite did not listen on port {self.port} within {timeout_s}s: {self.log.read_text(errors='replace')[-2000:]}"
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def unique_prefix(seed: str | None = None) -> str:
    """A fresh ``store.collection_prefix`` (stable for one ``seed``, e.g. a test's tmp path)."""
    tail = hashlib.sha256(seed.encode()).hexdigest()[:12] if seed is not None else uuid.uuid4().hex[:12]
    return f"t{tail}_"


def milvus_store(uri: str, prefix: str, **extra: object) -> StoreSettings:
    return StoreSettings.model_validate({"kind": "milvus", "uri": uri, "collection_prefix": prefix, **extra})


@pytest.fixture(scope="session")
def milvus_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URI of the session's Milvus server (re-exported by tests/conftest.py)."""
    require_milvus()
    external = os.environ.get(URI_ENV)
    if external:
        yield external
        return
    server = LiteServer(tmp_path_factory.mktemp("milvus") / "data").start()
    try:
        yield server.uri
    finally:
        server.stop()
