"""A duty's contract kept, over real HTTP: uvicorn, LiteLLM to the scripted model, the Slack API
stand-in.

- an output that breaks `output_schema` gets one repair turn: repaired, the run completes with the
  repaired result (and delivers it); still broken, the run fails naming the field, and a `failed`
  escalation hands the matter to another worker of the tenant as a task;
- `quality_criteria` get an evaluator turn whose verdict is on the run; audit evidence the run does
  not show fails it, the evidencing tool calls are its audit refs;
- an SLA breach (a scheduled run still going at its completion time) is announced
  (`duty.sla_breached`) and escalated to the person the contract names, on their preferred channel;
- a completed run whose result was not sent before its process stopped is delivered at the next
  start, once; a draft run's result is held; a destination the worker cannot reach fails visibly.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.autonomy.duties.delivery import DutyDelivery
from genworker.bus.models import Event
from genworker.runtime.composition import Runtime
from genworker.settings import load_settings
from genworker.testing import Hang, Reply, ScriptedModelServer, ToolCallReply, scripted_env
from genworker.testing.live_server import LiveServer
from genworker.testing.vendors import Vendor

POST = "/chat.postMessage"
PERSONA = """---
identity: {name: Alice, worker_id: alice, reports_to: dana}
mode: personal
channels:
  - {type: slack, chat_ids: [C-OPS]}
contacts:
  - person_id: sam
    name: Sam Ortiz
    identities: [{channel: slack, handle: U-SAM}]
  - person_id: dana
    name: Dana Lee
    identities: [{channel: slack, handle: U-DANA}]
---
You are alice.
"""
SCHEMA = """contract:
  version: "1"
  output_schema:
    type: object
    required: [summary]
    properties: {summary: {type: string}, risks: {type: array, items: {type: string}}}
