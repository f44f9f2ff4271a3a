"""Who a proactive message goes to: contacts by any of their names, through their identities in
order on the platforms the worker can send on; the owner (`reports_to`) then the default chats;
bound chats with or without a platform prefix. And what the send tools may do under governance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.unit.conftest import WorkspaceFiles

from genworker.channels.registry import ChannelRegistry
from genworker.delivery.recipients import bound_chat, contact_recipients, email_capable, find_contact, owner_recipients
from genworker.tools.base import ToolCall
from genworker.tools.builtin.mailbox import MailboxSlot, mailbox_tools
from genworker.tools.builtin.messaging import MessagingSlot, messaging_tools
from genworker.tools.context import ToolScope
from genworker.tools.outcomes import ToolDenied
from genworker.tools.pipeline import ToolPipeline

CREDS = {
    "slack": {"bot_token": "xoxb-1", "signing_secret": "s" * 32},
    "email": {
        "worker_address": "w@acme.example",
        "worker_smtp_host": "smtp.acme.example",
        "owner_address": "owner@acme.example",
    },
}
PERSONA = """
    channels:
      - {type: slack, chat_ids: [C-OPS]}
      - {type: wecom, chat_ids: [wr-1], features: {group_chat_ids: [wr-1]}}
    contacts:
      - person_id: dana
        name: Dana Lee
        aliases: [boss]
        identities:
          - {channel: feishu, handle: ou_dana}
          - {channel: Slack, handle: U-DANA}
          - {channel: email, handle: dana@acme.example}
          - {channel: phone, handle: "+1 555"}
"""


def load(ws: WorkspaceFiles, extra: str = "", creds: dict[str, object] | None = None) -> ChannelRegistry:
    ws.tenant()
    ws.persona(extra=PERSONA + extra)
    ws.write("tenants/acme/workers/w/CHANNEL_CREDENTIALS.json", json.dumps(creds or CREDS))
    return ChannelRegistry(ws.registry())


def test_a_contact_is_found_by_any_name_and_reached_in_its_order(ws: WorkspaceFiles) -> None:
    channels = load(ws)
    worker = channels.workspace.worker("acme", "w")
    assert worker is not None
    bindings = channels.bindings("acme", "w")
    for name in ("dana", "DANA LEE", "Boss", "u-dana", " dana@acme.example "):
        assert find_contact(worker, name) is not None, name
    assert find_contact(worker, "mallory") is None and find_contact(worker, " ") is None
    dana = find_contact(worker, "dana")
    assert dana is not None
    # feishu: no channel; phone: not a platform; email: credentials alone are enough
    found = contact_recipients(worker, bindings, dana)
    assert [(r.platform, r.chat_id, r.adapter_key) for r in found] == [
        ("slack", "U-DANA", "slack"),
        ("email", "dana@acme.example", None),
    ]
    assert [r.platform for r in contact_recipients(worker, bindings, dana, "email")] == ["email"]
    assert contact_recipients(worker, bindings, dana, "feishu") == []


def test_without_reports_to_only_the_default_chats_remain(ws: WorkspaceFiles) -> None:
    channels = load(ws)
    worker = channels.workspace.worker("acme", "w")
    assert worker is not None
    # wecom has no credentials here, and no email channel entry means no email default chat
    found = [(r.platform, r.chat_id) for r in owner_recipients(worker, channels.bindings("acme", "w"))]
    assert found == [("slack", "C-OPS")]


def test_reports_to_names_the_owner(ws: WorkspaceFiles) -> None:
    ws.tenant()
    ws.write(
        "tenants/acme/workers/w/PERSONA.md",
        "---\nidentity: {name: W, worker_id: w, reports_to: Boss}\n" + PERSONA.replace("\n    ", "\n") + "---\nHi.\n",
    )
    ws.write("tenants/acme/workers/w/CHANNEL_CREDENTIALS.json", json.dumps(CREDS))
    channels = ChannelRegistry(ws.registry())
    worker = channels.workspace.worker("acme", "w")
    assert worker is not None, ws.registry().issues()
    found = owner_recipients(worker, channels.bindings("acme", "w"))
    assert [(r.platform, r.chat_id, r.label) for r in found] == [
        ("slack", "U-DANA", "Dana Lee (slack)"),
        ("email", "dana@acme.example", "Dana Lee (email)"),
        ("slack", "C-OPS", "default chat of slack (slack)"),
    ]


def test_bound_chats_with_or_without_a_platform(ws: WorkspaceFiles) -> None:
    creds = {**CREDS, "wecom": {"corpid": "c", "corpsecret": "s", "agent_id": "1"}}
    channels = load(ws, creds=creds)
    bindings = channels.bindings("acme", "w")
    ops = bound_chat(bindings, "C-OPS")
    assert ops is not None and (ops.platform, ops.chat_type) == ("slack", "p2p")
    room = bound_chat(bindings, "wecom:wr-1")
    assert room is not None and (room.platform, room.chat_type) == ("wecom", "group")
    assert bound_chat(bindings, "slack:wr-1") is None
    assert bound_chat(bindings, "C-OPS", "wecom") is None
    assert bound_chat(bindings, "C-UNKNOWN") is None


def test_email_needs_an_smtp_host(ws: WorkspaceFiles) -> None:
    channels = load(ws, creds={"slack": CREDS["slack"], "email": {"worker_address": "w@acme.example"}})
    worker = channels.workspace.worker("acme", "w")
    assert worker is not None
    assert not email_capable(worker, channels.bindings("acme", "w"))


def test_the_send_tools_are_external_and_the_mailbox_tools_read() -> None:
    pipeline = ToolPipeline([*messaging_tools(MessagingSlot()), *mailbox_tools(MailboxSlot())])
    normal = ToolScope("acme", "w", "run-1", worker_dir=Path(), trust_level=2)
    assert {s.name for s in pipeline.visible(normal)} == {"send_message", "send_email", "email_list_folders",
                                                          "email_search"}  # fmt: skip
    proposal = ToolScope("acme", "w", "run-1", worker_dir=normal.worker_dir, trust_level=2, posture="proposal_only")
    assert {s.name for s in pipeline.visible(proposal)} == {"email_list_folders", "email_search"}
    low = ToolScope("acme", "w", "run-1", worker_dir=normal.worker_dir, trust_level=1)
    assert {s.name for s in pipeline.visible(low)} == {"email_list_folders", "email_search"}


@pytest.mark.anyio
async def test_a_send_below_trust_2_is_refused_before_anything_runs() -> None:
    pipeline = ToolPipeline(messaging_tools(MessagingSlot()))
    scope = ToolScope("acme", "w", "run-1", worker_dir=Path(), trust_level=1)
    outcome = await pipeline.execute(scope, ToolCall("c1", "send_message", {"to": "dana", "text": "hi"}))
    assert isinstance(outcome, ToolDenied) and outcome.code == "trust_level"
