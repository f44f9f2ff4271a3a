"""Signed IM webhooks against the real server (uvicorn, LiteLLM to the scripted model, real files).

Payloads are signed / encrypted by the vendors' SDKs (slack_sdk, wechatpy) or by the documented
algorithm (Feishu, DingTalk). Replies are counted at a recording ChannelReplier put in place of the
outbound delivery; everything else is the production path.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import os
import threading
import time
from collections.abc import AsyncIterable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from slack_sdk.signature import SignatureVerifier
from wechatpy.enterprise.crypto import WeChatCrypto

from genworker.api.app import create_app
from genworker.autonomy.inbox import FileInboxStore
from genworker.channels.base import ChannelMessage
from genworker.channels.ingest import FAILURE_TEXT
from genworker.delivery.messages import DeliveryResult, OutboundMessage
from genworker.settings import load_settings
from genworker.testing import Fail, Reply, ScriptedModelServer, scripted_env
from genworker.testing.channels import Handled
from genworker.testing.credentials import DINGTALK_APP_SECRET, SLACK_SIGNING_SECRET
from genworker.testing.live_server import LiveServer

SLACK_SECRET = SLACK_SIGNING_SECRET
FEISHU_TOKEN, FEISHU_KEY = "v-token-test", "e-key-test"
WECOM_TOKEN, WECOM_AES, CORP_ID = "QDG6eK", "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C", "wx5823bf96d3bd56c7"
DING_SECRET = DINGTALK_APP_SECRET

PERSONA = """---
identity: {name: Alice, worker_id: alice}
channels:
  - {type: slack}
  - {type: slack, adapter_id: slack-live, reply_mode: streaming}
  - {type: feishu}
  - {type: feishu, adapter_id: feishu-watch, features: {group_monitoring: true}}
  - {type: wecom}
  - {type: dingtalk}
contacts:
  - person_id: boss
    name: Boss
    tags: [owner]
    identities: [{channel: slack, handle: U_BOSS}]
