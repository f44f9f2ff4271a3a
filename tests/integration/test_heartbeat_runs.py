"""Tasks and isolated runs the heartbeat starts, through the real router and governance.

A task is a standard run tagged with its source; an isolated run has its own thread, is tagged
`heartbeat`, and reports a short result back to the main session. Both are RunRecords; both are
refs in the heartbeat meta. The persona's goal settings pick the action for goal items, and a sensor
that requires approval gates the task.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.autonomy.heartbeat import HEARTBEAT_NAME, TOPIC_ISOLATED_REPORTED, HeartbeatReport
from genworker.autonomy.inbox import InboxItem, InboxState, new_item
from genworker.bus import Event
from genworker.conversation import main_session_id
from genworker.runtime.composition import Runtime
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, scripted_env
from genworker.worker.task import RunRecord, RunRef

T = TypeVar("T")

PERSONA = """---
identity: {name: Alice, worker_id: alice, role: ops}
heartbeat:
  goal_task_actions: [open_ticket]
  goal_isolated_actions: [investigate]
  goal_isolated_deviation_threshold: 0.5
sensor_configs:
  - {source_type: webhook, sensor_id: hooks, require_approval: false}  # the default is true (upstream)
  - {source_type: webhook, sensor_id: gated, require_approval: true}
