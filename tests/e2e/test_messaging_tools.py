"""The messaging tools over real HTTP: uvicorn, LiteLLM to the scripted model calling send_message,
send_email, email_list_folders and email_search, against local vendor stand-ins (the Slack API,
an SMTP server with AUTH, a pymap IMAP server).

A message reaches the contact's preferred channel once per tool call; a vendor outage makes the
call fail visibly on the run while the outbox re-sends it once the vendor is back; a worker whose
policy asks for approval of sends gets a confirmation and the approved call sends exactly once;
a duty run the Policy Gate lets through on condition of the undo window holds the send until the
window ends, and an undo means it never leaves."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.channels.outbound import RetryPolicy
from genworker.delivery.outbox import Outbox, OutboxEntry
from genworker.runtime.composition import Runtime
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, ToolCallReply, scripted_env
from genworker.testing.live_server import LiveServer
from genworker.testing.mail import SMTP_WARNINGS, ImapServer, SmtpServer
from genworker.testing.vendors import Vendor

pytest.importorskip("pymap", reason="pymap (a pure-Python IMAP server) is a dev dependency")
pytest.importorskip("aiosmtpd", reason="aiosmtpd (an SMTP server) is a dev dependency")

pytestmark = [pytest.mark.filterwarnings(w) for w in SMTP_WARNINGS]

USER, PASSWORD = "alice@acme.example", "imap-s3cret-pw"
POST = "/chat.postMessage"
CONTACTS = """contacts:
  - person_id: dana
    name: Dana Lee
    aliases: [boss]
    identities:
      - {channel: slack, handle: U-DANA}
      - {channel: email, handle: dana@acme.example}
  - person_id: eve
    name: Eve
    identities: [{channel: email, handle: eve@partner.example}]