---
You are alice.
"""
CREDENTIALS = {
    "slack": {"bot_token": "xoxb-test", "signing_secret": SLACK_SECRET},
    "feishu": {"app_id": "cli_x", "app_secret": "s", "verification_token": FEISHU_TOKEN, "encrypt_key": FEISHU_KEY},
    "wecom": {
        "corpid": CORP_ID,
        "corpsecret": "cs",
        "agent_id": "218",
        "token": WECOM_TOKEN,
        "encoding_aes_key": WECOM_AES,
    },
    "dingtalk": {"app_key": "k", "app_secret": DING_SECRET},
}


class RecordingReplier:
    """Counts replies; thread-safe because the test thread waits while the server loop replies."""

    def __init__(self) -> None:
        self.replies: list[tuple[ChannelMessage, OutboundMessage]] = []
        self.streamed: list[list[str]] = []
        self._changed = threading.Condition()

    async def reply(self, message: ChannelMessage, outbound: OutboundMessage) -> DeliveryResult:
        with self._changed:
            self.replies.append((message, outbound))
            self._changed.notify_all()
        return DeliveryResult(ok=True, platform=message.platform)

    async def stream(self, message: ChannelMessage, pieces: AsyncIterable[str]) -> DeliveryResult:
        """A channel with reply_mode streaming: every piece as it arrives, then the whole as one reply."""
        seen = [piece async for piece in pieces]
        self.streamed.append(seen)
        return await self.reply(message, OutboundMessage("".join(seen)))

    def wait_for(self, count: int, timeout: float = 30) -> list[tuple[ChannelMessage, OutboundMessage]]:
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.replies) >= count, timeout), self.replies
            return list(self.replies)


class Server:
    def __init__(self, live: LiveServer, replier: RecordingReplier, workspace: Path, handled: Handled) -> None:
        self.live, self.replier, self.workspace, self.handled = live, replier, workspace, handled
        self.client = httpx.Client(base_url=live.url, timeout=30)

    def post(self, adapter: str, body: bytes, headers: dict[str, str] | None = None, **kw: Any) -> httpx.Response:
        path = kw.pop("path", "webhook")
        return self.client.post(f"/api/v1/channel/acme~alice~{adapter}/{path}", content=body, headers=headers, **kw)

    def journal(self) -> list[Path]:
        return sorted((self.workspace / "tenants/acme/workers/alice/runtime/channels/journal").glob("*.json"))


@pytest.fixture
def server(tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer) -> Iterator[Server]:
    workspace = small_workspace(
        {"acme": ["alice"]},
        {
            "tenants/acme/workers/alice/PERSONA.md": PERSONA,
            "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json": json.dumps(CREDENTIALS),
        },
    )
    configs = tmp_path / "configs"
    configs.mkdir()
    env = scripted_env(model_server, GENWORKER_HEARTBEAT_ENABLED="true")
    app = create_app(load_settings(configs, env, workspace=workspace))
    replier = RecordingReplier()
    handled = Handled()
    with LiveServer(app) as live:
        app.state.runtime.services.channels.processor.replier = replier
        app.state.runtime.services.channels.processor.listeners.append(handled)
        s = Server(live, replier, workspace, handled)
        yield s
        s.client.close()


def slack_signed(payload: dict[str, Any], *, at: int | None = None) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(payload).encode()
    ts = str(at if at is not None else int(time.time()))
    signature = SignatureVerifier(SLACK_SECRET).generate_signature(timestamp=ts, body=body)
    return body, {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": signature, "Content-Type": "application/json"}


def slack_dm(text: str, ts: str, user: str = "U_PEER") -> dict[str, Any]:
    event = {"type": "message", "user": user, "text": text, "channel": "D1", "channel_type": "im", "ts": ts}
    return {"type": "event_callback", "event_id": f"Ev{ts}", "event": event}


def test_slack_dm_is_answered_once_despite_100_retries(server: Server, model_server: ScriptedModelServer) -> None:
    model_server.expect(Reply("Hello from Alice."))
    body, headers = slack_signed(slack_dm("hi alice", "1700000000.000100"))
    first = server.post("slack", body, headers)
    assert first.status_code == 200, first.text
    assert server.replier.wait_for(1)[0][1].text == "Hello from Alice."

    def retry(n: int) -> int:
        return server.post("slack", body, {**headers, "X-Slack-Retry-Num": str(n % 3 + 1)}).status_code

    with ThreadPoolExecutor(8) as pool:
        assert set(pool.map(retry, range(100))) == {200}
    # a later, different event is answered: by then every retry was acked without being journaled
    body2, headers2 = slack_signed(slack_dm("/help", "1700000001.000100"))
    assert server.post("slack", body2, headers2).status_code == 200
    outcomes = server.handled.wait_for("D1:1700000001.000100")
    assert outcomes == {"D1:1700000000.000100": "replied", "D1:1700000001.000100": "command"}
    replies = server.replier.replies
    assert sorted(m.event_id for m, _ in replies) == ["D1:1700000000.000100", "D1:1700000001.000100"]
    assert server.journal() == []
    assert len(model_server.requests) == 1


def test_a_streaming_channel_gets_the_answer_while_it_is_produced(
    server: Server, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("Hello from Alice, piece by piece."))
    body, headers = slack_signed(slack_dm("hi alice", "1700000009.000100"))
    assert server.post("slack-live", body, headers).status_code == 200
    ((message, outbound),) = server.replier.wait_for(1)
    assert outbound.text == "Hello from Alice, piece by piece." and message.adapter_id == "acme~alice~slack-live"
    assert len(server.replier.streamed) == 1 and len(server.replier.streamed[0]) > 1  # word by word
    assert server.handled.wait_for("D1:1700000009.000100") == {"D1:1700000009.000100": "replied"}
    assert server.journal() == []


def test_slack_url_verification_and_a_failed_run_gets_a_neutral_line(
    server: Server, model_server: ScriptedModelServer
) -> None:
    body, headers = slack_signed({"type": "url_verification", "challenge": "chal-123"})
    response = server.post("slack", body, headers)
    assert (response.status_code, response.text) == (200, "chal-123")
    model_server.expect(Fail(400, "provider exploded with secret sk-live-123"))
    body, headers = slack_signed(slack_dm("summarise", "1700000002.000100"))
    assert server.post("slack", body, headers).status_code == 200
    (_, outbound) = server.replier.wait_for(1)[0]
    assert outbound.text == FAILURE_TEXT


def test_slack_slash_command_approval_needs_an_owner(server: Server) -> None:
    ts = str(int(time.time()))
    form = b"command=%2Fapprove_confirmation&text=cf_x&user_id=U_PEER&channel_id=C1&trigger_id=T1"
    headers = {
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": SignatureVerifier(SLACK_SECRET).generate_signature(timestamp=ts, body=form),
        "Content-Type": "application/x-www-form-urlencoded",
    }
    assert server.post("slack", form, headers, path="slash").status_code == 200
    assert "only this worker's owner" in server.replier.wait_for(1)[0][1].text


def feishu_signed(data: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    iv = os.urandom(16)
    padder = padding.PKCS7(128).padder()
    plain = padder.update(json.dumps(data).encode()) + padder.finalize()
    enc = Cipher(algorithms.AES(hashlib.sha256(FEISHU_KEY.encode()).digest()), modes.CBC(iv)).encryptor()
    body = json.dumps({"encrypt": base64.b64encode(iv + enc.update(plain) + enc.finalize()).decode()}).encode()
    ts, nonce = str(int(time.time())), "n0nce"
    signature = hashlib.sha256((ts + nonce + FEISHU_KEY).encode() + body).hexdigest()
    return body, {"X-Lark-Request-Timestamp": ts, "X-Lark-Request-Nonce": nonce, "X-Lark-Signature": signature}


def feishu_group(message_id: str, text: str, mention: bool) -> dict[str, Any]:
    mentions = [{"key": "@_user_1", "id": {"open_id": "ou_bot"}, "name": "Alice", "mentioned_type": "bot"}]
    return {
        "schema": "2.0",
        "header": {"event_id": f"ev_{message_id}", "event_type": "im.message.receive_v1", "token": FEISHU_TOKEN},
        "event": {
            "sender": {"sender_id": {"open_id": "ou_sender"}, "sender_type": "user"},
            "message": {
                "message_id": message_id,
                "chat_id": "oc_group",
                "chat_type": "group",
                "message_type": "text",
                "content": json.dumps({"text": ("@_user_1 " if mention else "") + text}),
                "mentions": mentions if mention else [],
            },
        },
    }


def test_feishu_group_mention_answer_and_monitoring_fact(server: Server, model_server: ScriptedModelServer) -> None:
    model_server.expect(Reply("The report is attached."))
    for adapter, message_id, text, mention in [
        ("feishu", "om_1", "weekly report please", True),
        ("feishu", "om_2", "chatter nobody addressed", False),  # mention required: ignored
        ("feishu-watch", "om_3", "prod deploy failed", False),  # group monitoring: a sensed fact
    ]:
        body, headers = feishu_signed(feishu_group(message_id, text, mention))
        assert server.post(adapter, body, headers).status_code == 200
    outcomes = server.handled.wait_for("om_1", "om_2", "om_3")
    assert outcomes == {"om_1": "replied", "om_2": "ignored", "om_3": "sensed"}
    [(message, outbound)] = server.replier.replies
    assert (message.event_id, outbound.text) == ("om_1", "The report is attached.")
    items = asyncio.run(FileInboxStore(server.workspace).list("acme", "alice"))  # settles the journal first
    assert any("prod deploy failed" in json.dumps(item.payload, default=dict) for item in items)


def test_feishu_bad_and_good_padding_answer_alike_without_a_valid_signature(server: Server) -> None:
    """No padding oracle over HTTP: every answer before the signature is checked is the same bytes."""
    body, headers = feishu_signed(feishu_group("om_pad", "hi", mention=False))
    raw = base64.b64decode(json.loads(body)["encrypt"])

    def encrypted(blob: bytes) -> bytes:
        return json.dumps({"encrypt": base64.b64encode(blob).decode()}).encode()

    probes = [
        body,  # good padding and a real event
        encrypted(raw[:-1] + bytes([raw[-1] ^ 1])),  # bad padding
        encrypted(bytes([raw[0] ^ 1]) + raw[1:]),  # good padding, garbled JSON
        json.dumps({"encrypt": "%%%"}).encode(),  # bad base64
    ]
    probes += [encrypted(raw[:-17] + bytes([raw[-17] ^ guess]) + raw[-16:]) for guess in range(1, 256, 17)]
    forged = {**headers, "X-Lark-Signature": "0" * 64}
    answers = {
        (r.status_code, r.content)
        for probe in probes
        for sent in (forged, {})
        for r in [server.post("feishu", probe, sent)]
    }
    assert len(answers) == 1, answers
    [(status, content)] = answers
    assert status == 401 and json.loads(content)["error"]["code"] == "signature_invalid"
    assert server.post("feishu", body, headers).status_code == 200  # the signed original is still taken
    assert server.handled.wait_for("om_pad") == {"om_pad": "ignored"}  # a group message without a mention


def test_wecom_echostr_and_encrypted_message(server: Server, model_server: ScriptedModelServer) -> None:
    crypto = WeChatCrypto(WECOM_TOKEN, WECOM_AES, CORP_ID)
    now = str(int(time.time()))
    signed = crypto.encrypt_message("echo-ok", "n1", now)
    encrypt = signed.split("<Encrypt><![CDATA[")[1].split("]]>")[0]
    signature = signed.split("<MsgSignature><![CDATA[")[1].split("]]>")[0]
    query = {"msg_signature": signature, "timestamp": now, "nonce": "n1", "echostr": encrypt}
    response = server.client.get("/api/v1/channel/acme~alice~wecom/webhook", params=query)
    assert (response.status_code, response.text) == (200, "echo-ok")
    model_server.expect(Reply("收到"))
    xml = (
        f"<xml><ToUserName><![CDATA[{CORP_ID}]]></ToUserName><FromUserName><![CDATA[zhangsan]]></FromUserName>"
        "<CreateTime>1409659813</CreateTime><MsgType><![CDATA[text]]></MsgType><Content><![CDATA[你好]]></Content>"
        "<MsgId>42</MsgId><AgentID>218</AgentID></xml>"
    )
    signed = crypto.encrypt_message(xml, "n2", now)
    encrypt = signed.split("<Encrypt><![CDATA[")[1].split("]]>")[0]
    signature = signed.split("<MsgSignature><![CDATA[")[1].split("]]>")[0]
    body = f"<xml><ToUserName><![CDATA[{CORP_ID}]]></ToUserName><Encrypt><![CDATA[{encrypt}]]></Encrypt></xml>"
    params = {"msg_signature": signature, "timestamp": now, "nonce": "n2"}
    response = server.client.post("/api/v1/channel/acme~alice~wecom/webhook", params=params, content=body.encode())
    assert response.status_code == 200, response.text
    (message, outbound) = server.replier.wait_for(1)[0]
    assert (message.sender_id, message.text, outbound.text) == ("zhangsan", "你好", "收到")


def ding_headers(at_ms: int | None = None, secret: str = DING_SECRET) -> dict[str, str]:
    ts = str(at_ms if at_ms is not None else int(time.time() * 1000))
    sign = base64.b64encode(hmac.new(secret.encode(), f"{ts}\n{secret}".encode(), hashlib.sha256).digest()).decode()
    return {"timestamp": ts, "sign": sign, "Content-Type": "application/json"}


DING = {
    "msgId": "msg_ding_1",
    "conversationId": "cid_1",
    "conversationType": "2",
    "isInAtList": True,
    "senderStaffId": "staff_1",
    "senderNick": "Li",
    "sessionWebhook": "https://oapi.dingtalk.com/robot/sendBySession?session=s",
    "sessionWebhookExpiredTime": 1700003600000,
    "msgtype": "text",
    "text": {"content": " release status?"},
}


def test_dingtalk_group_mention_is_answered_with_its_session_webhook(
    server: Server, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("Release is green."))
    assert server.post("dingtalk", json.dumps(DING).encode(), ding_headers()).status_code == 200
    (message, outbound) = server.replier.wait_for(1)[0]
    assert outbound.text == "Release is green."
    assert message.reply_context["session_webhook"].endswith("session=s")


def test_a_replayed_dingtalk_sign_is_refused(server: Server, caplog: pytest.LogCaptureFixture) -> None:
    """DingTalk's sign covers only the timestamp: a captured pair must not carry a second message."""
    headers = ding_headers()
    first = {**DING, "msgId": "msg_replay_1", "text": {"content": "/help"}}
    assert server.post("dingtalk", json.dumps(first).encode(), headers).status_code == 200
    assert server.post("dingtalk", json.dumps(first).encode(), headers).status_code == 200  # DingTalk retrying
    forged = {**DING, "msgId": "msg_replay_2", "text": {"content": "/status"}}  # new msgId, captured headers
    response = server.post("dingtalk", json.dumps(forged).encode(), headers)
    assert response.status_code == 401 and response.json()["error"]["code"] == "replayed", response.text
    assert "check replay failed" in caplog.text
    second = {**DING, "msgId": "msg_replay_3", "text": {"content": "/help"}}  # freshly signed: taken
    fresh = ding_headers(at_ms=int(headers["timestamp"]) + 1)
    assert server.post("dingtalk", json.dumps(second).encode(), fresh).status_code == 200
    outcomes = server.handled.wait_for("msg_replay_1", "msg_replay_3")
    assert "msg_replay_2" not in outcomes
    assert sorted(m.event_id for m, _ in server.replier.replies) == ["msg_replay_1", "msg_replay_3"]


