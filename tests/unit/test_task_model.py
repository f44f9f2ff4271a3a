"""Task and run values: the run state machine table (GoodBuddy §6.2), validation and conversions."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta, timezone

import pytest

from genworker.ids import InvalidIdError
from genworker.llm.client import LLMCallRecord
from genworker.tools.audit import AuditRecord
from genworker.worker.task import (
    ACTIVE_STATES,
    TERMINAL_STATES,
    TRANSITIONS,
    Deliverable,
    GoalStatus,
    ModelUsage,
    PendingApproval,
    RunFallback,
    RunRecord,
    RunRef,
    RunState,
    RunTimings,
    TaskManifest,
    TaskProvenance,
    ToolCallRecord,
    can_transition,
    new_run_id,
    new_task_id,
    schedule_idempotency_key,
)

S = RunState
T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
ENDINGS = {S.FAILED, S.CANCELLED, S.INTERRUPTED, S.BUDGET_EXCEEDED, S.SUPERSEDED}
ACTIVE = {S.QUEUED, S.RUNNING, S.WAITING_APPROVAL, S.PAUSED, S.EVALUATING}

# Written out independently of the implementation: the forward path, the ways back to running,
# and "every active state -> failed | cancelled | interrupted | budget_exceeded | superseded".
EXPECTED = {
    (S.QUEUED, S.RUNNING),
    (S.RUNNING, S.WAITING_APPROVAL),
    (S.RUNNING, S.PAUSED),
    (S.RUNNING, S.EVALUATING),
    (S.RUNNING, S.COMPLETED),
    (S.WAITING_APPROVAL, S.RUNNING),
    (S.PAUSED, S.RUNNING),
    (S.EVALUATING, S.COMPLETED),
    *((active, ending) for active in ACTIVE for ending in ENDINGS),
}


def test_run_states_are_exactly_the_documented_ones() -> None:
    assert [s.value for s in RunState] == [
        "queued",
        "running",
        "waiting_approval",
        "paused",
        "evaluating",
        "completed",
        "failed",
        "cancelled",
        "interrupted",
        "budget_exceeded",
        "superseded",
    ]
    assert [g.value for g in GoalStatus] == ["met", "not_met", "inconclusive", "not_applicable"]


def test_terminal_and_active_partition_the_states() -> None:
    assert ENDINGS | {S.COMPLETED} == TERMINAL_STATES
    assert ACTIVE == ACTIVE_STATES
    assert all(state.terminal for state in TERMINAL_STATES)
    assert not any(state.terminal for state in ACTIVE_STATES)
    assert set(TRANSITIONS) == set(RunState)


@pytest.mark.parametrize(("source", "target"), list(itertools.product(RunState, RunState)), ids=str)
def test_transition_table(source: RunState, target: RunState) -> None:
    assert can_transition(source, target) is ((source, target) in EXPECTED)


@pytest.mark.parametrize("state", sorted(TERMINAL_STATES), ids=str)
def test_terminal_states_are_final(state: RunState) -> None:
    assert TRANSITIONS[state] == frozenset()


def test_the_table_cannot_be_edited() -> None:
    with pytest.raises(TypeError):
        TRANSITIONS[S.COMPLETED] = frozenset({S.RUNNING})  # type: ignore[index]


# -- values -------------------------------------------------------------------------


def manifest(**changes: object) -> TaskManifest:
    fields: dict[str, object] = {
        "task_id": "t1",
        "run_id": "r1",
        "tenant_id": "acme",
        "worker_id": "w",
        "text": "do it",
        "created_at": T0,
    }
    return TaskManifest(**{**fields, **changes})  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["task_id", "run_id", "tenant_id", "worker_id"])
@pytest.mark.parametrize("bad", ["../etc", "a/b", "", ".hidden", "a..b"])
def test_manifest_ids_must_be_safe_path_parts(name: str, bad: str) -> None:
    with pytest.raises(InvalidIdError, match=name):
        manifest(**{name: bad})


def test_datetimes_must_be_timezone_aware() -> None:
    naive = datetime(2025, 3, 1, 9, 0)  # noqa: DTZ001 - the point of the test
    with pytest.raises(ValueError, match="created_at must be a timezone-aware"):
        manifest(created_at=naive)
    with pytest.raises(ValueError, match="scheduled_for"):
        TaskProvenance(scheduled_for=naive)
    with pytest.raises(ValueError, match="queued_at"):
        RunTimings(queued_at=naive)
    with pytest.raises(ValueError, match="requested_at"):
        PendingApproval("c1", "send", naive)


def test_manifest_defaults_and_schema_version() -> None:
    m = manifest()
    assert (m.gate_level, m.provenance, m.schema_version, m.thread_id) == ("auto", TaskProvenance(), 1, None)
    with pytest.raises(ValueError, match="schema_version 2"):
        manifest(schema_version=2)


def test_provenance_rejects_empty_source_and_key() -> None:
    with pytest.raises(ValueError, match="source_type"):
        TaskProvenance(source_type=" ")
    with pytest.raises(ValueError, match="idempotency_key"):
        TaskProvenance(idempotency_key="")


def test_run_record_validates_ids_and_version() -> None:
    timings = RunTimings(queued_at=T0)
    with pytest.raises(InvalidIdError, match="worker_id"):
        RunRecord("r1", "t1", "acme", "../w", S.QUEUED, timings)
    with pytest.raises(ValueError, match="version"):
        RunRecord("r1", "t1", "acme", "w", S.QUEUED, timings, version=0)
    run = RunRecord("r1", "t1", "acme", "w", S.QUEUED, timings)
    assert run.ref == RunRef("acme", "w", "r1") and str(run.ref) == "acme/w/r1"
    assert not run.terminal


def test_deliverables_need_content_or_ref() -> None:
    assert Deliverable("text", content="hi").content == "hi"
    assert Deliverable("file", ref="out/report.md").ref == "out/report.md"
    with pytest.raises(ValueError, match="text deliverable needs content"):
        Deliverable("text")
    with pytest.raises(ValueError, match="event deliverable needs a ref"):
        Deliverable("event", content="x")


def test_schedule_idempotency_key_is_plan_instant_and_version() -> None:
    oslo = timezone(timedelta(hours=1))
    key = schedule_idempotency_key("daily-report", T0, 3)
    assert key == "plan:daily-report:2025-03-01T09:00:00+00:00:v3"
    assert schedule_idempotency_key("daily-report", T0.astimezone(oslo), 3) == key  # same instant, same key
    assert schedule_idempotency_key("daily-report", T0, 4) != key
    with pytest.raises(ValueError, match="timezone-aware"):
        schedule_idempotency_key("p", datetime(2025, 1, 1), 1)  # noqa: DTZ001


def test_new_ids_are_valid_distinct_and_time_ordered() -> None:
    ids = [new_run_id() for _ in range(50)]
    assert len(set(ids)) == 50
    assert all(i.startswith("run-") for i in ids)
    assert new_task_id().startswith("task-")
    assert [i.split("-")[1] for i in ids] == sorted(i.split("-")[1] for i in ids)
    RunRef("acme", "w", ids[0])  # valid as a path part


def test_model_usage_from_llm_call_record() -> None:
    record = LLMCallRecord("task", "standard", "main", "openai/gpt-x", 120.5, 100, 20, 0.002, error=None)
    assert ModelUsage.from_record(record) == ModelUsage(
        "task", "standard", "main", "openai/gpt-x", 120.5, 100, 20, 0.002
    )


def test_tool_call_record_from_audit() -> None:
    audit = AuditRecord(
        ts="2025-03-01T09:00:00Z",
        tenant_id="acme",
        worker_id="w",
        run_id="r1",
        call_id="c1",
        tool="send_mail",
        caller="llm",
        effect="external",
        risk_level="high",
        args={},
        decision="deny",
        outcome="denied",
        code="posture",
        detail="proposal only",
        duration_ms=1.5,
    )
    assert ToolCallRecord.from_audit(audit) == ToolCallRecord("send_mail", "c1", "denied", 1.5, "posture")


def test_fallback_from_run_result_mapping() -> None:
    assert RunFallback.from_mapping({}) is None
    assert RunFallback.from_mapping({"from": "langgraph", "to": "autonomous", "reason": "n/a"}) == RunFallback(
        "langgraph", "autonomous", "n/a"
    )
