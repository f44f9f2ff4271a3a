"""A goal reaches `met` from evidence, over real HTTP (uvicorn, LiteLLM to the scripted model): a
duty bound to a goal task runs, the runtime judges the run in the background with one evaluator
call, and only a met verdict with evidence moves the goal file. A not_met run leaves the goal as it
was with the reason on the run and the dashboard; a completed run whose verdict is malformed is
inconclusive and moves nothing; judging a run again never advances the goal twice."""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.autonomy.goals import GOAL_EVALUATED, GOAL_VERDICT_INCONCLUSIVE
from genworker.autonomy.inbox import FileInboxStore
from genworker.bus import Event
from genworker.runtime.composition import Runtime
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, ToolCallReply, scripted_env
from genworker.testing.live_server import LiveServer

TIMEOUT = 30.0
GOAL_FILE = "tenants/acme/workers/alice/goals/kpi.md"
GOAL = """---
goal_id: kpi
title: Weekly KPI reporting
milestones:
  - id: launch
    title: The report is live
    tasks:
      - id: first-report
        title: Publish the first weekly KPI report
        duty_id: report
        success_criteria: ["the report with this week's signups is posted to the team channel"]
  - id: steady
    title: It keeps coming
    tasks:
      - id: review
        title: Review the format with the team
        status: blocked
        blocked_by: [first-report]
---
# Weekly KPI reporting
"""
DUTY = "---\nduty_id: report\ntitle: Weekly report\ntriggers: [{id: now, type: manual}]\n---\nPost the KPI report.\n"
POSTED = "Posted the weekly KPI report to #team: 1,204 signups (+8%)."


def verdict(**answer: Any) -> Reply:
    return Reply(tool_calls=(ToolCallReply("goal_verdict", answer),))


@dataclass
class Site:
    root: Path
    http: httpx.Client
    evaluated: queue.Queue[Event]

    def run_duty(self, output: str, answer: Reply, model: ScriptedModelServer) -> tuple[str, dict[str, Any]]:
        """Run the duty over HTTP; the run's evaluation event (the runtime judges it in the background)."""
        model.expect(Reply(output), answer)
        response = self.http.post("/api/v1/workers/alice/duties/report/run")
        assert response.status_code == 200, response.text
        run_id = response.json()["run"]["run_id"]
        event = self.evaluated.get(timeout=TIMEOUT)
        assert event.payload["run_id"] == run_id
        return run_id, dict(event.payload)

    def goal(self) -> dict[str, Any]:
        response = self.http.get("/api/v1/workers/alice/goals/kpi")
        assert response.status_code == 200, response.text
        body = response.json()
        return {t["id"]: t["status"] for m in body["milestones"] for t in m["tasks"]} | {
            m["id"]: m["status"] for m in body["milestones"]
        }

    def run(self, run_id: str) -> dict[str, Any]:
        response = self.http.get(f"/api/v1/workers/alice/runs/{run_id}")
        assert response.status_code == 200, response.text
        return dict(response.json())

    def last_verdict(self) -> dict[str, Any]:
        blocks = self.http.get("/api/v1/workers/alice/dashboard").json()["blocks"]
        assert blocks["goals"]["status"] == "ok", blocks["goals"]
        (goal,) = blocks["goals"]["data"]
        return dict(goal["last_verdict"])

    @property
    def goal_text(self) -> str:
        return (self.root / GOAL_FILE).read_text(encoding="utf-8")


@pytest.fixture
def site(tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer) -> Iterator[Site]:
    root = small_workspace({"acme": ["alice"]}, {GOAL_FILE: GOAL, "tenants/acme/workers/alice/duties/report.md": DUTY})
    (tmp_path / "configs").mkdir()
    app = create_app(load_settings(tmp_path / "configs", scripted_env(model_server), workspace=root))
    with LiveServer(app) as live:
        runtime: Runtime = app.state.runtime
        evaluated: queue.Queue[Event] = queue.Queue()

        async def on_evaluated(event: Event) -> None:
            evaluated.put(event)

        runtime.services.bus.subscribe(GOAL_EVALUATED, on_evaluated)
        key = ApiKeyStore(root).create("acme")[1]
        with httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
            yield Site(root, http, evaluated)


