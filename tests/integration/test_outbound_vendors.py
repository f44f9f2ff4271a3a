"""Outbound delivery against a local HTTP server standing in for the Slack, Feishu, WeCom and
DingTalk APIs (one recorder app answering each vendor's documented paths and shapes).

It records every request, so the tests check what really went over the wire: tokens fetched
once and reused, 429/5xx retried with Retry-After honoured, 4xx not retried, bodies parsed by
a JSON parser with the fields each vendor documents, long texts split, streaming replies
edited in place, and fallback to another channel of the same worker. The wait between
retries goes through an injected sleep that records the delay instead of sleeping.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest

from genworker.channels.base import ChannelMessage
from genworker.channels.outbound import ChannelDelivery, RetryPolicy, VendorEndpoints, VendorHttp
from genworker.channels.outbound.delivery import _Streamer
from genworker.channels.registry import ChannelRegistry
from genworker.delivery.messages import OutboundMessage, Target
from genworker.testing.live_server import LiveServer
from genworker.testing.vendors import Vendor, vendor_answer
from genworker.workspace.registry import WorkspaceRegistry

pytestmark = pytest.mark.anyio

PERSONA = """---
identity:
  name: Alice
  worker_id: alice
  role: assistant
mode: personal
channels:
  - type: slack
    chat_ids: [C-OPS]
    reply_mode: streaming
  - type: feishu
    chat_ids: [oc_team]
  - type: wecom
    chat_ids: [zhangsan]
  - type: dingtalk
    chat_ids: [staff-1]
