"""The demo as git tracks it runs cleanly: `genworker check` says OK with no warning, the server
starts without a WARNING, every sensor polls, and every duty runs to a completed run record with
a configured model (the scripted one), its tool steps reading the demo's sample data.

Over HTTP with the scripted model, it also shows what each demo feature does. With no credentials
(as shipped): the morning brief is written to briefs/ exactly once, a triage answer that breaks its
output schema is repaired, a goal task is met from a run's evidence, Iris delegates a data question
to Milo (a child run) while Milo may not delegate, and a heartbeat alert waits in Dana's brief. With
Slack credentials (the Slack API stand-in): the weekly review is posted to #metrics once, a heartbeat
alert reaches Dana, an SLA breach is escalated to her, and a helpdesk conversation is handed to Maya.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from genworker.auth import ApiKeyStore
from genworker.autonomy.duties.scheduler import event_matches
from genworker.autonomy.inbox import FileInboxStore, new_item
from genworker.autonomy.inbox.topics import written_event
from genworker.autonomy.sensing import SensorRegistry
from genworker.autonomy.sensing.facts import FactEmitter
from genworker.autonomy.sensing.testing import MemoryInboxWriter, StatusLog
from genworker.autonomy.sensing.webhook import body_facts, select_webhook_sensor
from genworker.cli import main
from genworker.testing import Hang, Reply, ScriptedModelServer, ToolCallReply, When
from genworker.testing.live_server import LiveServer, serve
from genworker.testing.vendors import Vendor
from genworker.tools.environment import ToolRuntime
from genworker.workspace.registry import PRODUCT_SKILLS, WorkspaceRegistry

DUTIES = {
    "assistant": ["morning-brief", "inbox-triage"],
    "analyst": ["weekly-metrics-review", "metric-anomaly-watch", "data-request"],
}  # helpdesk has none: it serves conversations


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
    assert capsys.readouterr().out == "OK: 1 tenant, 3 workers, 5 duties, 2 goals, 10 skills\n"


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


def goal_verdict(verdict: str, reason: str) -> Reply:
    answer = {"verdict": verdict, "reasons": [reason], "evidence": ["output"]}
    return Reply(tool_calls=(ToolCallReply("goal_verdict", answer),))


def call(name: str, **arguments: Any) -> Reply:
    return Reply(tool_calls=(ToolCallReply(name, arguments, "c1"),))


def tool_result(body: dict[str, Any]) -> str:
    return str([m for m in body["messages"] if m.get("role") == "tool"][-1]["content"])


def tool_said(text: str) -> Callable[[dict[str, Any]], None]:
    """A request check: the last tool result shown to the model contains `text`."""

    def check(body: dict[str, Any]) -> None:
        said = tool_result(body)
        assert text in said, f"the last tool result was {said!r}"

    return check


def offered(body: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in body.get("tools", ())}


def events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


def answer_of(found: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in found if e["type"] == "TEXT_MESSAGE_CONTENT")


def chat(http: httpx.Client, worker_id: str, message: str) -> list[dict[str, Any]]:
    response = http.post("/chat/stream", json={"worker_id": worker_id, "message": message})
    assert response.status_code == 200, response.text
    return events(response.text)


def sense(workspace: Path, worker_id: str, title: str, **payload: str) -> None:
    """A fact in the worker's inbox, written the way a sensor in another process writes it."""
    item = new_item("demo", worker_id, "webhook", "office-webhooks", "webhook.fact", {"title": title, **payload})

    async def write() -> None:
        assert await FileInboxStore(workspace).write(item)

    asyncio.run(write())


BRIEF_KEY = "brief-2026-12-07"  # the caller's idempotency key: a repeated request gets the first run back
UNTRIAGED = "Two new messages: a SaaS newsletter, and Dr. Haddad asking for a loyalty discount."
QUESTION = "How many signups did we have in the week of 2026-11-30?"
SIGNUPS = "4,380 signups in the week of 2026-11-30 (weekly_metrics.csv), down 14.5% from 5,120."
ALERT = "Priya moved the board deck deadline to tomorrow 09:00; the draft is not started."
ATTENTION = json.dumps({"attention": True, "message": ALERT})
OUTAGE = "Nobody at Bayview can see today's appointments since 8am, the calendar page stays empty."
HANDOVER = {
    "reason": "an outage: appointments do not load for the whole clinic",
    "summary": "Bayview Family Practice: the calendar page is empty since 08:00.",
}
STILL_HELPING = "I could not reach the support team just now. Please check status.acme.example."


