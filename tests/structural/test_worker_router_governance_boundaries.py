"""Boundaries of task governance, checked on the source (AST):

- governance and skill matching decide, they do not run anything: they import no engine, LLM,
  API, channel or store code;
- a GovernanceDecision is made only by the decision table (the router copies it, never builds one);
- one package owns the snapshot folder layout.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "genworker"
GOVERNANCE = PACKAGE / "worker" / "governance"
SKILL_MATCHER = PACKAGE / "worker" / "skill_matcher.py"
ALLOWED_IMPORTS = (
    "genworker.ids",
    "genworker.tools.base",
    "genworker.tools.context",
    "genworker.tools.middlewares.policy",
    "genworker.workspace",
    "genworker.worker.governance",
    "genworker.write_journal",  # how its snapshot files are made durable (a file primitive, not a store)
)


def modules(root: Path) -> Iterator[tuple[Path, ast.Module]]:
    paths = [root] if root.is_file() else sorted(root.rglob("*.py"))
    for path in paths:
        yield path, ast.parse(path.read_text(encoding="utf-8"), str(path))


def genworker_imports(tree: ast.Module) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        yield from (n for n in names if n == "genworker" or n.startswith("genworker."))


def allowed(module: str) -> bool:
    return any(module == a or module.startswith(f"{a}.") for a in ALLOWED_IMPORTS)


def test_the_checks_find_the_code() -> None:
    assert (GOVERNANCE / "decision_table.py").is_file()
    assert SKILL_MATCHER.is_file()


def test_governance_and_skill_matching_import_no_runtime_machinery() -> None:
    bad = [
        f"{path.relative_to(SRC)}: {module}"
        for root in (GOVERNANCE, SKILL_MATCHER)
        for path, tree in modules(root)
        for module in genworker_imports(tree)
        if not allowed(module)
    ]
    assert bad == []


def test_only_the_decision_table_builds_decisions() -> None:
    builders = []
    for path, tree in modules(PACKAGE):
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                if called == "GovernanceDecision":
                    builders.append(path.relative_to(PACKAGE).as_posix())
    assert builders and set(builders) == {"worker/governance/decision_table.py"}


def test_one_owner_of_the_snapshot_layout() -> None:
    """Other code imports POLICY_DIR / CONTRACT_DIR or goes through SnapshotStore (docstrings may mention them)."""
    owners = set()
    for path, tree in modules(PACKAGE):
        docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
        strings = (
            n.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
        )
        if any("policy_snapshots" in text or "contract_snapshots" in text for text in strings):
            owners.add(path.relative_to(PACKAGE).as_posix())
    assert owners == {"worker/governance/snapshots.py"}
