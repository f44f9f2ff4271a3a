"""The top-level packages of genworker form layers; a module imports only from its own package or
from a lower layer, and no files inside a package import each other in a circle (issue #24).

The import graph is read with `ast` from every module under src/genworker. Every import statement
counts: module level, inside functions (a deferred import is still a dependency) and under
`if TYPE_CHECKING:` (a type names a concept the module depends on; keeping those in the graph
costs nothing today and stops a cycle from hiding behind the guard).

`KNOWN_UPWARD` and `KNOWN_CIRCLES` list what is not fixed yet; each entry must still exist, so the
lists only shrink. Adding to them needs a reason in the issue tracker.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

import genworker

SRC = Path(genworker.__file__).resolve().parent

# Lowest first. A package may import a package of a strictly lower layer only.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"ids", "fsutil", "group_commit", "settings"}),  # leaf utilities
    frozenset({"write_journal", "observability"}),
    frozenset({"workspace"}),  # file models and loading
    frozenset({"auth", "bus", "conversation", "cluster"}),  # stores, the bus, worker ownership across processes
    frozenset({"llm", "mail", "delivery"}),  # clients of outside services: LiteLLM, IMAP; the outbox
    frozenset({"tools"}),
    frozenset({"memory"}),
    frozenset({"engine"}),
    frozenset({"worker", "streaming"}),
    frozenset({"supervision"}),  # policies watching runs: wraps the engine's tools and events (#33)
    frozenset({"experiments"}),  # isolated variants through the router, judged by one protocol (#33)
    frozenset({"channels"}),
    frozenset({"autonomy"}),
    frozenset({"runtime"}),  # composition
    frozenset({"dashboard"}),
    frozenset({"api"}),
    frozenset({"cli", "testing"}),
    frozenset({"__main__"}),
)

# (importing module, imported module) pairs that still point upward: none are left (#24 item 1).
KNOWN_UPWARD: frozenset[tuple[str, str]] = frozenset()

# Sets of modules inside one package that import each other in a circle.
KNOWN_CIRCLES: frozenset[frozenset[str]] = frozenset()


@dataclass(frozen=True)
class Import:
    importer: str  # module name without the "genworker." prefix
    imported: str
    line: int


def module_names(root: Path) -> dict[str, Path]:
    """`"tools.base" -> path` for every module under `root`; a package is named by its folder."""
    names = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def imports_of(name: str, source: str, known: Iterable[str], *, is_package: bool) -> Iterator[Import]:
    """Every genworker module that `source` (module `name`) imports, at any depth of the tree."""
    modules = set(known)
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = ["genworker", *filter(None, package.split("."))]
                base = ".".join(parts[: len(parts) - node.level + 1])
                origin = f"{base}.{node.module}" if node.module else base
            else:
                origin = node.module or ""
            targets = [f"{origin}.{alias.name}" for alias in node.names]
            targets = [t if t.removeprefix("genworker.") in modules else origin for t in targets]
        else:
            continue
        for target in targets:
            if not target.startswith("genworker."):
                continue
            short = target.removeprefix("genworker.")
            while short not in modules and "." in short:
                short = short.rpartition(".")[0]
            if short in modules and short != name:
                yield Import(name, short, node.lineno)


def import_graph(root: Path = SRC) -> list[Import]:
    names = module_names(root)
    found: list[Import] = []
    for name, path in sorted(names.items()):
        source = path.read_text(encoding="utf-8")
        found.extend(imports_of(name, source, names, is_package=path.name == "__init__.py"))
    return found


def unit(module: str) -> str:
    """The top-level package a module belongs to."""
    return module.split(".")[0]


def layer_of(layers: tuple[frozenset[str], ...]) -> dict[str, int]:
    return {name: rank for rank, names in enumerate(layers) for name in names}


def upward(imports: Iterable[Import], layers: tuple[frozenset[str], ...]) -> list[Import]:
    """Imports that reach a package of the same or a higher layer than the importer's."""
    rank = layer_of(layers)
    return [
        i for i in imports if unit(i.importer) != unit(i.imported) and rank[unit(i.imported)] >= rank[unit(i.importer)]
    ]


def circles(imports: Iterable[Import]) -> list[frozenset[str]]:
    """Strongly connected sets (> 1 module) of the module graph, each inside one package."""
    graph: Mapping[str, set[str]] = defaultdict(set)
    for i in imports:
        graph[i.importer].add(i.imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


@pytest.fixture(scope="module")
def graph() -> list[Import]:
    return import_graph()


def test_every_top_level_package_has_a_layer(graph: list[Import]) -> None:
    ranked = layer_of(LAYERS)
    units = {unit(name) for name in module_names(SRC)} - {""}
    assert sorted(units - ranked.keys()) == [], "add the new package to LAYERS"
    assert sorted(ranked.keys() - units) == [], "a package in LAYERS no longer exists"


def test_no_new_upward_import(graph: list[Import]) -> None:
    new = [
        f"{i.importer}:{i.line} imports {i.imported}"
        for i in upward(graph, LAYERS)
        if (i.importer, i.imported) not in KNOWN_UPWARD
    ]
    assert new == [], "move the definition down to the layer that owns it"


def test_known_upward_imports_still_exist(graph: list[Import]) -> None:
    present = {(i.importer, i.imported) for i in upward(graph, LAYERS)}
    assert sorted(KNOWN_UPWARD - present) == [], "fixed: remove from KNOWN_UPWARD"


def test_top_level_packages_form_a_dag_apart_from_known_edges(graph: list[Import]) -> None:
    remaining = [i for i in graph if (i.importer, i.imported) not in KNOWN_UPWARD]
    package_edges = [
        Import(unit(i.importer), unit(i.imported), 0) for i in remaining if unit(i.importer) != unit(i.imported)
    ]
    assert circles(package_edges) == []


def test_no_new_file_circle(graph: list[Import]) -> None:
    found = set(circles(graph))
    assert sorted(map(sorted, found - KNOWN_CIRCLES)) == [], "files import each other in a circle"
    assert sorted(map(sorted, KNOWN_CIRCLES - found)) == [], "fixed: remove from KNOWN_CIRCLES"


# The checker itself, on synthetic packages, so that it cannot silently stop seeing imports.


def _write(root: Path, files: Mapping[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_checker_sees_every_kind_of_import(tmp_path: Path) -> None:
    root = _write(
        tmp_path,
        {
            "__init__.py": "",
            "low/__init__.py": "",
            "low/a.py": "import genworker.high.x\n",
            "low/b.py": "def f():\n    from genworker.high import y\n",
            "low/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from genworker.high.x import Z\n",
            "low/d.py": "from .a import q\nfrom . import b\n",
            "high/__init__.py": "from genworker.low.a import q\n",
            "high/x.py": "",
            "high/y.py": "",
        },
    )
    imports = import_graph(root)
    layers = (frozenset({"low"}), frozenset({"high"}))
    assert sorted((i.importer, i.imported) for i in upward(imports, layers)) == [
        ("low.a", "high.x"),
        ("low.b", "high.y"),
        ("low.c", "high.x"),
    ]
    assert {(i.importer, i.imported) for i in imports} >= {("low.d", "low.a"), ("low.d", "low.b"), ("high", "low.a")}


def test_checker_finds_a_file_circle(tmp_path: Path) -> None:
    root = _write(
        tmp_path,
        {
            "__init__.py": "",
            "p/__init__.py": "from .m import X\n",
            "p/m.py": "def f():\n    from genworker.p import Y\n",
            "p/n.py": "from genworker.p.m import X\n",
        },
    )
    assert circles(import_graph(root)) == [frozenset({"p", "p.m"})]
