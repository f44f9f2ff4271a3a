"""DutyBindingResolver: explicit duty, duty source, trigger provenance, goal, and what fails."""

from __future__ import annotations

import pytest

from genworker.worker.governance import DutyBindingResolver, GovernanceInput
from genworker.workspace.models import Tenant
from genworker.workspace.snapshot import Worker


@pytest.fixture
def worker(ws) -> Worker:
    ws.persona()
    ws.write(
        "tenants/acme/workers/w/duties/_defaults.md",
        "---\nposture:\n  default: draft\nexecution_policy:\n  default: quick\n---\n",
    )
    ws.duty(
        "triage",
        """
        triggers:
          - {id: new-mail, type: event, source: mailbox}
          - {id: sweep, type: schedule, interval: 30m}
          - {id: shared, type: manual}
        execution_policy:
          default: standard
          overrides: {sweep: deep}
        posture:
          default: execute
          overrides: {sweep: propose}
        """,
    )
    ws.duty(
        "brief", "triggers:\n  - {id: shared, type: manual}\n  - {id: morning, type: schedule, cron: '0 7 * * *'}\n"
    )
    ws.duty("old", "status: closed\ntriggers:\n  - {id: old-trigger, type: manual}\n")
    ws.write(
        "tenants/acme/workers/w/goals/launch.md",
        "---\ngoal_id: launch\ntitle: Launch\nprimary_duty_id: brief\n---\n",
    )
    ws.write("tenants/acme/workers/w/goals/plain.md", "---\ngoal_id: plain\ntitle: No duty\n---\n")
    worker, _ = ws.load_worker()
    return worker


def bind(worker: Worker, **fields):
    return DutyBindingResolver().resolve(GovernanceInput(Tenant(tenant_id="acme"), worker, **fields))


def test_chat_binds_no_duty_by_default(worker) -> None:
    binding = bind(worker, source_type="chat")
    assert (binding.duty, binding.via, binding.problem, binding.depth, binding.posture) == (
        None,
        "none",
        None,
        None,
        None,
    )


def test_explicit_duty_takes_the_trigger_depth_and_posture(worker) -> None:
    binding = bind(worker, source_type="task", duty_id="triage", trigger_id="sweep")
    assert (binding.duty_id, binding.via, binding.trigger_id, binding.depth, binding.posture) == (
        "triage",
        "explicit",
        "sweep",
        "deep",
        "propose",
    )
    other = bind(worker, duty_id="triage", trigger_id="new-mail")
    assert (other.depth, other.posture) == ("standard", "execute")


def test_without_a_trigger_the_duty_default_applies_including_defaults_md(worker) -> None:
    triage = bind(worker, duty_id="triage")
    assert (triage.depth, triage.posture) == ("standard", "execute")  # the duty's own defaults win
    brief = bind(worker, duty_id="brief")
    assert (brief.depth, brief.posture) == ("quick", "draft")  # from duties/_defaults.md


def test_a_duty_source_names_its_duty(worker) -> None:
    binding = bind(worker, source_type="duty", source_id="triage", trigger_id="new-mail")
    assert (binding.duty_id, binding.via, binding.depth) == ("triage", "source", "standard")


def test_a_trigger_declared_by_one_duty_binds_it(worker) -> None:
    binding = bind(worker, source_type="schedule", trigger_id="morning")
    assert (binding.duty_id, binding.via, binding.depth, binding.posture) == ("brief", "trigger", "quick", "draft")


def test_a_trigger_no_duty_declares(worker) -> None:
    binding = bind(worker, source_type="event", trigger_id="nope")
    assert binding.duty is None
    assert binding.problem == "trigger_unknown"
    assert "no duty of worker acme/w declares trigger 'nope'" in binding.detail


def test_a_trigger_several_duties_declare_is_ambiguous(worker) -> None:
    binding = bind(worker, source_type="event", trigger_id="shared")
    assert binding.problem == "trigger_ambiguous"
    assert "['brief', 'triage']" in binding.detail


def test_an_explicit_duty_with_a_trigger_it_does_not_have(worker) -> None:
    binding = bind(worker, duty_id="triage", trigger_id="morning")
    assert binding.duty_id == "triage"
    assert binding.problem == "trigger_unknown"
    assert binding.detail == "duty 'triage' has no trigger 'morning'"


def test_unknown_duty(worker) -> None:
    binding = bind(worker, duty_id="ghost")
    assert (binding.duty, binding.via, binding.problem) == (None, "explicit", "duty_unknown")
    assert binding.detail == "duty 'ghost' is not a duty of worker acme/w"
    assert bind(worker, source_type="duty", source_id="ghost").problem == "duty_unknown"


def test_a_closed_duty_is_still_bound(worker) -> None:
    binding = bind(worker, duty_id="old")
    assert binding.duty_id == "old"
    assert binding.problem is None


def test_goal_binds_its_primary_duty_and_an_explicit_duty_wins(worker) -> None:
    binding = bind(worker, source_type="goal", goal_id="launch")
    assert (binding.goal_id, binding.duty_id, binding.via) == ("launch", "brief", "goal")
    binding = bind(worker, source_type="goal", goal_id="launch", duty_id="triage")
    assert (binding.goal_id, binding.duty_id, binding.via) == ("launch", "triage", "explicit")
    binding = bind(worker, source_type="goal", goal_id="plain")
    assert (binding.goal_id, binding.duty) == ("plain", None)


def test_unknown_goal(worker) -> None:
    binding = bind(worker, source_type="goal", goal_id="ghost", duty_id="triage")
    assert (binding.problem, binding.duty) == ("goal_unknown", None)
    assert binding.detail == "goal 'ghost' is not a goal of worker acme/w"
