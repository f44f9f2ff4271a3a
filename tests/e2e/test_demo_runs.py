"""The demo as git tracks it runs cleanly: `genworker check` says OK with no warning, the server
starts without a WARNING, every sensor polls, and every duty runs to a completed run record with
a configured model (the scripted one), its tool steps reading the demo's sample data."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from genworker.auth import ApiKeyStore
from genworker.autonomy.duties.scheduler import event_matches
from genworker.autonomy.inbox.topics import written_event
from genworker.autonomy.sensing import SensorRegistry
from genworker.autonomy.sensing.facts import FactEmitter
from genworker.autonomy.sensing.testing import MemoryInboxWriter, StatusLog
from genworker.autonomy.sensing.webhook import body_facts, select_webhook_sensor
from genworker.cli import main
from genworker.testing import Reply, ScriptedModelServer, ToolCallReply, When
from genworker.testing.live_server import serve
from genworker.tools.environment import ToolRuntime
from genworker.workspace.registry import PRODUCT_SKILLS, WorkspaceRegistry

DUTIES = {
    "assistant": ["morning-brief", "inbox-triage"],
    "analyst": ["weekly-metrics-review", "metric-anomaly-watch", "data-request"],
}


def sees(*texts: str) -> Callable[[dict[str, Any]], None]:
    """A request check: the messages sent to the model contain every text."""

    def check(body: dict[str, Any]) -> None:
        sent = json.dumps(body["messages"], ensure_ascii=False)
        missing = [t for t in texts if t not in sent]
        assert not missing, f"the model was not shown {missing}"

    return check


def warnings_in(records: list[logging.LogRecord]) -> list[str]:
    return [f"{r.name}: {r.getMessage()}" for r in records if r.levelno >= logging.WARNING]


def loaded(workspace: Path) -> WorkspaceRegistry:
    registry = WorkspaceRegistry(workspace, product_skills=PRODUCT_SKILLS)
    registry.load_all()
    return registry


def test_check_says_ok_with_no_warning(demo_workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--workspace", str(demo_workspace), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["ok"], report["issues"]) == (True, [])
    assert main(["check", "--workspace", str(demo_workspace)]) == 0
    assert capsys.readouterr().out == "OK: 1 tenant, 2 workers, 5 duties, 2 goals, 9 skills\n"


def test_every_tool_a_demo_skill_names_exists(demo_workspace: Path) -> None:
    tools = ToolRuntime(demo_workspace)
    for worker in loaded(demo_workspace).workers():
        assert tools.missing_tools(worker) == {}, worker.key


@pytest.mark.anyio
async def test_every_demo_sensor_can_run_and_polls_cleanly(
    demo_workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="genworker")
    statuses = StatusLog()
    sensors = SensorRegistry(demo_workspace, MemoryInboxWriter(), on_status=statuses)
    await sensors.sync(loaded(demo_workspace).workers())
    try:
        built = sensors.statuses()
        assert {(s.worker_id, s.sensor_key, s.state) for s in built} == {
            ("assistant", "office-webhooks", "ready"),
            ("assistant", "shared-notes", "ready"),
            ("analyst", "warehouse-export", "ready"),
            ("analyst", "warehouse-loads", "ready"),
        }
        for pulled in [(s.worker_id, s.sensor_key) for s in built if s.mode == "poll"]:
            await statuses.wait_for(lambda s, key=pulled: (s.worker_id, s.sensor_key) == key and s.polls >= 1)
        assert [s for s in sensors.statuses() if s.state != "ready" or s.consecutive_failures] == []
    finally:
        await sensors.stop()
    assert warnings_in(caplog.records) == []


@pytest.mark.anyio
async def test_new_mail_pushed_to_the_webhook_fires_the_inbox_triage_duty(demo_workspace: Path) -> None:
    assistant = loaded(demo_workspace).worker("demo", "assistant")
    assert assistant is not None
    (new_mail,) = [t for t in assistant.duties["inbox-triage"].triggers if t.type == "event"]
    emitter = FactEmitter("demo", "assistant", select_webhook_sensor(assistant), MemoryInboxWriter())
    bodies = {
        "email.received": {"event_type": "email.received", "id": "m-1", "subject": "Board deck draft?"},
        "calendar.updated": {"event_type": "calendar.updated", "id": "c-1", "subject": "Leadership sync moved"},
    }
    fired = {}
    for kind, body in bodies.items():
        (emission,) = [await emitter.emit(f) for f in body_facts(json.dumps(body).encode())]
        assert emission.item is not None
        fired[kind] = (emission.item.route, event_matches(new_mail, assistant, written_event(emission.item)))
    assert fired == {"email.received": ("mail", True), "calendar.updated": ("calendar", False)}


def judged(criteria: int, evidence: int = 0, conditions: int = 0) -> Reply:
    """The evaluator turn after a completed duty run: every quality criterion met, every piece of
    audit evidence present, no escalation condition holding."""
    answer = {
        "criteria": [{"n": n, "met": True, "reason": "shown"} for n in range(1, criteria + 1)],
        "evidence": [{"n": n, "present": True, "reason": "shown"} for n in range(1, evidence + 1)],
        "conditions": [{"n": n, "holds": False, "reason": "not seen"} for n in range(1, conditions + 1)],
    }
    return Reply(json.dumps(answer), check=sees("Quality criteria (is each met by the result?)"))


def script_every_duty(model: ScriptedModelServer) -> dict[str, str]:
    """The model's part of each duty, in the order the test runs them; returns each run's final text."""
    final = {
        "morning-brief": "Monday 2026-12-07, 4 meetings. Decisions today: the board deck draft for Priya.",
        "inbox-triage": "noise: SaaS Weekly #312; needs_dana: Dr. Omar Haddad asks for a loyalty discount.",
        "weekly-metrics-review": "# Weekly metrics — week of 2026-11-30\nsignups -14.5%: paid search US.",
        "metric-anomaly-watch": "Signups fell 14.5% week over week, mostly paid search US; confidence high.",
        "data-request": "Signups for the week of 2026-11-30: 4,380 (weekly_metrics.csv).",
    }
    # every duty serves an open demo goal task: the runtime judges each run once, in the background
    not_yet = {"verdict": "not_met", "reasons": ["one run does not finish this task"], "evidence": ["output"]}
    model.expect(*[When("You judge whether one run", Reply(tool_calls=(ToolCallReply("goal_verdict", not_yet),)))] * 5)
    model.expect(
        # morning-brief: daily-brief, hybrid: two file_search steps, an autonomous step, an llm step
        Reply(
            tool_calls=(ToolCallReply("file_search", {"query": "Haddad", "path": "data/inbox"}),),
            check=sees("Northwind Ventures quarterly check-in", "2026-12-06-priya-board-deck.md"),
        ),
        Reply("Omar Haddad runs Bayview Family Practice; he wrote today about the price change.",
              check=sees("2026-12-07-bayview-renewal.md:1: From: Dr. Omar Haddad")),
        Reply(final["morning-brief"], check=sees("Omar Haddad runs Bayview Family Practice")),
        judged(3, conditions=1),
        # inbox-triage: autonomous (ReAct) with the file tools
        Reply(tool_calls=(ToolCallReply("file_list", {"path": "data/inbox"}),), check=sees("Triage the new message")),
        Reply(final["inbox-triage"], check=sees("data/inbox/2026-12-07-saas-weekly.md")),
        judged(2, evidence=1, conditions=2),
        # weekly-metrics-review: metrics-weekly-report, deterministic: tool, tool, llm, condition, tool, llm
        Reply("- signups: 5120 -> 4380, -14.5%, cause unknown",
              check=sees("2026-11-30,signups,4380", "2026-11-23,signups,5120")),
        Reply(final["weekly-metrics-review"], check=sees("Black Friday paid search campaign ends in the US")),
        judged(2, evidence=1, conditions=2),
        # metric-anomaly-watch: anomaly-investigation, hybrid: tool, condition, tool, autonomous, llm
        Reply("Paid search starter US: 1460 -> 780; the US campaign ended 2026-11-27.",
              check=sees("2026-11-30,paid_search,starter,us,780")),
        Reply(final["metric-anomaly-watch"], check=sees("the US campaign ended 2026-11-27")),
        judged(2, conditions=1),
        # data-request: general-chat, autonomous
        Reply(final["data-request"], check=sees("Answer the data question you were given")),
        judged(2, conditions=1),
    )  # fmt: skip
    return final


def test_the_server_starts_without_a_warning_and_every_duty_runs(
    tmp_path: Path, demo_workspace: Path, model_server: ScriptedModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="genworker")
    final = script_every_duty(model_server)
    headers = {"Authorization": f"Bearer {ApiKeyStore(demo_workspace).create('demo')[1]}"}
    delivered: dict[str, list[tuple[str, str, str | None]]] = {}
    with serve(tmp_path, demo_workspace, model_server) as server:
        assert warnings_in(caplog.records) == []
        with httpx.Client(base_url=f"{server.url}/api/v1/workers", headers=headers, timeout=120) as http:
            for worker_id, duties in DUTIES.items():
                for duty_id in duties:
                    answer = http.post(f"/{worker_id}/duties/{duty_id}/run")
                    assert answer.status_code == 200, answer.text
                    run = http.get(f"/{worker_id}/runs/{answer.json()['run']['run_id']}").json()
                    assert (run["state"], run["error"], run["fallback"]) == ("completed", None, None), run
                    assert {t["outcome"] for t in run["tool_calls"]} <= {"completed"}, run["tool_calls"]
                    assert run["deliverables"][0]["content"] == final[duty_id]
                    assert {c["verdict"] for c in run["checks"]} == {"passed"}, run["checks"]
                    delivered[duty_id] = [(d["to"], d["state"], d["delivered_to"]) for d in run["deliveries"]]
                    executions = http.get(f"/{worker_id}/duties/{duty_id}/executions").json()["executions"]
                    assert [e["state"] for e in executions] == ["completed"]
    assert warnings_in(caplog.records) == []
    # the morning brief is written where a newcomer finds it; the weekly review's manual rerun is a draft: held
    [(to, state, brief)] = delivered["morning-brief"]
    assert (to, state) == ("folder briefs", "sent") and brief is not None
    written = (demo_workspace / "tenants/demo/workers/assistant" / brief).read_text(encoding="utf-8")
    assert written.startswith("# Morning brief for Dana\n") and final["morning-brief"] in written
    assert delivered["weekly-metrics-review"] == [("folder reports", "held", None)]
