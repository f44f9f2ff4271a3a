"""The API reads the runtime and its services through typed dependencies (api/deps.py), never by
probing for attributes: no `getattr(` on the runtime or `app.state` under genworker.api, and only
the app factory (api/app.py) sets `app.state.<x>` (issue #24 item 2)."""

from __future__ import annotations

import ast
from pathlib import Path

import genworker

API = Path(genworker.__file__).resolve().parent / "api"
FACTORY = API / "app.py"


def _probed(node: ast.Call) -> str | None:
    """The source of getattr's object when it is the runtime or app state, else None."""
    if not (isinstance(node.func, ast.Name) and node.func.id in {"getattr", "hasattr"} and node.args):
        return None
    target = ast.unparse(node.args[0])
    return target if "runtime" in target or target.endswith(".state") else None


def _state_writes(tree: ast.AST) -> list[ast.expr]:
    targets: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets.extend(node.targets)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets.append(node.target)
    return [t for t in targets if isinstance(t, ast.Attribute) and ast.unparse(t.value).endswith("app.state")]


def test_no_getattr_on_the_runtime_or_app_state() -> None:
    found = []
    for path in sorted(API.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and (target := _probed(node)) is not None:
                found.append(f"{path.relative_to(API)}:{node.lineno} getattr on {target}")
    assert not found, "read the service through api/deps.py:\n" + "\n".join(found)


def test_only_the_app_factory_sets_app_state() -> None:
    found = []
    for path in sorted(API.rglob("*.py")):
        if path == FACTORY:
            continue
        for target in _state_writes(ast.parse(path.read_text(encoding="utf-8"))):
            found.append(f"{path.relative_to(API)}:{target.lineno} sets {ast.unparse(target)}")
    assert not found, "declare and build it in api/app.py create_app:\n" + "\n".join(found)


def test_the_checks_see_what_they_look_for() -> None:
    probe = ast.parse("getattr(request.app.state, 'x', None)\ngetattr(runtime, 'inbox', None)\ngetattr(job, 'n', None)")
    calls = [n for n in ast.walk(probe) if isinstance(n, ast.Call)]
    assert [_probed(c) for c in calls] == ["request.app.state", "runtime", None]
    writes = _state_writes(ast.parse("request.app.state.x = 1\nx = request.app.state.y = 2\nrequest.state.p = 3"))
    assert [ast.unparse(t) for t in writes] == ["request.app.state.x", "request.app.state.y"]