---
You are Alice.
"""
GOAL = "---\ngoal_id: uptime\ntitle: 99.9% uptime\nstatus: active\n---\nKeep it up.\n"
DUTY = "---\nduty_id: payments\ntitle: Payments\ntriggers: [{id: m, type: manual}]\n---\nPay approved invoices.\n"


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    extra = {
        "tenants/acme/workers/alice/PERSONA.md": PERSONA,
        "tenants/acme/workers/alice/goals/uptime.md": GOAL,
        "tenants/acme/workers/alice/duties/payments.md": DUTY,
    }
    return small_workspace({"acme": ["alice"]}, extra)


@contextmanager
def running(tmp_path: Path, workspace: Path, model: ScriptedModelServer) -> Iterator[tuple[TestClient, Runtime]]:
    (tmp_path / "configs").mkdir(exist_ok=True)
    env = scripted_env(model)
    with TestClient(create_app(load_settings(tmp_path / "configs", env, workspace=workspace))) as client:
        yield client, client.app.state.runtime  # type: ignore[attr-defined]


def call(client: TestClient, fn: Callable[[], Awaitable[T]]) -> T:
    return client.portal.call(fn)  # type: ignore[union-attr, arg-type, return-value]


def beat(client: TestClient, runtime: Runtime, *items: InboxItem) -> HeartbeatReport:
    """Write `items`, run one heartbeat and wait for the runs it started."""
    inbox, service = runtime.services.inbox, runtime.services.heartbeat

    async def go() -> HeartbeatReport:
        for item in items:
            assert await inbox.write(item)
        report = await service.run_once("acme", "alice")
        await service.runner.wait_runs(report.run_ids)
        return report

    return call(client, go)


def run_record(client: TestClient, runtime: Runtime, run_id: str) -> RunRecord:
    tasks = runtime.services.router.tasks
    return call(client, lambda: tasks.get_run(RunRef("acme", "alice", run_id)))


def main_messages(client: TestClient, runtime: Runtime) -> list[Any]:
    sessions = runtime.services.router.sessions

    async def get() -> list[Any]:
        session = await sessions.get("acme", main_session_id("alice"))
        return list(session.messages) if session is not None else []

    return call(client, get)


def meta(workspace: Path) -> dict[str, Any]:
    path = workspace / "tenants/acme/workers/alice/runtime/heartbeat_meta.json"
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def hook(payload: dict[str, Any], *, sensor: str = "hooks", **kw: Any) -> InboxItem:
    return new_item("acme", "alice", "webhook", sensor, "webhook.fact", payload, **kw)


def goal_check(**payload: Any) -> InboxItem:
    return new_item("acme", "alice", "event", "goal-checker", "goal.check", {"goal_id": "uptime", **payload})


def test_a_task_route_starts_a_standard_task_tagged_with_its_sensor(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    def is_the_task(body: dict[str, Any]) -> None:
        assert "rotate the API key" in body["messages"][-1]["content"]

    model_server.expect(Reply("Rotated.", check=is_the_task))
    with running(tmp_path, workspace, model_server) as (client, runtime):
        item = hook({"title": "rotate the API key"}, route="task")
        report = beat(client, runtime, item)
        (result,) = report.items
        record = run_record(client, runtime, result.run_id or "")
        assert main_messages(client, runtime) == []  # tasks do not speak in the main session
    assert (result.action, result.outcome, report.model_turns) == ("task", "submitted", 0)
    assert record.state == "completed" and record.provenance.source_type == "sensor"
    assert record.provenance.source_id == "hooks"
    (ref,) = meta(workspace)["task_refs"]
    assert ref["kind"] == "task" and ref["item_id"] == item.item_id and ref["run_state"] == "completed"
    assert meta(workspace)["open_concerns"] == []  # closed when the run completed


def test_preferred_skills_weigh_in_and_do_not_override_a_clear_match(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer, keyword_skill: Callable[[str, str], str]
) -> None:
    skills = workspace / "tenants/acme/workers/alice/skills"
    for name, keyword in (("triage", "alert"), ("billing", "invoice")):
        (skills / name).mkdir(parents=True)
        (skills / name / "SKILL.md").write_text(keyword_skill(name, keyword), encoding="utf-8")

    def runs(skill_text: str) -> Callable[[dict[str, Any]], None]:
        def check(body: dict[str, Any]) -> None:
            assert skill_text in json.dumps(body), f"expected the {skill_text!r} skill"

        return check

    model_server.expect(
        Reply("Looked.", check=runs("Do the invoice work")), Reply("Triaged.", check=runs("Do the alert work"))
    )
    with running(tmp_path, workspace, model_server) as (client, runtime):
        vague = hook({"title": "have a look"}, route="task", metadata={"preferred_skill_ids": ["nope", "billing"]})
        clear = hook(
            {"title": "alert: disk alert on db-1"}, route="task", metadata={"preferred_skill_ids": ["billing"]}
        )
        reports = [beat(client, runtime, vague), beat(client, runtime, clear)]
        records = [run_record(client, runtime, r.items[0].run_id or "") for r in reports]
    # the vague one runs the preferred skill; the clear one its keyword match despite the preference
    assert [r.state for r in records] == ["completed", "completed"]


def test_a_goal_task_runs_the_skill_its_goal_prefers(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer, keyword_skill: Callable[[str, str], str]
) -> None:
    """A goal item's task has no preferences of its own: the goal's `preferred_skill_ids` pick the skill."""
    skills = workspace / "tenants/acme/workers/alice/skills"
    for name, keyword in (("triage", "alert"), ("billing", "invoice")):
        (skills / name).mkdir(parents=True)
        (skills / name / "SKILL.md").write_text(keyword_skill(name, keyword), encoding="utf-8")
    goal = "---\ngoal_id: revenue\ntitle: Revenue\nstatus: active\npreferred_skill_ids: [billing]\n---\nGrow.\n"
    (workspace / "tenants/acme/workers/alice/goals/revenue.md").write_text(goal, encoding="utf-8")

    def runs_billing(body: dict[str, Any]) -> None:
        assert "Do the invoice work" in json.dumps(body), "expected the goal's preferred skill (billing)"

    model_server.expect(Reply("Ticket opened.", check=runs_billing))
    with running(tmp_path, workspace, model_server) as (client, runtime):
        item = new_item("acme", "alice", "event", "goal-checker", "goal.check",
                        {"goal_id": "revenue", "action": "open_ticket", "title": "numbers look off"})  # fmt: skip
        (result,) = beat(client, runtime, item).items
        record = run_record(client, runtime, result.run_id or "")
        manifest = call(client, lambda: runtime.services.router.tasks.get_manifest("acme", "alice", record.task_id))  # type: ignore[union-attr]
    assert (result.action, record.state, record.provenance.goal_id) == ("task", "completed", "revenue")
    assert manifest.preferred_skill_ids == ("billing",)


def test_an_isolated_run_has_its_own_thread_and_reports_back(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("Checked the three replicas: lag is back under 2 s after the vacuum finished."))
    with running(tmp_path, workspace, model_server) as (client, runtime):
        bus, seen = runtime.services.bus, []

        async def subscribe() -> None:
            async def handler(event: Event) -> None:
                seen.append(event)

            bus.subscribe(TOPIC_ISOLATED_REPORTED, handler)

        call(client, subscribe)
        item = hook({"title": "replica lag 40s"}, route="isolated")
        report = beat(client, runtime, item)
        (result,) = report.items
        record = run_record(client, runtime, result.run_id or "")
        messages = main_messages(client, runtime)
        call(client, bus.drain)  # type: ignore[attr-defined]
    assert (result.action, result.outcome) == ("isolated", "submitted")
    assert record.state == "completed" and record.thread_id and record.thread_id.startswith("iso-")
    assert record.provenance.source_type == "heartbeat" and record.provenance.source_id == item.item_id
    (back,) = messages
    assert back.name == HEARTBEAT_NAME and back.run_id == record.run_id
    assert "replica lag 40s" in back.content and "lag is back under 2 s" in back.content
    assert "completed" in back.content
    (ref,) = meta(workspace)["task_refs"]
    assert ref["kind"] == "isolated" and ref["main_session_key"] == "alice.main" and ref["reported"] is True
    assert ref["thread_id"] == record.thread_id
    assert [e.payload["run_id"] for e in seen] == [record.run_id]


def test_goal_items_follow_the_persona_heartbeat_settings(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("ticket opened"), Reply("investigated"), Reply("deep dive done"))
    model_server.expect(Reply('{"attention": false, "message": ""}'))
    with running(tmp_path, workspace, model_server) as (client, runtime):
        task = beat(client, runtime, goal_check(action="open_ticket", deviation=0.9)).items[0]
        by_action = beat(client, runtime, goal_check(action="investigate")).items[0]
        by_deviation = beat(client, runtime, goal_check(action="wait", deviation=0.8)).items[0]
        small = beat(client, runtime, goal_check(action="watch", deviation=0.1)).items[0]
        again = beat(client, runtime, goal_check(action="watch", deviation=0.2)).items[0]  # same goal concern
        goal_run = run_record(client, runtime, task.run_id or "")
    actions = [r.action for r in (task, by_action, by_deviation, small, again)]
    assert actions == ["task", "isolated", "isolated", "summary", "duplicate"]
    assert "goal_task_actions" in task.reason and "exceeds 0.5" in by_deviation.reason
    assert goal_run.provenance.source_type == "goal" and goal_run.provenance.goal_id == "uptime"


def test_a_sensor_that_requires_approval_gates_the_task(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    with running(tmp_path, workspace, model_server) as (client, runtime):
        # the item names the duty that mandates the work; without one the run would be read-only
        item = hook({"title": "wire money"}, sensor="gated", route="task", metadata={"duty_id": "payments"})
        report = beat(client, runtime, item)
        (result,) = report.items
        record = run_record(client, runtime, result.run_id or "")
        inbox = runtime.services.inbox
        consumed = call(client, lambda: inbox.list("acme", "alice", InboxState.CONSUMED))
    assert model_server.requests == []  # nothing ran: a person decides first
    assert record.state == "waiting_approval" and record.provenance.duty_id == "payments"
    assert any("sensor_requires_approval" in r for r in record.provenance.governance_decision.reasons)  # type: ignore[union-attr]
    assert len(consumed) == 1
    (ref,) = meta(workspace)["task_refs"]
    assert ref["run_state"] == "waiting_approval"
    assert [c["run_id"] for c in meta(workspace)["open_concerns"]] == [record.run_id]  # still open


def test_an_approved_gated_task_keeps_the_skills_its_item_preferred(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer, keyword_skill: Callable[[str, str], str]
) -> None:
    skills = workspace / "tenants/acme/workers/alice/skills"
    for name, keyword in (("triage", "alert"), ("billing", "invoice")):
        (skills / name).mkdir(parents=True)
        (skills / name / "SKILL.md").write_text(keyword_skill(name, keyword), encoding="utf-8")

    def runs_billing(body: dict[str, Any]) -> None:
        assert "Do the invoice work" in json.dumps(body), "expected the item's preferred skill (billing)"

    model_server.expect(Reply("Paid.", check=runs_billing))
    auth = {"Authorization": f"Bearer {ApiKeyStore(workspace).create('acme')[1]}"}
    with running(tmp_path, workspace, model_server) as (client, runtime):
        metadata = {"duty_id": "payments", "preferred_skill_ids": ["billing"]}
        item = hook({"title": "have a look"}, sensor="gated", route="task", metadata=metadata)
        (result,) = beat(client, runtime, item).items
        assert run_record(client, runtime, result.run_id or "").state == "waiting_approval"
        [pending] = client.get("/api/v1/workers/alice/confirmations", headers=auth).json()["confirmations"]
        approve = f"/api/v1/workers/alice/confirmations/{pending['confirmation_id']}/approve"
        approved = client.post(approve, headers=auth)
        assert approved.status_code == 200, approved.text
        runs = call(client, lambda: runtime.services.router.tasks.list_runs("acme", "alice"))  # type: ignore[union-attr]
    assert sorted(str(r.state) for r in runs) == ["completed", "superseded"]
    assert len(model_server.requests) == 1


def test_blocked_work_is_recorded_with_its_reason(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    with running(tmp_path, workspace, model_server) as (client, runtime):
        item = new_item(
            "acme", "alice", "event", "c", "goal.check", {"goal_id": "no-such-goal", "action": "open_ticket"}
        )
        (result,) = beat(client, runtime, item).items
        record = run_record(client, runtime, result.run_id or "")
    assert model_server.requests == []
    assert record.state == "failed" and record.error is not None and record.error.code == "governance_blocked"
    assert meta(workspace)["task_refs"][0]["run_state"] == "failed"


def test_a_facts_evidence_reaches_the_policy_gate(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    evidence = {
        "confidence": 0.97,
        "evidence_sources": ["github", "pagerduty"],
        "requested_actions": ["internal_status_transition"],
        "requested_effects": ["external"],
    }
    with running(tmp_path, workspace, model_server) as (client, runtime):
        item = hook({"title": "move the ticket", **evidence}, route="task", metadata={"duty_id": "payments"})
        (result,) = beat(client, runtime, item).items
        record = run_record(client, runtime, result.run_id or "")
        snapshots = runtime.services.router.governance.snapshots
        ref = record.provenance.policy_snapshot_ref or ""
        snapshot = snapshots.load_policy("acme", "alice", ref.rsplit("/", 1)[-1].removesuffix(".json"))
    assert model_server.requests == [] and record.state == "waiting_approval"  # the tenant did not enable it
    assert (snapshot.inputs.confidence, snapshot.inputs.evidence_sources) == (0.97, ("github", "pagerduty"))
    assert snapshot.decision.gate_result == "confirm"
    assert "the tenant to enable high_risk_auto_enabled" in snapshot.decision.gate_reasons[0].message


def test_malformed_evidence_fails_the_item_naming_the_field_without_retry(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    with running(tmp_path, workspace, model_server) as (client, runtime):
        item = hook({"title": "move it", "confidence": 1.5}, route="task")
        (result,) = beat(client, runtime, item).items
        inbox = runtime.services.inbox
        stored = call(client, lambda: inbox.get("acme", "alice", item.item_id))
    assert result.outcome == "failed" and "payload.confidence must be a number between 0 and 1" in (result.error or "")
    assert stored is not None and stored.state == InboxState.DEAD and "payload.confidence" in (stored.last_error or "")
    assert model_server.requests == []


def test_a_run_that_ends_before_its_beat_is_recorded_keeps_its_final_state(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's follower records its end before the beat records the run's ref (a blocked run
    fails in milliseconds): the ref must still say `failed`, not stay `running`."""
    with running(tmp_path, workspace, model_server) as (client, runtime):
        runner = runtime.services.heartbeat.runner
        record_after_runs = runner._record

        async def late_record(*args: Any) -> None:
            await runner.wait_runs()  # every follower has finished and tried to update the meta
            await record_after_runs(*args)

        monkeypatch.setattr(runner, "_record", late_record)
        item = new_item(
            "acme", "alice", "event", "c", "goal.check", {"goal_id": "no-such-goal", "action": "open_ticket"}
        )
        (result,) = beat(client, runtime, item).items
    (ref,) = meta(workspace)["task_refs"]
    assert (ref["run_id"], ref["run_state"]) == (result.run_id, "failed")
    assert ref["finished_at"] is not None
