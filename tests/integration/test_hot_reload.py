"""Hot reload through the real OS file watcher: edit, invalid edit, delete, add."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from genworker.workspace.registry import ReloadOutcome, WorkspaceRegistry
from genworker.workspace.watcher import ReloadTarget, WorkspaceWatcher, classify, coalesce

pytestmark = pytest.mark.anyio
TIMEOUT = 15.0


class Reloads:
    """Collects reload outcomes; lets a test wait for the one it caused."""

    def __init__(self) -> None:
        self.outcomes: list[ReloadOutcome] = []
        self._changed = asyncio.Event()

    def __call__(self, outcome: ReloadOutcome) -> None:
        self.outcomes.append(outcome)
        self._changed.set()

    async def wait_for(self, target: str) -> ReloadOutcome:
        async def first() -> ReloadOutcome:
            while True:
                for outcome in self.outcomes:
                    if outcome.target == target:
                        self.outcomes.remove(outcome)
                        return outcome
                self._changed.clear()
                await self._changed.wait()

        return await asyncio.wait_for(first(), TIMEOUT)


@asynccontextmanager
async def watching(root: Path) -> AsyncIterator[tuple[WorkspaceRegistry, Reloads]]:
    registry = WorkspaceRegistry(root, product_skills=None)
    registry.load_all()
    reloads = Reloads()
    watcher = WorkspaceWatcher(registry, debounce_ms=50, on_reload=reloads)
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    probe = root / ".probe"
    # Handshake: touch an ignored file until the OS watch reports it, so no edit is missed.
    for attempt in range(100):
        probe.write_text(str(attempt), encoding="utf-8")
        try:
            await asyncio.wait_for(watcher.saw_changes.wait(), 0.2)
            break
        except TimeoutError:
            continue
    assert watcher.saw_changes.is_set(), "file watcher never became live"
    try:
        yield registry, reloads
    finally:
        stop.set()
        await asyncio.wait_for(task, TIMEOUT)


def _persona(root: Path, worker: str) -> Path:
    return root / "tenants" / "acme" / "workers" / worker / "PERSONA.md"


async def test_edit_reloads_only_that_worker(small_workspace: Callable[..., Path]) -> None:
    root = small_workspace()
    async with watching(root) as (registry, reloads):
        bob_before = registry.worker("acme", "bob")
        version_before = registry.version
        path = _persona(root, "alice")
        path.write_text(path.read_text(encoding="utf-8").replace("role: assistant", "role: planner"), encoding="utf-8")
        outcome = await reloads.wait_for("acme/alice")
        assert outcome.ok
        alice = registry.worker("acme", "alice")
        assert alice is not None and alice.persona.identity.role == "planner"
        assert alice.version > version_before and registry.version > version_before
        assert registry.worker("acme", "bob") is bob_before  # untouched


async def test_invalid_edit_keeps_last_good_and_records_the_error(small_workspace: Callable[..., Path]) -> None:
    root = small_workspace()
    async with watching(root) as (registry, reloads):
        good = registry.worker("acme", "alice")
        _persona(root, "alice").write_text("---\nidentity:\n  name: [unclosed\n---\n", encoding="utf-8")
        outcome = await reloads.wait_for("acme/alice")
        assert not outcome.ok and outcome.kept_last_good
        assert registry.worker("acme", "alice") is good
        described = registry.describe()["tenants"]["acme"]["workers"]["alice"]
        assert described["status"] == "loaded"
        assert described["reload_errors"][0]["file"] == "tenants/acme/workers/alice/PERSONA.md"
        assert described["reload_errors"][0]["line"] is not None
        # fixing the file clears the error
        _persona(root, "alice").write_text(
            "---\nidentity: {name: A, worker_id: alice, role: fixed}\n---\nHi\n", encoding="utf-8"
        )
        assert (await reloads.wait_for("acme/alice")).ok
        assert registry.describe()["tenants"]["acme"]["workers"]["alice"]["reload_errors"] == []
        assert registry.worker("acme", "alice").persona.identity.role == "fixed"  # type: ignore[union-attr]


async def test_an_oversized_persona_is_refused_and_the_last_good_version_keeps_serving(
    small_workspace: Callable[..., Path],
) -> None:
    root = small_workspace()
    async with watching(root) as (registry, reloads):
        good = registry.worker("acme", "alice")
        path = _persona(root, "alice")
        grown = path.with_name(".PERSONA.md.tmp")  # written aside and renamed: the reload sees it whole
        grown.write_text(path.read_text(encoding="utf-8") + "x" * (300 * 1024), encoding="utf-8")
        grown.replace(path)
        outcome = await reloads.wait_for("acme/alice")
        assert not outcome.ok and outcome.kept_last_good
        (error,) = outcome.errors
        assert error.file == "tenants/acme/workers/alice/PERSONA.md"
        assert "KiB, over the 256 KiB limit for PERSONA.md files (GENWORKER_MAX_PERSONA_KIB" in error.message
        assert registry.worker("acme", "alice") is good


async def test_deleted_worker_is_unloaded_and_new_one_picked_up(small_workspace: Callable[..., Path]) -> None:
    root = small_workspace()
    async with watching(root) as (registry, reloads):
        import shutil

        shutil.rmtree(root / "tenants" / "acme" / "workers" / "bob")
        while not (await reloads.wait_for("acme/bob")).removed:
            pass
        assert registry.worker("acme", "bob") is None
        new = _persona(root, "carol")
        new.parent.mkdir(parents=True)
        new.write_text("---\nidentity: {name: Carol, worker_id: carol}\n---\nHello\n", encoding="utf-8")
        while registry.worker("acme", "carol") is None:
            await reloads.wait_for("acme/carol")
        assert registry.worker("acme", "carol").instructions == "Hello"  # type: ignore[union-attr]


async def test_duty_and_tenant_edits(small_workspace: Callable[..., Path]) -> None:
    root = small_workspace()
    async with watching(root) as (registry, reloads):
        duty = root / "tenants" / "acme" / "workers" / "alice" / "duties" / "d1.md"
        duty.parent.mkdir()
        duty.write_text(
            "---\nduty_id: d1\ntitle: D\ntriggers: [{id: m, type: manual}]\n---\nDo it.\n", encoding="utf-8"
        )
        while "d1" not in registry.worker("acme", "alice").duties:  # type: ignore[union-attr]
            await reloads.wait_for("acme/alice")
        tenant = root / "tenants" / "acme" / "TENANT.json"
        tenant.write_text('{"tenant_id": "acme", "trust_level": 3, "default_worker": "alice"}', encoding="utf-8")
        assert (await reloads.wait_for("acme")).ok
        assert registry.tenant("acme").tenant.trust_level == 3  # type: ignore[union-attr]


async def test_runtime_state_writes_do_not_reload(
    small_workspace: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    """Nor reach the watcher's loop: watchfiles logged "N changes detected" for every turn's writes."""
    root = small_workspace()
    caplog.set_level("DEBUG", logger="watchfiles.main")  # at DEBUG it lists the changes it yields
    async with watching(root) as (registry, reloads):
        version = registry.version
        state = root / "tenants" / "acme" / "workers" / "alice" / "runtime" / "inbox.json"
        state.parent.mkdir()
        state.write_text("{}", encoding="utf-8")
        # a definition edit after it: the only reload that happens is this one
        path = _persona(root, "bob")
        path.write_text(path.read_text(encoding="utf-8") + "\nmore\n", encoding="utf-8")
        await reloads.wait_for("acme/bob")
        assert registry.version == version + 1
        assert reloads.outcomes == []
    yielded = [r.getMessage() for r in caplog.records if "detected" in r.getMessage()]
    assert yielded and all("inbox.json" not in line and ".probe" not in line for line in yielded), yielded


def test_classify_paths(tmp_path: Path) -> None:
    root = tmp_path
    w = root / "tenants" / "t" / "workers" / "w"
    assert classify(root, w / "PERSONA.md") == ReloadTarget("worker", "t", "w")
    assert classify(root, w / "duties" / "x.md") == ReloadTarget("worker", "t", "w")
    assert classify(root, w / "skills" / "s" / "SKILL.md") == ReloadTarget("worker", "t", "w")
    assert classify(root, w / "runtime" / "inbox.json") is None
    assert classify(root, w / "memory" / "episodes" / "e.md") is None
    assert classify(root, root / "tenants" / "t" / "sessions" / "s.json") is None
    assert classify(root, root / "tenants" / "t" / "TENANT.json") == ReloadTarget("tenant", "t")
    assert classify(root, root / "tenants" / "t" / "skills" / "a" / "SKILL.md") == ReloadTarget("tenant", "t")
    assert classify(root, root / "system" / "skills" / "a" / "SKILL.md") == ReloadTarget("system")
    assert classify(root, root / "tenants" / ".." / "x") is None
    assert classify(root, w / "PERSONA.md.swp") is None
    assert classify(root, w / "custom" / "s" / "SKILL.md", lambda t, w: "custom") == ReloadTarget("worker", "t", "w")


def test_coalesce_tenant_covers_its_workers() -> None:
    targets = [ReloadTarget("worker", "t", "a"), ReloadTarget("tenant", "t"), ReloadTarget("worker", "u", "b")]
    assert coalesce(targets) == [ReloadTarget("tenant", "t"), ReloadTarget("worker", "u", "b")]
    assert coalesce([*targets, ReloadTarget("system")]) == [ReloadTarget("system")]