def script_every_duty(model: ScriptedModelServer) -> dict[str, str]:
    """The model's part of each duty, in the order the test runs them; returns each run's final text."""
    final = {
        "morning-brief": "Monday 2026-12-07, 4 meetings, 2 open needs-Dana items. Decisions today: Priya's board deck.",
        "inbox-triage": "noise: SaaS Weekly #312; needs_dana: Dr. Omar Haddad asks for a loyalty discount.",
        "weekly-metrics-review": "# Weekly metrics — week of 2026-11-30\nsignups -14.5%: paid search US.",
        "metric-anomaly-watch": "Signups fell 14.5% week over week, mostly paid search US; confidence high.",
        "data-request": "Signups for the week of 2026-11-30: 4,380 (weekly_metrics.csv).",
    }
    # every duty run serves an open demo goal task: the runtime judges each once, in the background.
    # The brief states the open-item count, which is its task's success criterion: met.
    not_yet = goal_verdict("not_met", "one run does not finish this task")
    model.expect(
        When("The brief states how many", goal_verdict("met", "the brief says 2 needs-Dana items are open")),
        *[When("You judge whether one run", not_yet)] * 5,  # the other duties, and Milo's delegated run
    )
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
        # inbox-triage: autonomous (ReAct) with the file tools; its first answer breaks the output
        # schema's pattern (no category), so it gets one repair turn
        Reply(tool_calls=(ToolCallReply("file_list", {"path": "data/inbox"}),), check=sees("Triage the new message")),
        Reply(UNTRIAGED, check=sees("data/inbox/2026-12-07-saas-weekly.md")),
        Reply(final["inbox-triage"], check=sees(UNTRIAGED, "does not match")),
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


def script_collaboration(model: ScriptedModelServer) -> None:
    """Iris asks Milo (a child run of his data-request duty); Milo may not hand work on."""

    def not_offered(body: dict[str, Any]) -> None:
        assert offered(body) and not offered(body) & {"delegate_to_worker", "spawn_task", "spawn_subagents"}

    model.expect(
        call("delegate_to_worker", worker_id="analyst", task=QUESTION, request_type="data_request"),
        Reply(SIGNUPS, check=sees("You are Milo", QUESTION)),
        judged(2, conditions=1),
        Reply(f"Milo says: {SIGNUPS}", check=tool_said(SIGNUPS)),
        Reply(tool_calls=(ToolCallReply("delegate_to_worker", {"worker_id": "assistant", "task": "Book it."}, "c1"),),
              check=not_offered),
        Reply("I cannot hand work to Iris; please ask her.", check=tool_said("allowed_tools")),
    )  # fmt: skip


