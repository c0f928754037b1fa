"""Evaluation sets: BEIR folders (a corpus to index, qrels by document id) and YAML sets of questions with the
sources, pages, sections or text they should find (docs/evaluation.md)."""

from __future__ import annotations

import fnmatch
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from zhiku.cache import memoized
from zhiku.errors import InvalidInput
from zhiku.reconstruct import SECTION_SEPARATOR
from zhiku.types import Chunk

YAML_VERSION = 1
UNCATEGORIZED = "未分类"
QUERY_KEYS = ("query", "category", "expected", "id")
EXPECTED_KEYS = ("source", "page", "section", "contains")
LONGDOC_YAML, LONGDOC_DOCS = "eval.yaml", "docs"


@dataclass(frozen=True)
class BeirDoc:
    doc_id: str
    title: str
    text: str


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


def load_beir(folder: Path, *, max_queries: int | None = None) -> EvalSet:
    """A BEIR folder as a set: its queries with judgements, their qrels by document id, the corpus to index."""
    folder = Path(folder)
    if not folder.is_dir():
        what = "YAML set" if folder.suffix.lower() in (".yaml", ".yml") else "dataset folder"
        raise InvalidInput(f"{what} not found: {folder}")
    qrels_path = folder / "qrels.tsv" if (folder / "qrels.tsv").is_file() else folder / "qrels" / "test.tsv"
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
    ids = [q for q in queries_all if q in qrels][:max_queries]
    if not ids:
        raise InvalidInput(f"{folder}: no query in queries.jsonl has a judgement in {qrels_path.name}")
    name = Path(os.path.abspath(folder)).name  # `--dataset .`: the folder's name, not ""; a link keeps its own
    queries = tuple(EvalQuery(q, queries_all[q], UNCATEGORIZED, qrels[q]) for q in ids)
    return EvalSet(name, "beir", queries, corpus)


def squash(text: str) -> str:
    """``text`` without any whitespace (how ``contains`` compares: line breaks and spaces never matter)."""
    return "".join(text.split())


@dataclass(frozen=True)
class Expected:
    """One acceptable place for the answer: a source glob, and optionally a page, a section prefix, a text held."""

    source: str = "*"
    page: int | None = None
    section: str | None = None
    contains: str | None = None
    fold: Callable[[str], str] | None = field(default=None, compare=False, repr=False)  # see ``folded``

    def matches(self, chunk: Chunk, text: str | None = None) -> bool:
        """Whether ``chunk`` satisfies every field; ``text`` (default: the chunk's text) is what ``contains`` searches
        (the part of the chunk that fits a context budget)."""
        if not fnmatch.fnmatchcase(chunk.source, self.source):
            return False
        if self.page is not None and chunk.page != self.page:
            return False
        fold = self.fold or str
        if self.section is not None and not section_matches(fold(chunk.section), fold(self.section)):
            return False
        if self.contains is None:
            return True
        return squash(fold(self.contains)) in squash(fold(chunk.text if text is None else text))

    def to_json(self) -> dict[str, Any]:
        fields = (("source", self.source), ("page", self.page), ("section", self.section), ("contains", self.contains))
        return {k: v for k, v in fields if v is not None}


def folded(evalset: EvalSet, fold: Callable[[str], str]) -> EvalSet:
    """``evalset`` whose expected entries compare ``section`` and ``contains`` after ``fold``."""
    cached = memoized(8192)(fold)
    queries = tuple(replace(q, expected=tuple(replace(e, fold=cached) for e in q.expected)) for q in evalset.queries)
    return replace(evalset, queries=queries)


def section_matches(section: str, prefix: str) -> bool:
    """``prefix`` starts the chunk's section path at any level: ``第二章 > 第十九条`` matches ``劳动合同法 > 第二章 > 第十九条至第二十条``."""
    prefix = prefix.strip()
    if not prefix:
        return True
    parts = section.split(SECTION_SEPARATOR)
    return any(SECTION_SEPARATOR.join(parts[i:]).startswith(prefix) for i in range(len(parts)))


