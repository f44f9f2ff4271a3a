"""Service mode over real HTTP: uvicorn, LiteLLM to the scripted model, the Slack API stand-in.

Anonymous messages reach only a service that allows them, and are rate limited; a full service
answers a new conversation with a polite 429; an idle conversation expires after `session_ttl`;
the knowledge sources are searched into the prompt; a conversation escalates to a person (told
once, on Slack; the bot then passes messages on instead of answering, until the thread is released)
or to another worker, who takes the thread with the conversation so far."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from slack_sdk.signature import SignatureVerifier

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, ToolCallReply, scripted_env
from genworker.testing.channels import Handled
from genworker.testing.live_server import LiveServer
from genworker.testing.vendors import Vendor

POST = "/chat.postMessage"
FAQ = (
    "# Accounts\n\nPassword reset: use the 'Forgot password' link on the sign-in page; the mail comes within "
    "five minutes.\n\n# Billing\n\nInvoices are sent on the first working day of the month.\n"
)
DESK = """mode: service
contacts:
  - person_id: dana
    name: Dana Lee
    identities: [{channel: slack, handle: U-DANA}]
channels:
  - {type: slack, chat_ids: [C-SUPPORT]}
service:
  anonymous_allowed: true
  session_ttl: 1800
  max_concurrent_sessions: 2
  knowledge_sources: [knowledge/]
  escalation:
    enabled: true
    contact: dana
    triggers: [the user asks for a human, a refund over 100 EUR]
"""
HELPDESK = """mode: service
channels:
  - {type: slack}
service:
  anonymous_allowed: true
  max_concurrent_sessions: 1
  busy_message: All our agents are busy. Please write again in a few minutes.
  escalation: {enabled: true, target_worker: billing, triggers: [billing questions]}
"""


def persona(worker_id: str, name: str, front: str = "mode: personal\n") -> str:
    return f"---\nidentity: {{name: {name}, worker_id: {worker_id}}}\n{front}---\nYou are {name}.\n"


@dataclass
class Setup:
    workspace: Path
    url: str
    http: httpx.Client  # with the tenant's API key
    vendor: Vendor
    handled: Handled  # the channel processor's outcomes
    tenant: str = "acme"

    def anonymous(self, worker_id: str, message: str, thread_id: str | None = None) -> httpx.Response:
        body: dict[str, Any] = {"message": message, **({"thread_id": thread_id} if thread_id else {})}
        return httpx.post(f"{self.url}/api/v1/service/{self.tenant}/{worker_id}/chat/stream", json=body, timeout=60)

    def talk(self, worker_id: str, message: str, thread_id: str | None = None) -> list[dict[str, Any]]:
        response = self.anonymous(worker_id, message, thread_id)
        assert response.status_code == 200, response.text
        return events(response.text)

    def slack_dm(self, worker_id: str, text: str, ts: str) -> str:
        """A signed Slack DM to the worker's Slack channel; its event id."""
        event = {"type": "message", "user": "U_PEER", "text": text, "channel": "D1", "channel_type": "im", "ts": ts}
        body = json.dumps({"type": "event_callback", "event_id": f"Ev{ts}", "event": event}).encode()
        at = str(int(time.time()))
        headers = {
            "X-Slack-Request-Timestamp": at,
            "X-Slack-Signature": SignatureVerifier("s" * 32).generate_signature(timestamp=at, body=body),
            "Content-Type": "application/json",
        }
        url = f"{self.url}/api/v1/channel/{self.tenant}~{worker_id}~slack/webhook"
        response = httpx.post(url, content=body, headers=headers, timeout=60)
        assert response.status_code == 200, response.text
        return f"D1:{ts}"

    def run(self, worker_id: str, run_id: str) -> dict[str, Any]:
        response = self.http.get(f"/api/v1/workers/{worker_id}/runs/{run_id}")
        assert response.status_code == 200, response.text
        return dict(response.json())

    def session_file(self, worker_id: str, thread_id: str) -> Path:
        return self.workspace / "tenants" / self.tenant / "sessions" / f"{worker_id}.{thread_id}.json"


def events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


def answer(found: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in found if e["type"] == "TEXT_MESSAGE_CONTENT")