def test_the_server_starts_without_a_warning_and_every_duty_runs(
    tmp_path: Path, demo_workspace: Path, model_server: ScriptedModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="genworker")
    final = script_every_duty(model_server)
    script_collaboration(model_server)
    model_server.expect(
        Reply(ATTENTION),  # the heartbeat's summary turn
        # a helpdesk visitor: the hand-over cannot reach Maya without credentials; Juno is told so
        Reply(tool_calls=(ToolCallReply("escalate_conversation", HANDOVER, "c1"),)),
        Reply(STILL_HELPING, check=tool_said("Maya Chen has no identity this worker can send to")),
    )
    headers = {"Authorization": f"Bearer {ApiKeyStore(demo_workspace).create('demo')[1]}"}
    runs: dict[str, dict[str, Any]] = {}
    with serve(tmp_path, demo_workspace, model_server) as server:
        assert warnings_in(caplog.records) == []
        with httpx.Client(base_url=f"{server.url}/api/v1", headers=headers, timeout=120) as http:
            for worker_id, duties in DUTIES.items():
                for duty_id in duties:
                    keyed = {"Idempotency-Key": BRIEF_KEY} if duty_id == "morning-brief" else {}
                    answer = http.post(f"/workers/{worker_id}/duties/{duty_id}/run", headers=keyed)
                    assert answer.status_code == 200, answer.text
                    run = http.get(f"/workers/{worker_id}/runs/{answer.json()['run']['run_id']}").json()
                    assert (run["state"], run["error"], run["fallback"]) == ("completed", None, None), run
                    assert {t["outcome"] for t in run["tool_calls"]} <= {"completed"}, run["tool_calls"]
                    assert run["deliverables"][0]["content"] == final[duty_id]
                    runs[duty_id] = run
                    executions = http.get(f"/workers/{worker_id}/duties/{duty_id}/executions").json()["executions"]
                    assert [e["state"] for e in executions] == ["completed"]
            brief_id = runs["morning-brief"]["run_id"]
            again = http.post("/workers/assistant/duties/morning-brief/run", headers={"Idempotency-Key": BRIEF_KEY})
            assert (again.json()["created"], again.json()["run"]["run_id"]) == (False, brief_id)
            # the judgement runs in the background; asking for it waits for it (one model call in all)
            evaluation = http.post(f"/workers/assistant/runs/{brief_id}/goal-evaluation").json()
            goal = http.get("/workers/assistant/goals/inbox-under-control").json()

            asked = chat(http, "assistant", f"Ask Milo: {QUESTION}")
            parent = http.get(f"/workers/assistant/runs/{asked[0]['runId']}").json()
            [child_link] = parent["children"]
            child = http.get(f"/workers/analyst/runs/{child_link['run_id']}").json()
            refused = chat(http, "analyst", "Have Iris put the weekly review on Dana's calendar.")
            milo = http.get(f"/workers/analyst/runs/{refused[0]['runId']}").json()

            sense(demo_workspace, "assistant", "board deck deadline moved")
            heartbeat = http.post("/workers/assistant/heartbeat/run").json()["report"]["summary"]
            pending = http.get("/workers/assistant/briefs/pending").json()

            visitor = httpx.post(f"{server.url}/api/v1/service/demo/helpdesk/chat/stream", json={"message": OUTAGE})
            assert visitor.status_code == 200, visitor.text
            desk = http.get(f"/workers/helpdesk/runs/{events(visitor.text)[0]['runId']}").json()
    assert warnings_in(caplog.records) == []

    checks = {duty: {c["check"]: c["verdict"] for c in run["checks"]} for duty, run in runs.items()}
    assert checks["inbox-triage"].pop("output_schema") == "repaired"  # the repair turn's answer is the result
    assert {duty: set(verdicts.values()) for duty, verdicts in checks.items()} == {d: {"passed"} for d in runs}
    # the morning brief is written where a newcomer finds it, once; the weekly review's manual rerun is a
    # draft: each of its destinations is held (no credentials needed to see that)
    [(to, state, brief)] = [(d["to"], d["state"], d["delivered_to"]) for d in runs["morning-brief"]["deliveries"]]
    assert (to, state) == ("folder briefs", "sent") and brief is not None
    folder = demo_workspace / "tenants/demo/workers/assistant/briefs/morning-brief"
    assert [p.relative_to(folder.parents[1]).as_posix() for p in folder.iterdir()] == [brief]
    written = (folder.parents[1] / brief).read_text(encoding="utf-8")
    assert written.startswith("# Morning brief for Dana\n") and final["morning-brief"] in written
    assert [(d["to"], d["state"]) for d in runs["weekly-metrics-review"]["deliveries"]] == [
        ("folder reports", "held"),
        ("chat slack:C0DEMOMETRICS", "held"),
        ("contact sam-ortiz (email)", "held"),
    ]
    # the brief's goal task is met from the run's evidence; the milestone moves on
    assert evaluation["goal_status"] == "met", evaluation
    tasks = {t["id"]: t["status"] for m in goal["milestones"] for t in m["tasks"]}
    assert tasks["brief-open-items"] == "done" and tasks["triage-backlog"] == "in_progress"
    assert {m["id"]: m["status"] for m in goal["milestones"]}["steady-state"] == "in_progress"
    # Iris delegated: Milo's run is a child of hers, bound to his data-request duty's collaboration trigger
    assert answer_of(asked) == f"Milo says: {SIGNUPS}"
    assert child_link["worker_id"] == "analyst" and child["deliverables"][0]["content"] == SIGNUPS
    provenance = child["provenance"]
    assert (provenance["parent_run_id"], provenance["parent_worker_id"], provenance["delegation_depth"]) == (
        parent["run_id"], "assistant", 1
    )  # fmt: skip
    assert (provenance["duty_id"], provenance["trigger_id"]) == ("data-request", "from-iris")
    # Milo may not delegate: the tools are not offered, and a call is refused
    assert [(c["name"], c["outcome"]) for c in milo["tool_calls"]] == [("delegate_to_worker", "denied")]
    assert milo["children"] == []
    # with no channel credentials the heartbeat's alert waits in Dana's next brief (the dashboard shows it):
    # no channel reaches her, or (20:00-07:00 New York time) her quiet hours hold it anyway
    reason = heartbeat["delivery"].removeprefix("briefed: ")
    assert reason in ("no_recipient", "quiet_hours"), heartbeat
    assert [(i["title"], i["reason"]) for i in pending["items"]] == [(f"Needs attention (heartbeat): {ALERT}", reason)]
    # an anonymous visitor reaches the helpdesk; its hand-over fails visibly (no credentials), and it keeps helping
    assert answer_of(events(visitor.text)) == STILL_HELPING
    assert [(c["name"], c["outcome"]) for c in desk["tool_calls"]] == [("escalate_conversation", "failed")]
    assert (desk["state"], desk["provenance"]["source_id"]) == ("completed", "anonymous")


