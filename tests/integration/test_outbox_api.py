"""The outbox over HTTP: a worker's undelivered messages listed, and a person's re-send of a given-up
or outcome-unknown one, on the real app and runtime. The message comes from a real send_message tool
call (LiteLLM to the scripted model); the Slack API is a local stand-in that refuses (403) or holds its
answer until the test lets it go, so a second re-send can arrive while the first is on the wire.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.api.routes.outbox import UndeliveredState
from genworker.auth import ApiKeyStore
from genworker.delivery.outbox import UNDELIVERED, Outbox, OutboxEntry, OutboxMessage, Recipient
from genworker.delivery.redelivery import RedeliveryPolicy
from genworker.runtime.composition import Runtime
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, ToolCallReply, scripted_env
from genworker.testing.live_server import LiveServer
from genworker.testing.vendors import vendor_answer

POST = "/chat.postMessage"
PERSONA = """---
identity: {name: Alice, worker_id: alice}
channels:
  - {type: slack, chat_ids: [C-OPS]}
contacts:
  - person_id: dana
    name: Dana Lee
    identities: [{channel: slack, handle: U-DANA}]
---
You are alice.
"""
CREDENTIALS = {"slack": {"bot_token": "xoxb-test", "signing_secret": "s" * 32}}


@dataclass
class Slack:
    """chat.postMessage of the Slack API: refuses with 403 while `refusing`; else, while `held` is
    clear, holds each answer until it is set."""

    refusing: bool = True
    held: threading.Event = field(default_factory=threading.Event)
    texts: list[str] = field(default_factory=list)
    arrived: threading.Condition = field(default_factory=threading.Condition)

    def __post_init__(self) -> None:
        self.held.set()

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post(POST)
        async def post(request: Request) -> JSONResponse:
            body = json.loads(await request.body())
            with self.arrived:
                self.texts.append(body["text"])
                self.arrived.notify_all()
            if self.refusing:
                return JSONResponse({"ok": False, "error": "not_allowed_token_type"}, 403)
            await asyncio.to_thread(self.held.wait, 30)
            return JSONResponse(vendor_answer("POST", POST, len(self.texts)))

        return app

    def wait_for(self, count: int) -> None:
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.texts) >= count, 30), self.texts


class Announced:
    """Every entry the outbox announces (its events, in order), passed on to the real announcer."""

    def __init__(self, outbox: Outbox) -> None:
        self.entries: list[OutboxEntry] = []
        self.inner = outbox.announce
        outbox.announce = self

    async def __call__(self, entry: OutboxEntry) -> None:
        self.entries.append(entry)
        if self.inner is not None:
            await self.inner(entry)


@dataclass
class Setup:
    client: TestClient
    runtime: Runtime
    slack: Slack
    workspace: Path
    key_id: str

    @property
    def outbox(self) -> Outbox:
        return self.runtime.services.outbox


@pytest.fixture
def setup(tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer) -> Iterator[Setup]:
    workspace = small_workspace(
        {"acme": ["alice", "bob"], "globex": ["gina"]},
        {
            "tenants/acme/workers/alice/PERSONA.md": PERSONA,
            "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json": json.dumps(CREDENTIALS),
        },
    )
    key_id, key = ApiKeyStore(workspace).create("acme")
    slack = Slack()
    (tmp_path / "configs").mkdir()
    with LiveServer(slack.app()) as vendor:
        env = scripted_env(model_server, GENWORKER_SLACK_API_BASE=vendor.url)
        app = create_app(load_settings(tmp_path / "configs", env, workspace=workspace))
        with TestClient(app, headers={"Authorization": f"Bearer {key}"}) as client:
            yield Setup(client, app.state.runtime, slack, workspace, key_id)


def given_up_message(s: Setup, model_server: ScriptedModelServer) -> dict[str, Any]:
    """Alice's send_message to Dana, refused by Slack and (with no retry horizon) given up at once."""
    s.outbox.policy = RedeliveryPolicy(horizon_s=0)
    call = ToolCallReply("send_message", {"to": "dana", "text": "The deploy is done."}, "c1")
    model_server.expect(Reply(tool_calls=(call,)), Reply("Could not tell Dana yet."))
    with s.client.stream("POST", "/api/v1/chat/stream", json={"worker_id": "alice", "message": "Tell Dana."}) as r:
        assert r.status_code == 200
        events = [json.loads(line[5:]) for line in r.iter_lines() if line.startswith("data:")]
    assert events[-1]["type"] == "RUN_FINISHED"
    listed = s.client.get("/api/v1/workers/alice/outbox")
    assert listed.status_code == 200, listed.text
    [entry] = listed.json()["entries"]
    return dict(entry)


