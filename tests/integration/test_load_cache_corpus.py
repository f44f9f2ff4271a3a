"""The load cache on real workspaces: the demo and the upstream compatibility corpus load the same
from the cache as from their files, and every path their loads look at is part of the key."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.unit.test_load_cache import check_worker_inputs, same

from genworker.workspace.load_cache import LoadCache
from genworker.workspace.registry import PRODUCT_SKILLS, WorkspaceRegistry

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fixtures" / "compat"
SOURCES = ["demo", "upstream_full", "seed_style", "upstream_lenient"]


@pytest.fixture(params=SOURCES)
def workspace(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    if request.param == "demo":
        root: Path = request.getfixturevalue("demo_workspace")
        return root
    return Path(shutil.copytree(CORPUS / request.param, tmp_path / "workspace"))


def _registry(root: Path, cache: LoadCache | None) -> WorkspaceRegistry:
    registry = WorkspaceRegistry(root, product_skills=PRODUCT_SKILLS, cache=cache or False)
    registry.load_all()
    return registry


def test_a_load_from_the_cache_equals_a_load_from_the_files(workspace: Path) -> None:
    fresh = _registry(workspace, None)
    cache = LoadCache(fresh.root, fresh.limits, clock=lambda: time.time_ns() + 3600 * 10**9)
    _registry(workspace, cache)
    with_credentials = sum(w.credentials is not None for w in fresh.workers())  # never stored: secrets
    assert cache.last is not None
    assert cache.last.stored == len(fresh.workers()) - with_credentials
    restarted = _registry(workspace, cache)
    assert (cache.last.cached, cache.last.parsed) == (
        len(fresh.workers()) - with_credentials,
        with_credentials + len(fresh.failures()),
    )
    same(restarted, fresh)


def test_every_path_a_load_looks_at_is_part_of_its_key(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert check_worker_inputs(monkeypatch, workspace, PRODUCT_SKILLS) > 0


_START = """
import sys, time
from pathlib import Path
from genworker.workspace.load_cache import LoadCache
from genworker.workspace.registry import WorkspaceRegistry
root = Path(sys.argv[1]).resolve()
cache = LoadCache(root, WorkspaceRegistry(root).limits, clock=lambda: time.time_ns() + 3600 * 10**9)
registry = WorkspaceRegistry(root, cache=cache)
print(registry.load_all().workers, cache.last.written, repr(cache.last.problem), flush=True)
"""


def test_two_processes_starting_at_once_leave_a_usable_cache(demo_workspace: Path) -> None:
    """Each writes the file (temporary file, then rename) unless the other's was already there:
    whichever lands last is whole."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _START, str(demo_workspace)], stdout=subprocess.PIPE, text=True, encoding="utf-8"
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=120)[0].split() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    fresh = _registry(demo_workspace, None)
    assert [(count, problem) for count, _, problem in outputs] == [(str(len(fresh.workers())), "''")] * 2
    assert "True" in [written for _, written, _ in outputs]
    cache = LoadCache(fresh.root, fresh.limits, clock=lambda: time.time_ns() + 3600 * 10**9)
    same(_registry(demo_workspace, cache), fresh)
    assert cache.last is not None
    assert (cache.last.cached, cache.last.parsed, cache.last.problem) == (len(fresh.workers()), 0, "")
    assert not [p.name for p in (demo_workspace / "runtime" / "cache").iterdir() if p.name.endswith(".tmp")]


def test_the_server_starts_from_the_cache_the_previous_start_wrote(
    demo_workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastapi.testclient import TestClient

    from genworker.api.app import create_app
    from genworker.settings import load_settings

    monkeypatch.setattr("genworker.workspace.load_cache.SETTLE_NS", -3600 * 10**9)  # the copy is seconds old
    (tmp_path / "configs").mkdir()
    starts = []
    for _ in range(3):
        with TestClient(create_app(load_settings(tmp_path / "configs", {}, workspace=demo_workspace))) as client:
            registry = client.app.state.runtime.registry  # type: ignore[attr-defined]
            starts.append((registry.cache.last.cached, registry.cache.last.parsed, len(registry.workers())))
    workers = starts[0][2]
    assert starts == [(0, workers, workers), (workers, 0, workers), (workers, 0, workers)]