---
You are alice.
"""
CREDENTIALS = {
    "slack": {"bot_token": "xoxb-test-bot-token", "signing_secret": "s3cret"},
    "feishu": {"app_id": "cli_test", "app_secret": "feishu-app-secret"},
    "wecom": {"corpid": "ww-corp", "corpsecret": "wecom-secret", "agent_id": "1000002"},
    "dingtalk": {"app_key": "ding-key", "app_secret": "ding-secret", "robot_code": "ding-robot"},
}


@dataclass
class Setup:
    vendor: Vendor
    url: str
    delivery: ChannelDelivery
    delays: list[float]
    registry: WorkspaceRegistry


@pytest.fixture
def workspace(write_tree: Callable[[Mapping[str, str]], Path]) -> Path:
    return write_tree(
        {
            "tenants/acme/TENANT.json": '{"tenant_id": "acme", "name": "Acme", "default_worker": "alice"}',
            "tenants/acme/workers/alice/PERSONA.md": PERSONA,
            "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json": json.dumps(CREDENTIALS),
        }
    )


@pytest.fixture
def vendor() -> Iterator[tuple[Vendor, str]]:
    stand_in = Vendor()
    with LiveServer(stand_in.app()) as server:
        yield stand_in, server.url


@pytest.fixture
async def setup(workspace: Path, vendor: tuple[Vendor, str]) -> Any:
    stand_in, url = vendor
    registry = WorkspaceRegistry(workspace, product_skills=None)
    registry.load_all()
    assert registry.worker("acme", "alice") is not None, registry.issues()
    delays: list[float] = []

    async def record(delay: float) -> None:
        delays.append(delay)

    endpoints = VendorEndpoints(slack=url, feishu=url, wecom=url, dingtalk=url, dingtalk_oapi=url)
    http = VendorHttp(policy=RetryPolicy(max_attempts=3, base_delay=0.2), sleep=record)
    delivery = ChannelDelivery(ChannelRegistry(registry), endpoints=endpoints, http=http)
    yield Setup(stand_in, url, delivery, delays, registry)
    await delivery.aclose()


def message(platform: str, **kw: Any) -> ChannelMessage:
    values: dict[str, Any] = {
        "platform": platform,
        "adapter_id": f"acme~alice~{platform}",
        "tenant_id": "acme",
        "worker_id": "alice",
        "event_id": "evt-1",
        "chat_id": "chat-1",
        "chat_type": "p2p",
        "sender_id": "user-1",
        "text": "hello",
        "received_at": "2026-01-05T12:00:00+00:00",
    }
    values.update(kw)
    return ChannelMessage(**values)


async def test_fifty_concurrent_feishu_sends_fetch_one_token(setup: Setup) -> None:
    results = await asyncio.gather(
        *(setup.delivery.send("acme", "alice", OutboundMessage(f"note {i}"), platform="feishu") for i in range(50))
    )
    assert all(r.ok and r.platform == "feishu" for r in results)
    tokens = setup.vendor.calls("/open-apis/auth/v3/tenant_access_token/internal")
    assert len(tokens) == 1
    assert tokens[0].body == {"app_id": "cli_test", "app_secret": "feishu-app-secret"}
    sends = setup.vendor.calls("/open-apis/im/v1/messages")
    assert len(sends) == 50
    issued = vendor_answer("POST", "/open-apis/auth/v3/tenant_access_token/internal", 1)["tenant_access_token"]
    for sent in sends:
        assert sent.query == {"receive_id_type": "chat_id"}
        assert sent.headers["authorization"] == f"Bearer {issued}"
        assert sent.body["receive_id"] == "oc_team" and sent.body["msg_type"] == "text"
        assert json.loads(sent.body["content"])["text"].startswith("note ")  # content is itself a JSON string
        assert sent.body["uuid"]
    assert {json.loads(s.body["content"])["text"] for s in sends} == {f"note {i}" for i in range(50)}


async def test_feishu_replies_in_thread_and_renews_an_invalid_token(setup: Setup) -> None:
    setup.vendor.script["/open-apis/im/v1/messages/om_parent/reply"] = [
        (200, {"code": 99991663, "msg": "Invalid access token for authorization"}, {})
    ]
    text = 'He said "ok" \\ then </div>\n新行'
    incoming = message("feishu", thread_id="om_root", reply_context={"message_id": "om_parent"})
    result = await setup.delivery.reply(incoming, OutboundMessage(text))
    assert result.ok, result
    replies = setup.vendor.calls("/open-apis/im/v1/messages/om_parent/reply")
    assert len(replies) == 2
    assert replies[0].headers["authorization"] != replies[1].headers["authorization"]
    assert len(setup.vendor.calls("/open-apis/auth/v3/tenant_access_token/internal")) == 2
    assert replies[1].body["reply_in_thread"] is True
    assert json.loads(replies[1].body["content"]) == {"text": text}


async def test_wecom_honours_retry_after_seconds_and_http_date(setup: Setup) -> None:
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    setup.vendor.script["/cgi-bin/message/send"] = [
        (429, {"errcode": 45009}, {"Retry-After": "2"}),
        (503, {}, {"Retry-After": later}),
    ]
    result = await setup.delivery.send(
        "acme", "alice", OutboundMessage("**deploy done**", "markdown"), platform="wecom"
    )
    assert result.ok and result.attempts == 3, result
    assert setup.delays[0] == 2.0
    assert 25 <= setup.delays[1] <= 30
    sends = setup.vendor.calls("/cgi-bin/message/send")
    assert len(sends) == 3
    assert sends[-1].query["access_token"] == "w-1"
    assert sends[-1].body == {
        "touser": "zhangsan",
        "agentid": 1000002,
        "msgtype": "markdown",
        "markdown": {"content": "**deploy done**"},
        "safe": 0,
    }
    assert setup.vendor.calls("/cgi-bin/gettoken")[0].query == {"corpid": "ww-corp", "corpsecret": "wecom-secret"}


async def test_a_4xx_is_not_retried_and_5xx_retries_are_bounded(setup: Setup) -> None:
    setup.vendor.script["/chat.postMessage"] = [(400, {"ok": False, "error": "invalid_arguments"}, {})]
    setup.vendor.script["/open-apis/im/v1/messages"] = [(500, {}, {})] * 3
    setup.vendor.script["/cgi-bin/message/send"] = [(200, {"errcode": 60020, "errmsg": "not allow ip"}, {})]
    setup.vendor.script["/v1.0/robot/oToMessages/batchSend"] = [(403, {"code": "Forbidden", "message": "no"}, {})]
    result = await setup.delivery.send("acme", "alice", OutboundMessage("x"))
    assert not result.ok
    assert len(setup.vendor.calls("/chat.postMessage")) == 1
    assert len(setup.vendor.calls("/open-apis/im/v1/messages")) == 3  # RetryPolicy(max_attempts=3)
    assert len(setup.vendor.calls("/cgi-bin/message/send")) == 1
    assert len(setup.vendor.calls("/v1.0/robot/oToMessages/batchSend")) == 1
    assert result.attempts == 1 + 3 + 1 + 1
    assert "invalid_arguments" in (result.error or "")
    status = setup.delivery.status(setup.delivery.channels.resolve("acme~alice~feishu"))  # type: ignore[arg-type]
    assert status["status"] == "degraded" and "HTTP 500" in status["last_error"]


async def test_a_failed_channel_falls_back_to_another_bound_channel(setup: Setup) -> None:
    setup.vendor.script["/chat.postMessage"] = [(200, {"ok": False, "error": "channel_not_found"}, {})]
    result = await setup.delivery.reply(message("slack", chat_id="C-GONE"), OutboundMessage("the report is ready"))
    assert result.ok and result.platform == "feishu" and result.fell_back_to == "feishu", result
    assert "channel_not_found" in (result.error or "")
    sent = setup.vendor.calls("/open-apis/im/v1/messages")
    assert [json.loads(s.body["content"])["text"] for s in sent] == ["the report is ready"]
    slack = setup.delivery.status(setup.delivery.channels.resolve("acme~alice~slack"))  # type: ignore[arg-type]
    assert slack["last_delivery"] == "failed" and slack["status"] == "degraded"
    assert setup.delivery.status(setup.delivery.channels.resolve("acme~alice~feishu"))["last_delivery"] == "ok"  # type: ignore[arg-type]


async def test_long_texts_are_split_at_paragraphs_within_each_limit(setup: Setup) -> None:
    paragraphs = [f"第{i}段 " + "内容" * 300 for i in range(6)]  # ~1.8 KB each in UTF-8
    result = await setup.delivery.send("acme", "alice", OutboundMessage("\n\n".join(paragraphs)), platform="wecom")
    assert result.ok
    chunks = [c.body["text"]["content"] for c in setup.vendor.calls("/cgi-bin/message/send")]
    assert all(len(c.encode()) <= 2048 for c in chunks)
    assert chunks == paragraphs
    long_slack = "\n".join(f"line {i} " + "x" * 90 for i in range(100))  # ~10,000 characters
    await setup.delivery.send("acme", "alice", OutboundMessage(long_slack), platform="slack")
    posts = [p.body["text"] for p in setup.vendor.calls("/chat.postMessage")]
    assert len(posts) == 3 and all(len(p) <= 4000 for p in posts)
    assert "\n".join(posts) == long_slack


async def test_dingtalk_replies_through_the_session_webhook_only_on_its_host(setup: Setup) -> None:
    hook = f"{setup.url}/robot/sendBySession?session=abc"
    ok = await setup.delivery.reply(
        message("dingtalk", reply_context={"session_webhook": hook, "session_webhook_expires_ms": "99999999999999"}),
        OutboundMessage("收到"),
    )
    assert ok.ok
    replies = setup.vendor.calls("/robot/sendBySession")
    assert replies[0].query == {"session": "abc"}
    assert replies[0].body == {"msgtype": "text", "text": {"content": "收到"}}
    assert not setup.vendor.calls("/v1.0/oauth2/accessToken")  # a session webhook needs no token

    forged = message("dingtalk", chat_id="cid-group", chat_type="group")
    forged = ChannelMessage(**{**_fields(forged), "reply_context": {"session_webhook": "http://127.0.0.2:1/x"}})
    refused = await setup.delivery.stream(forged, _pieces("never sent"))
    assert refused.ok and refused.fell_back_to == "slack"  # the first other channel with a default chat
    assert "refused" in (refused.error or "")
    assert len(setup.vendor.calls("/robot/sendBySession")) == 1


async def test_dingtalk_api_sends_use_the_documented_robot_bodies(setup: Setup) -> None:
    expired = {"session_webhook": f"{setup.url}/robot/sendBySession", "session_webhook_expires_ms": "1000"}
    group = message("dingtalk", chat_id="cid-group", chat_type="group", reply_context=expired)
    assert (await setup.delivery.reply(group, OutboundMessage("# Weekly\n- done", "markdown"))).ok
    assert (await setup.delivery.send("acme", "alice", OutboundMessage("ping"), platform="dingtalk")).ok
    token = setup.vendor.calls("/v1.0/oauth2/accessToken")
    assert len(token) == 1 and token[0].body == {"appKey": "ding-key", "appSecret": "ding-secret"}
    to_group = setup.vendor.calls("/v1.0/robot/groupMessages/send")[0]
    assert to_group.headers["x-acs-dingtalk-access-token"] == "d-1"
    assert to_group.body["robotCode"] == "ding-robot" and to_group.body["openConversationId"] == "cid-group"
    assert to_group.body["msgKey"] == "sampleMarkdown"
    assert json.loads(to_group.body["msgParam"]) == {"title": "Weekly", "text": "# Weekly\n- done"}
    to_user = setup.vendor.calls("/v1.0/robot/oToMessages/batchSend")[0]
    assert to_user.body["userIds"] == ["staff-1"] and to_user.body["msgKey"] == "sampleText"
    assert json.loads(to_user.body["msgParam"]) == {"content": "ping"}
    assert not setup.vendor.calls("/robot/sendBySession")


async def test_slack_streaming_reply_grows_one_message_in_place(setup: Setup) -> None:
    clock = iter(float(i) for i in range(1000))  # every step is a second later: each piece is an edit
    setup.delivery._clock = lambda: next(clock)
    incoming = message("slack", chat_id="C-OPS", thread_id="1700000000.000001")
    result = await setup.delivery.stream(incoming, _pieces("Checking", " the logs", "...\n\nAll green."))
    assert result.ok and result.message_id
    posts = setup.vendor.calls("/chat.postMessage")
    updates = setup.vendor.calls("/chat.update")
    assert len(posts) == 1 and posts[0].body["thread_ts"] == "1700000000.000001"
    assert posts[0].headers["authorization"] == "Bearer xoxb-test-bot-token"
    assert [u.body["text"] for u in updates] == ["Checking the logs", "Checking the logs...\n\nAll green."]
    assert all(u.body["ts"] == result.message_id and u.body["channel"] == "C-OPS" for u in updates)


async def test_streaming_without_edits_sends_paragraph_chunks(setup: Setup) -> None:
    incoming = message("wecom", chat_id="zhangsan")
    long_paragraph = "a" * 700
    streamed = await setup.delivery.stream(incoming, _pieces("short intro\n\n", long_paragraph, "\n\nend"))
    assert streamed.ok  # wecom is bound with reply_mode complete: one message
    assert len(setup.vendor.calls("/cgi-bin/message/send")) == 1
    binding = setup.delivery.channels.resolve("acme~alice~wecom")
    assert binding is not None
    streamer = _Streamer(setup.delivery.client(binding), Target("zhangsan"), "text", lambda: 0.0)
    for piece in ("short intro\n\n", long_paragraph, "\n\nmore", "\n\nend"):
        await streamer.add(piece)
    await streamer.finish()
    chunks = [c.body["text"]["content"] for c in setup.vendor.calls("/cgi-bin/message/send")[1:]]
    assert chunks == ["short intro\n\n" + long_paragraph, "more\n\nend"]


async def test_reload_drops_a_workers_clients_and_their_tokens(setup: Setup) -> None:
    assert (await setup.delivery.send("acme", "alice", OutboundMessage("1"), platform="wecom")).ok
    assert setup.delivery.reload("acme", "alice") == ["acme~alice~wecom"]
    assert (await setup.delivery.send("acme", "alice", OutboundMessage("2"), platform="wecom")).ok
    assert len(setup.vendor.calls("/cgi-bin/gettoken")) == 2


async def test_unknown_adapters_and_missing_credentials_fail_clearly(setup: Setup) -> None:
    nowhere = await setup.delivery.reply(message("slack", adapter_id="acme~bob~slack"), OutboundMessage("x"))
    assert not nowhere.ok and "acme~bob~slack" in (nowhere.error or "")
    none = await setup.delivery.send("acme", "alice", OutboundMessage("x"), platform="email")
    assert not none.ok and "no channel on email" in (none.error or "")


async def _pieces(*parts: str) -> Any:
    for part in parts:
        yield part


def _fields(msg: ChannelMessage) -> dict[str, Any]:
    return {name: getattr(msg, name) for name in msg.__dataclass_fields__}


async def test_briefs_go_to_the_first_channel_as_markdown(setup: Setup) -> None:
    assert await setup.delivery.deliver("acme", "alice", "*Morning brief*: 2 items")
    [post] = setup.vendor.calls("/chat.postMessage")
    assert post.body == {"channel": "C-OPS", "text": "*Morning brief*: 2 items", "mrkdwn": True}
    assert not await setup.delivery.deliver("acme", "nobody", "lost")


async def test_feishu_streams_as_a_card_patched_in_place(setup: Setup) -> None:
    binding = setup.delivery.channels.resolve("acme~alice~feishu")
    assert binding is not None
    clock = iter(float(i) for i in range(100))
    target = Target("oc_team", "group", reply_to="om_question")
    streamer = _Streamer(setup.delivery.client(binding), target, "markdown", lambda: next(clock))
    for piece in ("**Status**", "\n- api: ok", "\n- db: ok"):
        await streamer.add(piece)
    await streamer.finish()
    [first] = setup.vendor.calls("/open-apis/im/v1/messages/om_question/reply")
    assert first.body["msg_type"] == "interactive"
    assert json.loads(first.body["content"])["elements"] == [{"tag": "markdown", "content": "**Status**"}]
    patches = [r for r in setup.vendor.requests if r.method == "PATCH"]
    assert {p.path for p in patches} == {f"/open-apis/im/v1/messages/{streamer.first_id}"}
    cards = [json.loads(p.body["content"])["elements"][0]["content"] for p in patches]
    assert cards == ["**Status**\n- api: ok", "**Status**\n- api: ok\n- db: ok"]


async def test_a_keyed_feishu_message_carries_its_key_as_the_uuid_and_each_piece_its_own(setup: Setup) -> None:
    """Feishu sends one message per `uuid` within an hour: a keyed answer sent twice (a retry, or the
    process that took its journal entry over) arrives once; a split text keys each piece."""
    incoming = message("feishu", reply_context={"message_id": "om_parent"})
    for _ in range(2):
        assert (await setup.delivery.reply(incoming, OutboundMessage("once", key="entry-1"))).ok
    replies = setup.vendor.calls("/open-apis/im/v1/messages/om_parent/reply")
    assert [r.body["uuid"] for r in replies] == ["entry-1", "entry-1"]
    long = "\n\n".join(["x" * 20_000] * 3)  # three pieces of Feishu's 28,000 bytes
    assert (await setup.delivery.send("acme", "alice", OutboundMessage(long, key="entry-2"), platform="feishu")).ok
    assert [s.body["uuid"] for s in setup.vendor.calls("/open-apis/im/v1/messages")] == [
        "entry-2-0",
        "entry-2-1",
        "entry-2-2",
    ]