def test_a_given_up_message_is_listed_and_a_person_sends_it_again(
    setup: Setup, model_server: ScriptedModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    s = setup
    announced = Announced(s.outbox)
    entry = given_up_message(s, model_server)
    assert (entry["state"], entry["to"], entry["text"]) == ("given_up", ["Dana Lee (slack)"], "The deploy is done.")
    assert entry["origin"]["tool"] == "send_message" and entry["attempts"] == 1
    assert "not_allowed_token_type" in entry["last_error"]
    body = s.client.get("/api/v1/workers/alice/outbox").json()
    assert body["counts"] == {"given_up": 1, "outcome_unknown": 0, "retrying": 0, "sending": 0}
    filtered = s.client.get("/api/v1/workers/alice/outbox?state=retrying").json()
    assert filtered["entries"] == [] and filtered["counts"] == body["counts"]

    # still refused: the re-send is answered with the entry as it settled (given up again: no horizon)
    path = f"/api/v1/workers/alice/outbox/{entry['id']}/resend"
    with caplog.at_level(logging.INFO, logger="genworker.channels"):
        again = s.client.post(path)
    assert again.status_code == 200, again.text
    assert again.json()["delivered"] is False
    assert (again.json()["entry"]["state"], again.json()["entry"]["resent_by"]) == ("given_up", f"key:{s.key_id}")
    [decision] = [r for r in caplog.records if getattr(r, "decision", None) == "outbox_resend"]
    assert (decision.outcome, decision.by, decision.outbox_id) == ("given_up", f"key:{s.key_id}", entry["id"])  # type: ignore[attr-defined]

    # Slack takes it, slowly: a second re-send meanwhile, from this server or another process, is refused
    s.outbox.policy = RedeliveryPolicy()
    s.slack.refusing = False
    s.slack.held.clear()
    first: dict[str, Any] = {}
    sender = threading.Thread(target=lambda: first.update(response=s.client.post(path)))
    sender.start()
    try:
        s.slack.wait_for(3)  # the first attempt, the refused re-send, and this one, on the wire
        second = s.client.post(path)
        refused = f"outbox entry {entry['id']} is sending: only given_up or outcome_unknown is re-sent"
        assert second.status_code == 409, second.text
        assert second.json()["error"] == {"code": "not_resendable", "message": refused}
        assert resend_in_another_process(s.workspace, entry["id"]) == f"ValueError: {refused}"
    finally:
        s.slack.held.set()
        sender.join(30)
    response = first["response"]
    assert response.status_code == 200, response.text
    sent = response.json()
    assert sent["delivered"] is True and sent["entry"]["state"] == "sent"
    assert sent["entry"]["delivered_to"] == "Dana Lee (slack)" and sent["entry"]["resent_by"] == f"key:{s.key_id}"
    assert s.slack.texts == ["The deploy is done."] * 3  # nothing sent twice by the refused re-sends

    done = s.client.post(path)
    assert done.status_code == 409 and f"{entry['id']} is sent" in done.json()["error"]["message"]
    assert s.client.get("/api/v1/workers/alice/outbox").json()["entries"] == []
    assert s.client.get("/api/v1/workers/alice/dashboard").json()["blocks"]["outbox"]["data"] == {"entries": []}
    states = [(e.state, e.resent_by) for e in announced.entries]
    by = f"key:{s.key_id}"
    assert states == [("given_up", None), ("sending", by), ("given_up", by), ("sending", by), ("sent", by)]
    stored = json.loads(s.outbox._path("acme", "alice", entry["id"]).read_text(encoding="utf-8"))
    assert (stored["schema_version"], stored["state"], stored["resent_by"]) == (2, "sent", by)


def resend_in_another_process(workspace: Path, entry_id: str) -> str:
    """What Outbox.resend says in a separate process on the same workspace (it sends nothing)."""
    code = f"""
import asyncio
from pathlib import Path
from genworker.delivery.outbox import Outbox

async def never(*args):
    raise AssertionError("sent from the other process")

try:
    asyncio.run(Outbox(Path({str(workspace)!r}), never, owner="other").resend("acme", "alice", {entry_id!r}))
except ValueError as exc:
    print(f"ValueError: {{exc}}")
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, encoding="utf-8", timeout=60, check=True
    )
    return done.stdout.strip()


def test_an_outcome_unknown_message_is_resent_and_errors_name_the_entry(setup: Setup) -> None:
    s = setup
    s.slack.refusing = False
    # what a process that died mid-send leaves once recovered (tests/integration/test_outbox.py has the recovery)
    cut = OutboxEntry("ob_" + "c" * 24, "tool:run_9:c1", "acme", "alice",
                      (Recipient("slack", "U-DANA", label="Dana Lee (slack)"),),
                      OutboxMessage("Maybe sent. token=abcd1234secret"), {"run_id": "run_9"},
                      state="outcome_unknown", created_at=1_700_000_000.0)  # fmt: skip
    s.outbox._write(cut)
    path = s.outbox._path("acme", "alice", cut.entry_id)
    written = json.loads(path.read_text(encoding="utf-8"))
    del written["resent_by"], written["resent_at"]
    path.write_text(json.dumps({**written, "schema_version": 1}), encoding="utf-8")  # as an earlier build wrote it
    [listed] = s.client.get("/api/v1/workers/alice/outbox?state=outcome_unknown").json()["entries"]
    assert listed["id"] == cut.entry_id and listed["text"] == "Maybe sent. token=***"  # masked as in logs
    block = s.client.get("/api/v1/workers/alice/dashboard").json()["blocks"]["outbox"]
    assert block["status"] == "ok" and block["data"]["entries"] == [{**listed, "resendable": True}]
    resent = s.client.post(f"/api/v1/workers/alice/outbox/{cut.entry_id}/resend")
    assert resent.status_code == 200 and resent.json()["delivered"] is True, resent.text
    assert s.slack.texts == ["Maybe sent. token=abcd1234secret"]  # the message itself is sent as written
    assert json.loads(path.read_text(encoding="utf-8"))["schema_version"] == 2

    unknown = s.client.post("/api/v1/workers/alice/outbox/ob_000000000000000000000000/resend")
    assert unknown.status_code == 404 and unknown.json()["error"] == {
        "code": "outbox_entry_not_found",
        "message": "worker 'alice' has no outbox entry 'ob_000000000000000000000000'",
    }
    # bob has no such entry: another worker's id is unknown here
    assert s.client.post(f"/api/v1/workers/bob/outbox/{cut.entry_id}/resend").status_code == 404
    bad = s.client.get("/api/v1/workers/alice/outbox?state=sent")
    assert bad.status_code == 422 and bad.json()["error"]["fields"][0]["loc"] == ["query", "state"]


def test_only_the_keys_tenant_and_workers_are_reachable(setup: Setup) -> None:
    s = setup
    keys = ApiKeyStore(s.workspace)
    for key in (keys.create("globex")[1], keys.create("acme", workers=["bob"])[1]):
        auth = {"Authorization": f"Bearer {key}"}
        listed = s.client.get("/api/v1/workers/alice/outbox", headers=auth)
        assert listed.status_code == 404 and listed.json()["error"]["code"] == "worker_not_found"
        resent = s.client.post(f"/api/v1/workers/alice/outbox/ob_{'c' * 24}/resend", headers=auth)
        assert resent.status_code == 404 and resent.json()["error"]["code"] == "worker_not_found"
    assert s.client.get("/api/v1/workers/alice/outbox", headers={"Authorization": ""}).status_code == 401


def test_the_state_filter_names_every_undelivered_state() -> None:
    assert set(get_args(UndeliveredState)) == UNDELIVERED
