"""A duty run that ends before (or outside) its engine — refused by governance, no skill, a failed
pre_script, an internal error — has the escalations its failure calls for written down before it
is recorded failed, as an engine run's are, so a stop in between leaves them owed (#25).

The settler and the duty outcomes are the runtime's, on a workspace on disk, with the real task
lifecycle and escalation plans; the model is the scripted server, with no step: the contract's
checks never call it for a failed run."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from genworker.autonomy.duties.contract import ContractChecks
from genworker.autonomy.duties.delivery import DutyDelivery
from genworker.autonomy.duties.escalation import Escalations
from genworker.autonomy.duties.escalation_plans import DueEscalation, EscalationPlans
from genworker.autonomy.duties.outcomes import DutyOutcomes
from genworker.conversation import SessionManager
from genworker.conversation.file_store import FileSessionStore
from genworker.engine.base import RunResult
from genworker.engine.events import RunError
from genworker.llm.client import LLMClient
from genworker.llm.config_source import load_model_config
from genworker.settings import load_settings
from genworker.testing import ScriptedModelServer
from genworker.worker.admission import Blocked
from genworker.worker.confirmations.store import ConfirmationStore
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.routing import RouteDone, RouteRequest
from genworker.worker.settlement import Settler
from genworker.worker.task import RunRef, RunState, TaskManifest, TaskProvenance
from genworker.workspace.models.duty_terms import EscalationRule
from genworker.workspace.snapshot import Worker
from genworker.write_journal import DIRECT

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
CONTACTS = """
contacts:
  - {person_id: dana, name: Dana Lee, identities: [{channel: slack, handle: U-DANA}]}
"""


class Lifecycle(TaskLifecycle):
    """The task lifecycle, noting which escalation plans were on disk each time a run was failed."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.plans = EscalationPlans(root)
        self.planned_when_failed: list[list[str]] = []

    async def fail(self, ref: RunRef, code: str, message: str = "") -> Any:
        self.planned_when_failed.append([json.loads(p.read_text(encoding="utf-8"))["expect"] for p in self.plans.all()])
        return await super().fail(ref, code, message)


class Setup:
    def __init__(self, ws: Any, tmp_path: Path, model: ScriptedModelServer) -> None:
        ws.tenant("acme", trust_level=2)
        ws.persona(extra=CONTACTS)
        ws.duty("tally", "triggers: [{id: go, type: manual}]\nescalation: {condition: failed, target: dana}\n")
        self.root: Path = ws.root
        self.worker: Worker = ws.load_worker()[0]
        self.tasks = Lifecycle(self.root)
        env = {"GENWORKER_LLM_MODEL": "openai/scripted", "GENWORKER_LLM_API_BASE": model.base_url}
        llm = LLMClient(load_model_config(load_settings(tmp_path, {**env, "GENWORKER_LLM_API_KEY": "k"})))
        self.escalations = Escalations(self.tasks, lambda t, w: self.worker, plans=self.tasks.plans)
        outcomes = DutyOutcomes(self.tasks, ContractChecks(llm), DutyDelivery(self.root, self.tasks), self.escalations)
        sessions = SessionManager(FileSessionStore(self.root))
        self.settler = Settler(self.tasks, sessions, ConfirmationStore(self.root), None, DIRECT, outcomes)

    async def run(self, run_id: str, duty_id: str | None = "tally") -> RunRef:
        provenance = TaskProvenance(source_type="duty" if duty_id else "chat", duty_id=duty_id)
        manifest = TaskManifest(f"t-{run_id}", run_id, "acme", "w", "Tally the week.", T0, provenance=provenance)
        await self.tasks.persist_initial(manifest, start=True)
        return RunRef("acme", "w", run_id)

    def plan_of(self, ref: RunRef) -> dict[str, Any] | None:
        path = self.tasks.plans.path(ref)
        return dict(json.loads(path.read_text(encoding="utf-8"))) if path.is_file() else None


@pytest.fixture
def setup(ws: Any, tmp_path: Path, model_server: ScriptedModelServer) -> Setup:
    return Setup(ws, tmp_path, model_server)


