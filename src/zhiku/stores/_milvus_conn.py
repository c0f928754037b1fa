"""The connection to Milvus behind ``MilvusStore``: connect, retries, one-line ``StoreError``s, collection calls."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, TypeVar

from zhiku.errors import MissingDependency, StoreError
from zhiku.settings import StoreSettings

T = TypeVar("T")
QUERY_LIMIT = 16384  # Milvus's limit on the rows of one query
WRITE_BATCH = 256  # rows per upsert request
LITE_FLUSH_ROWS = 512  # see Connection.flush_pending
TIMEOUT_S = 30.0  # a request, retries of a lost connection included, before it fails with a StoreError
CONSISTENCY = "Strong"  # every finished write is seen, across processes too
_SERVER_SCHEMES = ("http://", "https://", "tcp://", "grpc://", "unix:")
_UNREACHABLE = "fail connecting|unavailable|connection refused|failed to connect|deadline|timeout".split("|")
_UNREACHABLE += ["timed out", "retry run out", "illegal connection"]


def import_pymilvus() -> Any:
    try:
        import pymilvus
    except ImportError:
        raise MissingDependency("store.kind=milvus needs pymilvus: pip install 'zhiku[milvus]'") from None
    log = logging.getLogger("pymilvus")
    if log.level == logging.WARNING:  # pymilvus's own default: its per-call tracebacks duplicate our StoreErrors
        log.setLevel(logging.CRITICAL)
    return pymilvus


class Unreachable(StoreError):
    """The server did not answer (down, restarting, network)."""

    retryable = True


class NotLoaded(StoreError):
    """A collection is not loaded into memory (milvus-lite forgets loads across restarts); load and retry."""


class Connection:
    """A ``MilvusClient`` for one ``StoreSettings``, with error translation."""

    def __init__(self, settings: StoreSettings) -> None:
        self.settings = settings
        self.uri = settings.uri
        self.timeout = TIMEOUT_S
        db = settings.db_name or "default"
        self.where = f"Milvus at {self.uri} (database {db}, collections {settings.collection_prefix}*)"
        self._lock = threading.RLock()
        self._unflushed: dict[str, int] = {}
        self.server_version = ""
        pymilvus = import_pymilvus()
        token = settings.token.get_secret_value() if settings.token is not None else ""
        try:
            # dedicated: this store owns its gRPC channel and closes it (pymilvus keeps shared ones open forever)
            self.client = pymilvus.MilvusClient(uri=self.uri, token=token, timeout=self.timeout, dedicated=True)
        except Exception as e:  # noqa: BLE001 - every failure to connect becomes one StoreError
            raise self.error(e, "connect") from None
        try:
            self.server_version = str(self.call("get_server_version", self.client.get_server_version))
            if (name := settings.db_name) and name not in self.call("list_databases", self.client.list_databases):
                self.call("create_database", self.client.create_database, name)
            if name:
                with self.guard("use_database"):
                    self.client.use_database(name)
        except BaseException:
            self.close()
            raise

    @property
    def is_lite(self) -> bool:
        """True for milvus-lite (its gRPC server or an embedded local path), which differs from Milvus proper."""
        return self.server_version.startswith("milvus_lite") or not self.uri.startswith(_SERVER_SCHEMES)

    @contextmanager
    def guard(self, what: str) -> Iterator[None]:
        """Turn every failure inside the block into a ``StoreError`` about ``what``."""
        try:
            yield
        except StoreError:
            raise
        except Exception as e:  # noqa: BLE001 - pymilvus raises MilvusException, grpc.RpcError, ValueError, …
            raise self.error(e, what) from None

    def call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs, timeout=TIMEOUT_S)`` with every failure turned into a ``StoreError``."""
        deadline = time.monotonic() + self.timeout
        delay = 0.1
        while True:
            try:
                with self.guard(what):
                    return fn(*args, timeout=self.timeout, **kwargs)
            except Unreachable:
                if time.monotonic() + delay >= deadline:
                    raise
                time.sleep(delay)
                delay = min(2 * delay, 2.0)

    def error(self, e: BaseException, what: str) -> StoreError:
        message = str(getattr(e, "message", "") or e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        low = message.lower()
        if any(s in low for s in _UNREACHABLE):
            return Unreachable(
                f"cannot reach {self.where} during {what} ({message}): start Milvus (e.g. `milvus-lite server "
                f"--data-dir DIR --port 19530`) or fix store.uri (ZHIKU_STORE__URI); requests give up after "
                f"{self.timeout:g}s"
            )
        if any(s in low for s in ("auth", "permission", "denied", "unauthenticated", "credential")):
            return StoreError(
                f"{self.where} refused the credentials during {what} ({message}): set store.token "
                "(ZHIKU_STORE__TOKEN, `user:password` or an API key)"
            )
        if "not loaded" in low or "state 'released'" in low:
            return NotLoaded(f"{self.where}: {what} failed: {message}")
        if "database" in low and ("not found" in low or "not exist" in low):
            return StoreError(
                f"{self.where}: database {self.settings.db_name!r} does not exist ({message}): create it "
                "or fix store.db_name (ZHIKU_STORE__DB_NAME)"
            )
        return StoreError(f"{self.where}: {what} failed: {message}")

    # --- the operations MilvusStore uses ----------------------------------------------------------------
    def invoke(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """``client.<method>(…)`` through ``call``; a read of a collection not loaded loads it and is repeated once."""
        if method in ("search", "query"):
            kwargs.setdefault("consistency_level", CONSISTENCY)
            if method != "query" and self._unflushed:
                self.flush_pending()
        try:
            return self.call(what, getattr(self.client, method), *args, **kwargs)
        except NotLoaded:
            self.call(f"load {args[0]}", self.client.load_collection, args[0])
            return self.call(what, getattr(self.client, method), *args, **kwargs)

    def create(self, name: str, schema: Any, index_params: Any) -> bool:
        """Create, index and load a collection; False when another process created it first."""
        try:
            self.invoke(f"create {name}", "create_collection", name, schema=schema, consistency_level=CONSISTENCY)
        except StoreError:
            if not self.invoke(f"has_collection {name}", "has_collection", name):
                raise
            self.invoke(f"load {name}", "load_collection", name)
            return False
        self.invoke(f"index {name}", "create_index", name, index_params, sync=False)
        self.invoke(f"load {name}", "load_collection", name)
        return True

    def query_all(self, name: str, expr: str, fields: list[str], *, what: str = "query") -> list[dict[str, Any]]:
        """Every row of ``name`` matching ``expr`` (paged with an iterator past Milvus's per-query limit)."""
        rows = self.invoke(what, "query", name, filter=expr, output_fields=fields, limit=QUERY_LIMIT)
        if len(rows) < QUERY_LIMIT:
            return list(rows)
        with self.guard(what):
            options = {"filter": expr, "output_fields": fields, "consistency_level": CONSISTENCY}
            iterator = self.client.query_iterator(name, batch_size=4096, timeout=self.timeout, **options)
            out: list[dict[str, Any]] = []
            while batch := iterator.next():
                out.extend(batch)
            iterator.close()
        return out

    def upsert(self, name: str, rows: list[dict[str, Any]], what: str) -> None:
        """Upsert in requests of ``WRITE_BATCH`` rows (idempotent: safe to retry)."""
        for i in range(0, len(rows), WRITE_BATCH):
            self.call(what, self.client.upsert, name, rows[i : i + WRITE_BATCH])
        with self._lock:
            self._unflushed[name] = self._unflushed.get(name, 0) + len(rows)
            due = self._unflushed[name] >= LITE_FLUSH_ROWS
        if due:
            self.flush_pending()

    def flush_pending(self) -> None:
        """milvus-lite only: seal what this connection wrote into indexed segments."""
        with self._lock:
            pending = [name for name, count in self._unflushed.items() if count]
            self._unflushed.clear()
            if self.is_lite:
                for name in pending:
                    self.call(f"flush {name}", self.client.flush, name)

    def close(self) -> None:
        with suppress(StoreError):  # the rows are in milvus-lite's write-ahead log either way
            self.flush_pending()
        with suppress(Exception):  # closing never fails loudly
            self.client.close()
