"""Experiment variants stay in their own partitions (issue #33, seed §9 and §11.2): the experiments
package never writes outside the worker's `runtime/experiments/` and never touches memory itself.

An AST scan of every module under src/genworker/experiments:

- only store.py calls a file-writing primitive (`write-outside-store`);
- in store.py, every path written is made from `self.path(...)` or `self.folder(...)`, whose folder is
  `<worker>/runtime/experiments` (`store-path`);
- no module imports genworker.memory or names its write API: a variant's memory is what its run's
  binding allows, nothing else (`memory`);
- every RouteRequest it builds is an `experiment` run, not conversational (no thread: the episode is
  sealed into the run's own partition), bound to no thread, duty, goal, parent or approval
  (`variant-run`): the governance stage gives it the read-only posture, and no variant reads
  another's memory.

The checker is tested on synthetic snippets so that it cannot silently stop seeing things.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import genworker
from genworker.experiments import store
from genworker.testing.ast_rules import Violation

PACKAGE = Path(genworker.__file__).resolve().parent / "experiments"
WRITES = frozenset(
    {"write_atomic", "create_exclusive", "write_text", "write_bytes", "mkdir", "makedirs", "unlink", "rmtree",
     "move_file", "remove_file", "touch", "symlink_to", "hardlink_to", "chmod", "rename", "rmdir"}
)  # fmt: skip
MEMORY_WRITES = frozenset({"write_episode", "write_run", "propose", "decide_candidate", "record_run", "learn_later"})
BOUND = frozenset({"thread_id", "duty_id", "trigger_id", "goal_id", "approval_ref", "parent", "history", "resume"})
PARTITION = frozenset({"path", "folder"})  # ExperimentStore's methods that make paths under runtime/experiments


def _called(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _writes(node: ast.Call) -> bool:
    name = _called(node)
    if name == "open":  # builtin open with a mode that writes
        modes = [*node.args[1:2], *(k.value for k in node.keywords if k.arg == "mode")]
        return any(isinstance(m, ast.Constant) and set(str(m.value)) & set("wax+") for m in modes)
    if isinstance(node.func, ast.Attribute) and node.func.attr == "replace" and _dotted(node.func.value) == "os":
        return True
    return name in WRITES


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _target(node: ast.Call) -> ast.expr | None:
    """The path a write goes to: the first argument of a function, the receiver of a method."""
    if isinstance(node.func, ast.Name):
        return node.args[0] if node.args else None
    assert isinstance(node.func, ast.Attribute)
    if node.func.attr in ("write_atomic", "create_exclusive", "move_file", "remove_file", "rmtree", "makedirs"):
        return node.args[0] if node.args else None
    return node.func.value


def _derived(expr: ast.expr, names: dict[str, ast.expr], seen: frozenset[str] = frozenset()) -> bool:
    """Whether `expr` is built from self.path(...) / self.folder(...), directly or through local names."""
    for sub in ast.walk(expr):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in PARTITION:
            return _dotted(sub.func.value) == "self"
        if isinstance(sub, ast.Name) and sub.id in names and sub.id not in seen:
            return _derived(names[sub.id], names, seen | {sub.id})
    return False


def _functions(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def violations(source: str, *, is_store: bool = False) -> list[Violation]:
    tree = ast.parse(source)
    found: list[Violation] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("genworker.memory"):
            found.append(Violation(node.lineno, "memory", f"imports {node.module}"))
        if isinstance(node, ast.Import) and any(a.name.startswith("genworker.memory") for a in node.names):
            found.append(Violation(node.lineno, "memory", "imports genworker.memory"))
        if isinstance(node, ast.Attribute) and node.attr in MEMORY_WRITES:
            found.append(Violation(node.lineno, "memory", f"reaches {node.attr}"))
        if isinstance(node, ast.Call) and _called(node) == "RouteRequest":
            found += _variant_run(node)
        if isinstance(node, ast.Call) and _writes(node) and not is_store:
            found.append(Violation(node.lineno, "write-outside-store", f"{_called(node)} outside store.py"))
    if is_store:
        for function in _functions(tree):
            names = {
                t.id: a.value for a in ast.walk(function) if isinstance(a, ast.Assign) for t in a.targets
                if isinstance(t, ast.Name)
            }  # fmt: skip
            for node in ast.walk(function):
                if isinstance(node, ast.Call) and _writes(node):
                    target = _target(node)
                    if target is None or not _derived(target, names):
                        found.append(Violation(node.lineno, "store-path", f"{_called(node)} of a path not made by "
                                               "self.path() or self.folder()"))  # fmt: skip
    return sorted(found, key=lambda v: (v.line, v.rule))


def _variant_run(node: ast.Call) -> list[Violation]:
    keywords = {k.arg: k.value for k in node.keywords}
    source = node.args[3] if len(node.args) > 3 else keywords.get("source_type")
    conversational = keywords.get("conversational")
    problems = []
    if not (isinstance(source, ast.Constant) and source.value == "experiment"):
        problems.append("its source_type is not 'experiment'")
    if not (isinstance(conversational, ast.Constant) and conversational.value is False):
        problems.append("it is not conversational=False")
    problems += [f"it names {k}" for k in sorted(keywords.keys() & BOUND)]
    return [Violation(node.lineno, "variant-run", p) for p in problems]


def test_the_store_writes_under_the_workers_runtime_experiments_folder(tmp_path: Path) -> None:
    assert store.FOLDER == ("runtime", "experiments")
    folder = store.ExperimentStore(tmp_path).folder("acme", "alice")
    assert folder == tmp_path / "tenants/acme/workers/alice/runtime/experiments"


@pytest.mark.parametrize("module", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
def test_the_experiments_package_keeps_to_its_partitions(module: Path) -> None:
    source = module.read_text(encoding="utf-8")
    assert violations(source, is_store=module.name == "store.py") == []


@pytest.mark.parametrize(
    ("source", "is_store", "rule"),
    [
        ("def f(p):\n    p.write_text('x')\n", False, "write-outside-store"),
        ("from genworker.fsutil import write_atomic\ndef f(p):\n    write_atomic(p, b'')\n", False,
         "write-outside-store"),
        ("def f(p):\n    open(p, 'w')\n", False, "write-outside-store"),
        ("import os\ndef f(a, b):\n    os.replace(a, b)\n", False, "write-outside-store"),
        ("class S:\n    def f(self, root):\n        write_atomic(root / 'x.json', b'')\n", True, "store-path"),
        ("class S:\n    def f(self, p):\n        q = p / 'x'\n        q.mkdir()\n", True, "store-path"),
        ("from genworker.memory import MemoryService\n", False, "memory"),
        ("def f(m, b):\n    m.write_episode(b)\n", False, "memory"),
        ("RouteRequest(t, w, q, 'chat', conversational=False)\n", False, "variant-run"),
        ("RouteRequest(t, w, q, 'experiment')\n", False, "variant-run"),
        ("RouteRequest(t, w, q, 'experiment', conversational=False, thread_id='shared')\n", False, "variant-run"),
    ],
)  # fmt: skip
def test_the_checker_sees_each_rule(source: str, is_store: bool, rule: str) -> None:
    assert rule in {v.rule for v in violations(source, is_store=is_store)}


def test_the_checker_lets_a_partition_write_through() -> None:
    ok = (
        "class S:\n    def f(self, e):\n        path = self.path(e.t, e.w, e.id)\n"
        "        path.parent.mkdir()\n        write_atomic(path, b'')\n"
        "    def g(self, e):\n        folder = self.folder(e.t, e.w) / e.id\n"
        "        write_atomic(folder / 'c.md', b'')\n"
        "RouteRequest(t, w, q, 'experiment', 'experiment:x', conversational=False, skill_id=s)\n"
    )
    assert violations(ok, is_store=True) == []
