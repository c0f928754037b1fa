"""Runs the ``Store`` contract against every backend (add a backend to ``BACKENDS``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from zhiku.stores import SQLiteStore
from zhiku.stores.base import Store

from .store_contract import StoreContract

BACKENDS: dict[str, Callable[[Path], Store]] = {
    "sqlite": lambda tmp: SQLiteStore(tmp / "index"),
}


@pytest.fixture(params=sorted(BACKENDS))
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Store]]:
    opened: list[Store] = []

    def make() -> Store:
        opened.append(BACKENDS[request.param](tmp_path))
        return opened[-1]

    yield make
    for store in opened:
        store.close()


class TestStoreContract(StoreContract):
    pass
