"""Evaluation sets: BEIR folders (a corpus to index, qrels by document id) and YAML sets (queries with the
sources, pages and sections they should find, run against an existing index).

A YAML set::

    version: 1
    description: 劳动法检查集
    queries:
      - query: 试用期最长多久
        category: 试用期
        expected:                     # any one match is a success ("any-match")
          - source: 劳动合同法*.md      # fnmatch glob over the ingested source path (default: any source)
            section: 第二章 劳动合同的订立 > 第十九条   # optional: prefix of the section path, from any level
            page: 3                   # optional
            contains: 试用期最长不得超过六个月  # optional: text the returned chunk holds (whitespace ignored)
        # reason: 第十九条 sets the probation limits

An entry needs ``source`` or ``contains``; the fields it has must all hold. ``contains`` scores retrieval over long
documents however they are chunked: a chunk counts when its text holds those characters.

Both kinds load into one ``EvalSet``: every query has ``relevant`` targets and a ``label`` function that maps a
retrieved chunk to a target id, so the same metric functions score both.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from zhiku.errors import InvalidInput
from zhiku.evaluation.beir import BeirDataset, BeirDoc, load_beir
from zhiku.types import Chunk

YAML_VERSION = 1
UNCATEGORIZED = "未分类"
QUERY_KEYS = ("query", "category", "expected", "id")
EXPECTED_KEYS = ("source", "page", "section", "contains")
SECTION_SEP = " > "


def squash(text: str) -> str:
    """``text`` without any whitespace (how ``contains`` compares: line breaks and spaces never matter)."""
    return "".join(text.split())


@dataclass(frozen=True)
class Expected:
    """One acceptable place for the answer: a source glob, optionally a page, a section prefix and a text the chunk
    must contain (whitespace-insensitive)."""

    source: str = "*"
    page: int | None = None
    section: str | None = None
    contains: str | None = None

    def matches(self, chunk: Chunk, text: str | None = None) -> bool:
        """Whether ``chunk`` satisfies every field; ``text`` (default: the chunk's text) is what ``contains`` searches
        (the part of the chunk that fits a context budget)."""
        if not fnmatch.fnmatchcase(chunk.source, self.source):
            return False
        if self.page is not None and chunk.page != self.page:
            return False
        if self.section is not None and not section_matches(chunk.section, self.section):
            return False
        return self.contains is None or squash(self.contains) in squash(chunk.text if text is None else text)

    def to_json(self) -> dict[str, Any]:
        fields = (("source", self.source), ("page", self.page), ("section", self.section), ("contains", self.contains))
        return {k: v for k, v in fields if v is not None}


def section_matches(section: str, prefix: str) -> bool:
    """``prefix`` starts the chunk's section path at any level: ``第二章 > 第十九条`` matches
    ``劳动合同法 > 第二章 > 第十九条至第二十条`` (the last level may be cut short)."""
    prefix = prefix.strip()
    if not prefix:
        return True
    parts = section.split(SECTION_SEP)
    return any(SECTION_SEP.join(parts[i:]).startswith(prefix) for i in range(len(parts)))


@dataclass(frozen=True)
class EvalQuery:
    qid: str
    text: str
    category: str
    relevant: dict[str, int]  # target id -> grade (> 0)
    expected: tuple[Expected, ...] = ()  # YAML sets: the targets are "expected[i]"

    def label(self, chunk: Chunk, text: str | None = None) -> str:
        """The target a retrieved chunk counts for: its document (BEIR) or the first expected entry it matches
        (``text``: the part of the chunk that was returned, default all of it)."""
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
    path: str = ""

    @property
    def categories(self) -> list[str]:
        return sorted({q.category for q in self.queries})


def from_beir(data: BeirDataset, path: Path | str = "") -> EvalSet:
    queries = tuple(EvalQuery(qid, text, UNCATEGORIZED, dict(data.qrels[qid])) for qid, text in data.queries.items())
    return EvalSet(data.name, "beir", queries, data.corpus, path=str(path))


def load_dataset(path: Path, *, max_queries: int | None = None) -> EvalSet:
    """A BEIR folder or a YAML file (``.yaml``/``.yml``)."""
    path = Path(path)
    if path.is_file() and path.suffix.lower() in (".yaml", ".yml"):
        s = load_yaml_set(path)
        if max_queries is not None:
            s = EvalSet(s.name, s.kind, s.queries[:max_queries], s.corpus, s.description, s.path)
        return s
    if path.is_file():
        raise InvalidInput(f"{path} is neither a BEIR folder nor a YAML set (.yaml/.yml)")
    return from_beir(load_beir(path, max_queries=max_queries), path)


# ------------------------------------------------------------------------------------------- YAML
def _where(path: Path, node: Any) -> str:
    return f"{path}:{node.start_mark.line + 1}"


def _scalar(node: Any) -> Any:
    """The Python value of a YAML scalar node (int, str, …) as safe_load would give it."""
    import yaml

    return yaml.safe_load(yaml.serialize(node))


def _mapping(path: Path, node: Any, what: str, allowed: tuple[str, ...], example: str) -> dict[str, Any]:
    import yaml

    if not isinstance(node, yaml.MappingNode):
        raise InvalidInput(f"{_where(path, node)}: {what} must be a mapping, e.g. {example}")
    out: dict[str, Any] = {}
    for key_node, value_node in node.value:
        key = _scalar(key_node)
        if key not in allowed:
            raise InvalidInput(
                f"{_where(path, key_node)}: {what}: unknown field {key!r} (allowed: {', '.join(allowed)})"
            )
        out[key] = value_node
    return out


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
    top = _mapping(path, root, "the top level", ("version", "description", "queries"), "`version: 1`")
    if "version" not in top:
        raise InvalidInput(f"{_where(path, root)}: `version` is missing: add `version: {YAML_VERSION}`")
    version = _scalar(top["version"])
    if version != YAML_VERSION:
        raise InvalidInput(
            f"{_where(path, top['version'])}: version: {version!r} is not supported (use {YAML_VERSION})"
        )
    description = _scalar(top["description"]) if "description" in top else ""
    if not isinstance(description, str):
        raise InvalidInput(f"{_where(path, top['description'])}: description must be text")
    if "queries" not in top:
        raise InvalidInput(f"{_where(path, root)}: `queries` is missing: add a list of `- query: …` entries")
    qnode = top["queries"]
    if not isinstance(qnode, yaml.SequenceNode) or not qnode.value:
        raise InvalidInput(f"{_where(path, qnode)}: queries must be a non-empty list of `- query: …` entries")
    queries: list[EvalQuery] = []
    seen: set[str] = set()
    for n, item in enumerate(qnode.value):
        where = f"queries[{n}]"
        q = _mapping(path, item, where, QUERY_KEYS, "`- query: 试用期最长多久`")
        if "query" not in q:
            raise InvalidInput(f"{_where(path, item)}: {where}.query is missing")
        text = _scalar(q["query"])
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput(f"{_where(path, q['query'])}: {where}.query must be non-empty text")
        category = _scalar(q["category"]) if "category" in q else UNCATEGORIZED
        if not isinstance(category, str) or not category.strip():
            raise InvalidInput(f"{_where(path, q['category'])}: {where}.category must be non-empty text")
        qid = str(_scalar(q["id"])) if "id" in q else f"q{n + 1}"
        if qid in seen:
            raise InvalidInput(f"{_where(path, q.get('id', item))}: {where}.id {qid!r} is used twice")
        seen.add(qid)
        if "expected" not in q:
            raise InvalidInput(
                f"{_where(path, item)}: {where}.expected is missing: list where the answer is, "
                "e.g. `expected: [{source: 劳动合同法.md}]`"
            )
        enode = q["expected"]
        if not isinstance(enode, yaml.SequenceNode) or not enode.value:
            raise InvalidInput(
                f"{_where(path, enode)}: {where}.expected must be a non-empty list of "
                "`{source: …, page: …, section: …, contains: …}`"
            )
        expected = tuple(_expected(path, e, f"{where}.expected[{i}]") for i, e in enumerate(enode.value))
        queries.append(
            EvalQuery(
                qid, text.strip(), category.strip(), {f"expected[{i}]": 1 for i in range(len(expected))}, expected
            )
        )
    return EvalSet(path.stem, "yaml", tuple(queries), description=description.strip(), path=str(path))


def _text_field(path: Path, e: dict[str, Any], key: str, where: str) -> str | None:
    value = _scalar(e[key]) if key in e else None
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise InvalidInput(f"{_where(path, e[key])}: {where}.{key} must be non-empty text")
    return value.strip() if value is not None else None


def _expected(path: Path, node: Any, where: str) -> Expected:
    e = _mapping(path, node, where, EXPECTED_KEYS, "`{source: 劳动合同法.md, section: 第十九条}`")
    if "source" not in e and "contains" not in e:
        raise InvalidInput(
            f"{_where(path, node)}: {where} needs `source` (a path or glob, e.g. 劳动合同法*.md) "
            "or `contains` (text the chunk holds), or both"
        )
    source = _text_field(path, e, "source", where)
    page = _scalar(e["page"]) if "page" in e else None
    if page is not None and (isinstance(page, bool) or not isinstance(page, int) or page < 1):
        raise InvalidInput(f"{_where(path, e['page'])}: {where}.page must be a page number ≥ 1, got {page!r}")
    return Expected(
        source or "*", page, _text_field(path, e, "section", where), _text_field(path, e, "contains", where)
    )
