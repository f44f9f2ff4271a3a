"""Learning from feedback in a started runtime, over a scripted 30-day history (the learner's clock is
injected): a duty's decisions go through the real governance stage, a person's feedback through the
HTTP API, and every step — reject -> confirm in shadow, its proposal and application, the rollback,
a promotion never offered for an irreversible action, the freeze on a spike of negative feedback — is
read back from the decision log over the API."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.runtime.composition import Runtime
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, scripted_env
from genworker.tools.base import Effect
from genworker.tools.environment import undo_events
from genworker.tools.middlewares.undo_window import DeferredCall
from genworker.worker.governance import GovernanceInput
from genworker.worker.governance.evidence import evidence_from
from genworker.worker.router import RouteDone, RouteRequest

DUTY = (
    "---\nduty_id: triage\ntitle: Triage issues\ntriggers: [{id: new, type: event, source: github}]\n"
    "posture: {default: execute}\n---\nTriage new issues.\n"
)
START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
HIGH = {"confidence": 0.97, "evidence_sources": ("github", "email"), "undo_available": True}


@dataclass
class Clock:
    now: datetime = START

    def __call__(self) -> datetime:
        return self.now

    def day(self, day: int, hour: int = 9) -> None:
        self.now = START + timedelta(days=day, hours=hour - 9)


@dataclass
class History:
    client: TestClient
    runtime: Runtime
    clock: Clock
    headers: dict[str, str]

    def decide(self, action: str, effect: Effect = Effect.WRITE, **extra: Any) -> tuple[str, str]:
        """The duty decides on `action` through the real governance stage: (gate result, decision id)."""
        state = self.runtime.registry.tenant("acme")
        assert state is not None
        inp = GovernanceInput(
            state.tenant, state.workers["alice"], f"{action} issue 42", "duty", duty_id="triage", trigger_id="new",
            requested_effects=frozenset({effect}), requested_actions=(action,), **extra,
        )  # fmt: skip
        outcome = self.runtime.services.router.governance.evaluate(inp)
        assert outcome.manifest.policy_snapshot_ref is not None
        return str(outcome.decision.gate_result), outcome.manifest.policy_snapshot_ref

    def feedback(self, kind: str, decision_id: str) -> dict[str, Any]:
        body = {"feedback_type": kind, "decision_id": decision_id, "source": "dashboard"}
        response = self.client.post("/api/v1/workers/alice/feedback-events", json=body, headers=self.headers)
        assert response.status_code == 201, response.text
        return dict(response.json())

    def get(self, path: str) -> Any:
        response = self.client.get(f"/api/v1/workers/alice{path}", headers=self.headers)
        assert response.status_code == 200, response.text
        return response.json()

    def post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        return self.client.post(f"/api/v1/workers/alice{path}", json=body or {}, headers=self.headers)

    def steps(self) -> list[tuple[str, int | None]]:
        rows = self.get("/learning/decisions?kind=policy")["decisions"]
        return [(r["step"], r.get("version")) for r in reversed(rows)]

    def last_gate(self) -> dict[str, Any]:
        return dict(self.get("/learning/decisions?kind=gate&limit=1")["decisions"][0])


@contextmanager
def started(
    tmp_path: Path, small_workspace: Callable[..., Path], env: dict[str, str], clock: Clock | None = None
) -> Iterator[History]:
    """A runtime over acme/alice with the triage duty; the learner's clock is `clock` when given."""
    workspace = small_workspace({"acme": ["alice"]}, {"tenants/acme/workers/alice/duties/triage.md": DUTY})
    (tmp_path / "configs").mkdir()
    settings = load_settings(tmp_path / "configs", env, workspace=workspace)
    headers = {"Authorization": f"Bearer {ApiKeyStore(workspace).create('acme')[1]}"}
    with TestClient(create_app(settings)) as client:
        runtime: Runtime = client.app.state.runtime  # type: ignore[attr-defined]
        if clock is not None:
            runtime.services.learning.learner.clock = clock
        yield History(client, runtime, clock or Clock(), headers)


@pytest.fixture
def history(tmp_path: Path, small_workspace: Callable[..., Path]) -> Iterator[History]:
    with started(tmp_path, small_workspace, {"GENWORKER_HOT_RELOAD": "false"}, Clock()) as h:
        h.runtime.services.learning.learner.budget_of = None  # the budget's auto-tune: the last test's
        yield h


