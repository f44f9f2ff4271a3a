"""Goal evaluation with real parts: run records in a tmp workspace through TaskLifecycle, LiteLLM over
HTTP to the scripted model, the goal file edited through the GoalAggregate, a file inbox.

A met verdict with evidence moves its goal task to done (and the milestone with it), once; not_met
and every kind of malformed or failed answer move nothing; a completed run without a verdict is
not met; a run is judged once however often it is projected, and judging it again never advances
anything twice."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from genworker.autonomy.goals import (
    GOAL_EVALUATED,
    GOAL_UPDATED,
    GOAL_VERDICT_INCONCLUSIVE,
    GoalAggregate,
    GoalEvaluator,
    GoalProgressProjector,
    VerdictLog,
)
from genworker.autonomy.inbox import FileInboxStore
from genworker.bus import Event, InProcessEventBus
from genworker.engine.base import RunResult
from genworker.llm.client import LLMClient
from genworker.llm.config_source import load_model_config
from genworker.settings import load_settings
from genworker.testing import Fail, Reply, ScriptedModelServer, ToolCallReply, When, scripted_env
from genworker.tools.audit import AuditRecord, WorkerAuditSink
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.task import (
    GoalStatus,
    RunRecord,
    TaskManifest,
    TaskProvenance,
    ToolCallRecord,
    new_run_id,
    new_task_id,
)

pytestmark = pytest.mark.anyio

GOAL_FILE = "tenants/acme/workers/alice/goals/kpi.md"
GOAL = """---
goal_id: kpi
title: KPI reporting
milestones:
  - id: weekly
    title: Weekly reporting runs   # the author's comment stays
    success_criteria: [the report reaches the team]
    tasks:
      - id: first-report
        title: Publish the first weekly KPI report
        duty_id: report
        success_criteria:
          - "a report with this week's signup numbers is posted to #kpi"
      - id: review
        title: Review the report format
        blocked_by: [first-report]
        duty_id: review
