"""Duties through the real runtime: the manual run API (tenant-scoped, idempotent with a caller's key),
execution records over the API, and a scheduled slot fired by two schedulers reaching the model once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.autonomy.duties import DutyScheduler, DutyStore, FireOutcome, route_through
from genworker.runtime.composition import Runtime
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, scripted_env

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
DUTIES = {
    "report.md": "---\nduty_id: report\ntitle: Report\ntriggers: [{id: now, type: manual}]\n---\nWrite the report.\n",
    "hourly.md": (
        "---\nduty_id: hourly\ntitle: Hourly\ntriggers: [{id: h, type: schedule, cron: '0 * * * *', "
        "timezone: Asia/Tokyo}]\n---\nCheck the queue.\n"
    ),
}


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    extra = {f"tenants/acme/workers/alice/duties/{name}": text for name, text in DUTIES.items()}
    return small_workspace({"acme": ["alice"], "zero": ["zed"]}, extra)


@contextmanager
def running(tmp_path: Path, workspace: Path, model: ScriptedModelServer) -> Iterator[tuple[TestClient, Runtime]]:
    (tmp_path / "configs").mkdir(exist_ok=True)
    env = scripted_env(model, GENWORKER_HEARTBEAT_ENABLED="true")
    with TestClient(create_app(load_settings(tmp_path / "configs", env, workspace=workspace))) as client:
        yield client, client.app.state.runtime  # type: ignore[attr-defined]


def test_manual_run_api(tmp_path: Path, workspace: Path, model_server: ScriptedModelServer) -> None:
    model_server.expect(Reply("report written"), Reply("second report"))
    keys = ApiKeyStore(workspace)
    acme = {"Authorization": f"Bearer {keys.create('acme')[1]}"}
    zero = {"Authorization": f"Bearer {keys.create('zero')[1]}"}
    with running(tmp_path, workspace, model_server) as (client, runtime):
        assert runtime.services.duties.running
        first = client.post("/api/v1/workers/alice/duties/report/run", headers={**acme, "Idempotency-Key": "k1"})
        assert first.status_code == 200, first.text
        body = first.json()
        assert body["created"] and body["run"]["state"] == "completed" and body["trigger_id"] == "now"
        repeat = client.post("/api/v1/workers/alice/duties/report/run", headers={**acme, "Idempotency-Key": "k1"})
        assert repeat.json()["run"]["run_id"] == body["run"]["run_id"] and not repeat.json()["created"]
        plain = client.post("/api/v1/workers/alice/duties/report/run", headers=acme, json={"trigger_id": "now"})
        assert plain.json()["created"] and plain.json()["run"]["run_id"] != body["run"]["run_id"]
        assert client.post("/api/v1/workers/alice/duties/report/run", headers=zero).status_code == 404
        assert client.post("/api/v1/workers/acme/alice/duties/report/run", headers=zero).status_code == 404
        assert client.post("/api/v1/workers/alice/duties/nope/run", headers=acme).status_code == 404
        bad_trigger = client.post("/api/v1/workers/alice/duties/report/run", headers=acme, json={"trigger_id": "x"})
        assert bad_trigger.status_code == 404
        records = client.get("/api/v1/workers/alice/duties/report/executions", headers=acme).json()["executions"]
        assert [r["trigger_type"] for r in records] == ["manual", "manual"]
        assert records[0]["run_id"] == body["run"]["run_id"] and records[0]["key"] == body["idempotency_key"]
        assert client.get("/api/v1/workers/alice/duties/report/executions", headers=zero).status_code == 404
        listed = client.get("/api/v1/workers/alice/duties", headers=acme).json()
        assert [d["duty_id"] for d in listed["duties"]] == ["hourly", "report"]
        hourly = listed["duties"][0]["triggers"][0]
        assert hourly["type"] == "schedule" and hourly["timezone"] == "Asia/Tokyo"
        assert hourly["next_fire"].endswith(":00:00+00:00")  # the top of an hour, in UTC
        assert listed["duties"][1]["triggers"] == [{"id": "now", "type": "manual"}]
        assert client.get("/api/v1/workers/alice/duties", headers=zero).status_code == 404
    assert len(model_server.requests) == 2


def test_a_manual_runs_evidence_reaches_the_policy_gate(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    """High risk with an undo window, but the tenant did not enable high-risk auto: the gate asks a
    person, and the policy snapshot and the confirmation record the evidence it judged."""
    evidence = {
        "confidence": 0.97,
        "sources": ["github", "pagerduty"],
        "requested_actions": ["internal_status_transition"],
        "requested_effects": ["external"],
    }
    acme = {"Authorization": f"Bearer {ApiKeyStore(workspace).create('acme')[1]}"}
    with running(tmp_path, workspace, model_server) as (client, runtime):
        ran = client.post("/api/v1/workers/alice/duties/report/run", headers=acme, json={"evidence": evidence})
        assert ran.status_code == 200, ran.text
        run = client.get(f"/api/v1/workers/alice/runs/{ran.json()['run']['run_id']}", headers=acme).json()
        snapshot_id = run["provenance"]["policy_snapshot_ref"].rsplit("/", 1)[-1].removesuffix(".json")
        snapshot = runtime.services.router.governance.snapshots.load_policy("acme", "alice", snapshot_id)
        [pending] = client.get("/api/v1/workers/alice/confirmations", headers=acme).json()["confirmations"]
    assert model_server.requests == [] and run["state"] == "waiting_approval"
    assert (snapshot.inputs.confidence, snapshot.inputs.evidence_sources) == (0.97, ("github", "pagerduty"))
    assert snapshot.inputs.requested_actions == ("internal_status_transition",)
    assert snapshot.decision.gate_result == "confirm"
    assert pending["evidence"]["evidence_sources"] == ["github", "pagerduty"]  # the approved run is gated alike


BAD_EVIDENCE = [
    ({"confidence": 1.5}, "body.evidence.confidence: Input should be less than or equal to 1"),
    ({"sources": ["github", "github"]}, "body.evidence.sources lists ['github'] more than once"),
    ({"confidence": "high"}, "body.evidence.confidence"),
    ({"requested_effects": ["launch"]}, "body.evidence.requested_effects.0"),
    ({"confidance": 0.9}, "body.evidence.confidance"),
]


def test_malformed_evidence_is_a_422_naming_the_field(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    acme = {"Authorization": f"Bearer {ApiKeyStore(workspace).create('acme')[1]}"}
    with running(tmp_path, workspace, model_server) as (client, runtime):
        for evidence, field in BAD_EVIDENCE:
            answer = client.post("/api/v1/workers/alice/duties/report/run", headers=acme, json={"evidence": evidence})
            assert answer.status_code == 422 and field in answer.json()["error"]["message"], answer.text
        runs = client.portal.call(runtime.services.router.tasks.list_runs, "acme", "alice")  # type: ignore[union-attr]
    assert runs == [] and model_server.requests == []


def test_one_slot_from_two_runtimes_reaches_the_model_once(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("queue fine"))
    now = [T0]
    with running(tmp_path, workspace, model_server) as (client, runtime):
        worker = runtime.registry.worker("acme", "alice")
        assert worker is not None
        schedulers = []
        for _ in range(2):
            s = DutyScheduler(
                DutyStore(tmp_path / "state"), partial(route_through, runtime.services.router), clock=lambda: now[0]
            )
            s.sync([worker])
            schedulers.append(s)

        async def fire_both() -> list[list[FireOutcome]]:
            await schedulers[0].tick("acme", "alice", "hourly", "h")
            now[0] = T0 + timedelta(hours=1, seconds=5)
            return await asyncio.gather(*(s.tick("acme", "alice", "hourly", "h") for s in schedulers))

        a, b = client.portal.call(fire_both)  # type: ignore[union-attr]
    fired = [*a, *b]
    assert sorted(f.created for f in fired) == [False, True]
    assert fired[0].run.run_id == fired[1].run.run_id
    run = next(f.run for f in fired if f.created)
    assert run.state == "completed" and run.provenance.duty_id == "hourly" and run.provenance.trigger_id == "h"
    assert run.provenance.scheduled_for == T0 + timedelta(hours=1) and run.provenance.idempotency_key == fired[0].key
    assert len(model_server.requests) == 1
