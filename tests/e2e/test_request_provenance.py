"""Where a request came from is the runtime's bookkeeping, not the user's words: the model receives
what the person typed as the user message, and the thread and memory keep exactly that. Over the
real server, LiteLLM to the scripted model server, for chat, one-shot tasks, the OpenAI-compatible
endpoint, an IM webhook and a duty run (whose origin the model is told in the system prompt)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2 as httpx
import openai
import pytest
from slack_sdk.signature import SignatureVerifier

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.channels.base import ChannelMessage
from genworker.conversation import FileSessionStore, SessionManager
from genworker.delivery.messages import DeliveryResult, OutboundMessage
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, scripted_env
from genworker.testing.channels import Handled
from genworker.testing.credentials import SLACK_SIGNING_SECRET
from genworker.testing.live_server import LiveServer

TYPED = "Can you move my 3pm with Dana to Thursday?"
PERSONA = """---
identity: {name: Alice, worker_id: alice}
channels:
  - {type: slack}
---
You are alice.
"""
DUTY = """---
duty_id: weekly-review
title: Weekly review
triggers:
  - {id: now, type: manual}
posture: {default: execute}
---
Review the week and list what is still open.
"""


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    return small_workspace(
        {"acme": ["alice"]},
        {
            "tenants/acme/workers/alice/PERSONA.md": PERSONA,
            "tenants/acme/workers/alice/duties/weekly-review.md": DUTY,
            "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json": json.dumps(
                {"slack": {"bot_token": "xoxb-test", "signing_secret": SLACK_SIGNING_SECRET}}
            ),
        },
    )


class QuietReplier:
    """Takes the worker's IM replies instead of the vendor's API."""

    async def reply(self, message: ChannelMessage, outbound: OutboundMessage) -> DeliveryResult:
        return DeliveryResult(ok=True, platform=message.platform)


@contextmanager
def running(tmp_path: Path, workspace: Path, model: ScriptedModelServer) -> Iterator[tuple[LiveServer, Handled]]:
    configs = tmp_path / "configs"
    configs.mkdir(exist_ok=True)
    app = create_app(load_settings(configs, scripted_env(model), workspace=workspace))
    handled = Handled()
    with LiveServer(app) as server:
        app.state.runtime.services.channels.processor.replier = QuietReplier()
        app.state.runtime.services.channels.processor.listeners.append(handled)
        yield server, handled


def user_turns(request: dict[str, Any]) -> list[Any]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


def system_text(request: dict[str, Any]) -> str:
    return "\n".join(str(m["content"]) for m in request["messages"] if m["role"] == "system")


def stream(server: LiveServer, api_key: str, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    with httpx.stream(
        "POST", server.url + path, json=body, headers={"Authorization": f"Bearer {api_key}"}, timeout=60
    ) as response:
        assert response.status_code == 200, response.read()
        events = [json.loads(line[5:]) for line in response.iter_lines() if line.startswith("data:")]
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    return events


def stored_thread(workspace: Path, session_id: str) -> list[tuple[str, str]]:
    async def read() -> list[tuple[str, str]]:
        manager = SessionManager(FileSessionStore(workspace))
        session = await manager.get("acme", session_id)
        assert session is not None, session_id
        return [(m.role, m.content) for m in await manager.all_messages(session)]

    return asyncio.run(read())


def files_holding(root: Path, *needles: str) -> list[str]:
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and any(n in p.read_text(encoding="utf-8", errors="replace") for n in needles)
    )


def test_chat_sends_and_keeps_exactly_what_the_user_typed(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    key_id, api_key = ApiKeyStore(workspace).create("acme")
    model_server.expect(Reply("Moved to Thursday 3pm."), Reply("You asked me to move your 3pm."))
    with running(tmp_path, workspace, model_server) as (server, _):
        first = stream(server, api_key, "/api/v1/chat/stream", {"worker_id": "alice", "message": TYPED})
        thread = first[0]["threadId"]
        body = {"worker_id": "alice", "thread_id": thread, "message": "What did I ask?"}
        stream(server, api_key, "/api/v1/chat/stream", body)
    one, two = model_server.requests
    assert user_turns(one) == [TYPED]
    assert user_turns(two) == [TYPED, "What did I ask?"]  # the history carries the turn as typed, too
    for request in (one, two):
        assert key_id not in json.dumps(request)
        assert "provenance" not in json.dumps(request).lower()
    assert stored_thread(workspace, f"alice.{thread}") == [
        ("user", TYPED),
        ("assistant", "Moved to Thursday 3pm."),
        ("user", "What did I ask?"),
        ("assistant", "You asked me to move your 3pm."),
    ]
    alice = workspace / "tenants/acme/workers/alice"
    assert files_holding(alice / "memory", TYPED), "the episode of the turn keeps the question"
    kept = [workspace / "tenants/acme/sessions", alice / "memory"]
    assert [f for root in kept for f in files_holding(root, key_id, "Task provenance", "source_type")] == []


def test_one_shot_task_and_openai_endpoint_send_the_text_as_given(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    key_id, api_key = ApiKeyStore(workspace).create("acme")
    model_server.expect(Reply("Done."), Reply("Sure."))
    history = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "Hi."},
        {"role": "user", "content": TYPED},
    ]
    with running(tmp_path, workspace, model_server) as (server, _):
        stream(server, api_key, "/api/v1/worker/task/stream", {"worker_id": "alice", "task": TYPED})
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=api_key)
        answer = client.chat.completions.create(model="alice", messages=history)  # type: ignore[arg-type]
        assert answer.choices[0].message.content == "Sure."
    task, compat = model_server.requests
    assert user_turns(task) == [TYPED]
    assert user_turns(compat) == ["hello", TYPED]
    for request in (task, compat):
        assert key_id not in json.dumps(request)
        assert "provenance" not in json.dumps(request).lower()


def test_an_im_message_reaches_the_model_and_the_thread_as_sent(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("Moved."))
    ts = "1700000000.000100"
    event = {"type": "message", "user": "U_PEER", "text": TYPED, "channel": "D1", "channel_type": "im", "ts": ts}
    body = json.dumps({"type": "event_callback", "event_id": "Ev1", "event": event}).encode()
    stamp = str(int(time.time()))
    headers = {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": SignatureVerifier(SLACK_SIGNING_SECRET).generate_signature(timestamp=stamp, body=body),
        "Content-Type": "application/json",
    }
    with running(tmp_path, workspace, model_server) as (server, handled):
        sent = httpx.post(f"{server.url}/api/v1/channel/acme~alice~slack/webhook", content=body, headers=headers)
        assert sent.status_code == 200, sent.text
        assert handled.wait_for(f"D1:{ts}") == {f"D1:{ts}": "replied"}
    (request,) = model_server.requests
    assert user_turns(request) == [TYPED]
    assert "U_PEER" not in json.dumps(request) and "provenance" not in json.dumps(request).lower()
    sessions = sorted((workspace / "tenants/acme/sessions").rglob("*.json"))
    assert sessions and files_holding(workspace / "tenants/acme/sessions", "provenance", "U_PEER") == []
    assert files_holding(workspace / "tenants/acme/sessions", TYPED)


def test_a_duty_run_is_told_its_origin_in_the_system_prompt(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    _, api_key = ApiKeyStore(workspace).create("acme")
    model_server.expect(Reply("Two items are open."))
    with running(tmp_path, workspace, model_server) as (server, _):
        ran = httpx.post(
            f"{server.url}/api/v1/workers/alice/duties/weekly-review/run",
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=60,
        )
        assert ran.status_code == 200 and ran.json()["run"]["state"] == "completed", ran.text
    (request,) = model_server.requests
    assert user_turns(request) == ["Review the week and list what is still open."]
    system = system_text(request)
    assert system.index("## Identity") < system.index("## This task")  # after what stays the same across runs
    block = system.split("## This task\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert block[:3] == ["- source_type: duty", "- duty_id: weekly-review", "- trigger_id: now"]
    assert len(block) == 4 and block[3].startswith("- scheduled_for: 20")
    assert "governance" not in system and "source_id" not in system
