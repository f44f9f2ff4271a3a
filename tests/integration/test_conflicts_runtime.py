"""The Conflict Arbiter in a started runtime: a plan declared over the API claims a file; a chat run's
`file_write` of that file (declared irreversible in the tenant's tool_effects.yml) is escalated, its
run waits, the brief shows one card for it, and a person decides over the API or IM — the call then
runs once and the task continues, or it is dropped and never runs. Model: the scripted server over
real HTTP and LiteLLM."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.bus import Event
from genworker.runtime.composition import Runtime
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, ToolCallReply, scripted_env
from genworker.worker.router import RouteDone, RouteRequest, RouterEvent

EFFECTS = 'file_write:\n  resource: {key: "file:{worker_id}/{path}", operation: write, reversibility: irreversible}\n'
REPORT = "files/report.md"
KEY = f"file:alice/{REPORT}"


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    return small_workspace({"acme": ["alice"], "globex": ["gina"]}, {"tenants/acme/tool_effects.yml": EFFECTS})


@contextmanager
def running(tmp_path: Path, workspace: Path, model: ScriptedModelServer) -> Iterator[tuple[TestClient, Runtime]]:
    (tmp_path / "configs").mkdir(exist_ok=True)
    with TestClient(
        create_app(load_settings(tmp_path / "configs", scripted_env(model), workspace=workspace))
    ) as client:
        yield client, client.app.state.runtime  # type: ignore[attr-defined]


def auth(workspace: Path, tenant: str = "acme") -> dict[str, str]:
    return {"Authorization": f"Bearer {ApiKeyStore(workspace).create(tenant)[1]}"}


def escalated_run(client: TestClient, runtime: Runtime, headers: dict[str, str]) -> tuple[str, dict[str, Any]]:
    """Plan A claims the report; a chat run then overwrites it: (the waiting run's id, its open case)."""
    declared = client.post(
        "/api/v1/workers/alice/plans",
        json={"plan_id": "plan-a", "effects": [{"resource_key": KEY, "operation": "write"}]},
        headers=headers,
    )
    assert declared.status_code == 201 and declared.json()["conflicts"] == []
    assert declared.json()["plan"]["state"] == "gated"

    async def ask() -> RouterEvent:
        req = RouteRequest("acme", "alice", "Write the report", conversational=False)
        return [e async for e in runtime.services.router.route_stream(req)][-1]

    done = client.portal.call(ask)  # type: ignore[union-attr]
    assert isinstance(done, RouteDone) and done.record.state == "waiting_approval"
    (case,) = client.get("/api/v1/conflicts?status=open", headers=headers).json()["conflicts"]
    assert (case["plan_a_id"], case["plan_b_id"], case["resource_key"]) == ("plan-a", done.record.run_id, KEY)
    assert (case["resolution"], case["irreversible"], case["detected_at"]) == ("escalate", True, "commit")
    return done.record.run_id, case


def test_an_irreversible_conflict_waits_for_a_person_who_lets_it_proceed(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    write = ToolCallReply("file_write", {"path": REPORT, "content": "the new report"}, "call_w")
    model_server.expect(Reply(tool_calls=(write,)), Reply("The report is written."))
    headers = auth(workspace)
    with running(tmp_path, workspace, model_server) as (client, runtime):
        run_id, case = escalated_run(client, runtime, headers)
        report = workspace / "tenants/acme/workers/alice" / REPORT
        assert not report.exists()
        plan = client.get(f"/api/v1/workers/alice/plans/{run_id}", headers=headers).json()["plan"]
        assert plan["state"] == "conflicted"
        assert [h["to"] for h in plan["history"]] == ["planned", "gated", "conflicted"]  # stopped before its change

        brief = client.portal.call(lambda: runtime.services.briefs.generate("acme", "alice", deliver=False))  # type: ignore[union-attr]
        (card,) = brief.sections["conflicts"]
        assert card.ref == case["conflict_id"] and card.risk == "high"
        assert [o.command for o in card.options] == [
            f"/resolve_conflict {case['conflict_id']} proceed",
            f"/resolve_conflict {case['conflict_id']} drop",
        ]
        assert brief.sections["confirm"] == ()  # one card: the waiting call is the conflict's
        assert "Conflicts and risks (1)" in brief.text

        other = auth(workspace, "globex")
        assert client.get(f"/api/v1/conflicts/{case['conflict_id']}", headers=other).status_code == 404
        resolved = client.post(
            f"/api/v1/conflicts/{case['conflict_id']}/resolve", json={"decision": "proceed"}, headers=headers
        )
        assert resolved.status_code == 200
        body = resolved.json()
        assert (body["conflict"]["status"], body["conflict"]["resolved_by"]) == ("resolved", "user")
        assert body["call"]["status"] == "approved" and body["call"]["run_state"] == "completed"
        assert report.read_text(encoding="utf-8") == "the new report"
        again = client.post(
            f"/api/v1/conflicts/{case['conflict_id']}/resolve", json={"decision": "drop"}, headers=headers
        )
        assert again.status_code == 409
        assert client.get("/api/v1/conflicts/cc_0_00000000", headers=headers).status_code == 404
        plan = client.get(f"/api/v1/workers/alice/plans/{run_id}", headers=headers).json()["plan"]
        assert [h["to"] for h in plan["history"]][-2:] == ["gated", "running"]  # back through the gate
    assert len(model_server.requests) == 2


def test_a_person_drops_it_over_im_or_by_rejecting_its_confirmation(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    write = ToolCallReply("file_write", {"path": REPORT, "content": "never"}, "call_w")
    model_server.expect(Reply(tool_calls=(write,)), Reply(tool_calls=(write,)))
    headers = auth(workspace)
    with running(tmp_path, workspace, model_server) as (client, runtime):
        run_id, case = escalated_run(client, runtime, headers)
        backend = runtime.services.command_backend
        listed = client.portal.call(backend.conflicts, "acme", "alice")  # type: ignore[union-attr]
        assert [c["id"] for c in listed] == [case["conflict_id"]]
        done = client.portal.call(backend.resolve_conflict, "acme", "alice", case["conflict_id"], "drop", "slack:U1")  # type: ignore[union-attr]
        assert done["status"] == "dropped" and done["call"]["status"] == "rejected"
        assert client.get(f"/api/v1/workers/alice/runs/{run_id}", headers=headers).json()["state"] == "cancelled"
        plan = client.get(f"/api/v1/workers/alice/plans/{run_id}", headers=headers).json()["plan"]
        assert plan["state"] == "failed"

        # the same once more, decided on the confirmation itself: the case follows
        finish = client.post("/api/v1/workers/alice/plans/plan-a/finish", json={"state": "succeeded"}, headers=headers)
        assert finish.status_code == 200 and finish.json()["plan"]["state"] == "succeeded"
        client.post(
            "/api/v1/workers/alice/plans",
            json={"plan_id": "plan-c", "effects": [{"resource_key": KEY, "operation": "write"}]},
            headers=headers,
        )
        second_run, second = escalated_run_again(client, runtime)
        dropped = asyncio.Event()

        async def listen() -> None:
            def seen(event: Event) -> Any:
                if event.payload.get("conflict_id") == second:
                    dropped.set()
                return asyncio.sleep(0)

            runtime.services.bus.subscribe("conflict.resolved", seen)

        client.portal.call(listen)  # type: ignore[union-attr]
        (pending,) = client.get("/api/v1/workers/alice/confirmations?status=pending", headers=headers).json()[
            "confirmations"
        ]
        assert any(f"conflict {second}" in r for r in pending["reasons"])
        client.post(f"/api/v1/workers/alice/confirmations/{pending['confirmation_id']}/reject", headers=headers)
        client.portal.call(asyncio.wait_for, dropped.wait(), 10)  # type: ignore[union-attr]
        got = client.get(f"/api/v1/conflicts/{second}", headers=headers).json()["conflict"]
        assert (got["status"], got["decision"]) == ("dropped", "drop") and got["decided_by"].startswith("key:")
        assert second_run != run_id
    assert not (workspace / "tenants/acme/workers/alice" / REPORT).exists()


def escalated_run_again(client: TestClient, runtime: Runtime) -> tuple[str, str]:
    async def ask() -> RouterEvent:
        req = RouteRequest("acme", "alice", "Write the report again", conversational=False)
        return [e async for e in runtime.services.router.route_stream(req)][-1]

    done = client.portal.call(ask)  # type: ignore[union-attr]
    assert isinstance(done, RouteDone) and done.record.state == "waiting_approval"
    cases = runtime.services.conflicts.store.cases("acme", status="open", plan_id=done.record.run_id)
    return done.record.run_id, cases[0].conflict_id


APPROVE = (
    "---\nduty_id: triage\ntitle: Triage issues\ntriggers: [{id: m, type: manual}]\n"
    "contract: {version: '1', approval: {required: true}}\n---\nTriage the issue.\n"
)


def test_two_brief_items_whose_goals_exclude_each_other_are_one_card(
    tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    workspace = small_workspace({"acme": ["alice"]}, {"tenants/acme/workers/alice/duties/triage.md": APPROVE})
    headers = auth(workspace)
    with running(tmp_path, workspace, model_server) as (client, runtime):

        async def gate(text: str) -> None:
            req = RouteRequest("acme", "alice", text, "duty", duty_id="triage", trigger_id="m", conversational=False)
            done = [e async for e in runtime.services.router.route_stream(req)][-1]
            assert isinstance(done, RouteDone) and done.record.state == "waiting_approval"

        for text in ("Close issue 42", "Keep issue 42 open and follow up with the reporter"):
            client.portal.call(gate, text)  # type: ignore[union-attr]
        close, keep = sorted(
            client.get("/api/v1/workers/alice/confirmations", headers=headers).json()["confirmations"],
            key=lambda c: c["text"],
        )
        pair = {
            "a": f"conf_{close['confirmation_id']}",
            "b": f"conf_{keep['confirmation_id']}",
            "why": "closing it ends the follow-up",
        }

        def shown_both(body: dict[str, Any]) -> None:
            items = json.loads(body["messages"][-1]["content"])["items"]
            assert {i["id"] for i in items} == {pair["a"], pair["b"]}

        model_server.expect(
            Reply(tool_calls=(ToolCallReply("exclusive_pairs", {"pairs": [pair]}, "c1"),), check=shown_both)
        )
        brief = client.portal.call(lambda: runtime.services.briefs.generate("acme", "alice", deliver=False))  # type: ignore[union-attr]
        assert brief.sections["confirm"] == ()  # neither is listed alone
        (card,) = brief.sections["conflicts"]
        assert card.title == "[Conflicted] A: Close issue 42 / B: Keep issue 42 open and follow up with the reporter"
        assert [o.command for o in card.options] == [
            f"/approve_confirmation {close['confirmation_id']}", f"/reject_confirmation {close['confirmation_id']}",
            f"/approve_confirmation {keep['confirmation_id']}", f"/reject_confirmation {keep['confirmation_id']}",
            f"/resolve_conflict {card.ref} proceed",
        ]  # fmt: skip
        case = client.get(f"/api/v1/conflicts/{card.ref}", headers=headers).json()["conflict"]
        assert (case["conflict_type"], case["status"], case["detected_at"]) == ("semantic", "open", "brief")
        assert case["detail"] == "closing it ends the follow-up"
        settled = client.post(f"/api/v1/conflicts/{card.ref}/resolve", json={"decision": "proceed"}, headers=headers)
        assert settled.status_code == 200 and settled.json()["call"] is None
        assert runtime.services.conflicts.store.plans("acme", "alice") == []  # brief items are no plans


def test_a_plan_declared_over_the_api_expires_after_its_ttl_without_a_commit(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    headers = auth(workspace)
    with running(tmp_path, workspace, model_server) as (client, runtime):
        effects = [{"resource_key": KEY, "operation": "write"}]
        body = {"plan_id": "plan-a", "effects": effects, "ttl_seconds": 90.0}
        declared = client.post("/api/v1/workers/alice/plans", json=body, headers=headers)
        assert declared.status_code == 201, declared.text
        plan = declared.json()["plan"]
        created, expires = (datetime.fromisoformat(plan[k]) for k in ("created_at", "expires_at"))
        assert plan["ttl_s"] == 90 and expires - created == timedelta(seconds=90)  # the real clock
        assert created <= datetime.now(UTC) < expires
        bad = {"plan_id": "plan-x", "effects": effects, "ttl_seconds": True}
        assert client.post("/api/v1/workers/alice/plans", json=bad, headers=headers).status_code == 422

        # 90 s later (the arbiter's clock moved on from the real one): expired when next looked at
        runtime.services.conflicts.arbiter.clock = lambda: datetime.now(UTC) + timedelta(seconds=91)
        got = client.get("/api/v1/workers/alice/plans/plan-a", headers=headers).json()["plan"]
        assert got["state"] == "failed" and got["history"][-1]["reason"].startswith("expired: no commit")
        second = client.post(
            "/api/v1/workers/alice/plans", json={"plan_id": "plan-b", "effects": effects}, headers=headers
        )
        assert second.status_code == 201 and second.json()["conflicts"] == []  # its claim is gone
        default = datetime.fromisoformat(second.json()["plan"]["expires_at"]) - datetime.fromisoformat(
            second.json()["plan"]["created_at"]
        )
        assert default == timedelta(hours=24)  # conflict.declared_plan_ttl_seconds
        again = client.post("/api/v1/workers/alice/plans", json=body, headers=headers)
        assert again.status_code == 409  # an expired plan has ended: declare a new one