def test_thirty_days_of_feedback_shadow_apply_rollback_and_freeze(history: History) -> None:
    h = history
    # days 0-1: labelling ran without asking twice, and was rejected twice -> confirm, in shadow
    assert h.decide("label_issue") == ("brief", h.decide("label_issue")[1])
    result, first = h.decide("label_issue")
    assert h.feedback("reject", first)["shadow_versions"] == []
    h.clock.day(1)
    _, second = h.decide("label_issue")
    made = h.feedback("reject", second)
    assert made["shadow_versions"] == [1] and made["feedback"]["actions"] == ["label_issue"]
    assert made["feedback"]["gate_result"] == "brief" and made["feedback"]["source"] == "dashboard"
    # days 2-7: the live policy still decides; the log says what v1 would have done
    for day in range(2, 8):
        h.clock.day(day)
        assert h.decide("label_issue")[0] == "brief"
        gate = h.last_gate()
        assert (gate["policy_version"], gate["shadow"]) == (0, [{"version": 1, "would_have": "confirm"}])
    refused = h.post("/learning/versions/1/apply")
    assert refused.status_code == 409 and "in shadow until 2026-03-09" in refused.json()["error"]["message"]
    unknown = h.post("/learning/versions/99/apply")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "policy_version_not_found"
    assert h.get("/suggestions")["suggestions"] == []  # nothing proposed while in shadow

    # day 8: the shadow period is over -> proposed as a suggestion; a person approves it -> applied
    h.clock.day(8)
    overview = h.get("/learning")
    (proposal,) = h.get("/suggestions")["suggestions"]
    assert proposal["kind"] == "policy" and proposal["payload"] == {"version": 1, "changes": "label_issue -> confirm"}
    assert "6 of 6 decisions would have been different" in proposal["detail"]  # days 2-7
    assert overview["policy_version"] == 0 and overview["versions"][0]["status"] == "shadow"
    approved = h.client.post(
        f"/api/v1/workers/alice/suggestions/{proposal['suggestion_id']}/approve", headers=h.headers
    )
    assert approved.status_code == 200 and approved.json()["suggestion"]["result"].startswith(
        "policy version 1 applied"
    )
    result, gated = h.decide("label_issue")
    assert result == "confirm"
    gate = h.last_gate()
    assert (gate["policy_version"], gate["learned"], gate["reasons"]) == (1, True, ["learned_confirm"])
    snapshot = h.runtime.services.router.governance.snapshots.load_policy("acme", "alice", gated)
    assert "learned:policy/v1" in snapshot.decision.policy_sources
    assert snapshot.decision.action == "gated"

    # day 10: rolled back in one command -> the policy decides as before
    h.clock.day(10)
    back = h.post("/learning/rollback")
    assert back.status_code == 200 and back.json() == {
        "version": 1,
        "status": "rolled_back",
        "changes": "label_issue -> confirm",
    }
    assert h.decide("label_issue")[0] == "brief" and h.last_gate()["policy_version"] == 0
    assert h.post("/learning/rollback").status_code == 409  # nothing applied is left

    # days 11-15: closing asked (high risk) and was approved five times -> proposed auto, in shadow;
    # an irreversible action approved as often is never offered
    for day in range(11, 16):
        h.clock.day(day)
        result, closing = h.decide("close_issue", Effect.EXTERNAL, **HIGH)
        assert result == "confirm"
        h.feedback("approve", closing)
        result, promise = h.decide("external_commitment_send")
        assert result == "confirm"
        h.feedback("approve", promise)
    versions = h.get("/learning")["versions"]
    assert [(v["version"], v["changes"][0]["action"], v["changes"][0]["gate"], v["status"]) for v in versions] == [
        (1, "label_issue", "confirm", "rolled_back"),
        (2, "close_issue", "auto", "shadow"),
    ]

    # day 16: five different actions rejected within a day -> learning freezes
    h.clock.day(16)
    for i in range(5):
        _, tidy = h.decide(f"tidy_{i}")
        h.feedback("reject", tidy)
    assert h.get("/learning")["frozen"]["reason"].startswith("5 negative feedback events within 24 h")
    # frozen: two more rejections of labelling learn nothing; v2 is not proposed or applied
    h.clock.day(17)
    for _ in range(2):
        h.feedback("reject", h.decide("label_issue")[1])
    h.clock.day(19)
    assert [v["version"] for v in h.get("/learning")["versions"]] == [1, 2]
    assert [s["payload"]["version"] for s in h.get("/suggestions?status=pending")["suggestions"]] == []
    frozen = h.post("/learning/versions/2/apply")
    assert frozen.status_code == 409 and "learning is frozen" in frozen.json()["error"]["message"]

    # day 20: a person unfreezes it; day 22: v2's shadow period is over: proposed, applied, and
    # closing now runs without asking (its external calls held in the undo window)
    h.clock.day(20)
    assert h.post("/learning/unfreeze").status_code == 200
    h.clock.day(22)
    h.get("/learning")
    (proposal,) = h.get("/suggestions")["suggestions"]
    assert proposal["payload"] == {"version": 2, "changes": "close_issue -> auto"}
    assert h.post("/learning/versions/2/apply").status_code == 200
    result, lifted = h.decide("close_issue", Effect.EXTERNAL, **HIGH)
    assert result == "brief"
    assert (
        h.runtime.services.router.governance.snapshots.load_policy("acme", "alice", lifted).decision.undo_window_s == 60
    )
    assert h.last_gate()["reasons"] == ["learned_auto"] and h.last_gate()["policy_version"] == 2
    assert h.decide("external_commitment_send")[0] == "confirm"  # irreversible: always a person

    assert h.steps() == [
        ("shadow_started", 1), ("proposed", 1), ("applied", 1), ("rolled_back", 1), ("shadow_started", 2),
        ("frozen", None), ("unfrozen", None), ("proposed", 2), ("applied", 2),
    ]  # fmt: skip
    metrics = {m["metric_name"]: m["value"] for m in h.get("/learning?window_days=30")["metrics"]}
    assert 0 < metrics["gate_pass_rate"] < 1 and 0 < metrics["rollback_rate"] <= 1
    assert metrics["action_success_rate"] is None  # no run of these decisions has ended
    assert h.client.get("/api/v1/workers/alice/learning", headers={"Authorization": "Bearer nope"}).status_code == 401