POST = "/chat.postMessage"
SLACK = {"slack": {"bot_token": "xoxb-demo-test", "signing_secret": "s" * 32}}


@pytest.fixture
def slack() -> Iterator[tuple[Vendor, str]]:
    stand_in = Vendor()
    with LiveServer(stand_in.app()) as live:
        yield stand_in, live.url


def with_slack_credentials(workspace: Path) -> None:
    """What a user adds to reach people: CHANNEL_CREDENTIALS.json for each worker (Slack only: no
    SMTP, so the weekly review's mail to Sam stays undeliverable and says so)."""
    for worker_id in ("assistant", "analyst", "helpdesk"):
        path = workspace / "tenants/demo/workers" / worker_id / "CHANNEL_CREDENTIALS.json"
        path.write_text(json.dumps(SLACK), encoding="utf-8")


def test_with_slack_credentials_results_and_escalations_reach_people(
    tmp_path: Path, demo_workspace: Path, model_server: ScriptedModelServer, slack: tuple[Vendor, str]
) -> None:
    vendor, vendor_url = slack
    with_slack_credentials(demo_workspace)
    # inbox-triage's SLA, cut from an hour to a second so that the test need not wait an hour
    triage = demo_workspace / "tenants/demo/workers/assistant/duties/inbox-triage.md"
    text = triage.read_text(encoding="utf-8")
    assert "    completion_time: 1h\n" in text
    triage.write_text(text.replace("    completion_time: 1h\n", "    completion_time: 1s\n"), encoding="utf-8")
    review = "# Weekly metrics — week of 2026-11-30\nAll loads completed (loads.csv). signups -14.5%."
    model_server.expect(When("You judge whether one run", goal_verdict("not_met", "one week of twelve")))
    model_server.expect(
        # weekly-metrics-review through its Monday trigger (posture execute)
        Reply("- signups: 5120 -> 4380, -14.5%", check=sees("2026-11-30,signups,4380")),
        Reply(review),
        judged(2, evidence=1, conditions=2),
        Reply(ATTENTION),  # Iris's heartbeat
        Hang(),  # inbox-triage: still going when its SLA ends
        # helpdesk: an anonymous visitor, handed to Maya
        Reply(tool_calls=(ToolCallReply("escalate_conversation", HANDOVER, "c1"),),
              check=sees("# Clinic support", "[knowledge] Booking and reminders", "status.acme.example")),
        Reply("I am passing you to our support team now.",
              check=tool_said("Handed over to Maya Chen (a person)")),
    )  # fmt: skip
    headers = {"Authorization": f"Bearer {ApiKeyStore(demo_workspace).create('demo')[1]}"}
    env = {"GENWORKER_SLACK_API_BASE": vendor_url, "GENWORKER_LLM_TIMEOUT": "3"}
    with (
        serve(tmp_path, demo_workspace, model_server, **env) as server,
        httpx.Client(base_url=f"{server.url}/api/v1", headers=headers, timeout=120) as http,
    ):

        def monday_run() -> dict[str, Any]:
            """The review through its Monday trigger, under one idempotency key."""
            body, key = {"trigger_id": "monday-0900"}, {"Idempotency-Key": "week-2026-11-30"}
            return dict(http.post("/workers/analyst/duties/weekly-metrics-review/run", json=body, headers=key).json())

        fired = monday_run()
        run = http.get(f"/workers/analyst/runs/{fired['run']['run_id']}").json()
        repeated = monday_run()

        sense(demo_workspace, "assistant", "board deck deadline moved", priority="P0")
        heartbeat = http.post("/workers/assistant/heartbeat/run").json()["report"]["summary"]

        late = http.post("/workers/assistant/duties/inbox-triage/run").json()["run"]
        late_run = http.get(f"/workers/assistant/runs/{late['run_id']}").json()

        visitor = httpx.post(f"{server.url}/api/v1/service/demo/helpdesk/chat/stream", json={"message": OUTAGE})
        assert visitor.status_code == 200, visitor.text
        posted = vendor.wait_for(POST, 4)  # #metrics, the alert and the escalation to Dana, the hand-over to Maya

    # the weekly review: reports/ and #metrics once; the mail to Sam cannot go without SMTP credentials
    assert run["state"] == "completed" and repeated["created"] is False
    deliveries = {d["to"]: d for d in run["deliveries"]}
    assert {to: d["state"] for to, d in deliveries.items()} == {
        "folder reports": "sent",
        "chat slack:C0DEMOMETRICS": "sent",
        "contact sam-ortiz (email)": "failed",
    }
    no_mail = "Sam Ortiz has no identity on email the worker can send to"
    assert deliveries["contact sam-ortiz (email)"]["error"] == no_mail
    reports = demo_workspace / "tenants/demo/workers/analyst/reports/weekly-metrics-review"
    assert len(list(reports.iterdir())) == 1
    [metrics] = [p for p in posted if p.body["channel"] == "C0DEMOMETRICS"]
    assert metrics.body["blocks"][0]["text"]["text"] == "Weekly metrics review" and "-14.5%" in metrics.body["text"]
    # a P0 heartbeat alert reaches Dana on her preferred channel (her first identity: Slack), even at night
    assert heartbeat["delivery"] == "sent: Dana Kim (slack)", heartbeat
    to_dana = [p.body["text"] for p in posted if p.body["channel"] == "U0DEMODANA"]
    assert f"**Iris** needs your attention:\n\n{ALERT}" in to_dana
    # the triage run was still going when its SLA ended (it failed later, its model timing out): Dana, the
    # contract's escalation target, is told once
    assert (late_run["state"], late_run["error"]["code"]) == ("failed", "provider_error")
    assert [(c["check"], c["verdict"]) for c in late_run["checks"]] == [("sla", "breached")]
    assert [(e["condition"], e["kind"], e["target"], e["state"]) for e in late_run["escalations"]] == [
        ("sla_breached", "person", "dana-kim", "sent")
    ]
    [escalated] = [text for text in to_dana if "escalates" in text]
    assert escalated.startswith("**Iris** escalates *Triage Dana's inbox* to you (sla_completion).")
    assert "did not finish within 1 s" in escalated and late["run_id"] in escalated
    assert len(to_dana) == 2  # the alert and the escalation, each once
    # the helpdesk hands the outage to Maya: she gets the conversation, the visitor is told who has it
    assert answer_of(events(visitor.text)).endswith("Maya Chen has taken over this conversation.")
    [to_maya] = [p.body["text"] for p in posted if p.body["channel"] == "U0DEMOMAYA"]
    assert "Reason: an outage: appointments do not load for the whole clinic" in to_maya and OUTAGE in to_maya
