"""Shared pieces for the KnowledgeBase, ingestion, CLI, embedding and eval tests.

- a tiny Chinese corpus (three short law-like files, four chunks) written into a test's folder;
- ONE embedding-cache directory for the whole session (``embed_cache_dir``): the real bundled embedder does
  ~5 short texts/s on the 2-core CI box, so every test that embeds shares its vectors through this cache;
- one shared ``BundledE5Embedder`` (the real model, never random vectors), loaded once per session;
- ``kb_factory``: opens ``KnowledgeBase`` objects on a given index with those settings and closes them after
  the test.

The session fixtures are re-exported by ``tests/conftest.py`` so that every module shares one instance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from zhiku.api import KnowledgeBase
from zhiku.embedding import BundledE5Embedder, CachedEmbedder, EmbeddingCache
from zhiku.settings import Settings

CACHE_FILE = "embeddings.sqlite"  # the file name build_embedder uses inside embedding.cache_dir

CONTRACT_LAW = """# 劳动合同法

## 第二章 劳动合同的订立

第十九条 劳动合同期限三个月以上不满一年的，试用期不得超过一个月；劳动合同期限一年以上不满三年的，试用期不得超过二个月；三年以上固定期限和无固定期限的劳动合同，试用期不得超过六个月。

## 第四章 劳动合同的解除和终止

第四十七条 经济补偿按劳动者在本单位工作的年限，每满一年支付一个月工资的标准向劳动者支付。六个月以上不满一年的，按一年计算；不满六个月的，向劳动者支付半个月工资的经济补偿。
"""

LEAVE_RULES = """# 职工带薪年休假条例

第三条 职工累计工作已满1年不满10年的，年休假5天；已满10年不满20年的，年休假10天；已满20年的，年休假15天。

第五条 单位确因工作需要不能安排职工休年休假的，经职工本人同意，可以不安排职工休年休假。对职工应休未休的年休假天数，单位应当按照该职工日工资收入的300%支付年休假工资报酬。
"""

WAGE_RULES = (
    "用人单位应当按月以货币形式支付劳动者工资，不得克扣或者无故拖欠劳动者的工资。"
    "安排劳动者延长工作时间的，支付不低于工资的百分之一百五十的加班工资。\n"
)

# source (relative to the ingest root) -> text
CORPUS: dict[str, str] = {
    "劳动合同法.md": CONTRACT_LAW,
    "年休假条例.md": LEAVE_RULES,
    "规章/工资支付规定.txt": WAGE_RULES,
}

# The chunks the corpus is cut into: (source, section)
SEC_PROBATION = "劳动合同法 > 第二章 劳动合同的订立 > 第十九条"
SEC_SEVERANCE = "劳动合同法 > 第四章 劳动合同的解除和终止 > 第四十七条"
SEC_LEAVE = "职工带薪年休假条例 > 第三条、第五条"
SEC_WAGE = ""
CORPUS_CHUNKS = 4

# An edited version of the leave rules: 第三条 gets other day counts (1 chunk, new text).
LEAVE_RULES_V2 = """# 职工带薪年休假条例

第三条 职工累计工作已满1年不满10年的，年休假7天；已满10年不满20年的，年休假12天；已满20年的，年休假18天。疗养假期另行计算。
"""


def write_corpus(root: Path, files: dict[str, str] | None = None) -> Path:
    """Write ``files`` (default: ``CORPUS``) under ``root``; returns ``root``."""
    for source, text in (CORPUS if files is None else files).items():
        path = root / source
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def make_settings(index: Path, embed_cache: Path, **overrides: Any) -> Settings:
    """Settings for ``index`` with the shared embedding cache; ignores ``ZHIKU_*`` env and ``zhiku.yaml``."""
    data: dict[str, Any] = {"index": str(index), "collection": "hr", "cache_dir": str(embed_cache)}
    for key, value in overrides.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) and isinstance(data.get(key), dict) else value
    return Settings.model_validate(data)


class RenamedEmbedder:
    """The real (cached) embedder under another name: simulates an index built with a different model.

    Vectors come from the wrapped embedder (and thus the shared cache); only ``name`` differs.
    """

    def __init__(self, inner: Any, name: str) -> None:
        self.inner = inner
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def computed(self) -> int:
        return getattr(self.inner, "computed", 0)

    def embed_documents(self, texts: Any) -> np.ndarray:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)


# ------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="session")
def embed_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one embedding-cache directory every embedding test of this session shares."""
    return tmp_path_factory.mktemp("embedding-cache")


@pytest.fixture(scope="session")
def e5() -> BundledE5Embedder:
    """The bundled multilingual-e5-small, loaded once per session."""
    return BundledE5Embedder(threads=2, batch_size=32)


@pytest.fixture
def cached_embedder(e5: BundledE5Embedder, embed_cache_dir: Path) -> Callable[[], CachedEmbedder]:
    """A factory of fresh ``CachedEmbedder`` objects (``computed`` starts at 0) over the shared cache."""

    def make() -> CachedEmbedder:
        return CachedEmbedder(e5, EmbeddingCache(embed_cache_dir / CACHE_FILE))

    return make


@pytest.fixture
def kb_factory(
    embed_cache_dir: Path, cached_embedder: Callable[[], CachedEmbedder]
) -> Iterator[Callable[..., KnowledgeBase]]:
    """``open_kb(index, read_only=False, embedder=None, reranker=None, **settings_overrides)``; every KB is closed
    afterwards."""
    opened: list[KnowledgeBase] = []

    def open_kb(
        index: Path, *, read_only: bool = False, embedder: Any = None, reranker: Any = None, **overrides: Any
    ) -> KnowledgeBase:
        kb = KnowledgeBase(
            make_settings(index, embed_cache_dir, **overrides),
            read_only=read_only,
            embedder=embedder if embedder is not None else cached_embedder(),
            reranker=reranker,
        )
        opened.append(kb)
        return kb

    yield open_kb
    for kb in opened:
        kb.close()


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """A fresh copy of ``CORPUS`` in ``tmp_path/docs``."""
    return write_corpus(tmp_path / "docs")