@dataclass(frozen=True)
class EvalQuery:
    qid: str
    text: str
    category: str
    relevant: dict[str, int]  # target id -> grade (> 0)
    expected: tuple[Expected, ...] = ()  # YAML sets: the targets are "expected[i]"

    def label(self, chunk: Chunk, text: str | None = None) -> str:
        """The target a retrieved chunk counts for: its document (BEIR) or the first expected entry it matches."""
        if not self.expected:
            return chunk.source
        for i, e in enumerate(self.expected):
            if e.matches(chunk, text):
                return f"expected[{i}]"
        return f"chunk:{chunk.chunk_id}"


@dataclass(frozen=True)
class EvalSet:
    name: str
    kind: Literal["beir", "yaml"]
    queries: tuple[EvalQuery, ...]
    corpus: tuple[BeirDoc, ...] = ()  # BEIR: the documents to index first
    description: str = ""
    docs: str = ""  # a long-document set: the folder of files to ingest before its YAML questions run


def load_dataset(path: Path, *, max_queries: int | None = None) -> EvalSet:
    """A BEIR folder, a YAML file (``.yaml``/``.yml``), or a long-document folder (``docs/`` beside ``eval.yaml``)."""
    path = Path(path)
    if path.is_dir() and (path / LONGDOC_YAML).is_file() and (path / LONGDOC_DOCS).is_dir():
        s = load_dataset(path / LONGDOC_YAML, max_queries=max_queries)
        return replace(s, name=Path(os.path.abspath(path)).name, docs=str(path / LONGDOC_DOCS))
    if path.is_file() and path.suffix.lower() in (".yaml", ".yml"):
        s = load_yaml_set(path)
        return s if max_queries is None else replace(s, queries=s.queries[:max_queries])
    if path.is_file():
        raise InvalidInput(f"{path} is neither a BEIR folder nor a YAML set (.yaml/.yml)")
    return load_beir(path, max_queries=max_queries)


# The YAML schema as pydantic models (strict: no coercion of 3 to "3" or "3" to 3); a validation error becomes one
# line naming the file, the line (from the YAML node marks) and the field, with the fix.
_Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _ExpectedEntry(_Strict):
    source: _Text | None = None
    page: Annotated[int, Field(ge=1)] | None = None
    section: _Text | None = None
    contains: _Text | None = None

    @model_validator(mode="after")
    def _source_or_contains(self) -> _ExpectedEntry:
        if self.source is None and self.contains is None:
            raise PydanticCustomError("source_or_contains", "needs source or contains")
        return self


class _QueryEntry(_Strict):
    query: _Text
    category: _Text = UNCATEGORIZED
    expected: Annotated[list[_ExpectedEntry], Field(min_length=1)]
    id: str | int | None = None


class _YamlSet(_Strict):
    version: Literal[1]
    description: str = ""
    queries: Annotated[list[_QueryEntry], Field(min_length=1)]


# What each field must be, and what to add when it is missing (by field name; the line and path come from the error).
_MUST = dict.fromkeys(("query", "category", "source", "section", "contains"), "must be non-empty text") | {
    "description": "must be text",
    "page": "must be a page number ≥ 1, got {value!r}",
    "queries": "must be a non-empty list of `- query: …` entries",
    "expected": "must be a non-empty list of `{{source: …, page: …, section: …, contains: …}}`",
    "id": "must be text or a number",
}
_MISSING = {
    "version": f": add `version: {YAML_VERSION}`",
    "queries": ": add a list of `- query: …` entries",
    "expected": ": list where the answer is, e.g. `expected: [{source: 劳动合同法.md}]`",
    "source": " (a path or glob, e.g. 劳动合同法*.md)",
}
_MAPPING_EXAMPLE = {
    0: "`version: 1`",
    2: "`- query: 试用期最长多久`",
    4: "`{source: 劳动合同法.md, section: 第十九条}`",
}
_Loc = tuple[str | int, ...]


