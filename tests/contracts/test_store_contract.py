"""Runs the ``Store`` contract against every backend (add a backend to ``BACKENDS``).

A factory takes the test's ``tmp`` path; any further parameter is a pytest fixture of that name (the
Milvus backend takes the session's server URI, ``milvus_uri``, and a prefix unique to the test).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from milvus_fixtures import milvus_store, unique_prefix
from zhiku.stores import SQLiteStore
from zhiku.stores.base import Store

from .store_contract import StoreContract


def _milvus(tmp: Path, milvus_uri: str) -> Store:
    from zhiku.stores.milvus import MilvusStore

    return MilvusStore(milvus_store(milvus_uri, unique_prefix(str(tmp))))


BACKENDS: dict[str, Callable[..., Store]] = {
    "sqlite": lambda tmp: SQLiteStore(tmp / "index"),
    "milvus": _milvus,
}


@pytest.fixture(params=sorted(BACKENDS))
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Store]]:
    opened: list[Store] = []
    factory = BACKENDS[request.param]
    extra = {name: request.getfixturevalue(name) for name in list(inspect.signature(factory).parameters)[1:]}

    def make() -> Store:
        opened.append(factory(tmp_path, **extra))
        return opened[-1]

    yield make
    for store in opened:
        store.close()


class TestStoreContract(StoreContract):
    pass