@pytest.mark.parametrize("code", ["governance_blocked", "no_skill", "pre_script_failed"])
async def test_a_refused_duty_run_plans_its_escalations_before_it_is_recorded_failed(setup: Setup, code: str) -> None:
    ref = await setup.run("run_refused")
    error, done = await setup.settler.refuse(setup.worker, ref, Blocked(code, "it cannot run"))
    assert isinstance(error, RunError) and isinstance(done, RouteDone)
    assert setup.tasks.planned_when_failed == [["failed"]]
    plan = setup.plan_of(ref)
    assert plan is not None and plan["duty_id"] == "tally" and plan["expect"] == "failed"
    [due] = plan["due"]
    assert due["rule"] == {"condition": "failed", "target": "dana", "kind": "failed"}
    assert due["detail"] == f"The run ended failed: {code} it cannot run"

    ended = await setup.settler.ended(setup.worker, done)  # the escalation made, its plan dropped
    assert isinstance(ended, RouteDone) and ended.record.state is RunState.FAILED
    [made] = ended.record.escalations
    assert (made.target, made.state) == ("dana", "failed")  # recorded; Dana has no identity the worker can reach
    assert setup.plan_of(ref) is None


async def test_a_refused_duty_run_owes_its_escalations_at_the_next_start(setup: Setup) -> None:
    """Stopped after it was recorded failed, before `ended`: recovery makes what it owed, once."""
    ref = await setup.run("run_stopped")
    await setup.settler.refuse(setup.worker, ref, Blocked("pre_script_failed", "no such file"))
    assert await setup.escalations.recover() == 1
    [made] = (await setup.tasks.get_run(ref)).escalations
    assert made.target == "dana"
    assert await setup.escalations.recover() == 0


async def test_a_refused_run_of_no_duty_plans_nothing(setup: Setup) -> None:
    ref = await setup.run("run_chat", duty_id=None)
    await setup.settler.refuse(setup.worker, ref, Blocked("governance_blocked", "blocked by policy"))
    assert setup.tasks.planned_when_failed == [[]]
    assert (await setup.tasks.get_run(ref)).state is RunState.FAILED


def request() -> RouteRequest:
    return RouteRequest("acme", "w", "Tally the week.", "duty", duty_id="tally", conversational=False)


async def test_an_internal_error_of_a_duty_run_plans_its_escalations_before_it_is_recorded_failed(
    setup: Setup,
) -> None:
    ref = await setup.run("run_broken")
    _, done = await setup.settler.internal_error(request(), setup.worker, ref.run_id, RuntimeError("bug"))
    assert isinstance(done, RouteDone) and done.record.state is RunState.FAILED
    assert setup.tasks.planned_when_failed == [["failed"]]
    plan = setup.plan_of(ref)
    assert plan is not None and plan["due"][0]["detail"].startswith("The run ended failed: internal_error")


async def test_an_internal_error_after_the_run_ended_keeps_the_plan_it_ended_with(setup: Setup) -> None:
    """Completed (its plan written for `completed`), then its turn could not be stored: the run stays
    completed, and so does what it owes."""
    ref = await setup.run("run_done")
    rule = EscalationRule("failed", "dana", "failed")
    duty = setup.worker.duties["tally"]
    await setup.escalations.plan(ref, duty, [DueEscalation(rule, 0, "failed", "as planned")], "completed")
    await setup.tasks.complete(ref, RunResult("completed", "done"))
    _, done = await setup.settler.internal_error(request(), setup.worker, ref.run_id, OSError("disk full"))
    assert isinstance(done, RouteDone) and done.record.state is RunState.COMPLETED
    plan = setup.plan_of(ref)
    assert plan is not None and (plan["expect"], plan["due"][0]["detail"]) == ("completed", "as planned")


async def test_an_internal_error_of_a_run_never_recorded_plans_nothing_and_raises(setup: Setup) -> None:
    ref = RunRef("acme", "w", "run_unrecorded")
    with pytest.raises(RuntimeError, match="bug"):
        await setup.settler.internal_error(request(), setup.worker, ref.run_id, RuntimeError("bug"))
    assert setup.tasks.plans.all() == []