def _node_lines(node: Any, loc: _Loc, lines: dict[_Loc, int]) -> None:
    """``lines[loc]``: the 1-based line of every value in the YAML tree (and of each mapping key, at loc + key)."""
    import yaml

    lines[loc] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = yaml.safe_load(yaml.serialize(key_node))
            lines[loc + ("key", key)] = key_node.start_mark.line + 1
            _node_lines(value_node, loc + (key,), lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _node_lines(item, (*loc, i), lines)


def _dotted(loc: _Loc) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p)) for i, p in enumerate(loc))


def _message(path: Path, error: Any, lines: dict[_Loc, int]) -> str:
    """One pydantic error as ``file:line: field: what is wrong (the fix)``."""
    loc: _Loc = tuple(p for p in error["loc"] if not (isinstance(p, str) and p in ("str", "int", "list")))
    kind, field, parent = error["type"], loc[-1] if loc else "", loc[:-1]
    line = lines.get(loc) or lines.get(parent) or lines.get(())
    where = f"{path}:{line}" if line else str(path)
    if kind == "extra_forbidden":
        allowed = {0: "version, description, queries", 2: ", ".join(QUERY_KEYS), 4: ", ".join(EXPECTED_KEYS)}
        what = _dotted(parent) if parent else "the top level"
        line = lines.get((*parent, "key", field), line)
        return f"{path}:{line}: {what}: unknown field {field!r} (allowed: {allowed.get(len(parent), '')})"
    if kind == "source_or_contains":
        return (
            f"{where}: {_dotted(loc)} needs `source` (a path or glob, e.g. 劳动合同法*.md) "
            "or `contains` (text the chunk holds), or both"
        )
    if kind == "missing":
        name = _dotted(loc) if parent else f"`{field}`"
        return f"{where}: {name} is missing{_MISSING.get(str(field), '')}"
    if kind in ("model_type", "dict_type"):
        return (
            f"{where}: {_dotted(loc) or 'the top level'} must be a mapping, e.g. {_MAPPING_EXAMPLE.get(len(loc), '')}"
        )
    if field == "version":
        return f"{where}: version: {error['input']!r} is not supported (use {YAML_VERSION})"
    if isinstance(field, int):  # an item of a list that is not a list: the list itself is wrong
        loc, field = parent, parent[-1]
    must = _MUST.get(str(field), error["msg"]).format(value=error["input"])
    return f"{where}: {_dotted(loc)} {must}"


def load_yaml_set(path: Path) -> EvalSet:
    """Load and validate a YAML set; every error names the file, the line and the field."""
    import yaml

    path = Path(path)
    try:
        root = yaml.compose(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidInput(f"cannot read {path}: {e}") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise InvalidInput(f"{path}{line}: not valid YAML ({e.problem})") from None
    if root is None:
        raise InvalidInput(f"{path}: the file is empty: it needs `version: 1` and `queries:`")
    lines: dict[_Loc, int] = {}
    _node_lines(root, (), lines)
    try:
        data = _YamlSet.model_validate(yaml.safe_load(yaml.serialize(root)))
    except ValidationError as e:
        first = min(e.errors(), key=lambda err: err["type"] != "extra_forbidden")  # a typo explains a missing field
        raise InvalidInput(_message(path, first, lines)) from None
    queries: list[EvalQuery] = []
    seen: set[str] = set()
    for n, q in enumerate(data.queries):
        qid = str(q.id) if q.id is not None else f"q{n + 1}"
        if qid in seen:
            at = lines.get(("queries", n, "id")) or lines[("queries", n)]
            raise InvalidInput(f"{path}:{at}: queries[{n}].id {qid!r} is used twice")
        seen.add(qid)
        expected = tuple(Expected(e.source or "*", e.page, e.section, e.contains) for e in q.expected)
        relevant = {f"expected[{i}]": 1 for i in range(len(expected))}
        queries.append(EvalQuery(qid, q.query, q.category, relevant, expected))
    return EvalSet(path.stem, "yaml", tuple(queries), description=data.description.strip())
