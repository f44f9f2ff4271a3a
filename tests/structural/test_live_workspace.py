"""Tests and benchmarks never use the repository's live `workspace/` folder: people add workers
there (README "Add a worker") and a running server writes runtime state into it. They use the demo
as git tracks it, through the `demo_workspace_src` / `demo_workspace` fixtures (tests/conftest.py).

Two nets: the source is searched for paths to the live folder (here), and an audit hook fails any
test that opens, lists or changes a file under it at run time (tests/conftest.py).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = sorted([*(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")])
# the audit hook that watches the live folder
ALLOWED = {"tests/conftest.py": {'_GUARD = LiveWorkspaceGuard(ROOT / "workspace")'}}
PATH_CALLS = {"Path", "PurePath", "PosixPath", "PurePosixPath", "join", "abspath", "realpath"}


def _names_the_workspace(node: ast.AST) -> bool:
    """A string literal path whose first part is `workspace` ("workspace", "./workspace/tenants")."""
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return False
    parts = [p for p in node.value.removeprefix("--workspace=").split("/") if p not in ("", ".")]
    return bool(parts) and parts[0] == "workspace"


def _repo_anchored(tree: ast.AST) -> Callable[[ast.AST], bool]:
    """Whether an expression is (derived from) a path computed from `__file__`, i.e. inside the repo."""
    anchored: set[str] = {"__file__"}

    def anchors(node: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id in anchored for n in ast.walk(node))

    assigns = [n for n in ast.walk(tree) if isinstance(n, ast.Assign | ast.AnnAssign) and n.value is not None]
    grown = True
    while grown:
        before = len(anchored)
        for assign in assigns:
            targets = assign.targets if isinstance(assign, ast.Assign) else [assign.target]
            if assign.value is not None and anchors(assign.value):
                anchored.update(t.id for t in targets if isinstance(t, ast.Name))
        grown = len(anchored) > before
    return anchors


def live_workspace_paths(source: str) -> list[int]:
    """Lines building a path to the live workspace folder."""
    tree = ast.parse(source)
    anchors = _repo_anchored(tree)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            if _names_the_workspace(node.right) and anchors(node.left):  # ROOT / "workspace"
                found.add(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            args = node.args
            if name == "joinpath" and isinstance(node.func, ast.Attribute) and anchors(node.func.value):
                if args and _names_the_workspace(args[0]):  # ROOT.joinpath("workspace")
                    found.add(node.lineno)
            elif name in PATH_CALLS and args and _names_the_workspace(args[0]):  # Path("workspace"): the cwd's
                found.add(node.lineno)
        elif isinstance(node, ast.List | ast.Tuple):  # [..., "--workspace", "workspace"] or "--workspace=workspace"
            items = node.elts
            for i, item in enumerate(items):
                flag = isinstance(item, ast.Constant) and item.value == "--workspace"
                if (flag and i + 1 < len(items) and _names_the_workspace(items[i + 1])) or (
                    isinstance(item, ast.Constant) and str(item.value).startswith("--workspace=workspace")
                ):
                    found.add(item.lineno)
    return sorted(found)


OLD_WAYS = {
    "conftest": 'ROOT = Path(__file__).resolve().parents[1]\nDEMO_WORKSPACE = ROOT / "workspace"\n',
    "inline": 'registry = WorkspaceRegistry(Path(__file__).resolve().parents[2] / "workspace")\n',
    "chained": 'ROOT = Path(__file__).parents[2]\nWORKSPACE = ROOT\nDEMO = WORKSPACE / "workspace/tenants/demo"\n',
    "copy": 'HERE = Path(__file__).parent\nshutil.copytree(HERE.parent / "workspace", tmp_path / "ws")\n',
    "joinpath": "ROOT = Path(__file__).parents[1]\nws = ROOT.joinpath('workspace', 'tenants')\n",
    "cwd": 'registry = WorkspaceRegistry(Path("./workspace"))\n',
    "argv": 'main(["check", "--workspace", "workspace"])\nrun(["genworker", "run", "--workspace=workspace"])\n',
}
FINE = """
ROOT = Path(__file__).resolve().parents[2]
skills = ROOT / "skills"
root = tmp_path / "workspace"
copy = Path(tmp) / "workspace"
made = tmp_path_factory.mktemp("demo") / "workspace"
main(["check", "--workspace", str(demo_workspace)])
debug["workspace"]["tenants"]
"""


@pytest.mark.parametrize("way", sorted(OLD_WAYS))
def test_the_search_finds_the_ways_tests_reached_the_live_folder(way: str) -> None:
    assert live_workspace_paths(OLD_WAYS[way]), way


def test_the_search_leaves_temporary_and_other_repo_paths_alone() -> None:
    assert live_workspace_paths(textwrap.dedent(FINE)) == []


def test_no_test_or_benchmark_builds_a_path_to_the_live_workspace() -> None:
    assert len(SCANNED) > 100
    offenders = {}
    for path in SCANNED:
        rel, text = str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")
        lines = text.splitlines()
        found = [n for n in live_workspace_paths(text) if lines[n - 1].strip() not in ALLOWED.get(rel, ())]
        if found:
            offenders[rel] = found
    assert offenders == {}, "use the demo_workspace fixture (tests/conftest.py) instead"


def test_the_guard_sees_what_a_test_does_under_the_watched_folder(live_workspace_guard: Any, tmp_path: Path) -> None:
    assert Path(live_workspace_guard.root).parent == ROOT and Path(live_workspace_guard.root).name == "workspace"
    watched = tmp_path / "live"
    watched.mkdir()
    (tmp_path / "elsewhere.md").write_text("not watched", encoding="utf-8")
    with live_workspace_guard.watching(watched) as touched:
        (watched / "a.md").write_text("x", encoding="utf-8")
        assert (tmp_path / "elsewhere.md").read_text(encoding="utf-8") == "not watched"
        assert [p.name for p in watched.iterdir()] == ["a.md"]
    assert touched == [str(watched / "a.md"), str(watched)]


def demo_git_checkout(root: Path, demo_workspace_src: Path) -> list[str]:
    """A git checkout at `root` whose index tracks the demo; returns the tracked paths."""
    for src in sorted(demo_workspace_src.rglob("*")):
        if src.is_file():
            dest = root / "workspace" / src.relative_to(demo_workspace_src)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(src.read_bytes())
    (root / ".gitignore").write_bytes((ROOT / ".gitignore").read_bytes())
    git = ["git", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", str(root)], check=True, capture_output=True, encoding="utf-8")
    subprocess.run([*git, "add", "workspace"], cwd=root, check=True, capture_output=True, encoding="utf-8")
    return sorted(p.relative_to(root / "workspace").as_posix() for p in (root / "workspace").rglob("*") if p.is_file())


def add_a_worker_and_run_the_server(root: Path) -> None:
    """README "Add a worker", and the runtime state `make run` leaves in the workspace."""
    helper = root / "workspace/tenants/demo/workers/helper"
    (helper / "duties").mkdir(parents=True)
    (helper / "PERSONA.md").write_text(
        "---\nidentity:\n  name: Helper\n  worker_id: helper\n  role: Front-desk helper\nmode: service\n---\n"
        "You answer visitors' questions politely and briefly.\n",
        encoding="utf-8",
    )
    assistant = root / "workspace/tenants/demo/workers/assistant"
    for rel in ("runtime/dedupe/0a1b.json", "runs/run_1.json", "memory/episodes/ep_1.md"):
        (assistant / rel).parent.mkdir(parents=True, exist_ok=True)
        (assistant / rel).write_text("{}", encoding="utf-8")
    (root / "workspace/tenants/demo/sessions").mkdir()
    (root / "workspace/tenants/demo/sessions/s.json").write_text("{}", encoding="utf-8")


def test_the_demo_for_tests_is_what_git_tracks_not_what_was_added_beside_it(
    tmp_path: Path, demo_workspace_src: Path, materialise_demo: Callable[[Path, Path], str]
) -> None:
    checkout = tmp_path / "checkout"
    tracked = demo_git_checkout(checkout, demo_workspace_src)
    add_a_worker_and_run_the_server(checkout)
    (checkout / "workspace/tenants/demo/TENANT.json").write_text('{"edited": true}', encoding="utf-8")

    source = materialise_demo(checkout, tmp_path / "copy")
    copied = sorted(p.relative_to(tmp_path / "copy").as_posix() for p in (tmp_path / "copy").rglob("*") if p.is_file())
    assert source.startswith("git ls-files")
    assert copied == tracked
    assert "tenants/demo/workers/assistant/PERSONA.md" in copied
    # a tracked file is taken as it is in the working tree: an edit to the demo is tested
    assert (tmp_path / "copy/tenants/demo/TENANT.json").read_text(encoding="utf-8") == '{"edited": true}'


def test_outside_a_git_checkout_runtime_state_is_left_out_and_that_is_said(
    tmp_path: Path,
    demo_workspace_src: Path,
    materialise_demo: Callable[[Path, Path], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checkout = tmp_path / "tarball"
    tracked = demo_git_checkout(checkout, demo_workspace_src)
    shutil.rmtree(checkout / ".git")
    add_a_worker_and_run_the_server(checkout)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))

    source = materialise_demo(checkout, tmp_path / "copy")
    copied = sorted(p.relative_to(tmp_path / "copy").as_posix() for p in (tmp_path / "copy").rglob("*") if p.is_file())
    assert source.startswith("workspace/ on disk minus .gitignore'd runtime state (")
    assert "files added there are included" in source
    assert copied == sorted([*tracked, "tenants/demo/workers/helper/PERSONA.md"])


def test_this_checkout_gives_the_tests_exactly_what_git_tracks(demo_workspace_src: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", "workspace"], cwd=ROOT, capture_output=True, encoding="utf-8", check=False
    )
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout: {listed.stderr.strip()}")
    tracked = sorted(p.removeprefix("workspace/") for p in listed.stdout.split("\0") if p and (ROOT / p).is_file())
    copied = sorted(p.relative_to(demo_workspace_src).as_posix() for p in demo_workspace_src.rglob("*") if p.is_file())
    assert copied == tracked
