"""BEIR-format datasets: ``corpus.jsonl``, ``queries.jsonl``, ``qrels.tsv`` (or ``qrels/test.tsv``)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zhiku.errors import InvalidInput


@dataclass(frozen=True)
class BeirDoc:
    doc_id: str
    title: str
    text: str


@dataclass(frozen=True)
class BeirDataset:
    name: str
    corpus: tuple[BeirDoc, ...]
    queries: dict[str, str]  # id -> text (only queries with judgements)
    qrels: dict[str, dict[str, int]]  # query id -> {doc id: grade > 0}


def _jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise InvalidInput(f"{path}:{n}: not valid JSON ({e.msg})") from None
            if not isinstance(row, dict) or "_id" not in row or "text" not in row:
                raise InvalidInput(f'{path}:{n}: each line needs "_id" and "text"')
            rows.append(row)
    return rows


def load_beir(folder: Path, *, max_queries: int | None = None) -> BeirDataset:
    folder = Path(folder)
    if not folder.is_dir():
        what = "YAML set" if folder.suffix.lower() in (".yaml", ".yml") else "dataset folder"
        raise InvalidInput(f"{what} not found: {folder}")
    qrels_path = folder / "qrels.tsv"
    if not qrels_path.is_file():
        qrels_path = folder / "qrels" / "test.tsv"
    for p in (folder / "corpus.jsonl", folder / "queries.jsonl", qrels_path):
        if not p.is_file():
            raise InvalidInput(
                f"{folder} is not a BEIR dataset: {p.name} is missing "
                "(expected corpus.jsonl, queries.jsonl and qrels.tsv)"
            )
    corpus = tuple(
        BeirDoc(str(r["_id"]), str(r.get("title") or ""), str(r["text"])) for r in _jsonl(folder / "corpus.jsonl")
    )
    queries_all = {str(r["_id"]): str(r["text"]) for r in _jsonl(folder / "queries.jsonl")}
    qrels: dict[str, dict[str, int]] = {}
    with qrels_path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            parts = line.rstrip("\n").split("\t")
            if n == 1 and parts[0] in ("query-id", "qid", "query_id"):
                continue
            if len(parts) < 3:
                if line.strip():
                    raise InvalidInput(f"{qrels_path}:{n}: expected `query-id<TAB>corpus-id<TAB>score`")
                continue
            try:
                grade = int(float(parts[2]))
            except ValueError:
                raise InvalidInput(f"{qrels_path}:{n}: score {parts[2]!r} is not a number") from None
            if grade > 0:
                qrels.setdefault(parts[0], {})[parts[1]] = grade
    ids = [q for q in queries_all if q in qrels]
    if max_queries is not None:
        ids = ids[:max_queries]
    if not ids:
        raise InvalidInput(f"{folder}: no query in queries.jsonl has a judgement in {qrels_path.name}")
    name = Path(os.path.abspath(folder)).name  # `--dataset .`: the folder's name, not ""; a link keeps its own
    return BeirDataset(name, corpus, {q: queries_all[q] for q in ids}, {q: qrels[q] for q in ids})