@pytest.fixture
def setup(
    tmp_path: Path, write_tree: Callable[..., Path], model_server: ScriptedModelServer
) -> Iterator[Callable[..., Setup]]:
    opened: list[Callable[[], None]] = []

    def start(tenant: str = "acme", **env: str) -> Setup:
        creds = {"slack": {"bot_token": "xoxb-test", "signing_secret": "s" * 32}}
        t = f"tenants/{tenant}"
        workspace = write_tree(
            {
                f"{t}/TENANT.json": json.dumps({"tenant_id": tenant, "trust_level": 2}),
                f"{t}/workers/desk/PERSONA.md": persona("desk", "Desk", DESK),
                f"{t}/workers/desk/CHANNEL_CREDENTIALS.json": json.dumps(creds),
                f"{t}/workers/desk/knowledge/faq.md": FAQ,
                f"{t}/workers/helpdesk/PERSONA.md": persona("helpdesk", "Helpdesk", HELPDESK),
                f"{t}/workers/helpdesk/CHANNEL_CREDENTIALS.json": json.dumps(creds),
                f"{t}/workers/billing/PERSONA.md": persona("billing", "Bill", "mode: team_member\n"),
                f"{t}/workers/private/PERSONA.md": persona("private", "Private", "mode: service\n"),
                f"{t}/workers/alice/PERSONA.md": persona("alice", "Alice"),
            }
        )
        vendor = Vendor()
        vendor_live = LiveServer(vendor.app()).__enter__()
        opened.append(lambda: vendor_live.__exit__(None, None, None))
        (tmp_path / "configs").mkdir(exist_ok=True)
        settings = scripted_env(model_server, GENWORKER_SLACK_API_BASE=vendor_live.url, **env)
        app = create_app(load_settings(tmp_path / "configs", settings, workspace=workspace))
        live = LiveServer(app).__enter__()
        opened.append(lambda: live.__exit__(None, None, None))
        handled = Handled()
        app.state.runtime.services.channels.processor.listeners.append(handled)
        key = ApiKeyStore(workspace).create(tenant)[1]
        http = httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        opened.append(http.close)
        return Setup(workspace, live.url, http, vendor, handled, tenant)

    yield start
    for close in reversed(opened):
        close()


def escalate(reason: str, summary: str = "") -> Reply:
    return Reply(tool_calls=(ToolCallReply("escalate_conversation", {"reason": reason, "summary": summary}, "c1"),))


def tool_result(body: dict[str, Any]) -> str:
    return str([m for m in body["messages"] if m.get("role") == "tool"][-1]["content"])


