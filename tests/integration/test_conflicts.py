"""The Conflict Arbiter over the real ToolPipeline: tools declare the resource they change in the
tenant's tool_effects.yml, plans race on one key, and the arbiter lets one commit while the other is
serialized (and re-plans), merged, or escalated to a person — never both on the same state.

The "GitHub" here is a dict the test's own tools change: what is under test is the arbiter between the
calls and the side effect, not an issue tracker."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from genworker.autonomy.conflicts import (
    CommitCheck,
    ConflictArbiter,
    ConflictStore,
    EffectRecord,
    FileLedger,
    PlanState,
    ResourceLedger,
)
from genworker.tools.base import Effect, ToolCall
from genworker.tools.context import ToolScope
from genworker.tools.effects import EffectResolver
from genworker.tools.outcomes import ToolCompleted, ToolFailed, ToolNeedsApproval, ToolOutcome
from genworker.tools.pipeline import ToolPipeline
from genworker.tools.tool import function_tool
from genworker.workspace.models.steward import ConflictConfig

pytestmark = pytest.mark.anyio

EFFECTS = """\
issue_set_status:
  resource:
    key: "github:issue:{number}"
    operation: "set_status:{status}"
    version_arg: expected_version
    version_result: version
issue_delete:
  resource: {key: "github:issue:{number}", operation: delete, reversibility: irreversible}
