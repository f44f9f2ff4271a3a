"""Context spaces in the running runtime: the heartbeat, LiteLLM to the scripted model, real files,
the HTTP API.

One incident reported on three channels (a group chat, an email, a GitHub webhook) yields one task
through the router and governance, not three: the facts are gathered into one space, the task starts
when two independent sources agree, and the third adds evidence without another run. The API lists
the space, its facts and its task, pins it, refuses another tenant's worker and an unknown space; a
worker that did not opt in keeps the heartbeat's own behaviour.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.autonomy.heartbeat import HeartbeatReport
from genworker.autonomy.inbox import InboxItem, new_item
from genworker.runtime.composition import Runtime
from genworker.settings import load_settings
from genworker.testing import Fail, Reply, ScriptedModelServer, ToolCallReply, When, scripted_env

T = TypeVar("T")
SPACES_ON = "context_spaces:\n  enabled: true\n"


@pytest.fixture
def workspace(write_tree: Callable[..., Path]) -> Path:
    def persona(worker: str, extra: str = "") -> str:
        return f"---\nidentity:\n  name: {worker.title()}\n  worker_id: {worker}\n{extra}---\nYou are {worker}.\n"

    return write_tree(
        {
            "tenants/acme/TENANT.json": '{"tenant_id": "acme", "trust_level": 2, "default_worker": "alice"}',
            "tenants/acme/workers/alice/PERSONA.md": persona("alice", SPACES_ON),
            "tenants/acme/workers/bob/PERSONA.md": persona("bob"),
            "tenants/globex/TENANT.json": '{"tenant_id": "globex", "default_worker": "gina"}',
            "tenants/globex/workers/gina/PERSONA.md": persona("gina", SPACES_ON),
        }
    )


@contextmanager
def running(tmp_path: Path, workspace: Path, model: ScriptedModelServer) -> Iterator[tuple[TestClient, Runtime]]:
    (tmp_path / "configs").mkdir(exist_ok=True)
    with TestClient(create_app(load_settings(tmp_path / "configs", scripted_env(model), workspace=workspace))) as c:
        yield c, c.app.state.runtime  # type: ignore[attr-defined]


def call(client: TestClient, fn: Callable[[], Awaitable[T]]) -> T:
    return client.portal.call(fn)  # type: ignore[union-attr, arg-type, return-value]


def beat(client: TestClient, runtime: Runtime, item: InboxItem) -> HeartbeatReport:
    async def go() -> HeartbeatReport:
        assert await runtime.services.inbox.write(item)
        report = await runtime.services.heartbeat.run_once(item.tenant_id, item.worker_id)
        await runtime.services.heartbeat.runner.wait_runs()
        return report

    return call(client, go)


def choose(space_id: str, confidence: float = 0.9) -> Reply:
    answer = {"choice": space_id, "confidence": confidence, "reason": "the same login outage"}
    return Reply(tool_calls=(ToolCallReply("choose_space", answer),))


CHAT = new_item(
    "acme", "alice", "channel", "acme~alice~slack", "channel.group_message",
    {"text": "Login is down for everyone since the deploy, SSO returns 500", "sender_name": "dana"},
)  # fmt: skip
EMAIL = new_item(
    "acme", "alice", "email", "mailbox", "email.received",
    {"subject": "Customers cannot login: SSO errors after deploy", "from": "support"},
)  # fmt: skip
GITHUB = new_item(
    "acme", "alice", "webhook", "github", "github.issue_opened",
    {"source": "github", "repo": "acme/auth", "issue": 101, "title": "SSO login returns 500 after deploy"},
)  # fmt: skip


def test_one_incident_on_three_channels_yields_one_task(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(
        When("choose_space", choose("SPACE_1")),  # the email: the chat's space
        Reply("Rolled back the SSO deploy; login works again."),  # the one task
        When("choose_space", choose("SPACE_1")),  # the webhook
    )
    headers = {"Authorization": f"Bearer {ApiKeyStore(workspace).create('acme')[1]}"}
    with running(tmp_path, workspace, model_server) as (client, runtime):
        first = beat(client, runtime, CHAT)  # nothing to choose from: a new space, no model call
        assert [(r.action, r.outcome) for r in first.items] == [("space", "gathered")]
        assert model_server.requests == []
        second = beat(client, runtime, EMAIL)  # two sources agree: 0.6, 0.6 -> 0.84 >= 0.80
        (task,) = second.items
        assert (task.action, task.outcome) == ("task", "submitted") and task.run_id
        third = beat(client, runtime, GITHUB)
        assert [(r.action, r.outcome) for r in third.items] == [("space", "gathered")]
        assert "SPACE_1" in third.items[0].reason

        runs = call(client, lambda: runtime.services.router.tasks.list_runs("acme", "alice"))
        assert [r.run_id for r in runs] == [task.run_id]  # one task, not three
        (run,) = runs
        assert run.state == "completed" and run.provenance.source_type == "sensor"  # an email sensor's fact
        manifest = call(client, lambda: runtime.services.router.tasks.get_manifest("acme", "alice", run.task_id))
        assert manifest.text.startswith("Context space SPACE_1:")
        question = model_server.requests[0]
        assert question["tool_choice"] == {"type": "function", "function": {"name": "choose_space"}}
        assert question["tools"][0]["function"]["parameters"]["properties"]["choice"]["enum"] == ["SPACE_1", "NEW"]

        base = "/api/v1/workers/alice/spaces"
        listed = client.get(base, headers=headers).json()
        (card,) = listed["spaces"]
        assert card["space_id"] == "SPACE_1" and card["evidence_count"] == 3
        assert card["sources"] == ["chat", "email", "github"] and card["tasks"][0]["run_id"] == task.run_id
        assert listed["counts"]["active"] == 1
        space = client.get(f"{base}/SPACE_1", headers=headers).json()["space"]
        assert "issue:acme/auth#101" in space["anchors"] and space["candidates"][0]["sources"] == ["chat", "email"]
        events = client.get(f"{base}/SPACE_1/events", headers=headers).json()["events"]
        assert [e["source"] for e in events] == ["chat", "email", "github"]
        pinned = client.post(f"{base}/SPACE_1/pin", json={"pinned": True}, headers=headers).json()["space"]
        assert (pinned["is_pinned"], pinned["pin_reason"]) == (True, "manual")
        assert client.post(f"{base}/SPACE_1/confirm", headers=headers).status_code == 409  # not pending
        assert client.get(f"{base}/SPACE_9", headers=headers).json()["error"]["code"] == "space_not_found"
        assert client.get("/api/v1/workers/gina/spaces", headers=headers).status_code == 404  # another tenant's
        block = client.get("/api/v1/workers/alice/dashboard", headers=headers).json()["blocks"]["spaces"]
        assert block["status"] == "ok" and block["data"]["enabled"] is True
        assert (
            block["data"]["counts"]["active"] == 1 and block["data"]["spaces"][0]["tasks"][0]["run_id"] == task.run_id
        )
        text = (workspace / "tenants/acme/workers/alice/runtime/spaces/SPACE_1.md").read_text(encoding="utf-8")
        assert "# SPACE_1: Login is down for everyone" in text and "[github]" in text

        # a worker that did not opt in: the same fact goes the heartbeat's own way (a summary turn)
        model_server.expect(Reply('{"attention": false, "message": ""}'))
        quiet = beat(client, runtime, new_item("acme", "bob", "email", "mailbox", "email.received", {"subject": "x"}))
        assert [(r.action, r.outcome) for r in quiet.items] == [("summary", "silent")]
        assert not (workspace / "tenants/acme/workers/bob/runtime/spaces").exists()


def test_a_model_that_cannot_be_reached_leaves_the_fact_for_a_retry(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Fail(500, "down"))
    with running(tmp_path, workspace, model_server) as (client, runtime):
        beat(client, runtime, CHAT)
        report = beat(client, runtime, EMAIL)
        (result,) = report.items
        assert (result.action, result.outcome) == ("space", "failed") and "could not be reached" in (result.error or "")
        item: Any = call(client, lambda: runtime.services.inbox.get("acme", "alice", EMAIL.item_id))
        assert item.state == "failed" and item.retry_at is not None  # retried later, not filed blind
