"""A heartbeat report that needs attention reaches the worker's owner, over real HTTP (uvicorn,
LiteLLM to the scripted model, the Slack API stand-in): the owner is the contact
`identity.reports_to` names, on their preferred channel, once per heartbeat run, within the
interruption budget. Over budget or in quiet hours it goes into the next brief instead, unless
the fact is P0."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.autonomy.heartbeat import AttentionReport
from genworker.autonomy.inbox import FileInboxStore, InboxItem, new_item
from genworker.channels.outbound import RetryPolicy
from genworker.runtime.composition import Runtime
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, scripted_env
from genworker.testing.live_server import LiveServer
from genworker.testing.vendors import Vendor

POST = "/chat.postMessage"
ALERT = "Disk on db1 is 95% full; backups will fail tonight."
ATTENTION = json.dumps({"attention": True, "message": ALERT})


def persona(policy: str = "") -> str:
    return (
        "---\nidentity: {name: Alice, worker_id: alice, reports_to: Dana Lee}\nmode: personal\n"
        "channels:\n  - {type: slack, chat_ids: [C-OPS]}\n"
        "contacts:\n  - person_id: dana\n    name: Dana Lee\n"
        "    identities: [{channel: feishu, handle: ou_dana}, {channel: slack, handle: U-DANA}]\n"
        f"{policy}---\nYou are alice.\n"
    )


@dataclass
class Setup:
    workspace: Path
    runtime: Runtime
    vendor: Vendor
    http: httpx.Client

    def sense(self, **payload: Any) -> InboxItem:
        """A fact written the way a sensor in another process writes it."""
        item = new_item("acme", "alice", "webhook", "hooks", "webhook.fact", {"title": "db1 disk", **payload})

        async def write() -> None:
            assert await FileInboxStore(self.workspace).write(item)

        asyncio.run(write())
        return item

    def heartbeat(self) -> dict[str, Any]:
        response = self.http.post("/api/v1/workers/alice/heartbeat/run")
        assert response.status_code == 200, response.text
        return dict(response.json()["report"])

    def owner_messages(self) -> list[str]:
        return [r.body["text"] for r in self.vendor.calls(POST) if r.body["channel"] == "U-DANA"]


@pytest.fixture
def setup(
    tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer
) -> Iterator[Callable[[str], Setup]]:
    opened: list[Callable[[], None]] = []

    def start(policy: str = "") -> Setup:
        workspace = small_workspace(
            {"acme": ["alice"]},
            {
                "tenants/acme/workers/alice/PERSONA.md": persona(policy),
                "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json": json.dumps(
                    {"slack": {"bot_token": "xoxb-test", "signing_secret": "s" * 32}}
                ),
            },
        )
        vendor = Vendor()
        vendor_live = LiveServer(vendor.app()).__enter__()
        opened.append(lambda: vendor_live.__exit__(None, None, None))
        (tmp_path / "configs").mkdir(exist_ok=True)
        env = scripted_env(model_server, GENWORKER_SLACK_API_BASE=vendor_live.url, GENWORKER_HEARTBEAT_ENABLED="false")
        app = create_app(load_settings(tmp_path / "configs", env, workspace=workspace))
        live = LiveServer(app).__enter__()
        opened.append(lambda: live.__exit__(None, None, None))
        key = ApiKeyStore(workspace).create("acme")[1]
        http = httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        opened.append(http.close)
        return Setup(workspace, app.state.runtime, vendor, http)

    yield start
    for close in reversed(opened):
        close()


def test_an_attention_report_reaches_the_owner_on_their_channel_once(
    setup: Callable[[str], Setup], model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply(ATTENTION))
    s = setup("")
    item = s.sense()
    report = s.heartbeat()
    summary = report["summary"]
    assert summary["outcome"] == "reported" and summary["delivery"] == "sent: Dana Lee (slack)"
    # feishu is Dana's first identity, but alice has no feishu channel: her next one, slack, is used
    assert s.owner_messages() == [f"**Alice** needs your attention:\n\n{ALERT}"]
    assert [r.body["channel"] for r in s.vendor.calls(POST)] == ["U-DANA"]
    budget = s.http.get("/api/v1/workers/alice/briefs/pending").json()
    assert budget["interruption_budget"]["used"] == 1 and budget["items"] == []

    # the same heartbeat run told again (a retry of the notice): nothing is sent, nothing counted twice
    runtime, worker = s.runtime, s.runtime.registry.worker("acme", "alice")
    assert worker
    again = asyncio.run(
        runtime.services.heartbeat.runner.notify_owner(
            worker, AttentionReport(ALERT, summary["run_id"], (item.item_id,))
        )
    )
    assert again == "sent: Dana Lee (slack)"
    assert len(s.owner_messages()) == 1
    assert s.http.get("/api/v1/workers/alice/briefs/pending").json()["interruption_budget"]["used"] == 1


def test_over_budget_the_report_goes_into_the_brief_instead(
    setup: Callable[[str], Setup], model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply(ATTENTION))
    s = setup("policy: {interruption_budget_per_day: 0}\n")
    s.sense()
    report = s.heartbeat()
    assert report["summary"]["delivery"] == "briefed: budget_exhausted"
    assert s.vendor.calls(POST) == []
    [held] = s.http.get("/api/v1/workers/alice/briefs/pending").json()["items"]
    assert held["title"] == f"Needs attention (heartbeat): {ALERT}" and held["reason"] == "budget_exhausted"
    assert held["ref"] == report["summary"]["run_id"]
    brief = s.http.post("/api/v1/workers/alice/briefs/generate").json()["brief"]
    assert ALERT in brief["text"] and brief["delivered"] is True
    [sent] = s.vendor.calls(POST)  # the brief, on the worker's default chat: the report is in it
    assert sent.body["channel"] == "C-OPS" and ALERT in sent.body["text"]
    assert s.owner_messages() == []


def test_in_quiet_hours_only_a_p0_fact_interrupts(
    setup: Callable[[str], Setup], model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply(ATTENTION), Reply(ATTENTION))
    s = setup('policy: {quiet_hours: {windows: ["00:00-12:00", "12:00-00:00"], timezone: UTC}}\n')
    s.sense()
    assert s.heartbeat()["summary"]["delivery"] == "briefed: quiet_hours"
    assert s.vendor.calls(POST) == []
    s.sense(title="db1 down", priority="P0")
    assert s.heartbeat()["summary"]["delivery"] == "sent: Dana Lee (slack)"
    assert len(s.owner_messages()) == 1


def test_when_no_channel_takes_the_report_it_goes_into_the_brief_and_is_not_re_sent(
    setup: Callable[[str], Setup], model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply(ATTENTION))
    s = setup("")
    s.runtime.services.delivery.http.policy = RetryPolicy(base_delay=0.001, max_delay=0.002)
    s.vendor.down[POST] = 503
    s.sense()
    report = s.heartbeat()
    assert report["summary"]["delivery"] == "briefed: delivery_failed"
    tried = [r.body["channel"] for r in s.vendor.calls(POST)]
    assert tried == ["U-DANA"] * 4 + ["C-OPS"] * 4  # the owner's DM, then the default chat
    [held] = s.http.get("/api/v1/workers/alice/briefs/pending").json()["items"]
    assert held["reason"] == "delivery_failed" and "HTTP 503" in held["detail"]
    [entry] = asyncio.run(s.runtime.services.outbox.entries("acme", "alice"))
    assert entry.state == "failed" and entry.next_at is None  # nothing left to re-send
