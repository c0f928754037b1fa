"""The package layout holds: no import cycle between zhiku's modules (lazy imports inside functions count too), and
the Store roles stay small. Modules are split where a concept ends, not at a line count."""

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