"""


def duty(duty_id: str, front: str, triggers: str = "[{id: go, type: manual}]") -> str:
    return f"---\nduty_id: {duty_id}\ntitle: {duty_id.title()} report\ntriggers: {triggers}\n{front}---\nReport.\n"


@dataclass
class Setup:
    workspace: Path
    runtime: Runtime
    vendor: Vendor
    http: httpx.Client
    live: LiveServer
    closed: bool = False

    def close(self) -> None:
        """Stop the server: its duty fires and escalated tasks finish first."""
        if not self.closed:
            self.closed = True
            self.http.close()
            self.live.__exit__(None, None, None)

    def run_duty(self, duty_id: str) -> dict[str, Any]:
        ran = self.http.post(f"/api/v1/workers/alice/duties/{duty_id}/run")
        assert ran.status_code == 200, ran.text
        return self.run(ran.json()["run"]["run_id"])

    def run(self, run_id: str, worker: str = "alice") -> dict[str, Any]:
        got = self.http.get(f"/api/v1/workers/{worker}/runs/{run_id}")
        assert got.status_code == 200, got.text
        return dict(got.json())


@pytest.fixture
def setup(
    tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer
) -> Iterator[Callable[..., Setup]]:
    opened: list[Callable[[], None]] = []
    vendor = Vendor()
    vendor_live = LiveServer(vendor.app()).__enter__()
    opened.append(lambda: vendor_live.__exit__(None, None, None))
    workspace: Path | None = None

    def start(duties: dict[str, str] | None = None, **env: str) -> Setup:
        nonlocal workspace
        if workspace is None:
            files = {
                "tenants/acme/workers/alice/PERSONA.md": PERSONA,
                "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json": json.dumps(
                    {"slack": {"bot_token": "xoxb-test", "signing_secret": "s" * 32}}
                ),
                **{f"tenants/acme/workers/alice/duties/{k}.md": v for k, v in (duties or {}).items()},
            }
            workspace = small_workspace({"acme": ["alice", "bob"]}, files)
        (tmp_path / "configs").mkdir(exist_ok=True)
        settings = scripted_env(model_server, GENWORKER_SLACK_API_BASE=vendor_live.url, **env)
        app = create_app(load_settings(tmp_path / "configs", settings, workspace=workspace))
        live = LiveServer(app).__enter__()
        key = ApiKeyStore(workspace).create("acme")[1]
        http = httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        started = Setup(workspace, app.state.runtime, vendor, http, live)
        opened.append(started.close)
        return started

    yield start
    for close in reversed(opened):
        close()


def run_file(workspace: Path, run_id: str, worker: str = "alice") -> dict[str, Any]:
    path = workspace / f"tenants/acme/workers/{worker}/runs/{run_id}.json"
    return dict(json.loads(path.read_text(encoding="utf-8")))


def sees(*texts: str) -> Callable[[dict[str, Any]], None]:
    def check(body: dict[str, Any]) -> None:
        sent = json.dumps(body["messages"], ensure_ascii=False)
        missing = [t for t in texts if t not in sent]
        assert not missing, f"the model was not shown {missing}"

    return check


def test_a_result_that_breaks_the_schema_is_repaired_once_and_delivered(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    model_server.expect(
        Reply('{"summery": "Signups fell 14.5%."}'),
        Reply('{"summary": "Signups fell 14.5%.", "risks": ["churn"]}',
              check=sees("output field 'summary': 'summary' is a required property", "Output schema (JSON Schema)")),
    )  # fmt: skip
    s = setup({"report": duty("report", SCHEMA + "delivery: [{folder: reports}, {chat: 'slack:C-OPS'}]\n")})
    run = s.run_duty("report")
    assert run["state"] == "completed", run
    assert json.loads(run["deliverables"][0]["content"]) == {"summary": "Signups fell 14.5%.", "risks": ["churn"]}
    [check] = run["checks"]
    assert (check["check"], check["verdict"]) == ("output_schema", "repaired")
    assert "'summary' is a required property" in check["detail"]
    assert [(u["purpose"], u["tier"]) for u in run["model_usage"]] == [("task", "standard"), ("extract", "fast")]
    written = {d["to"]: d for d in run["deliveries"]}
    assert {k: d["state"] for k, d in written.items()} == {"folder reports": "sent", "chat slack:C-OPS": "sent"}
    report = s.workspace / "tenants/acme/workers/alice" / written["folder reports"]["delivered_to"]
    assert written["folder reports"]["delivered_to"].startswith("reports/report/")
    text = report.read_text(encoding="utf-8")
    assert text.startswith("# Report report\n") and "**summary**: Signups fell 14.5%." in text and "- churn" in text
    [posted] = s.vendor.calls(POST)
    assert posted.body["channel"] == "C-OPS" and "**summary**: Signups fell 14.5%." in posted.body["text"]


def test_a_result_still_broken_after_the_repair_fails_naming_the_field_and_escalates_to_a_worker(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    failing = SCHEMA + "escalation: {condition: failed, target: 'worker:bob'}\ndelivery: [{chat: 'slack:C-OPS'}]\n"
    model_server.expect(
        Reply('{"summary": 14.5}'),
        Reply('{"summary": ["still", "a list"]}'),
        # bob's task (the summarize workflow): its key points, then whether they name a request
        Reply("I will look at Alice's report.", check=sees("Escalated to you by Alice (alice)", "output_schema")),
        Reply("no"),
    )
    s = setup({"report": duty("report", failing)})
    run = s.run_duty("report")
    assert (run["state"], run["error"]["code"]) == ("failed", "output_schema_violation")
    assert run["error"]["message"].startswith("output field 'summary': ['still', 'a list'] is not of type 'string'")
    first = "after one repair turn; first: output field 'summary': 14.5 is not of type 'string'"
    assert first in run["error"]["message"]
    assert [(d["to"], d["state"]) for d in run["deliveries"]] == []  # nothing is sent for a failed run
    [escalation] = run["escalations"]
    assert (escalation["kind"], escalation["state"], escalation["target"]) == ("worker", "task_created", "worker:bob")
    bob_run = escalation["ref"].removeprefix("bob/")
    s.close()  # bob's task has run to its end
    handed = run_file(s.workspace, bob_run, "bob")
    assert handed["state"] == "completed" and handed["provenance"]["source_id"] == "escalation:alice"
    assert handed["provenance"]["idempotency_key"] == escalation["key"]
    assert s.vendor.calls(POST) == []


def test_quality_is_judged_and_missing_audit_evidence_fails_the_run(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    front = (
        "quality_criteria: [Every figure has its source, Names the week]\n"
        "contract:\n  version: '1'\n  audit: {evidence: ['tool:file_list', cited sources]}\n"
    )
    verdicts = {
        "criteria": [{"n": 1, "met": True, "reason": "sources named"}, {"n": 2, "met": False, "reason": "no week"}],
        "evidence": [{"n": 1, "present": False, "reason": "no source is cited"}],
    }
    model_server.expect(
        Reply(tool_calls=(ToolCallReply("file_list", {"path": "."}, "call-1"),)),
        Reply("Signups are down."),
        Reply(json.dumps(verdicts), check=sees("1. Every figure has its source", "1. cited sources", "file_list")),
    )
    s = setup({"audited": duty("audited", front)})
    run = s.run_duty("audited")
    assert (run["state"], run["error"]["code"]) == ("failed", "audit_evidence_missing")
    assert run["error"]["message"] == "audit evidence missing: cited sources"
    checks = {c["check"]: c for c in run["checks"]}
    assert checks["quality"]["verdict"] == "failed" and checks["quality"]["detail"] == "not met: Names the week"
    assert [(i["name"], i["ok"]) for i in checks["quality"]["items"]] == [
        ("Every figure has its source", True),
        ("Names the week", False),
    ]
    audit = [(i["name"], i["ok"]) for i in checks["audit"]["items"]]
    assert audit == [("tool:file_list", True), ("cited sources", False)]
    assert run["provenance"]["audit_refs"] == ["call-1"]


def test_an_sla_breach_is_announced_and_escalated_to_the_named_person(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    model_server.expect(Hang())  # the run is still going at its completion time
    s = setup(GENWORKER_LLM_TIMEOUT="4")
    breaches: list[Event] = []

    async def seen(event: Event) -> None:
        breaches.append(event)

    s.runtime.services.bus.subscribe("duty.sla_breached", seen)
    slot = (datetime.now(UTC) + timedelta(seconds=3)).replace(microsecond=0)
    cron = f"{slot.second} {slot.minute} {slot.hour} {slot.day} {slot.month} *"
    front = (
        "contract:\n  version: '1'\n  sla: {completion_time: 1s}\n"
        "  escalation: {condition: sla_breached, target: sam}\n"
    )
    triggers = f"[{{id: daily, type: schedule, cron: '{cron}', timezone: UTC}}]"
    (s.workspace / "tenants/acme/workers/alice/duties").mkdir(exist_ok=True)
    (s.workspace / "tenants/acme/workers/alice/duties/daily.md").write_text(
        duty("daily", front, triggers), encoding="utf-8"
    )
    reload = s.http.post("/api/v1/worker/ops/reload", json={"worker_id": "alice"})
    assert reload.status_code == 200 and reload.json()["ok"], reload.text
    [dm] = s.vendor.wait_for(POST, 1)
    assert dm.body["channel"] == "U-SAM"
    assert "escalates *Daily report* to you (sla_completion)" in dm.body["text"]
    assert "did not finish within 1 s" in dm.body["text"]
    s.close()  # the fire ends when the run's model call times out
    [breach] = breaches
    assert breach.payload["kind"] == "completion" and breach.payload["limit_s"] == 1.0
    assert datetime.fromisoformat(breach.payload["scheduled_for"]) == slot
    run = run_file(s.workspace, breach.payload["run_id"])
    assert run["state"] == "failed" and run["provenance"]["duty_id"] == "daily"
    assert [(c["check"], c["verdict"]) for c in run["checks"]] == [("sla", "breached")]
    assert [(e["kind"], e["target"], e["state"]) for e in run["escalations"]] == [("person", "sam", "sent")]


def test_a_completed_run_whose_result_was_not_sent_is_delivered_once_at_the_next_start(
    setup: Callable[..., Setup], model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    model_server.expect(Reply('{"summary": "All quiet."}'))
    duties = {"report": duty("report", SCHEMA + "delivery: {chat: 'slack:C-OPS', format: card}\n")}

    async def stopped_before_sending(self: DutyDelivery, ref: Any) -> None:
        return None  # the process stops between the run's completion and its delivery

    with monkeypatch.context() as patched:
        patched.setattr(DutyDelivery, "deliver", stopped_before_sending)
        first = setup(duties)
        run = first.run_duty("report")
        first.close()
    assert run["state"] == "completed"
    assert [(d["to"], d["state"]) for d in run["deliveries"]] == [("chat slack:C-OPS", "pending")]
    assert first.vendor.calls(POST) == []
    second = setup()  # the same workspace: the plan is delivered at start
    [posted] = second.vendor.wait_for(POST, 1)
    assert posted.body["blocks"][0] == {"type": "header", "text": {"type": "plain_text", "text": "Report report"}}
    after = second.run(run["run_id"])
    assert [(d["to"], d["state"]) for d in after["deliveries"]] == [("chat slack:C-OPS", "sent")]
    second.close()
    third = setup()
    third.http.get("/api/v1/workers/alice/runs")  # started: nothing is owed any more
    assert len(third.vendor.calls(POST)) == 1


def test_a_draft_run_holds_its_result_and_an_unreachable_destination_fails_visibly(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("Numbers are in."), Reply("Numbers are in again."))
    s = setup(
        {
            "drafted": duty("drafted", "posture: {default: draft}\ndelivery: [{chat: 'slack:C-OPS'}]\n"),
            "lost": duty("lost", "delivery: ['slack:C-ELSEWHERE', nobody, owner]\n"),
        }
    )
    held = s.run_duty("drafted")
    assert held["state"] == "completed"
    [record] = held["deliveries"]
    assert record["state"] == "held" and "proposal_only" in record["error"]
    lost = s.run_duty("lost")
    states = {d["to"]: (d["state"], d["error"]) for d in lost["deliveries"]}
    assert states["chat slack:C-ELSEWHERE"][0] == "failed" and "not bound" in states["chat slack:C-ELSEWHERE"][1]
    assert states["contact nobody"] == ("failed", "no contact 'nobody' (contacts: dana, sam)")
    assert states["contact owner"][0] == "sent"
    [dm] = s.vendor.calls(POST)
    assert dm.body["channel"] == "U-DANA"
    blocks = s.http.get("/api/v1/workers/alice/dashboard").json()["blocks"]
    shown = {r["run_id"]: r for r in blocks["runs"]["data"]["runs"]}
    assert [(d["to"], d["state"]) for d in shown[lost["run_id"]]["deliveries"]] == [
        ("chat slack:C-ELSEWHERE", "failed"),
        ("contact nobody", "failed"),
        ("contact owner", "sent"),
    ]
    assert {r["run_id"]: r["undelivered"] for r in blocks["tasks"]["data"]["done"]} == {
        held["run_id"]: 0,
        lost["run_id"]: 2,
    }


def test_a_destination_falls_back_when_its_channel_refuses_the_result(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("Numbers are in."))
    s = setup({"routed": duty("routed", "delivery: [{chat: 'slack:C-OPS', fallback: dana}]\n")})
    s.vendor.script[POST] = [(200, {"ok": False, "error": "channel_not_found"}, {})]  # the channel is gone
    run = s.run_duty("routed")
    [record] = run["deliveries"]
    assert (record["to"], record["state"], record["delivered_to"]) == (
        "chat slack:C-OPS (else contact dana)",
        "sent",
        "Dana Lee (slack)",
    )
    assert [c.body["channel"] for c in s.vendor.calls(POST)] == ["C-OPS", "U-DANA"]


def test_a_held_result_is_in_the_next_brief_and_sent_only_once_released(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("Revenue is up 4% this week."))
    s = setup({"drafted": duty("drafted", "posture: {default: draft}\ndelivery: [{chat: 'slack:C-OPS'}]\n")})
    held = s.run_duty("drafted")
    assert [(d["to"], d["state"]) for d in held["deliveries"]] == [("chat slack:C-OPS", "held")]
    brief = s.http.post("/api/v1/workers/alice/briefs/generate", params={"deliver": "false"}).json()["brief"]
    [item] = [i for i in brief["sections"]["confirm"] if i["ref"] == held["run_id"]]
    assert item["title"] == "Duty drafted: its result is held, not sent to chat slack:C-OPS"
    assert "Draft: Revenue is up 4% this week." in item["detail"] and "proposal_only" in item["detail"]
    release = f"/api/v1/workers/alice/duties/drafted/runs/{held['run_id']}/release"
    assert item["options"][0]["command"] == f"POST {release}"
    assert "Revenue is up 4% this week." in brief["text"]
    assert s.vendor.calls(POST) == []  # held: nothing left before a person said so

    released = s.http.post(release)
    assert released.status_code == 200, released.text
    assert [(d["to"], d["state"]) for d in released.json()["deliveries"]] == [("chat slack:C-OPS", "sent")]
    [posted] = s.vendor.calls(POST)
    assert posted.body["channel"] == "C-OPS" and "Revenue is up 4% this week." in posted.body["text"]
    again = s.http.post(release)
    assert again.status_code == 409 and again.json()["error"]["code"] == "nothing_held"
    later = s.http.post("/api/v1/workers/alice/briefs/generate", params={"deliver": "false"}).json()["brief"]
    assert not [i for i in later["sections"]["confirm"] if i["ref"] == held["run_id"]]
    assert len(s.vendor.calls(POST)) == 1