"""
DUTY = "---\nduty_id: notify\ntitle: Tell Dana\ntriggers: [{id: m, type: manual}]\n---\nTell Dana the deploy is done.\n"
EVIDENCE = {
    "confidence": 0.97,
    "evidence_sources": ["ci", "pagerduty"],
    "requested_actions": ["internal_status_transition"],
    "requested_effects": ["external"],
}


def persona(extra: str = "") -> str:
    return (
        "---\nidentity: {name: Alice, worker_id: alice, reports_to: dana}\nmode: personal\n"
        "channels:\n  - {type: slack, chat_ids: [C-OPS]}\n"
        "  - {type: email, chat_ids: [alice@acme.example], features: {imap_security: plain, smtp_security: plain}}\n"
        f"{CONTACTS}{extra}---\nYou are alice.\n"
    )


@pytest.fixture(scope="module")
def imap() -> Iterator[ImapServer]:
    with ImapServer(USER, PASSWORD) as server:
        server.create("Support")
        server.deliver("Invoice 42 overdue", "Globex Billing <billing@globex.example>", mailbox="Support",
                       body="Please pay invoice 42 by Friday.")  # fmt: skip
        server.deliver("Lunch?", "Bob <bob@partner.example>", body="Lunch on Thursday?")
        yield server


@dataclass
class Setup:
    server: LiveServer
    runtime: Runtime
    vendor: Vendor
    smtp: SmtpServer
    http: httpx.Client

    def chat(self, message: str) -> list[dict[str, Any]]:
        body = {"worker_id": "alice", "message": message}
        with self.http.stream("POST", "/api/v1/chat/stream", json=body) as r:
            assert r.status_code == 200, r.read()
            return [json.loads(line[5:]) for line in r.iter_lines() if line.startswith("data:")]

    def run_of(self, events: list[dict[str, Any]]) -> dict[str, Any]:
        thread_id = events[0]["threadId"]
        [task] = self.http.get(f"/api/v1/chat/{thread_id}/tasks").json()["tasks"]
        response = self.http.get(f"/api/v1/workers/alice/runs/{task['run_id']}")
        assert response.status_code == 200, response.text
        return dict(response.json())


@pytest.fixture
def setup(
    tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer, imap: ImapServer
) -> Iterator[Callable[..., Setup]]:
    opened: list[Callable[[], None]] = []

    def start(extra: str = "", policy: dict[str, Any] | None = None) -> Setup:
        smtp = SmtpServer(USER, PASSWORD).__enter__()
        opened.append(lambda: smtp.__exit__(None, None, None))
        creds = {
            "slack": {"bot_token": "xoxb-test", "signing_secret": "s" * 32},
            "email": {
                "worker_address": USER,
                "worker_password": PASSWORD,
                "worker_imap_host": "127.0.0.1",
                "worker_imap_port": imap.port,
                "worker_smtp_host": "127.0.0.1",
                "worker_smtp_port": smtp.port,
            },
        }
        tenant = {"tenant_id": "acme", "trust_level": 2, "default_worker": "alice", "policy": policy or {}}
        workspace = small_workspace(
            {"acme": ["alice"]},
            {
                "tenants/acme/TENANT.json": json.dumps(tenant),
                "tenants/acme/workers/alice/PERSONA.md": persona(extra),
                "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json": json.dumps(creds),
                "tenants/acme/workers/alice/duties/notify.md": DUTY,
            },
        )
        vendor = Vendor()
        vendor_live = LiveServer(vendor.app()).__enter__()
        opened.append(lambda: vendor_live.__exit__(None, None, None))
        (tmp_path / "configs").mkdir(exist_ok=True)
        env = scripted_env(model_server, GENWORKER_SLACK_API_BASE=vendor_live.url)
        app = create_app(load_settings(tmp_path / "configs", env, workspace=workspace))
        live = LiveServer(app).__enter__()
        opened.append(lambda: live.__exit__(None, None, None))
        key = ApiKeyStore(workspace).create("acme")[1]
        http = httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        opened.append(http.close)
        return Setup(live, app.state.runtime, vendor, smtp, http)

    yield start
    for close in reversed(opened):
        close()


def call(name: str, call_id: str = "c1", **arguments: Any) -> Reply:
    return Reply(tool_calls=(ToolCallReply(name, arguments, call_id),))


def tool_result(body: dict[str, Any]) -> str:
    return str([m for m in body["messages"] if m.get("role") == "tool"][-1]["content"])


def test_a_message_reaches_the_contact_on_their_preferred_channel_once(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    def sees_it_sent(body: dict[str, Any]) -> None:
        assert tool_result(body).startswith("Sent to Dana Lee (slack)")

    model_server.expect(
        call("send_message", to="boss", text="The *deploy* is done."),
        Reply("Told Dana.", check=sees_it_sent),
        call("send_message", call_id="c2", to="slack:C-OPS", text="Deploy done, channel."),
        Reply("Posted."),
    )
    s = setup()
    events = s.chat("Tell my boss the deploy is done.")
    assert events[-1]["type"] == "RUN_FINISHED"
    [sent] = s.vendor.calls(POST)
    assert (sent.body["channel"], sent.body["text"]) == ("U-DANA", "The *deploy* is done.")
    assert sent.headers["authorization"] == "Bearer xoxb-test"
    run = s.run_of(events)
    assert [(c["name"], c["outcome"]) for c in run["tool_calls"]] == [("send_message", "completed")]
    s.chat("Post it to the ops channel.")
    assert [r.body["channel"] for r in s.vendor.calls(POST)] == ["U-DANA", "C-OPS"]
    assert s.smtp.sent == []


def test_send_email_mails_contacts_and_addresses_from_the_workers_mailbox(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    model_server.expect(
        call(
            "send_email",
            to=["dana", "eve@partner.example"],
            cc=["Eve", "frank@acme.example"],  # Eve is in `to` already: mailed once
            subject="Q1 report",
            body="The Q1 report is attached in spirit.",
        ),
        Reply("Mailed.", check=lambda body: tool_result(body).startswith("Sent to dana@acme.example")),
    )
    s = setup()
    s.chat("Mail the Q1 report to Dana and Eve, copy Frank.")
    [mail] = s.smtp.wait_for(1)
    assert mail.sender == USER and s.smtp.logins == [USER]
    assert sorted(mail.recipients) == ["dana@acme.example", "eve@partner.example", "frank@acme.example"]
    message = mail.message
    assert (message["From"], message["To"], message["Cc"]) == (
        USER,
        "dana@acme.example, eve@partner.example",
        "frank@acme.example",
    )
    assert message["Subject"] == "Q1 report" and message["Auto-Submitted"] == "auto-generated"
    assert message.get_content().strip() == "The Q1 report is attached in spirit."
    assert s.vendor.calls(POST) == []


def test_bad_recipients_come_back_to_the_model_and_nothing_is_sent(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    def names_what_exists(body: dict[str, Any]) -> None:
        result = tool_result(body)
        assert "no contact or bound chat 'mallory'" in result
        assert "contacts: dana, eve" in result and "slack:C-OPS" in result

    model_server.expect(
        call("send_message", to="mallory", text="hi"),
        Reply("Cannot.", check=names_what_exists),
        call("send_email", call_id="c2", to=["not an address"], subject="x", body="y"),
        Reply("Cannot.", check=lambda body: "neither an email address nor a contact" in tool_result(body)),
    )
    s = setup()
    s.chat("Tell Mallory hi.")
    s.chat("Mail them.")
    assert s.vendor.calls(POST) == [] and s.smtp.sent == []


def test_an_outage_fails_the_call_visibly_and_the_message_arrives_once_afterwards(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    def told_to_wait(body: dict[str, Any]) -> None:
        result = tool_result(body)
        assert "not delivered yet" in result and "sent again automatically" in result
        assert "do not send it again" in result

    model_server.expect(
        call("send_message", to="dana", text="Deploy done.", platform="slack"), Reply("Later.", check=told_to_wait)
    )
    s = setup()
    outbox, replier = s.runtime.services.outbox, s.runtime.services.delivery
    assert outbox is not None and replier is not None
    now = [time.time()]
    outbox.due.clock = lambda: now[0]
    replier.http.policy = RetryPolicy(base_delay=0.001, max_delay=0.002)  # the in-send retries, fast
    states = Announced(outbox)
    s.vendor.down[POST] = 503
    events = s.chat("Tell Dana the deploy is done.")
    run = s.run_of(events)
    assert [(c["name"], c["outcome"]) for c in run["tool_calls"]] == [("send_message", "failed")]
    [entry] = asyncio.run(outbox.undelivered("acme", "alice"))
    assert entry.state == "retrying" and entry.origin["run_id"] == run["run_id"] and "HTTP 503" in str(entry.last_error)
    tried = len(s.vendor.calls(POST))
    s.vendor.down.clear()
    now[0] += 31  # the first re-send is due after 30 s
    outbox.due.wake()
    states.wait("sent")
    assert [r.body["text"] for r in s.vendor.calls(POST)] == ["Deploy done."] * (tried + 1)
    assert asyncio.run(outbox.undelivered("acme", "alice")) == []
    now[0] += 86_400
    outbox.due.wake()
    assert len(s.vendor.calls(POST)) == tried + 1 and s.smtp.sent == []


def test_when_the_preferred_channel_is_down_the_contacts_next_one_takes_the_message(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    model_server.expect(
        call("send_message", to="dana", text="Deploy done."),
        Reply("Mailed instead.", check=lambda body: tool_result(body).startswith("Sent to Dana Lee (email)")),
    )
    s = setup()
    s.runtime.services.delivery.http.policy = RetryPolicy(base_delay=0.001, max_delay=0.002)
    s.vendor.down[POST] = 503
    s.chat("Tell Dana the deploy is done.")
    [mail] = s.smtp.wait_for(1)
    assert mail.recipients == ("dana@acme.example",) and mail.message.get_content().strip() == "Deploy done."
    assert len(s.vendor.calls(POST)) == 4  # slack was tried first


class Announced:
    """The states the outbox settles entries in, for the test thread to wait on."""

    def __init__(self, outbox: Outbox) -> None:
        self.states: list[str] = []
        self.changed = threading.Condition()
        self.inner = outbox.announce
        outbox.announce = self

    async def __call__(self, entry: OutboxEntry) -> None:
        with self.changed:
            self.states.append(entry.state)
            self.changed.notify_all()
        if self.inner is not None:
            await self.inner(entry)

    def wait(self, state: str) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: state in self.states, 30), self.states


def test_a_worker_whose_sends_need_approval_gets_a_confirmation_and_the_approved_call_sends_once(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    model_server.expect(
        call("send_message", call_id="c-approve", to="dana", text="Quote: 12k EUR."),
        Reply("Sent the quote.", check=lambda body: tool_result(body).startswith("Sent to Dana Lee (slack)")),
    )
    s = setup("tool_effect_overrides: {send_message: {requires_approval: true}}\n")
    events = s.chat("Send Dana the quote.")
    assert any(e["type"] == "CUSTOM" and e["name"] == "approval_required" for e in events)
    [pending] = s.http.get("/api/v1/workers/alice/confirmations?status=pending").json()["confirmations"]
    assert pending["kind"] == "tool" and pending["tool_call"]["name"] == "send_message"
    [notice] = s.vendor.calls(POST)  # a confirmation instead of a send: announced on the default chat
    assert notice.body["channel"] == "C-OPS" and pending["confirmation_id"] in notice.body["text"]
    approved = s.http.post(f"/api/v1/workers/alice/confirmations/{pending['confirmation_id']}/approve")
    assert approved.status_code == 200 and approved.json()["output"] == "Sent the quote."
    [sent] = [r.body for r in s.vendor.calls(POST) if r.body["channel"] == "U-DANA"]
    assert sent["text"] == "Quote: 12k EUR."
    again = s.http.post(f"/api/v1/workers/alice/confirmations/{pending['confirmation_id']}/approve")
    assert again.status_code == 409 and len(s.vendor.calls(POST)) == 2


def test_an_autonomous_send_without_a_mandate_for_it_becomes_a_confirmation(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    s = setup()  # high_risk_auto_enabled is off: external effects of a duty run need a person
    fired = s.http.post("/api/v1/workers/alice/duties/notify/run", json={"evidence": EVIDENCE}).json()
    assert fired["run"]["state"] == "waiting_approval"
    [pending] = s.http.get("/api/v1/workers/alice/confirmations?status=pending").json()["confirmations"]
    assert "high_risk_auto_enabled" in " ".join(pending["reasons"])
    assert model_server.requests == []
    assert [r.body["channel"] for r in s.vendor.calls(POST)] == ["C-OPS"]  # the confirmation's notice only


def test_the_undo_window_holds_a_send_and_an_undo_means_it_never_leaves(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    model_server.expect(call("send_message", to="dana", text="Deploy done."), Reply("Scheduled."))
    s = setup(policy={"high_risk_auto_enabled": True, "undo_window_seconds": 3600})
    fired = s.http.post("/api/v1/workers/alice/duties/notify/run", json={"evidence": EVIDENCE}).json()
    assert fired["run"]["state"] == "completed"
    [held] = s.http.get("/api/v1/workers/alice/deferred-actions?state=pending").json()["deferred_actions"]
    assert held["tool"] == "send_message" and s.vendor.calls(POST) == []
    undone = s.http.post(f"/api/v1/workers/alice/deferred-actions/{held['undo_id']}/undo")
    assert undone.status_code == 200 and undone.json()["state"] == "undone"
    assert s.vendor.calls(POST) == []
    assert asyncio.run(s.runtime.services.outbox.entries("acme", "alice")) == []  # type: ignore[union-attr]


def test_a_held_send_leaves_once_when_its_window_ends(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    model_server.expect(call("send_message", to="dana", text="Deploy done."), Reply("Scheduled."))
    s = setup(policy={"high_risk_auto_enabled": True, "undo_window_seconds": 1})
    fired = s.http.post("/api/v1/workers/alice/duties/notify/run", json={"evidence": EVIDENCE}).json()
    [sent] = s.vendor.wait_for(POST, 1)
    assert (sent.body["channel"], sent.body["text"]) == ("U-DANA", "Deploy done.")
    [entry] = asyncio.run(s.runtime.services.outbox.entries("acme", "alice"))  # type: ignore[union-attr]
    assert entry.key == f"tool:{fired['run']['run_id']}:c1" and entry.origin["caller"] == "system"
    [done] = s.http.get("/api/v1/workers/alice/deferred-actions").json()["deferred_actions"]
    assert done["state"] in ("executing", "executed")
    assert len(s.vendor.calls(POST)) == 1


def test_email_tools_list_the_folders_and_find_mail(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    def sees_folders(body: dict[str, Any]) -> None:
        names = tool_result(body).splitlines()
        assert names[0] == "INBOX" and "Support" in names

    def finds_the_invoice(body: dict[str, Any]) -> None:
        result = tool_result(body)
        assert "Globex Billing <billing@globex.example> | Invoice 42 overdue" in result
        assert "Lunch" not in result

    def finds_nothing_in_the_inbox(body: dict[str, Any]) -> None:
        assert tool_result(body) == "no messages in INBOX match"

    def refused_by_the_server(body: dict[str, Any]) -> None:
        assert re.search(r"IMAP 127\.0\.0\.1:\d+: mailbox 'Missing' cannot be opened", tool_result(body))

    model_server.expect(
        call("email_list_folders"),
        Reply("Folders listed.", check=sees_folders),
        call("email_search", call_id="c2", query="invoice 42", folder="Support", since="2020-01-01"),
        Reply("Found it.", check=finds_the_invoice),
        call("email_search", call_id="c3", query="invoice", sender="globex"),
        Reply("Nothing.", check=finds_nothing_in_the_inbox),
        call("email_search", call_id="c4", folder='Sup"port'),
        Reply("Bad.", check=lambda body: "use a name email_list_folders gives" in tool_result(body)),
        call("email_search", call_id="c5", folder="Missing"),
        Reply("No such folder.", check=refused_by_the_server),
    )
    s = setup()
    asks = ("Which folders?", "Find the invoice in Support.", "Any invoice in the inbox?", "Bad folder.", "Missing.")
    for ask in asks:
        assert s.chat(ask)[-1]["type"] == "RUN_FINISHED"