def test_decisions_made_by_people_are_feedback(
    tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    """A gated duty task approved or rejected over the API is approve / reject feedback on its
    decision; an action of a run that ran without asking, undone in its undo window, is a reject."""
    model_server.expect(Reply("labelled"))
    with started(tmp_path, small_workspace, scripted_env(model_server)) as h:
        client, runtime, headers = h.client, h.runtime, h.headers

        def route(action: str, effect: str, **evidence: Any) -> RouteDone:
            payload = {"requested_actions": [action], "requested_effects": [effect], **evidence}
            req = RouteRequest(
                "acme", "alice", f"{action} issue 42", "duty", duty_id="triage", trigger_id="new",
                conversational=False, evidence=evidence_from(payload),
            )  # fmt: skip

            async def run() -> RouteDone:
                done = [e async for e in runtime.services.router.route_stream(req)][-1]
                assert isinstance(done, RouteDone)
                return done

            return client.portal.call(run)  # type: ignore[union-attr]

        evidence = {"confidence": 0.97, "evidence_sources": ["github", "email"]}
        for decision in ("approve", "reject"):
            gated = route("close_issue", "external", **evidence)
            assert gated.record.state == "waiting_approval"
            (pending,) = client.get("/api/v1/workers/alice/confirmations?status=pending", headers=headers).json()[
                "confirmations"
            ]
            if decision == "approve":
                model_server.expect(Reply("closed"))
            client.post(f"/api/v1/workers/alice/confirmations/{pending['confirmation_id']}/{decision}", headers=headers)
        labelled = route("label_issue", "write")
        assert labelled.record.state == "completed"
        # the undo window announcing an undone call of that run (as tools/environment.py does)
        now = datetime.now(UTC)
        held = DeferredCall("undo_1", "acme", "alice", labelled.record.run_id, "c1", "mail__notify", {}, "normal",
                            now, now, state="undone", decided_by="dana")  # fmt: skip
        client.portal.call(undo_events(runtime.services.bus), held)  # type: ignore[union-attr]
        client.portal.call(runtime.services.bus.drain)  # type: ignore[union-attr, attr-defined]
        events = client.get("/api/v1/workers/alice/feedback-events", headers=headers).json()["feedback"]
        assert [(e["feedback_type"], e["source"], e["actions"], e["gate_result"]) for e in reversed(events)] == [
            ("approve", "confirmation", ["close_issue"], "confirm"),
            ("reject", "confirmation", ["close_issue"], "confirm"),
            ("reject", "undo", ["label_issue"], "brief"),
        ]
        assert events[0]["plan_id"] == labelled.record.run_id and events[0]["by"] == "dana"


def test_priority_and_interruption_budget_are_learned_in_shadow_then_applied_over_the_api(
    tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    """edit_priority feedback on a run raises the priority of items alike and, as engagement, the
    interruption budget: both in shadow first (logged as "would have"), then applied and rolled back."""
    model_server.expect(Reply("labelled"))
    with started(tmp_path, small_workspace, scripted_env(model_server), Clock()) as h:
        client, runtime, clock = h.client, h.runtime, h.clock
        evidence = evidence_from({"requested_actions": ["label_issue"]})
        req = RouteRequest("acme", "alice", "label issue 42", "duty", duty_id="triage", trigger_id="new",
                           conversational=False, evidence=evidence)  # fmt: skip

        async def route() -> RouteDone:
            done = [e async for e in runtime.services.router.route_stream(req)][-1]
            assert isinstance(done, RouteDone)
            return done

        run_id = client.portal.call(route).record.run_id  # type: ignore[union-attr]
        body = {"feedback_type": "edit_priority", "run_id": run_id, "old_value": "P2", "new_value": "P1"}
        made = [h.post("/feedback-events", body).json() for _ in range(5)]
        assert made[-1]["shadow_versions"] == [1, 2]
        assert made[-1]["feedback"]["features"] == {
            "source": "duty", "intent": "label_issue", "entity_type": "duty:triage", "counterpart_role": "trust:2",
        }  # fmt: skip
        versions = h.get("/learning")["versions"]
        changes = [(v["changes"][0]["kind"], v["changes"][0]["value"]) for v in versions]
        assert changes == [("priority", 1), ("budget", 11)]

        briefs = runtime.services.briefs
        base = briefs.policy("acme", "alice").interruption_budget_per_day
        assert base == 10

        def notify(item_id: str) -> str:
            item = briefs.item("done", "Labelled issue 42", item_id=item_id, ref=run_id, priority="P2")
            client.portal.call(briefs.notify, "acme", "alice", item)  # type: ignore[union-attr]
            return next(i.priority for i in briefs.store.pending("acme", "alice") if i.item_id == item_id)

        assert notify("bi_shadow") == "P2"  # in shadow: nothing changes ...
        logged = h.get("/learning/decisions?kind=priority")["decisions"][0]
        assert (logged["priority"], logged["shadow"]) == ("P2", [{"version": 1, "would_have": "P1"}])  # ... but logged
        assert briefs.limit("acme", "alice", briefs.policy("acme", "alice")) == 10

        clock.day(8)  # past safe_apply_after_shadow_days: proposed, then applied by a person
        h.get("/learning")
        proposals = h.get("/suggestions")["suggestions"]
        assert sorted(p["payload"]["version"] for p in proposals) == [1, 2]
        for number in (1, 2):
            assert h.post(f"/learning/versions/{number}/apply").status_code == 200
        assert notify("bi_applied") == "P1"
        assert h.get("/learning/decisions?kind=priority")["decisions"][0]["policy_version"] == 1
        assert briefs.limit("acme", "alice", briefs.policy("acme", "alice")) == 11
        briefs.review = None  # the semantic check would ask the model about the two pending proposals
        brief = client.portal.call(lambda: briefs.generate("acme", "alice", deliver=False))  # type: ignore[union-attr]
        assert brief.budget_limit == 11 and "Interruption budget: 2 / 11 (today)" in brief.text  # two notified
        assert [i.item_id for i in brief.sections["done"]][:2] == ["bi_applied", "bi_shadow"]  # P1 first

        back = h.post("/learning/rollback", {"version": 2})
        assert back.status_code == 200 and back.json()["changes"] == "interruption budget -> 11 a day"
        assert briefs.limit("acme", "alice", briefs.policy("acme", "alice")) == base


def test_the_decision_log_and_feedback_are_pruned_past_their_retention(history: History) -> None:
    h = history
    for day in (0, 1):  # two rejections of what ran without asking: v1 in shadow
        h.clock.day(day)
        h.feedback("reject", h.decide("label_issue")[1])
    assert len(h.get("/feedback-events")["feedback"]) == 2
    h.clock.day(100)  # past learning.retention (90 days) for every gate decision and feedback event
    h.get("/learning")
    assert h.get("/learning/decisions?kind=gate")["decisions"] == []
    assert h.get("/learning/decisions?kind=feedback")["decisions"] == []
    assert h.get("/feedback-events")["feedback"] == []
    assert h.steps()[0] == ("shadow_started", 1)  # the history of the versions stays
    (pruned,) = h.get("/learning/decisions?kind=retention")["decisions"]
    assert (pruned["log_entries"], pruned["feedback_events"]) == (4, 2)
    assert [v["version"] for v in h.get("/learning")["versions"]] == [1]
