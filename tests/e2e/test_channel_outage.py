"""A vendor outage delays IM answers; it never loses them.

The real server (uvicorn, LiteLLM to the scripted model, the real outbound `ChannelDelivery`)
answers a Slack DM signed by slack_sdk; the stand-in Slack API answers 503 for ten minutes, then
200. The processor's clock is a manual one the test moves to each scheduled attempt, so ten
minutes pass without waiting for them; the vendor's own in-send retries are made fast.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx2 as httpx
import pytest
from fastapi import FastAPI
from slack_sdk.signature import SignatureVerifier

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.channels.ingest.journal import EventJournal
from genworker.channels.ingest.processor import ChannelProcessor
from genworker.channels.outbound import RetryPolicy
from genworker.cli import main
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, scripted_env
from genworker.testing.channels import Handled
from genworker.testing.credentials import SLACK_SIGNING_SECRET
from genworker.testing.live_server import LiveServer
from genworker.testing.vendors import Vendor

PERSONA = "---\nidentity: {name: Alice, worker_id: alice}\nchannels:\n  - {type: slack}\n---\nYou are alice.\n"
POST = "/chat.postMessage"


class ManualClock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class Setup:
    def __init__(self, app: FastAPI, live: LiveServer, workspace: Path, vendor: Vendor, key: str) -> None:
        self.live, self.workspace, self.vendor = live, workspace, vendor
        runtime = app.state.runtime
        self.processor: ChannelProcessor = runtime.services.channels.processor
        self.clock = ManualClock()
        self.processor.clock = self.clock
        runtime.services.delivery.http.policy = RetryPolicy(base_delay=0.001, max_delay=0.002)  # in-send retries
        self.handled = Handled()
        self.processor.listeners.append(self.handled)
        self.client = httpx.Client(base_url=live.url, timeout=30, headers={"Authorization": f"Bearer {key}"})

    def dm(self, text: str, ts: str) -> None:
        event = {"type": "message", "user": "U_PEER", "text": text, "channel": "D1", "channel_type": "im", "ts": ts}
        body = json.dumps({"type": "event_callback", "event_id": f"Ev{ts}", "event": event}).encode()
        stamp = str(int(time.time()))
        signature = SignatureVerifier(SLACK_SIGNING_SECRET).generate_signature(timestamp=stamp, body=body)
        headers = {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": signature}
        response = self.client.post("/api/v1/channel/acme~alice~slack/webhook", content=body, headers=headers)
        assert response.status_code == 200, response.text

    def entry_due(self) -> float:
        journal = EventJournal(self.workspace)
        [path] = journal.pending()
        delivery = journal.read(path).delivery
        assert delivery is not None
        return delivery.next_at

    def move_clock(self, to: float) -> None:
        self.clock.now = to
        self.processor.due.wake()

    def undelivered_gauge(self) -> dict[str, float]:
        page = self.client.get("/metrics").text
        found = {}
        for line in page.splitlines():
            if line.startswith("genworker_channel_replies_undelivered{") and 'platform="slack"' in line:
                found[line.split('state="')[1].split('"')[0]] = float(line.rsplit(" ", 1)[1])
        return found


@pytest.fixture
def setup(tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer) -> Iterator[Setup]:
    workspace = small_workspace(
        {"acme": ["alice"]},
        {
            "tenants/acme/workers/alice/PERSONA.md": PERSONA,
            "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json": json.dumps(
                {"slack": {"bot_token": "xoxb-test", "signing_secret": SLACK_SIGNING_SECRET}}
            ),
        },
    )
    key = ApiKeyStore(workspace).create("acme")[1]
    vendor = Vendor()
    (tmp_path / "configs").mkdir()
    with LiveServer(vendor.app()) as vendor_live:
        env = scripted_env(model_server, GENWORKER_SLACK_API_BASE=vendor_live.url)
        app = create_app(load_settings(tmp_path / "configs", env, workspace=workspace))
        with LiveServer(app) as live:
            ready = Setup(app, live, workspace, vendor, key)
            yield ready
            ready.client.close()


def test_a_ten_minute_vendor_outage_delays_the_answer_and_it_arrives_once(
    setup: Setup, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("Standup moved to 10:30."))
    setup.vendor.down[POST] = 503
    outage_ends = setup.clock.now + 600
    setup.dm("when is standup?", "1700000300.000100")
    event = "D1:1700000300.000100"
    setup.handled.wait_count(event, "undelivered", 1)
    assert setup.undelivered_gauge() == {"retrying": 1.0, "given_up": 0.0}
    failures = 1
    while (due := setup.entry_due()) < outage_ends:  # every scheduled attempt during the outage fails
        setup.move_clock(due)
        failures += 1
        setup.handled.wait_count(event, "undelivered", failures)
    assert failures >= 5  # 0 s, 30 s, 1.5 min, 3.5 min, 7.5 min: the next one, at 15.5 min, is after it
    setup.vendor.down.clear()  # the vendor is back
    setup.move_clock(due)
    setup.handled.wait_count(event, "replied", 1)
    answered = [r for r in setup.vendor.calls(POST) if r.body["text"] == "Standup moved to 10:30."]
    assert len(answered) == failures * 4 + 1  # four HTTP tries per failed attempt, then one that was taken
    assert EventJournal(setup.workspace).pending() == []
    assert setup.undelivered_gauge() == {"retrying": 0.0, "given_up": 0.0}
    assert setup.client.get("/api/v1/workers/alice/channel-replies").json()["undelivered"] == []
    setup.move_clock(due + 86_400)  # nothing is left to send, however late it gets
    assert len(setup.vendor.calls(POST)) == len(answered)


def cli(capsys: pytest.CaptureFixture[str], setup: Setup, *args: str) -> str:
    capsys.readouterr()
    auth = setup.client.headers["Authorization"].removeprefix("Bearer ")
    code = main(["replies", args[0], "alice", *args[1:], "--url", setup.live.url, "--api-key", auth])
    out = capsys.readouterr().out
    assert code == 0, out
    return out


def test_an_answer_given_up_on_is_kept_listed_and_re_sent_by_a_person(
    setup: Setup, model_server: ScriptedModelServer, capsys: pytest.CaptureFixture[str]
) -> None:
    model_server.expect(Reply("The invoice was paid on Monday."))
    setup.vendor.down[POST] = 502
    setup.dm("was the invoice paid?", "1700000400.000100")
    event = "D1:1700000400.000100"
    setup.handled.wait_count(event, "undelivered", 1)
    setup.move_clock(setup.clock.now + setup.processor.policy.horizon_s)  # days later, still down
    setup.handled.wait_count(event, "given_up", 1)
    assert setup.undelivered_gauge() == {"retrying": 0.0, "given_up": 1.0}
    [owed] = setup.client.get("/api/v1/workers/alice/channel-replies").json()["undelivered"]
    assert (owed["state"], owed["answer"], owed["event_id"]) == ("given_up", "The invoice was paid on Monday.", event)
    assert "HTTP 502" in owed["last_error"]
    dead = setup.workspace / "tenants/acme/workers/alice/runtime/channels/journal/dead"
    assert "undelivered since" in (dead / f"{owed['id']}.reason.txt").read_text(encoding="utf-8")

    failed = setup.client.post(f"/api/v1/workers/alice/channel-replies/{owed['id']}/resend").json()
    assert failed == {"id": owed["id"], "outcome": "undelivered", "delivered": False}  # still down: retrying again
    listed = cli(capsys, setup, "list")
    assert owed["id"] in listed and "retrying" in listed and "HTTP 502" in listed
    setup.vendor.down.clear()
    assert cli(capsys, setup, "resend", owed["id"]) == f"{owed['id']}: delivered\n"  # `genworker replies resend`
    taken = [r for r in setup.vendor.calls(POST) if r.body["text"] == "The invoice was paid on Monday."]
    assert len(taken) == 4 * 3 + 1  # the first attempt, the one at the horizon, the first re-send; then taken
    assert setup.client.get("/api/v1/workers/alice/channel-replies").json()["undelivered"] == []
    assert setup.undelivered_gauge() == {"retrying": 0.0, "given_up": 0.0}
    missing = setup.client.post("/api/v1/workers/alice/channel-replies/00000000000000000001-deadbeef/resend")
    assert missing.status_code == 404