---
The weekly KPI report keeps the team honest.
"""
DUTY = "---\nduty_id: report\ntitle: Weekly report\ntriggers: [{id: m, type: manual}]\n---\nWrite the KPI report.\n"
REVIEW = "---\nduty_id: review\ntitle: Review\ntriggers: [{id: m, type: manual}]\n---\nReview the report format.\n"
OUTPUT = "Posted the weekly KPI report to #kpi: 1,204 signups (+8%)."


def verdict_call(**answer: Any) -> Reply:
    return Reply(tool_calls=(ToolCallReply("goal_verdict", answer),))


MET = {"verdict": "met", "reasons": ["the report with signups was posted to #kpi"], "evidence": ["output", "tool:c1"]}
NOT_MET = {"verdict": "not_met", "reasons": ["the report was drafted but never posted"], "evidence": ["output"]}


@dataclass
class World:
    root: Path
    tasks: TaskLifecycle
    goals: GoalAggregate
    projector: GoalProgressProjector
    inbox: FileInboxStore
    bus: InProcessEventBus
    events: list[Event] = field(default_factory=list)

    @property
    def goal_text(self) -> str:
        return (self.root / GOAL_FILE).read_text(encoding="utf-8")

    def statuses(self) -> dict[str, str]:
        goal = self.goals.get("acme", "alice", "kpi")
        return {t.id: t.status for t in goal.tasks()} | {m.id: m.status for m in goal.milestones}

    async def completed_run(self, output: str = OUTPUT, *, calls: int = 1, **provenance: Any) -> RunRecord:
        manifest = TaskManifest(
            task_id=new_task_id(),
            run_id=new_run_id(),
            tenant_id="acme",
            worker_id="alice",
            text="Write the KPI report",
            created_at=datetime.now(UTC),
            provenance=TaskProvenance(**({"source_type": "duty", "duty_id": "report"} | provenance)),
        )
        run = await self.tasks.persist_initial(manifest, start=True)
        sink = WorkerAuditSink(self.root)
        records = []
        for n in range(1, calls + 1):
            args = {"channel": "#kpi", "text": "KPI report: 1,204 signups"}
            await sink.write(
                AuditRecord(
                    datetime.now(UTC).isoformat(),
                    "acme",
                    "alice",
                    run.run_id,
                    f"c{n}",
                    "send_message",
                    "task",
                    "external",
                    "medium",
                    args,
                    "allow",
                    "completed",
                    None,
                    "",
                    12.0,
                )
            )
            records.append(ToolCallRecord("send_message", f"c{n}", "completed", 12.0))
        return await self.tasks.complete(run.ref, RunResult("completed", output), tool_calls=records)

    async def inbox_types(self) -> list[str]:
        return [i.event_type for i in await self.inbox.list("acme", "alice")]


@pytest.fixture
async def world(small_workspace: Callable[..., Path], tmp_path: Path, model_server: ScriptedModelServer) -> Any:
    root = small_workspace(
        {"acme": ["alice"]},
        {
            GOAL_FILE: GOAL,
            "tenants/acme/workers/alice/duties/report.md": DUTY,
            "tenants/acme/workers/alice/duties/review.md": REVIEW,
        },
    )
    llm = LLMClient(load_model_config(load_settings(tmp_path, scripted_env(model_server))))
    tasks = TaskLifecycle(root)
    bus = InProcessEventBus()
    goals = GoalAggregate(root, bus=bus)
    inbox = FileInboxStore(root)
    projector = GoalProgressProjector(goals, tasks, GoalEvaluator(llm, timeout_s=30), bus=bus, inbox=inbox)
    w = World(root, tasks, goals, projector, inbox, bus)

    async def record(event: Event) -> None:
        w.events.append(event)

    bus.subscribe("goal.*", record)
    yield w
    await bus.close()


async def test_a_met_verdict_with_evidence_moves_the_task_to_done_once(
    world: World, model_server: ScriptedModelServer
) -> None:
    def check(body: dict[str, Any]) -> None:
        assert body["tool_choice"] == {"type": "function", "function": {"name": "goal_verdict"}}
        assert [t["function"]["name"] for t in body["tools"]] == ["goal_verdict"]
        assert body["tools"][0]["function"]["parameters"]["required"] == ["verdict", "reasons", "evidence"]
        question = json.loads(body["messages"][1]["content"])
        assert question["task"]["id"] == "first-report" and question["milestone"]["id"] == "weekly"
        assert question["criteria"] == [
            "a report with this week's signup numbers is posted to #kpi",  # the task's, then the milestone's
            "the report reaches the team",
        ]
        output, call = question["evidence"]
        assert output == {"id": "output", "kind": "output", "text": OUTPUT}
        assert call["id"] == "tool:c1" and call["tool"] == "send_message" and call["outcome"] == "completed"
        assert json.loads(call["arguments"]) == {"channel": "#kpi", "text": "KPI report: 1,204 signups"}
        assert "untrusted data" in body["messages"][0]["content"]

    model_server.expect(Reply(tool_calls=(ToolCallReply("goal_verdict", MET),), check=check))
    run = await world.completed_run()
    assert run.goal_status is GoalStatus.NOT_APPLICABLE and run.goal_verdict is None  # completed is not met

    done = await world.projector.evaluate(run.ref)
    assert done.judged and done.run.goal_status is GoalStatus.MET
    verdict = done.run.goal_verdict
    assert verdict is not None and (verdict.goal_id, verdict.task_id) == ("kpi", "first-report")
    assert verdict.evidence == ("output", "tool:c1") and verdict.reasons == tuple(MET["reasons"])
    assert verdict.evaluator == "goal-evaluator/1" and verdict.usage is not None and verdict.usage.tier == "fast"
    assert world.statuses() == {"first-report": "done", "review": "pending", "weekly": "in_progress"}
    assert (await world.tasks.get_run(run.ref)).goal_verdict == verdict  # on the run record
    text = world.goal_text
    assert "title: Weekly reporting runs   # the author's comment stays" in text
    assert text.endswith("---\nThe weekly KPI report keeps the team honest.\n")
    last = VerdictLog(world.root).last("acme", "alice")["kpi"]
    assert last.run_id == run.run_id and last.moved == ("task first-report: done", "milestone weekly: in_progress")

    # projected again (the catch-up, another listener): the recorded verdict is reused, no model call
    assert (await world.projector.evaluate(run.ref)).judged is False
    assert await world.projector.project(await world.tasks.get_run(run.ref)) == []
    # judged again on request: a second model call, the same verdict, nothing advances twice
    model_server.expect(verdict_call(**MET))
    again = await world.projector.evaluate(run.ref, again=True)
    assert again.judged and again.changes == () and world.goal_text == text
    assert again.run.version == done.run.version + 1  # the new verdict is recorded
    await world.bus.drain()
    assert [e.topic for e in world.events].count(GOAL_UPDATED) == 1
    assert [e.topic for e in world.events].count(GOAL_EVALUATED) == 2
    assert await world.inbox_types() == []


async def test_not_met_leaves_the_goal_unchanged_with_the_reason_recorded(
    world: World, model_server: ScriptedModelServer
) -> None:
    model_server.expect(verdict_call(**NOT_MET))
    before = world.goal_text
    run = await world.completed_run()
    result = await world.projector.evaluate(run.ref)
    assert result.run.goal_status is GoalStatus.NOT_MET and result.changes == ()
    assert result.run.goal_verdict is not None
    assert result.run.goal_verdict.reasons == ("the report was drafted but never posted",)
    assert world.goal_text == before
    last = VerdictLog(world.root).last("acme", "alice")["kpi"]
    assert last.verdict.status is GoalStatus.NOT_MET and last.moved == ()
    await world.bus.drain()
    evaluated = [e for e in world.events if e.topic == GOAL_EVALUATED]
    assert [e.payload["goal_status"] for e in evaluated] == ["not_met"]
    assert evaluated[0].payload["reasons"] == ("the report was drafted but never posted",)
    assert await world.inbox_types() == []


MALFORMED = {
    "prose": Reply("The report is clearly done, the goal is met."),
    "empty arguments": Reply(tool_calls=(ToolCallReply("goal_verdict", {}),)),
    "no reasons": verdict_call(verdict="met", evidence=["output"]),
    "unknown verdict": verdict_call(verdict="achieved", reasons=["posted"], evidence=["output"]),
    "extra field": verdict_call(verdict="met", reasons=["posted"], evidence=["output"], confidence=0.9),
    "invented evidence": verdict_call(verdict="met", reasons=["posted"], evidence=["tool:c9"]),
    "met without evidence": verdict_call(verdict="met", reasons=["surely posted"], evidence=[]),
    "another function": Reply(tool_calls=(ToolCallReply("send_message", {"text": "met"}),)),
    "model down": Fail(500, "upstream down"),
}


@pytest.mark.parametrize("answer", MALFORMED.values(), ids=MALFORMED.keys())
async def test_a_malformed_or_failed_verdict_is_inconclusive_and_moves_nothing(
    world: World, model_server: ScriptedModelServer, answer: Reply | Fail
) -> None:
    model_server.expect(answer)
    before = world.goal_text
    run = await world.completed_run()
    result = await world.projector.evaluate(run.ref)
    assert result.run.state == "completed" and result.run.goal_status is GoalStatus.INCONCLUSIVE
    assert result.run.goal_verdict is not None and result.run.goal_verdict.evidence == ()
    assert world.goal_text == before and result.changes == ()
    # a person is asked to look (once per goal task and day, however many runs are inconclusive)
    assert await world.inbox_types() == [GOAL_VERDICT_INCONCLUSIVE]
    (item,) = await world.inbox.list("acme", "alice")
    assert item.payload["action"] == "review_goal_run" and item.payload["run_id"] == run.run_id


async def test_the_reasons_name_what_was_malformed(world: World, model_server: ScriptedModelServer) -> None:
    model_server.expect(
        verdict_call(verdict="met", evidence=["output"]),
        verdict_call(verdict="met", reasons=["posted"], evidence=["tool:c9"]),
    )
    first = (await world.projector.evaluate((await world.completed_run()).ref)).run.goal_verdict
    second = (await world.projector.evaluate((await world.completed_run()).ref)).run.goal_verdict
    assert first is not None and second is not None
    assert first.reasons == ("the evaluator's answer was malformed: reasons: Field required",)
    assert second.reasons == ("the evaluator cited evidence the run does not have: ['tool:c9']",)
    assert await world.inbox_types() == [GOAL_VERDICT_INCONCLUSIVE]  # the second is the same concern


async def test_runs_that_did_not_complete_or_serve_no_goal_are_not_judged(world: World) -> None:
    unrelated = await world.completed_run(duty_id="other-duty")
    assert (await world.projector.evaluate(unrelated.ref)).run.goal_verdict is None
    provenance = TaskProvenance("duty", duty_id="report")
    manifest = TaskManifest(new_task_id(), new_run_id(), "acme", "alice", "x", datetime.now(UTC), provenance=provenance)
    failed = await world.tasks.persist_initial(manifest, start=True)
    failed = await world.tasks.fail(failed.ref, "engine_failed", "boom")
    assert (await world.projector.evaluate(failed.ref)).run.goal_verdict is None
    assert world.statuses()["first-report"] == "pending"  # no model call was scripted: none was made


async def test_the_completion_listener_and_a_catch_up_judge_a_run_once(
    world: World, model_server: ScriptedModelServer
) -> None:
    model_server.expect(verdict_call(**MET))
    world.tasks.on_completed.append(world.projector.after_run)
    evaluated = asyncio.Event()

    async def on_evaluated(event: Event) -> None:
        evaluated.set()

    world.bus.subscribe(GOAL_EVALUATED, on_evaluated)
    run = await world.completed_run()  # the listener starts the judgement in the background
    await world.projector.catch_up("acme", "alice")  # meanwhile: whichever comes second reuses the verdict
    await asyncio.wait_for(evaluated.wait(), 30)
    await world.projector.stop()
    assert world.statuses()["first-report"] == "done"
    assert (await world.tasks.get_run(run.ref)).goal_status is GoalStatus.MET
    assert len(model_server.requests) == 1


async def test_verdicts_for_two_tasks_of_one_goal_written_at_once_both_land(
    world: World, model_server: ScriptedModelServer
) -> None:
    model_server.expect(
        When("Publish the first weekly KPI report", verdict_call(**MET)),
        When("Review the report format", verdict_call(verdict="met", reasons=["format reviewed"], evidence=["output"])),
    )
    report = await world.completed_run()
    review = await world.completed_run("Reviewed the format with the team.", duty_id="review")
    # both judged at once: each edit re-reads the goal file under its lock, so neither is lost
    await asyncio.gather(world.projector.evaluate(report.ref), world.projector.evaluate(review.ref))
    assert world.statuses() == {"first-report": "done", "review": "done", "weekly": "done"}
