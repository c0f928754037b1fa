"""The package layout holds: no import cycle between zhiku's modules (lazy imports inside functions count too), the
layers import downwards only, and the Store roles stay small."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _modules() -> dict[str, Path]:
    mods = {}
    for p in (SRC / "zhiku").rglob("*.py"):
        parts = list(p.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p
    return mods


def _imports(path: Path, mods: dict[str, Path]) -> set[str]:
    """Every zhiku module this file imports, at module level or inside functions."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for n in names:
            while n and n not in mods:
                n = n.rpartition(".")[0]
            if n.startswith("zhiku"):
                found.add(n)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles() -> None:
    mods = _modules()
    # a package's __init__ importing its own submodules is not a cycle through the parent package
    graph = {
        m: {d for d in _imports(p, mods) if d != m and not (m.startswith(d + ".") and d != "zhiku")}
        for m, p in mods.items()
    }
    assert _cycles(graph) == []


def _importers(prefix: str) -> dict[str, set[str]]:
    """Each module under ``prefix`` with the zhiku modules it imports."""
    mods = _modules()
    return {m: _imports(p, mods) for m, p in mods.items() if m == prefix or m.startswith(prefix + ".")}


def _reaching(prefix: str, below: tuple[str, ...], allowed: tuple[str, ...] = ()) -> dict[str, set[str]]:
    """The modules under ``prefix`` that import a module under one of ``below`` (except those ``allowed``)."""
    under = lambda m, ps: any(m == p or m.startswith(p + ".") for p in ps)  # noqa: E731
    found = {
        m: {d for d in deps if under(d, below) and not under(d, allowed)} for m, deps in _importers(prefix).items()
    }
    return {m: deps for m, deps in found.items() if deps}


def test_what_retrieval_and_ingest_share_lives_below_both() -> None:
    # article patterns (zhiku.text) and the chat service (zhiku.llm) are imported from below, not across
    assert _reaching("zhiku.retrieval", ("zhiku.ingest",)) == {}
    assert _reaching("zhiku.ingest", ("zhiku.retrieval",)) == {}
    assert _reaching("zhiku.llm", ("zhiku.ingest", "zhiku.retrieval", "zhiku.api")) == {}
    # retrieval reads a store through the Store protocols only: no concrete store, no private part of one
    assert _reaching("zhiku.retrieval", ("zhiku.stores",), allowed=("zhiku.stores.base",)) == {}


def test_surfaces_only_parse_call_the_library_and_format() -> None:
    """The CLI, the MCP server and the dashboard reach the index through ``zhiku.api`` (and evaluation, errors,
    types, settings): never retrieval, ingest or stores, and of tracing only the trace records they show."""
    below = ("zhiku.retrieval", "zhiku.ingest", "zhiku.stores", "zhiku.observability")
    records = ("zhiku.observability.trace", "zhiku.observability.sampling")
    for surface in ("zhiku.cli", "zhiku.mcp", "zhiku.dashboard"):
        assert _reaching(surface, below, allowed=records) == {}, surface


def test_store_roles_stay_small_and_callers_use_them() -> None:
    from zhiku.stores.base import ROLES, Store

    def methods(cls: type) -> set[str]:
        return {n for n, v in vars(cls).items() if callable(v) and not n.startswith("_")}

    sizes = {role.__name__: len(methods(role)) for role in ROLES}
    assert all(n <= 8 for n in sizes.values()), sizes
    assert set().union(*(methods(r) for r in ROLES)) == {
        n for n in dir(Store) if not n.startswith("_") and callable(getattr(Store, n))
    }
    search = (SRC / "zhiku" / "retrieval" / "search.py").read_text(encoding="utf-8")
    pipeline = (SRC / "zhiku" / "ingest" / "pipeline.py").read_text(encoding="utf-8")
    assert "store: Retriever" in search and "store: Writer" in pipeline