"""
KEY = "github:issue:42"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Tracker:
    """What the tools change: issue state, its version, and every change made, in order."""

    status: str = "open"
    version: int = 1
    changes: list[tuple[str, str]] = field(default_factory=list)

    def tools(self) -> list[Any]:
        @function_tool(effect=Effect.WRITE)
        async def issue_set_status(ctx: Any, number: int, status: str, expected_version: str = "") -> dict[str, Any]:
            """Set an issue's status.

            Args:
                number: The issue.
                status: open or closed.
                expected_version: The version read.
            """
            self.status, self.version = status, self.version + 1
            self.changes.append((ctx.scope.run_id, f"set_status:{status}"))
            return {"number": number, "status": status, "version": f"v{self.version}"}

        @function_tool(effect=Effect.WRITE)
        async def issue_delete(ctx: Any, number: int) -> str:
            """Delete an issue.

            Args:
                number: The issue.
            """
            self.changes.append((ctx.scope.run_id, "delete"))
            return f"deleted {number}"

        return [issue_set_status, issue_delete]


@dataclass
class Setup:
    root: Path
    arbiter: ConflictArbiter
    pipeline: ToolPipeline
    tracker: Tracker

    def scope(self, run_id: str, worker: str = "alice", approved: frozenset[str] = frozenset()) -> ToolScope:
        folder = self.root / "tenants/acme/workers" / worker
        return ToolScope("acme", worker, run_id, folder, trust_level=2, approved_call_ids=approved)

    async def call(self, run_id: str, tool: str, approved: bool = False, **arguments: Any) -> ToolOutcome:
        call = ToolCall(f"call-{run_id}", tool, arguments)
        scope = self.scope(run_id, approved=frozenset({call.id}) if approved else frozenset())
        return await self.pipeline.execute(scope, call)

    def plan_state(self, plan_id: str) -> PlanState:
        plan = self.arbiter.store.plan("acme", "alice", plan_id)
        assert plan is not None
        return plan.state


def build(root: Path, ledger: ResourceLedger | None = None, config: ConflictConfig | None = None) -> Setup:
    (root / "tenants/acme").mkdir(parents=True, exist_ok=True)
    (root / "tenants/acme/tool_effects.yml").write_text(EFFECTS, encoding="utf-8")
    arbiter = ConflictArbiter(ConflictStore(root), ledger or FileLedger(root), lambda t: config or ConflictConfig())
    resolver = EffectResolver(root)
    tracker = Tracker()
    pipeline = ToolPipeline(tracker.tools(), effects=resolver, middlewares=(CommitCheck(arbiter, resolver),))
    return Setup(root, arbiter, pipeline, tracker)


def effect(plan_id: str, operation: str, version: str | None = "v1", **kw: Any) -> EffectRecord:
    return EffectRecord(plan_id, "acme", "alice", KEY, operation, version, **kw)


async def test_two_planned_changes_racing_on_one_key_one_commits_and_the_other_is_serialized(tmp_path: Path) -> None:
    s = build(tmp_path)
    _, first = await s.arbiter.plan("acme", "alice", "plan-a", [effect("plan-a", "set_status:closed")])
    _, found = await s.arbiter.plan("acme", "alice", "plan-b", [effect("plan-b", "set_status:open")])
    assert first == []
    [case] = found
    assert (case.resolution, case.plan_a_id, case.plan_b_id, case.status) == (
        "serialize",
        "plan-a",
        "plan-b",
        "resolved",
    )
    assert s.plan_state("plan-b") is PlanState.GATED  # conflicted, then back to the gate
    assert [t.target for t in s.arbiter.store.plan("acme", "alice", "plan-b").history] == [  # type: ignore[union-attr]
        PlanState.PLANNED,
        PlanState.CONFLICTED,
        PlanState.GATED,
    ]

    # B is started first: it waits for A, which commits; B then finds the issue changed and re-plans
    b = asyncio.create_task(s.call("plan-b", "issue_set_status", number=42, status="open"))
    a = asyncio.create_task(s.call("plan-a", "issue_set_status", number=42, status="closed"))
    got_a, got_b = await asyncio.gather(a, b)
    assert isinstance(got_a, ToolCompleted)
    assert isinstance(got_b, ToolFailed) and got_b.code == "conflict"
    assert "is at version v2, the plan read v1" in got_b.error and "Read github:issue:42 again" in got_b.error
    assert s.tracker.changes == [("plan-a", "set_status:closed")]  # never both
    assert s.plan_state("plan-a") is PlanState.RUNNING

    # re-planned from the new state, B commits
    again = await s.call("plan-b", "issue_set_status", number=42, status="open", expected_version="v2")
    assert isinstance(again, ToolCompleted)
    assert s.tracker.changes[-1] == ("plan-b", "set_status:open")


async def test_unplanned_calls_racing_one_commits_and_the_other_re_plans_or_merges(tmp_path: Path) -> None:
    s = build(tmp_path)
    results = await asyncio.gather(
        *(s.call(f"run-{i}", "issue_set_status", number=42, status="closed", expected_version="v1") for i in range(4)),
        s.call("run-x", "issue_set_status", number=42, status="open", expected_version="v1"),
    )
    assert len(s.tracker.changes) == 1  # one change on version v1, whoever got the lock first
    winner = s.tracker.changes[0][0]
    for run, outcome in zip([*(f"run-{i}" for i in range(4)), "run-x"], results, strict=True):
        if run == winner:
            assert isinstance(outcome, ToolCompleted) and outcome.result.data["version"] == "v2"
        elif winner != "run-x" and run != "run-x":  # the same change: made once, merged into the winner's
            assert isinstance(outcome, ToolCompleted) and outcome.result.data == {
                "merged_into": winner,
                "version": "v2",
            }
        else:
            assert isinstance(outcome, ToolFailed) and outcome.code == "conflict"
    cases = s.arbiter.store.cases("acme")
    assert {c.resolution for c in cases} <= {"merge", "replan"} and len(cases) == 4


async def test_a_stale_expected_version_at_commit_re_plans(tmp_path: Path) -> None:
    s = build(tmp_path)
    assert isinstance(await s.call("run-1", "issue_set_status", number=42, status="closed"), ToolCompleted)
    stale = await s.call("run-2", "issue_set_status", number=42, status="open", expected_version="v1")
    assert isinstance(stale, ToolFailed) and stale.code == "conflict"
    [case] = s.arbiter.store.cases("acme")
    assert (case.resolution, case.status, case.resolved_by, case.detected_at) == (
        "replan",
        "resolved",
        "system",
        "commit",
    )
    assert (case.plan_a_id, case.plan_b_id) == ("run-1", "run-2")
    plan = s.arbiter.store.plan("acme", "alice", "run-2")
    assert plan is not None and [t.target for t in plan.history][-2:] == [PlanState.CONFLICTED, PlanState.GATED]
    fresh = await s.call("run-2", "issue_set_status", number=42, status="open", expected_version="v2")
    assert isinstance(fresh, ToolCompleted)
    assert [c for _, c in s.tracker.changes] == ["set_status:closed", "set_status:open"]


@pytest.mark.parametrize("decision", ["proceed", "drop"])
async def test_an_irreversible_conflict_waits_for_a_person(tmp_path: Path, decision: str) -> None:
    s = build(tmp_path)
    await s.arbiter.plan("acme", "alice", "plan-a", [effect("plan-a", "set_status:closed")])
    asked = await s.call("run-d", "issue_delete", number=42)
    assert isinstance(asked, ToolNeedsApproval)
    [case] = s.arbiter.store.cases("acme", status="open")
    assert f"conflict {case.conflict_id} on github:issue:42" in asked.reason
    assert (case.resolution, case.irreversible, case.plan_b_id) == ("escalate", True, "run-d")
    assert s.plan_state("plan-a") is PlanState.GATED
    assert s.arbiter.store.plan("acme", "alice", "run-d").state is PlanState.CONFLICTED  # type: ignore[union-attr]
    again = await s.call("run-d", "issue_delete", number=42)  # asking again changes nothing
    assert isinstance(again, ToolNeedsApproval) and s.tracker.changes == []

    decided = await s.arbiter.decide("acme", case.conflict_id, decision, "dana")  # type: ignore[arg-type]
    assert (decided.resolved_by, decided.decided_by) == ("user", "dana")
    after = await s.call("run-d", "issue_delete", number=42)
    if decision == "proceed":
        assert isinstance(after, ToolCompleted) and s.tracker.changes == [("run-d", "delete")]
        assert s.arbiter.store.plan("acme", "alice", "run-d").state is PlanState.RUNNING  # type: ignore[union-attr]
    else:
        assert isinstance(after, ToolFailed) and "dropped by a person" in after.error and s.tracker.changes == []
        assert s.arbiter.store.plan("acme", "alice", "run-d").state is PlanState.FAILED  # type: ignore[union-attr]


async def test_approving_the_escalated_call_settles_its_conflict(tmp_path: Path) -> None:
    s = build(tmp_path)
    await s.arbiter.plan("acme", "alice", "plan-a", [effect("plan-a", "set_status:closed")])
    assert isinstance(await s.call("run-d", "issue_delete", number=42), ToolNeedsApproval)
    approved = await s.call("run-d", "issue_delete", approved=True, number=42)
    assert isinstance(approved, ToolCompleted) and s.tracker.changes == [("run-d", "delete")]
    [case] = s.arbiter.store.cases("acme")
    assert (case.status, case.decision, case.resolved_by) == ("resolved", "proceed", "user")


async def test_plans_of_ended_runs_stop_claiming(tmp_path: Path) -> None:
    s = build(tmp_path)
    ended: set[str] = set()

    async def liveness(tenant_id: str, worker_id: str, plan_id: str) -> PlanState | None:
        return PlanState.SUCCEEDED if plan_id in ended else None

    s.arbiter.liveness = liveness
    await s.arbiter.plan("acme", "alice", "plan-a", [effect("plan-a", "set_status:closed")])
    ended.add("plan-a")
    _, cases = await s.arbiter.plan("acme", "alice", "plan-b", [effect("plan-b", "set_status:open")])
    assert cases == []
    assert s.plan_state("plan-a") is PlanState.SUCCEEDED


async def test_the_resolution_order_is_the_tenants(tmp_path: Path) -> None:
    s = build(tmp_path, config=ConflictConfig(default_resolution_order=("replan",)))
    assert s.arbiter.config_of("acme").default_resolution_order == ("replan", "escalate")
    await s.arbiter.plan("acme", "alice", "plan-a", [effect("plan-a", "set_status:closed")])
    _, [case] = await s.arbiter.plan("acme", "alice", "plan-b", [effect("plan-b", "set_status:closed")])
    assert case.resolution == "replan"  # merge is not in this tenant's order


async def test_a_declared_plan_without_a_commit_within_its_ttl_expires_and_releases_its_claim(tmp_path: Path) -> None:
    s = build(tmp_path)
    now = [datetime(2026, 3, 1, 9, 0, tzinfo=UTC)]
    s.arbiter.clock = lambda: now[0]
    declared, _ = await s.arbiter.plan("acme", "alice", "plan-a", [effect("plan-a", "set_status:closed")],
                                       run_bound=False, ttl_s=600)  # fmt: skip
    assert (declared.ttl_s, declared.expires_at) == (600, now[0] + timedelta(seconds=600))
    now[0] += timedelta(seconds=599)
    _, within = await s.arbiter.plan("acme", "alice", "plan-b", [effect("plan-b", "set_status:open")])
    assert [c.plan_a_id for c in within] == ["plan-a"]  # still live: B is serialized behind it
    await s.arbiter.finish("acme", "alice", "plan-b", PlanState.FAILED, "test")

    now[0] += timedelta(seconds=1)  # the ttl is over without a commit
    _, after = await s.arbiter.plan("acme", "alice", "plan-c", [effect("plan-c", "set_status:open")])
    assert after == []
    expired = s.arbiter.store.plan("acme", "alice", "plan-a")
    assert expired is not None and expired.state is PlanState.FAILED
    assert expired.history[-1].reason.startswith("expired: no commit within its ttl of 600 s")
    assert "plan-a" not in (await s.arbiter.ledger.state("acme", KEY)).claims
    # plan-c was never serialized behind the expired plan: it commits at once
    assert isinstance(await s.call("plan-c", "issue_set_status", number=42, status="open"), ToolCompleted)


async def test_each_commit_renews_a_declared_plan(tmp_path: Path) -> None:
    s = build(tmp_path)
    now = [datetime(2026, 3, 1, 9, 0, tzinfo=UTC)]
    s.arbiter.clock = lambda: now[0]
    await s.arbiter.plan("acme", "alice", "plan-a", [effect("plan-a", "set_status:closed")], run_bound=False, ttl_s=60)
    now[0] += timedelta(seconds=50)
    assert isinstance(await s.call("plan-a", "issue_set_status", number=42, status="closed"), ToolCompleted)
    now[0] += timedelta(seconds=50)  # 100 s after it was declared, 50 s after its commit
    plan = await s.arbiter.expire_if_due("acme", "alice", "plan-a")
    assert plan is not None and plan.state is PlanState.RUNNING and plan.expires_at == now[0] + timedelta(seconds=10)
    now[0] += timedelta(seconds=10)
    plan = await s.arbiter.expire_if_due("acme", "alice", "plan-a")
    assert plan is not None and plan.state is PlanState.FAILED
    # run-bound plans (a run's) never expire by time
    await s.arbiter.plan("acme", "alice", "run-1", [effect("run-1", "set_status:open", version=None)])
    now[0] += timedelta(days=365)
    run_plan = await s.arbiter.expire_if_due("acme", "alice", "run-1")
    assert run_plan is not None and run_plan.expires_at is None and not run_plan.state.terminal
