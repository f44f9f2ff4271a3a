"""Only the task lifecycle aggregate writes task and run state (seed §8).

An AST scan of every module under src/genworker. Outside the three writer modules of
`genworker.worker.lifecycle` nothing may:

- import the store or its file primitives (`store-import`),
- call or reference a TaskStore write method (`store-write`),
- build a RunRecord or StateChange, or `replace(...)` state fields in a module that uses run
  values (`run-state`),
- spell a task/run file path: "tasks/active", "tasks/done", "runs/_idempotency", or join a
  "runs" / "tasks" / "_idempotency" path segment (`task-path`).

The checker is tested on synthetic snippets so that it cannot silently stop seeing things.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import genworker
from genworker.testing.ast_rules import Violation, docstring_ids, uses_names
from genworker.worker.lifecycle.store import TaskStore

SRC = Path(genworker.__file__).resolve().parent
WRITERS = frozenset({"worker/lifecycle/task_aggregate.py", "worker/lifecycle/store.py", "worker/lifecycle/files.py"})
PRIVATE_MODULES = ("genworker.worker.lifecycle.store", "genworker.worker.lifecycle.files")
STORE_WRITES = frozenset(
    {
        "create_run",
        "save_run",
        "create_manifest",
        "discard_manifest",
        "finish_manifest",
        "claim_idempotency",
        "discard_claim",
    }
)
RUN_VALUES = frozenset({"RunRecord", "RunState", "RunTimings", "StateChange"})
STATE_FIELDS = frozenset({"state", "goal_status", "timings", "history", "pending_approval", "version", "error"})
PATH_FRAGMENTS = ("tasks/active", "tasks/done", "runs/_idempotency")
PATH_SEGMENTS = frozenset({"runs", "tasks", "_idempotency"})
PATH_CALLS = frozenset({"safe_join", "joinpath", "Path", "PurePath", "PurePosixPath", "join"})


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _segment(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value in PATH_SEGMENTS


def violations(source: str) -> list[Violation]:
    tree = ast.parse(source)
    docstrings = docstring_ids(tree)
    uses_runs = uses_names(tree, RUN_VALUES)
    found: list[Violation] = []
    for node in ast.walk(tree):
        found.extend(_check(node, docstrings, uses_runs))
    return sorted(found, key=lambda v: (v.line, v.rule))


def _check(node: ast.AST, docstrings: set[int], uses_runs: bool) -> Iterator[Violation]:  # noqa: C901
    line = getattr(node, "lineno", 0)
    if isinstance(node, ast.ImportFrom) and node.module:
        full = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        if any(name.startswith(PRIVATE_MODULES) for name in full) or any(a.name == "TaskStore" for a in node.names):
            yield Violation(line, "store-import", node.module)
    elif isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.startswith(PRIVATE_MODULES):
                yield Violation(line, "store-import", alias.name)
    elif isinstance(node, ast.Attribute) and node.attr in STORE_WRITES:
        yield Violation(line, "store-write", node.attr)
    elif isinstance(node, ast.Call):
        name = _name(node.func)
        if name in {"RunRecord", "StateChange"}:
            yield Violation(line, "run-state", f"{name}(...)")
        if name == "replace" and uses_runs:
            fields = sorted(kw.arg for kw in node.keywords if kw.arg in STATE_FIELDS)
            if fields:
                yield Violation(line, "run-state", f"replace(..., {', '.join(f'{f}=' for f in fields)})")
        if name in PATH_CALLS and any(_segment(arg) for arg in node.args):
            yield Violation(line, "task-path", f"{name}(... path segment ...)")
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and (_segment(node.left) or _segment(node.right)):
        yield Violation(line, "task-path", "/ path segment")
    elif (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and any(fragment in node.value for fragment in PATH_FRAGMENTS)
    ):
        yield Violation(line, "task-path", repr(node.value))


def modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def rel(path: Path) -> str:
    return path.relative_to(SRC).as_posix()


# -- the real source ----------------------------------------------------------------


def test_the_scan_covers_the_package() -> None:
    names = {rel(p) for p in modules()}
    assert names >= WRITERS, "a writer module was renamed: update WRITERS"
    assert {"worker/task.py", "worker/lifecycle/recovery.py", "engine/dispatcher.py"} <= names


def test_store_write_methods_are_the_ones_checked() -> None:
    public = {name for name in vars(TaskStore) if not name.startswith("_") and callable(getattr(TaskStore, name))}
    reads = {n for n in public if n.startswith(("read_", "list_", "run_", "claim_path", "claim_lock"))}
    reads |= {"worker_dir", "manifest_path", "workers", "active_run_refs"}
    assert public - reads == STORE_WRITES, "a TaskStore method was added or renamed: classify it here"


@pytest.mark.parametrize("path", [p for p in modules() if rel(p) not in WRITERS], ids=rel)
def test_only_the_lifecycle_aggregate_writes_task_state(path: Path) -> None:
    assert violations(path.read_text(encoding="utf-8")) == []


def test_the_writers_are_what_the_checker_flags() -> None:
    """Scanned without their exemption, the writers light up: the checker sees real code."""
    aggregate = violations((SRC / "worker/lifecycle/task_aggregate.py").read_text(encoding="utf-8"))
    store = violations((SRC / "worker/lifecycle/store.py").read_text(encoding="utf-8"))
    assert {"store-import", "store-write", "run-state"} <= {v.rule for v in aggregate}
    assert {"store-import", "task-path"} <= {v.rule for v in store}


# -- the checker itself -------------------------------------------------------------

BAD = {
    "store-import": [
        "from genworker.worker.lifecycle.store import TaskStore",
        "from genworker.worker.lifecycle import store",
        "import genworker.worker.lifecycle.files",
        "from genworker.worker.lifecycle.files import write_atomic",
    ],
    "store-write": [
        "store.save_run(run)",
        "self._tasks.finish_manifest(t, w, task_id)",
        "await asyncio.to_thread(s.create_manifest, m)",
    ],
    "run-state": [
        "from genworker.worker.task import RunRecord\nx = RunRecord(run_id='r', **rest)",
        "from genworker.worker.task import RunState\nrun = replace(run, state=RunState.COMPLETED)",
        "from genworker.worker import task\nrun = dataclasses.replace(run, version=2, state=task.RunState.FAILED)",
        "from genworker.worker.task import StateChange\nh = StateChange(now, a, b)",
    ],
    "task-path": [
        "p = worker_dir / 'runs' / f'{run_id}.json'",
        "p = safe_join(root, 'tenants', t, 'workers', w, 'tasks')",
        "p = root.joinpath('tasks', 'active')",
        "open(f'{root}/tasks/active/{task_id}.json', 'w')",
        "Path(base, 'runs/_idempotency/x.json').write_text('{}')",
    ],
}

GOOD = [
    "await lifecycle.start(ref)",
    "run = await lifecycle.get_run(ref)\nruns = await lifecycle.list_runs(t, w, limit=20)",
    "from genworker.worker.lifecycle import TaskLifecycle, recover_interrupted",
    "from genworker.worker.task import TaskManifest, RunRef",
    "@router.get('/api/v1/workers/{worker_id}/runs/{run_id}')\nasync def get(run_id: str) -> None: ...",
    "scope = replace(scope, posture='proposal_only')",  # no run values in this module
    "from genworker.worker.task import RunRecord\nx = replace(req, state_dir=d)",
    'def f() -> None:\n    """Moves the manifest to tasks/done/."""',
    "counts = {'runs': 3, 'tasks': 2}\nlabel = 'tasks'",
    "if run.state is RunState.RUNNING and 'done' in flags: pass",
    "history.save_session(s)",
]


@pytest.mark.parametrize(("rule", "snippet"), [(r, s) for r, snippets in BAD.items() for s in snippets])
def test_the_checker_flags(rule: str, snippet: str) -> None:
    assert rule in {v.rule for v in violations(snippet)}, snippet


@pytest.mark.parametrize("snippet", GOOD)
def test_the_checker_allows(snippet: str) -> None:
    assert violations(snippet) == []


def test_violations_name_their_line() -> None:
    source = "import os\n\n\ndef f(store):\n    store.save_run(x)\n"
    assert violations(source) == [Violation(5, "store-write", "save_run")]