def test_a_goal_reaches_met_from_evidence_and_nothing_else_moves_it(
    site: Site, model_server: ScriptedModelServer
) -> None:
    untouched = site.goal_text
    start = {"first-report": "pending", "review": "blocked", "launch": "pending", "steady": "pending"}
    assert site.goal() == start

    # not met: the goal stays as it was; the reason is on the run, the event and the dashboard
    drafted, event = site.run_duty(
        "Drafted the KPI report; not posted yet.",
        verdict(verdict="not_met", reasons=["the report was drafted, not posted"], evidence=["output"]),
        model_server,
    )
    assert event["goal_status"] == "not_met" and list(event["moved"]) == []
    assert site.goal() == start and site.goal_text == untouched
    run = site.run(drafted)
    assert run["state"] == "completed" and run["goal_status"] == "not_met"
    assert run["goal_verdict"]["reasons"] == ["the report was drafted, not posted"]
    assert run["goal_verdict"]["task_id"] == "first-report"
    last = site.last_verdict()
    assert (last["run_id"], last["goal_status"], last["reasons"]) == (
        drafted,
        "not_met",
        ["the report was drafted, not posted"],
    )

    # completed, but the evaluator's answer is malformed: inconclusive, nothing moves, a person is asked
    unclear, event = site.run_duty(POSTED, Reply("Looks met to me!"), model_server)
    assert event["goal_status"] == "inconclusive" and site.goal_text == untouched
    run = site.run(unclear)
    assert run["state"] == "completed" and run["goal_status"] == "inconclusive"
    assert run["goal_verdict"]["reasons"][0].startswith("the evaluator's answer was malformed: not JSON")
    assert site.last_verdict()["goal_status"] == "inconclusive"
    (item,) = asyncio.run(FileInboxStore(site.root).list("acme", "alice"))
    assert item.event_type == GOAL_VERDICT_INCONCLUSIVE and item.payload["run_id"] == unclear

    # met with evidence: the task is done, its milestone with it, and the blocked task is free
    posted, event = site.run_duty(
        POSTED,
        verdict(verdict="met", reasons=["the report with signups was posted to #team"], evidence=["output"]),
        model_server,
    )
    assert event["goal_status"] == "met"
    assert list(event["moved"]) == ["task first-report: done", "task review: pending", "milestone launch: done"]
    assert site.goal() == {"first-report": "done", "review": "pending", "launch": "done", "steady": "pending"}
    run = site.run(posted)
    assert run["goal_status"] == "met" and run["goal_verdict"]["evidence"] == ["output"]
    assert run["goal_verdict"]["usage"]["purpose"] == "classify"
    last = site.last_verdict()
    assert (last["run_id"], last["goal_status"], last["task_id"]) == (posted, "met", "first-report")
    done = site.goal_text
    assert "# Weekly KPI reporting" in done and "duty_id: report" in done

    # asked again over HTTP: the recorded verdict, no model call; judged again: nothing advances twice
    url = f"/api/v1/workers/alice/runs/{posted}/goal-evaluation"
    same = site.http.post(url)
    assert same.status_code == 200, same.text
    assert same.json()["judged"] is False and same.json()["goal_status"] == "met" and same.json()["changes"] == []
    model_server.expect(verdict(verdict="met", reasons=["posted to #team"], evidence=["output"]))
    again = site.http.post(url, json={"again": True}).json()
    assert again["judged"] is True and again["goal_status"] == "met" and again["changes"] == []
    assert again["goal_verdict"]["reasons"] == ["posted to #team"]
    assert site.goal_text == done
    assert site.goal() == {"first-report": "done", "review": "pending", "launch": "done", "steady": "pending"}
    site.evaluated.get(timeout=TIMEOUT)  # the new judgement's event
    refused = site.http.post(f"/api/v1/workers/alice/runs/{posted}x/goal-evaluation")
    assert refused.status_code == 404