def test_anonymous_access_is_refused_unless_the_service_allows_it(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    s = setup()
    for worker in ("private", "alice", "nobody"):  # a service without anonymous_allowed, a personal worker, none
        response = s.anonymous(worker, "Hello?")
        assert response.status_code == 403, response.text
        error = response.json()["error"]
        assert error["code"] == "anonymous_not_allowed" and "service.anonymous_allowed: true" in error["message"]
    bad = s.anonymous("desk", "Hello?", thread_id="someone-elses-thread")
    assert bad.status_code == 422  # only the server's own anon_ threads
    assert model_server.requests == []


def test_anonymous_messages_are_rate_limited(setup: Callable[..., Setup], model_server: ScriptedModelServer) -> None:
    def remembers(body: dict[str, Any]) -> None:
        assert [m["content"] for m in body["messages"] if m["role"] == "user"] == ["Hi", "Still there?"]

    model_server.expect(Reply("Hello!"), Reply("Yes.", check=remembers))
    s = setup(GENWORKER_SERVICE_ANON_PER_MINUTE="2")
    first = s.talk("desk", "Hi")
    thread = first[0]["threadId"]
    assert re.fullmatch(r"anon_[0-9a-f]{32}", thread)
    assert answer(s.talk("desk", "Still there?", thread)) == "Yes."
    refused = s.anonymous("desk", "And now?", thread)
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited"
    assert int(refused.headers["Retry-After"]) >= 1


def test_a_full_service_answers_a_new_conversation_politely(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("One."), Reply("Two."), Reply("Still one."))
    s = setup()
    one = s.talk("desk", "First visitor")[0]["threadId"]
    s.talk("desk", "Second visitor")
    busy = s.anonymous("desk", "Third visitor")
    assert busy.status_code == 429, busy.text
    error = busy.json()["error"]
    assert error["code"] == "service_busy"
    assert error["message"].startswith("Desk is helping as many people as it can right now. Please try again")
    assert 1 <= int(busy.headers["Retry-After"]) <= 1800
    keyed = s.http.post("/api/v1/chat/stream", json={"worker_id": "desk", "message": "A colleague"})
    assert keyed.status_code == 429 and keyed.json()["error"]["code"] == "service_busy"
    assert answer(s.talk("desk", "Me again", one)) == "Still one."  # a live conversation goes on


def test_a_full_service_answers_an_im_message_with_its_busy_text_and_runs_nothing(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("Hello, how can I help?"))
    s = setup()
    s.talk("helpdesk", "First visitor")  # max_concurrent_sessions: 1
    event_id = s.slack_dm("helpdesk", "Is anyone there?", "1700000000.000100")
    assert s.handled.wait_for(event_id) == {event_id: "busy"}
    [answered] = s.vendor.wait_for(POST, 1)
    assert answered.body["channel"] == "D1"
    assert answered.body["text"] == "All our agents are busy. Please write again in a few minutes."
    busy = s.anonymous("helpdesk", "Another visitor")  # the HTTP route says the same
    assert busy.status_code == 429 and busy.json()["error"]["message"] == answered.body["text"]
    runs = s.http.get("/api/v1/workers/helpdesk/runs").json()["runs"]
    assert len(runs) == 1 and len(model_server.requests) == 1  # the refused message made no run
    journal = s.workspace / "tenants/acme/workers/helpdesk/runtime/channels/journal"
    assert not any(journal.glob("**/*.json"))  # done: neither retried nor set aside


def test_an_idle_conversation_expires_after_the_session_ttl(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    def forgot(body: dict[str, Any]) -> None:
        assert [m["content"] for m in body["messages"] if m["role"] in ("user", "assistant")] == ["Back after lunch"]

    model_server.expect(Reply("One."), Reply("Two."), Reply("Welcome back.", check=forgot))
    s = setup()
    one = s.talk("desk", "First visitor")[0]["threadId"]
    s.talk("desk", "Second visitor")
    path = s.session_file("desk", one)
    stored = json.loads(path.read_text(encoding="utf-8"))
    assert stored["ttl_s"] == 1800
    idle = datetime.now(UTC) - timedelta(seconds=1801)
    stored["updated_at"] = idle.isoformat()  # as if nobody had written for longer than session_ttl
    path.write_text(json.dumps(stored), encoding="utf-8")
    assert answer(s.talk("desk", "Back after lunch", one)) == "Welcome back."  # a new conversation, history gone
    assert s.anonymous("desk", "Third visitor").status_code == 429  # it counts again; the expired one had not


def test_the_knowledge_sources_and_the_service_rules_are_in_the_prompt(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    def informed(body: dict[str, Any]) -> None:
        system = body["messages"][0]["content"]
        assert "[knowledge] Accounts: Password reset: use the 'Forgot password' link" in system
        assert "(knowledge:knowledge/faq.md)" in system and "Invoices are sent" not in system
        assert "## Service" in system and "A conversation idle for 1800 seconds is closed." in system
        assert "when: the user asks for a human; a refund over 100 EUR." in system

    model_server.expect(Reply("Use the Forgot password link.", check=informed))
    s = setup()
    s.talk("desk", "How do I reset my password?")


def test_a_conversation_escalated_to_a_person_is_theirs_until_released(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    model_server.expect(
        escalate("the user asks for a human", "Wants a refund of 240 EUR for order 7."),
        Reply("Let me get a colleague.", check=lambda body: "Handed over to Dana Lee (a person)" in tool_result(body)),
        Reply("Welcome back to the bot."),  # after the release
    )
    s = setup()
    first = s.talk("desk", "I want a human, and my 240 EUR back for order 7.")
    thread = first[0]["threadId"]
    assert answer(first) == "Let me get a colleague.\n\nDana Lee has taken over this conversation."
    [told] = s.vendor.wait_for(POST, 1)
    assert told.body["channel"] == "U-DANA"
    assert "Reason: the user asks for a human" in told.body["text"]
    assert "User: I want a human, and my 240 EUR back for order 7." in told.body["text"]
    relayed = s.talk("desk", "Are you there, Dana?", thread)  # no model step: the person has it
    assert answer(relayed) == "Dana Lee has this conversation now; your message was passed on to them."
    [_, passed] = s.vendor.wait_for(POST, 2)
    assert passed.body["channel"] == "U-DANA" and passed.body["text"].endswith("Are you there, Dana?")
    relay_run = s.run("desk", relayed[0]["runId"])
    assert (relay_run["state"], relay_run["engine"]) == ("completed", "handoff")
    released = s.http.post(f"/api/v1/workers/desk/service/threads/{thread}/release")
    assert released.status_code == 200 and released.json()["released"]["name"] == "Dana Lee"
    assert s.http.post(f"/api/v1/workers/desk/service/threads/{thread}/release").status_code == 409
    assert answer(s.talk("desk", "Hello again", thread)) == "Welcome back to the bot."
    assert len(s.vendor.calls(POST)) == 2  # the hand-off was told once


def test_a_conversation_escalated_to_another_worker_continues_with_them(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    def is_bill_with_the_conversation(body: dict[str, Any]) -> None:
        assert "You are Bill" in body["messages"][0]["content"]
        said = [(m["role"], m["content"]) for m in body["messages"][1:]]
        assert said[0] == ("user", "My invoice is wrong.")
        assert said[1] == ("system", "Helpdesk handed this conversation over to you. Reason: billing questions. "
                                     "Invoice 42 charged twice.")  # fmt: skip
        assert said[-1] == ("user", "Can you fix it?")

    model_server.expect(
        escalate("billing questions", "Invoice 42 charged twice."),
        Reply("Passing you to billing.", check=lambda body: "Handed over to Bill" in tool_result(body)),
        Reply("Refunded the double charge.", check=is_bill_with_the_conversation),
    )
    s = setup()
    first = s.talk("helpdesk", "My invoice is wrong.")
    thread = first[0]["threadId"]
    assert answer(first) == "Passing you to billing.\n\nBill has taken over this conversation."
    second = s.talk("helpdesk", "Can you fix it?", thread)
    assert answer(second) == "Refunded the double charge."
    runs = s.http.get(f"/api/v1/chat/{thread}/tasks").json()["tasks"]
    assert sorted(r["worker_id"] for r in runs) == ["billing", "helpdesk"]
    assert s.run("billing", second[0]["runId"])["thread_id"] == thread
    assert s.vendor.calls(POST) == []


@pytest.mark.redis
def test_with_redis_sessions_a_full_service_and_an_idle_conversation_behave_the_same(
    setup: Callable[..., Setup], model_server: ScriptedModelServer, redis_url: str
) -> None:
    import redis

    tenant = f"t{uuid.uuid4().hex[:12]}"  # the runtime's key prefix is shared: keep to our own tenant
    model_server.expect(Reply("One."), Reply("Two."), Reply("Still one."))
    try:
        s = setup(tenant, REDIS_URL=redis_url, GENWORKER_PROFILE="shared")
        one = s.talk("desk", "First visitor")[0]["threadId"]
        s.talk("desk", "Second visitor")
        busy = s.anonymous("desk", "Third visitor")
        assert busy.status_code == 429 and busy.json()["error"]["code"] == "service_busy"
        assert answer(s.talk("desk", "Me again", one)) == "Still one."
        with redis.Redis.from_url(redis_url) as r:
            [key] = [k for k in r.scan_iter(match=f"*{tenant}*") if k.decode().endswith(f"desk.{one}")]
            assert 1_200_000 < r.pttl(key) <= 1_800_000  # session_ttl (1800 s), as a sliding expiry
        assert not s.session_file("desk", one).exists()
    finally:
        with redis.Redis.from_url(redis_url) as r:
            keys = list(r.scan_iter(match=f"*{tenant}*"))
            if keys:
                r.delete(*keys)


@pytest.mark.redis
def test_with_redis_the_anonymous_rate_limit_holds_across_two_servers(
    setup: Callable[..., Setup], model_server: ScriptedModelServer, redis_url: str
) -> None:
    """Two servers (two runtimes on one workspace and one Redis, as behind a load balancer) share one
    window: two messages a minute from the address, wherever they land."""
    import redis

    tenant = f"t{uuid.uuid4().hex[:12]}"
    model_server.expect(Reply("One."), Reply("Two."))
    env = {"REDIS_URL": redis_url, "GENWORKER_PROFILE": "shared", "GENWORKER_SERVICE_ANON_PER_MINUTE": "2"}
    try:
        first, second = setup(tenant, **env), setup(tenant, **env)
        thread = first.talk("desk", "Hi")[0]["threadId"]
        assert answer(second.talk("desk", "Still there?", thread)) == "Two."
        for server in (first, second):
            refused = server.anonymous("desk", "And now?", thread)
            assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited", refused.text
            assert 1 <= int(refused.headers["Retry-After"]) <= 60
        with redis.Redis.from_url(redis_url) as r:
            assert [k.decode() for k in r.scan_iter(match=f"gw:ratelimit:service-client:{tenant}|*")]
    finally:
        with redis.Redis.from_url(redis_url) as r:
            keys = list(r.scan_iter(match=f"*{tenant}*"))
            if keys:
                r.delete(*keys)