def test_probes_are_refused_and_nothing_is_processed(server: Server, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="genworker.api.channels")
    slack_body, slack_headers = slack_signed(slack_dm("hi", "1700000009.000100"))
    ding = json.dumps(DING).encode()
    feishu_body, feishu_headers = feishu_signed(feishu_group("om_9", "hi", True))
    now = str(int(time.time()))
    wrong_corp = WeChatCrypto(WECOM_TOKEN, WECOM_AES, "wwAnotherCorp0001").encrypt_message("<xml/>", "n", now)
    encrypt = wrong_corp.split("<Encrypt><![CDATA[")[1].split("]]>")[0]
    signature = wrong_corp.split("<MsgSignature><![CDATA[")[1].split("]]>")[0]
    wecom_body = f"<xml><Encrypt><![CDATA[{encrypt}]]></Encrypt></xml>".encode()
    wecom_url = "/api/v1/channel/acme~alice~wecom/webhook"
    wrong_corp_query = {"msg_signature": signature, "timestamp": now, "nonce": "n"}
    forged_slack = {**slack_headers, "X-Slack-Signature": "v0=" + "0" * 64}
    stale_slack = slack_signed(slack_dm("hi", "1.2"), at=int(time.time()) - 600)
    forged_feishu = {**feishu_headers, "X-Lark-Signature": "f" * 64}
    stale_ding = ding_headers(at_ms=int(time.time() * 1000) - 7_200_000)
    huge = b"{" + b" " * (1024 * 1024 + 1) + b"}"
    dtd = '<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE x [<!ENTITY a "aaaa">]><xml><Encrypt>&a;</Encrypt></xml>'
    utf16_dtd = dtd.encode("utf-16")  # no ASCII "<!DOCTYPE" for a byte check to find
    post = server.client.post
    probes: list[tuple[str, Callable[[], httpx.Response], int, str]] = [
        ("forged slack", lambda: server.post("slack", slack_body, forged_slack), 401, "signature_invalid"),
        ("stale slack", lambda: server.post("slack", *stale_slack), 401, "stale_timestamp"),
        ("no slack headers", lambda: server.post("slack", slack_body), 401, "missing_header"),
        ("forged feishu", lambda: server.post("feishu", feishu_body, forged_feishu), 401, "signature_invalid"),
        ("feishu body without its headers", lambda: server.post("feishu", feishu_body, {}), 401, "signature_invalid"),
        ("wrong corp id", lambda: post(wecom_url, params=wrong_corp_query, content=wecom_body), 403, "wrong_corp_id"),
        ("wecom unsigned", lambda: post(wecom_url, content=wecom_body), 401, "missing_parameter"),
        ("malformed xml", lambda: post(wecom_url, params=wrong_corp_query, content=b"<xml><E"), 400, "malformed_body"),
        ("UTF-16 DTD", lambda: post(wecom_url, params=wrong_corp_query, content=utf16_dtd), 400, "malformed_body"),
        ("forged dingtalk", lambda: server.post("dingtalk", ding, ding_headers(secret="x")), 401, "signature_invalid"),
        ("stale dingtalk", lambda: server.post("dingtalk", ding, stale_ding), 401, "stale_timestamp"),
        ("malformed json", lambda: server.post("dingtalk", b'{"msgId": ', ding_headers()), 400, "malformed_body"),
        ("oversized", lambda: server.post("dingtalk", huge, ding_headers()), 413, "payload_too_large"),
        (
            "unknown adapter",
            lambda: post("/api/v1/channel/acme~alice~teams/webhook", content=b"{}"),
            404,
            "channel_not_found",
        ),
        (
            "GET, POST-only platform",
            lambda: server.client.get("/api/v1/channel/acme~alice~slack/webhook"),
            405,
            "method_not_allowed",
        ),
    ]
    for name, send, status, code in probes:
        response = send()
        assert response.status_code == status, (name, response.text)
        assert response.json()["error"]["code"] == code, (name, response.text)
    for check in ("signature", "timestamp", "missing_header", "corp_id", "missing_parameter", "xml", "json"):
        assert f"check {check} failed" in caplog.text, check
    assert server.journal() == []
    assert server.replier.replies == []
    dedupe = server.workspace / "tenants/acme/workers/alice/runtime/channels/dedupe"
    assert not dedupe.exists() or not list(dedupe.rglob("*.json"))
