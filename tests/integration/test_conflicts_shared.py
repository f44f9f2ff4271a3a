"""Two runtime processes on one Redis and one workspace hold the Conflict Arbiter's guarantee: the
resource lock, the versions and the plans' claims live in Redis, so plans made in different processes
on one key are serialized, re-planned or escalated as in one process. Both runtimes run in this test's
process, each with its own Redis clients and tool pipelines, as two processes would have (like
test_worker_ownership.py)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import redis

from genworker.autonomy.conflicts import REDIS_PREFIX, EffectRecord, PlanState
from genworker.cluster.ownership import CLAIM_PREFIX
from genworker.runtime.composition import Runtime, build_runtime
from genworker.settings import load_settings
from genworker.tools.base import ToolCall
from genworker.tools.outcomes import ToolCompleted, ToolFailed, ToolNeedsApproval, ToolOutcome
from genworker.worker.lifecycle.leases import REDIS_PREFIX as LEASE_PREFIX

pytestmark = [pytest.mark.anyio, pytest.mark.redis]

EFFECTS = 'file_write:\n  resource: {key: "file:{worker_id}/{path}", operation: "{mode}"}\n'


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _forget(url: str) -> None:
    """Leases, claims and resource state earlier tests left in the test database."""
    with redis.Redis.from_url(url) as client:
        for pattern in (f"{LEASE_PREFIX}*", f"{CLAIM_PREFIX}*", f"{REDIS_PREFIX}*"):
            keys = list(client.scan_iter(match=pattern))
            if keys:
                client.delete(*keys)


@asynccontextmanager
async def two_runtimes(tmp_path: Path, workspace: Path, url: str) -> AsyncIterator[tuple[Runtime, Runtime]]:
    _forget(url)
    (tmp_path / "configs").mkdir()
    env = {"GENWORKER_HOT_RELOAD": "false", "REDIS_URL": url, "GENWORKER_PROFILE": "shared"}
    settings = load_settings(tmp_path / "configs", env, workspace=workspace)
    first = await asyncio.to_thread(build_runtime, settings)
    second = await asyncio.to_thread(build_runtime, settings)
    await first.start()
    try:
        await second.start()
        try:
            yield first, second
        finally:
            await second.stop()
    finally:
        await first.stop()
        _forget(url)


async def write(runtime: Runtime, run_id: str, path: str, content: str, mode: str) -> ToolOutcome:
    """file_write through `runtime`'s own pipeline, as run `run_id` of acme/alice."""
    state = runtime.registry.tenant("acme")
    assert state is not None
    worker = state.workers["alice"]
    scope = runtime.tools.scope(state.tenant, worker, run_id)
    call = ToolCall(f"call-{run_id}", "file_write", {"path": path, "content": content, "mode": mode})
    return await runtime.tools.pipeline_for(worker).execute(scope, call)


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    return small_workspace({"acme": ["alice"]}, {"tenants/acme/tool_effects.yml": EFFECTS})


@pytest.fixture
def path() -> str:
    return f"files/{uuid.uuid4().hex}.md"


async def test_plans_in_two_processes_racing_on_one_key_never_both_commit(
    tmp_path: Path, workspace: Path, path: str, redis_url: str
) -> None:
    key = f"file:alice/{path}"
    async with two_runtimes(tmp_path, workspace, redis_url) as (first, second):
        a, b = first.services.conflicts.arbiter, second.services.conflicts.arbiter
        await a.plan("acme", "alice", "plan-a", [EffectRecord("plan-a", "acme", "alice", key, "overwrite")])
        _, [case] = await b.plan("acme", "alice", "plan-b", [EffectRecord("plan-b", "acme", "alice", key, "append")])
        assert (case.resolution, case.plan_a_id, case.plan_b_id) == ("serialize", "plan-a", "plan-b")

        # B in the second process starts first and waits for A, which the first process commits
        got_b, got_a = await asyncio.gather(
            write(second, "plan-b", path, "B\n", "append"), write(first, "plan-a", path, "A\n", "overwrite")
        )
        assert isinstance(got_a, ToolCompleted)
        assert isinstance(got_b, ToolFailed) and got_b.code == "conflict"
        target = workspace / "tenants/acme/workers/alice" / path
        assert target.read_text(encoding="utf-8") == "A\n"  # never both on the same state

        # told of the change, B re-plans and commits from the new state, in its own process
        assert isinstance(await write(second, "plan-b", path, "B\n", "append"), ToolCompleted)
        assert target.read_text(encoding="utf-8") == "A\nB\n"

        # unplanned changes racing from both processes: one lock, so one after the other
        outcomes = await asyncio.gather(
            *(write(p, f"run-{i}", path, f"{i}\n", "append") for i, p in enumerate((first, second) * 3))
        )
        assert all(isinstance(o, ToolCompleted) for o in outcomes)
        lines = target.read_text(encoding="utf-8").splitlines()
        assert sorted(lines[2:]) == [str(i) for i in range(6)]  # six whole appends, none lost


async def test_an_irreversible_conflict_found_in_one_process_is_decided_in_the_other(
    tmp_path: Path, workspace: Path, path: str, redis_url: str
) -> None:
    key = f"file:alice/{path}"
    async with two_runtimes(tmp_path, workspace, redis_url) as (first, second):
        await first.services.conflicts.arbiter.plan(
            "acme", "alice", "plan-a", [EffectRecord("plan-a", "acme", "alice", key, "overwrite")]
        )
        mine = EffectRecord("plan-d", "acme", "alice", key, "overwrite", reversibility="irreversible")
        _, [case] = await second.services.conflicts.arbiter.plan("acme", "alice", "plan-d", [mine])
        assert (case.resolution, case.status, case.irreversible) == ("escalate", "open", True)

        asked = await write(second, "plan-d", path, "D\n", "overwrite")
        assert isinstance(asked, ToolNeedsApproval) and case.conflict_id in asked.reason
        assert not (workspace / "tenants/acme/workers/alice" / path).exists()
        settled, call = await first.services.conflicts.decide("acme", case.conflict_id, "proceed", "dana")
        assert (settled.status, settled.resolved_by, call) == ("resolved", "user", None)  # no confirmation here
        assert isinstance(await write(second, "plan-d", path, "D\n", "overwrite"), ToolCompleted)
        plan = second.services.conflicts.store.plan("acme", "alice", "plan-d")
        assert plan is not None and plan.state is PlanState.RUNNING
        assert [t.target for t in plan.history] == [
            PlanState.PLANNED, PlanState.CONFLICTED, PlanState.GATED, PlanState.RUNNING
        ]  # fmt: skip
