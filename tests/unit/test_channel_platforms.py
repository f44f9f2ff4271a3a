"""Inbound verification and normalisation per platform, with payloads made by the vendors' own code.

Slack signatures come from slack_sdk, WeCom ciphertexts from wechatpy (plus WeCom's published
sample vector), Feishu ciphertexts from the documented algorithm in this file and are also fed
to lark-oapi's own dispatcher, plus Feishu's published vector; DingTalk signs with the
documented algorithm here and dingtalk_stream parses the same payload independently.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from dingtalk_stream import ChatbotMessage
from slack_sdk.signature import SignatureVerifier
from wechatpy.enterprise.crypto import PrpCrypto, WeChatCrypto

from genworker.channels import dingtalk, feishu, slack, wecom
from genworker.channels.base import InboundKind, InboundRequest
from genworker.channels.crypto import feishu_decrypt, wecom_decrypt, wecom_key
from genworker.channels.errors import ChannelConfigError, ChannelError, VerificationError
from genworker.channels.registry import ChannelBinding
from genworker.testing.credentials import DINGTALK_APP_SECRET, SLACK_SIGNING_SECRET
from genworker.workspace.models.credentials import (
    DingTalkCredentials,
    FeishuCredentials,
    SlackCredentials,
    WeComCredentials,
)
from genworker.workspace.models.persona import Channel

SLACK_SECRET = SLACK_SIGNING_SECRET
FEISHU_TOKEN, FEISHU_KEY = "v-token-test", "e-key-test"
WECOM_TOKEN, WECOM_AES, CORP_ID = "QDG6eK", "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C", "wx5823bf96d3bd56c7"
DING_SECRET = DINGTALK_APP_SECRET


def binding(platform: str, credentials: Any, **features: Any) -> ChannelBinding:
    channel = Channel.model_validate({"type": platform, "features": features})
    return ChannelBinding(f"acme~w~{platform}", "acme", "w", platform, channel, credentials)


SLACK = binding("slack", SlackCredentials(bot_token="xoxb-test", signing_secret=SLACK_SECRET))
FEISHU = binding(
    "feishu",
    FeishuCredentials(app_id="cli_x", app_secret="s", verification_token=FEISHU_TOKEN, encrypt_key=FEISHU_KEY),
)
FEISHU_PLAIN = binding("feishu", FeishuCredentials(app_id="cli_x", app_secret="s", verification_token=FEISHU_TOKEN))
WECOM = binding(
    "wecom",
    WeComCredentials(corpid=CORP_ID, corpsecret="cs", agent_id="218", token=WECOM_TOKEN, encoding_aes_key=WECOM_AES),
)
DINGTALK = binding("dingtalk", DingTalkCredentials(app_key="k", app_secret=DING_SECRET))


def request(
    body: bytes,
    headers: dict[str, str] | None = None,
    *,
    query: dict[str, str] | None = None,
    method: str = "POST",
    kind: InboundKind = "webhook",
    at: datetime | None = None,
) -> InboundRequest:
    return InboundRequest(
        method,
        kind,
        {k.lower(): v for k, v in (headers or {}).items()},
        query or {},
        body,
        at or datetime.now(UTC),
    )


def refused(exc: pytest.ExceptionInfo[ChannelError], status: int, check: str) -> None:
    assert exc.value.status == status, exc.value.message
    assert exc.value.check == check, exc.value.message


# -- Slack ---------------------------------------------------------------------------------------


def slack_headers(body: bytes, *, at: int | None = None, secret: str = SLACK_SECRET) -> dict[str, str]:
    ts = str(at if at is not None else int(time.time()))
    return {
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": SignatureVerifier(secret).generate_signature(timestamp=ts, body=body),
    }


def slack_event(text: str = "<@UBOT> hello there", channel_type: str = "channel", **event: Any) -> bytes:
    payload = {
        "type": "event_callback",
        "event_id": "Ev001",
        "authorizations": [{"user_id": "UBOT", "is_bot": True}],
        "event": {
            "type": "message",
            "user": "U123",
            "text": text,
            "channel": "C42",
            "channel_type": channel_type,
            "ts": "1700000000.000100",
            **event,
        },
    }
    return json.dumps(payload).encode()


def test_slack_event_signed_by_slack_sdk_becomes_a_message() -> None:
    body = slack_event(thread_ts="1699999999.000001")
    ack = slack.parse(SLACK, request(body, slack_headers(body)))
    m = ack.message
    assert m is not None
    assert (m.event_id, m.chat_id, m.chat_type, m.sender_id) == ("C42:1700000000.000100", "C42", "group", "U123")
    assert m.text == "hello there" and m.mentioned_bot and m.mentions == ("UBOT",)
    assert m.thread_id == "1699999999.000001" and m.reply_context["slack_event_id"] == "Ev001"


def test_slack_url_verification_answers_the_challenge() -> None:
    body = json.dumps(
        {"type": "url_verification", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}
    ).encode()
    ack = slack.parse(SLACK, request(body, slack_headers(body)))
    assert ack.message is None and ack.body == b"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"


def test_our_slack_signature_is_accepted_by_slack_sdk() -> None:
    from genworker.channels.crypto import slack_signature

    ts, body = str(int(time.time())), b'{"a":1}'
    assert SignatureVerifier(SLACK_SECRET).is_valid(body, ts, slack_signature(SLACK_SECRET, ts, body))


def test_slack_slash_command_and_button_become_im_commands() -> None:
    form = (
        b"command=%2Fapprove_confirmation&text=cf_1&user_id=U1&channel_id=D9&channel_name=directmessage&trigger_id=T1"
    )
    ack = slack.parse(SLACK, request(form, slack_headers(form), kind="slash"))
    assert ack.message is not None and ack.message.text == "/approve_confirmation cf_1"
    assert ack.message.chat_type == "p2p" and ack.body == b""
    payload = {
        "type": "block_actions",
        "trigger_id": "T2",
        "user": {"id": "U1"},
        "channel": {"id": "C1"},
        "actions": [{"action_id": "a", "value": "reject_suggestion:sg_9", "action_ts": "1"}],
    }
    from urllib.parse import urlencode

    body = urlencode({"payload": json.dumps(payload)}).encode()
    ack = slack.parse(SLACK, request(body, slack_headers(body), kind="interactivity"))
    assert ack.message is not None and ack.message.text == "/reject_suggestion sg_9"


def test_slack_bot_messages_and_edits_are_acked_not_handled() -> None:
    body = slack_event(bot_id="B1")
    assert slack.parse(SLACK, request(body, slack_headers(body))).message is None
    body = slack_event(subtype="message_changed")
    assert slack.parse(SLACK, request(body, slack_headers(body))).message is None


def test_slack_probes_are_refused() -> None:
    body = slack_event()
    with pytest.raises(VerificationError) as exc:
        slack.parse(SLACK, request(body, slack_headers(body, secret="not-the-secret")))
    refused(exc, 401, "signature")
    with pytest.raises(VerificationError) as exc:
        slack.parse(SLACK, request(body, slack_headers(body, at=int(time.time()) - 301)))
    refused(exc, 401, "timestamp")
    with pytest.raises(VerificationError) as exc:
        slack.parse(SLACK, request(body, {"X-Slack-Request-Timestamp": str(int(time.time()))}))
    refused(exc, 401, "missing_header")
    tampered = body.replace(b"hello", b"HELLO")
    with pytest.raises(VerificationError) as exc:
        slack.parse(SLACK, request(tampered, slack_headers(body)))
    refused(exc, 401, "signature")
    with pytest.raises(ChannelError) as err:
        slack.parse(SLACK, request(b"{not json", slack_headers(b"{not json")))
    refused(err, 400, "json")
    with pytest.raises(ChannelConfigError):
        slack.parse(binding("slack", None), request(body, slack_headers(body)))


# -- Feishu --------------------------------------------------------------------------------------


def feishu_encrypt(plain: bytes, key: str = FEISHU_KEY) -> str:
    """The documented algorithm: base64(IV ‖ AES-256-CBC(PKCS7(plain))), key = SHA-256(encrypt_key)."""
    iv = os.urandom(16)
    padder = padding.PKCS7(128).padder()
    padded = padder.update(plain) + padder.finalize()
    encryptor = Cipher(algorithms.AES(hashlib.sha256(key.encode()).digest()), modes.CBC(iv)).encryptor()
    return base64.b64encode(iv + encryptor.update(padded) + encryptor.finalize()).decode()


def feishu_event(chat_type: str = "group", token: str = FEISHU_TOKEN, mention_bot: bool = True) -> dict[str, Any]:
    mentions = [{"key": "@_user_1", "id": {"open_id": "ou_bot"}, "name": "Helper", "mentioned_type": "bot"}]
    return {
        "schema": "2.0",
        "header": {
            "event_id": "5e3702a84e847582be8db7fb73283c02",
            "event_type": "im.message.receive_v1",
            "create_time": "1608725989000",
            "token": token,
            "app_id": "cli_x",
            "tenant_key": "2ca1d211f64f6438",
        },
        "event": {
            "sender": {"sender_id": {"open_id": "ou_sender", "user_id": "u1"}, "sender_type": "user"},
            "message": {
                "message_id": "om_5ce6d572455d361153b7cb51da133945",
                "root_id": "om_root",
                "chat_id": "oc_5ce6d572455d361153b7xx51da133945",
                "chat_type": chat_type,
                "message_type": "text",
                "content": json.dumps({"text": "@_user_1 weekly report please"}),
                "mentions": mentions if mention_bot else [],
            },
        },
    }


def feishu_signed(data: dict[str, Any], *, key: str = FEISHU_KEY) -> tuple[bytes, dict[str, str]]:
    body = json.dumps({"encrypt": feishu_encrypt(json.dumps(data).encode(), key)}).encode()
    ts, nonce = str(int(time.time())), "13jd8f"
    signature = hashlib.sha256((ts + nonce + key).encode() + body).hexdigest()
    return body, {"X-Lark-Request-Timestamp": ts, "X-Lark-Request-Nonce": nonce, "X-Lark-Signature": signature}


def test_feishu_published_decryption_vector() -> None:
    # https://open.feishu.cn/document/server-docs/event-subscription-guide/event-subscription-configure-/encrypt-key-encryption-configuration-case
    assert feishu_decrypt("test key", "P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk=") == b"hello world"


def test_feishu_encrypted_signed_event_becomes_a_message_and_lark_sdk_accepts_it() -> None:
    body, headers = feishu_signed(feishu_event())
    ack = feishu.parse(FEISHU, request(body, headers))
    m = ack.message
    assert m is not None
    assert (m.event_id, m.chat_type, m.sender_id, m.thread_id) == (
        "om_5ce6d572455d361153b7cb51da133945",
        "group",
        "ou_sender",
        "om_root",
    )
    assert m.text == "weekly report please" and m.mentioned_bot
    # the same fixture through the vendor SDK's own dispatcher: decrypts, checks token and signature
    import lark_oapi as lark
    import lark_oapi.ws.client as lark_ws
    from lark_oapi.core.model import RawRequest

    if not lark_ws.loop.is_running():  # the SDK opens an event loop at import; we never use it
        lark_ws.loop.close()

    seen: list[Any] = []
    handler = (
        lark.EventDispatcherHandler.builder(FEISHU_KEY, FEISHU_TOKEN)
        .register_p2_im_message_receive_v1(seen.append)
        .build()
    )
    raw = RawRequest()
    raw.uri, raw.body, raw.headers = "/webhook", body, headers
    response = handler.do(raw)
    assert response.status_code == 200, response.content
    assert seen[0].event.message.message_id == m.event_id


def test_feishu_url_verification_checks_the_token() -> None:
    data = {"challenge": "ajls384kdjx98XX", "token": FEISHU_TOKEN, "type": "url_verification"}
    body = json.dumps({"encrypt": feishu_encrypt(json.dumps(data).encode())}).encode()
    ack = feishu.parse(FEISHU, request(body))
    assert json.loads(ack.body) == {"challenge": "ajls384kdjx98XX"}
    plain = json.dumps({**data, "token": "forged"}).encode()
    with pytest.raises(VerificationError) as exc:
        feishu.parse(FEISHU_PLAIN, request(plain))
    refused(exc, 403, "verification_token")


def test_feishu_probes_are_refused() -> None:
    body, headers = feishu_signed(feishu_event())
    with pytest.raises(VerificationError) as exc:
        feishu.parse(FEISHU, request(body, {**headers, "X-Lark-Signature": "0" * 64}))
    refused(exc, 401, "signature")
    with pytest.raises(VerificationError) as exc:
        feishu.parse(FEISHU, request(body, {k: v for k, v in headers.items() if k != "X-Lark-Signature"}))
    refused(exc, 401, "missing_header")
    late = datetime.fromtimestamp(time.time() + feishu.REPLAY_WINDOW_S + 60, UTC)
    with pytest.raises(VerificationError) as exc:
        feishu.parse(FEISHU, request(body, headers, at=late))  # the same signed request, replayed a day later
    refused(exc, 401, "timestamp")
    forged_body, forged_headers = feishu_signed(feishu_event(token="forged"))
    with pytest.raises(VerificationError) as exc:
        feishu.parse(FEISHU, request(forged_body, forged_headers))
    refused(exc, 403, "verification_token")
    wrong_key_body, wrong_key_headers = feishu_signed(feishu_event(), key="another-key")
    with pytest.raises(VerificationError) as exc:
        feishu.parse(FEISHU, request(wrong_key_body, wrong_key_headers))
    refused(exc, 401, "signature")  # checked over the raw body: nothing was decrypted
    with pytest.raises(VerificationError) as exc:
        feishu.parse(FEISHU, request(json.dumps(feishu_event()).encode()))  # plain body while encryption is on
    refused(exc, 401, "encryption")
    with pytest.raises(ChannelError) as err:
        feishu.parse(FEISHU_PLAIN, request(b"[1, 2"))
    refused(err, 400, "json")


def test_feishu_failures_before_the_signature_all_answer_alike() -> None:
    """No decryption oracle: bad padding, good padding with garbage, bad base64, a valid event and a
    forged handshake give the same status, code and message without a valid signature."""
    body, headers = feishu_signed(feishu_event())
    raw = base64.b64decode(json.loads(body)["encrypt"])

    def encrypted(blob: bytes) -> bytes:
        return json.dumps({"encrypt": base64.b64encode(blob).decode()}).encode()

    bodies = [
        body,  # a real event: good padding, good JSON
        encrypted(raw[:-1] + bytes([raw[-1] ^ 1])),  # bad padding
        encrypted(bytes([raw[0] ^ 1]) + raw[1:]),  # good padding, the first block garbled ("z" for "{")
        encrypted(raw[:16] + raw[16:-16]),  # one block short
        json.dumps({"encrypt": "%%%"}).encode(),  # bad base64
        json.dumps(feishu_event()).encode(),  # not encrypted
        b"[1, 2",  # not JSON
        encrypted(base64.b64decode(feishu_encrypt(b'{"type": "url_verification", "token": "x", "challenge": "c"}'))),
    ]
    forged = {**headers, "X-Lark-Signature": "0" * 64}
    answers = set()
    for candidate in bodies:
        for sent in (forged, {}, {k: v for k, v in headers.items() if k != "X-Lark-Request-Nonce"}):
            with pytest.raises(VerificationError) as exc:
                feishu.parse(FEISHU, request(candidate, sent))
            answers.add((exc.value.status, exc.value.code, exc.value.message))
    assert answers == {(401, "signature_invalid", feishu.UNAUTHENTICATED)}


def test_feishu_plain_p2p_event_without_mentions() -> None:
    ack = feishu.parse(FEISHU_PLAIN, request(json.dumps(feishu_event("p2p", mention_bot=False)).encode()))
    assert ack.message is not None and ack.message.chat_type == "p2p" and not ack.message.mentioned_bot


# -- WeCom ---------------------------------------------------------------------------------------

WECOM_TEXT = (
    "<xml><ToUserName><![CDATA[{corp}]]></ToUserName><FromUserName><![CDATA[zhangsan]]></FromUserName>"
    "<CreateTime>1348831860</CreateTime><MsgType><![CDATA[text]]></MsgType>"
    "<Content><![CDATA[周报 please]]></Content><MsgId>1234567890123456</MsgId><AgentID>218</AgentID></xml>"
)


def wecom_post(corp: str = CORP_ID, text: str | None = None, at: int | None = None) -> tuple[bytes, dict[str, str]]:
    crypto = WeChatCrypto(WECOM_TOKEN, WECOM_AES, corp)
    ts = str(at if at is not None else int(time.time()))
    signed = crypto.encrypt_message(text or WECOM_TEXT.format(corp=corp), "1372623149", ts)
    fields = wecom.parse_xml(signed.encode())
    query = {"msg_signature": fields["MsgSignature"], "timestamp": fields["TimeStamp"], "nonce": fields["Nonce"]}
    body = f"<xml><ToUserName><![CDATA[{corp}]]></ToUserName><Encrypt><![CDATA[{fields['Encrypt']}]]></Encrypt></xml>"
    return body.encode(), query


def test_wecom_published_sample_vector() -> None:
    # https://developer.work.weixin.qq.com/document/path/90968 (WXBizMsgCrypt samples)
    echo = "P9nAzCzyDtyTWESHep1vC5X9xho/qYX3Zpb4yKa9SKld1DsH3Iyt3tP3zNdtp+4RPcs8TgAE7OaBO+FZXvnaqQ=="
    query = {"msg_signature": "5c45ff5e21c57e6ad56bac8758b79b1d9ac89fd3", "timestamp": "1409659589"}
    at = datetime.fromtimestamp(1409659589, UTC)  # the sample's own time: it is older than the replay window
    ack = wecom.parse(WECOM, request(b"", query={**query, "nonce": "263014780", "echostr": echo}, method="GET", at=at))
    assert ack.body == b"1616140317555161061"
    plain, receive_id = wecom_decrypt(wecom_key(WECOM_AES), SAMPLE_ENCRYPT)
    assert receive_id == CORP_ID and b"<Content><![CDATA[hello]]></Content>" in plain
    body = f"<xml><ToUserName><![CDATA[{CORP_ID}]]></ToUserName><Encrypt><![CDATA[{SAMPLE_ENCRYPT}]]></Encrypt></xml>"
    query = {
        "msg_signature": "477715d11cdb4164915debcba66cb864d751f3e6",
        "timestamp": "1409659813",
        "nonce": "1372623149",
    }
    ack = wecom.parse(WECOM, request(body.encode(), query=query, at=datetime.fromtimestamp(1409659813, UTC)))
    assert ack.message is not None and ack.message.text == "hello" and ack.message.event_id == "4561255354251345929"


def test_wecom_message_encrypted_by_wechatpy_becomes_a_message() -> None:
    body, query = wecom_post()
    ack = wecom.parse(WECOM, request(body, query=query))
    m = ack.message
    assert m is not None
    assert (m.event_id, m.sender_id, m.chat_type, m.text) == ("1234567890123456", "zhangsan", "p2p", "周报 please")


def test_wecom_echostr_encrypted_by_wechatpy() -> None:
    echo = PrpCrypto(wecom_key(WECOM_AES)).encrypt("echo-42", CORP_ID).decode()
    crypto = WeChatCrypto(WECOM_TOKEN, WECOM_AES, CORP_ID)
    from wechatpy.utils import WeChatSigner

    signer = WeChatSigner()
    signer.add_data(WECOM_TOKEN, "1409659589", "n1", echo)
    query = {"msg_signature": signer.signature, "timestamp": "1409659589", "nonce": "n1", "echostr": echo}
    assert crypto.check_signature(signer.signature, "1409659589", "n1", echo) == "echo-42"
    at = datetime.fromtimestamp(1409659589, UTC)
    assert wecom.parse(WECOM, request(b"", query=query, method="GET", at=at)).body == b"echo-42"


def test_wecom_probes_are_refused() -> None:
    body, query = wecom_post()
    with pytest.raises(VerificationError) as exc:
        wecom.parse(WECOM, request(body, query={**query, "msg_signature": "0" * 40}))
    refused(exc, 401, "signature")
    with pytest.raises(VerificationError) as exc:
        wecom.parse(WECOM, request(body, query={k: v for k, v in query.items() if k != "msg_signature"}))
    refused(exc, 401, "missing_parameter")
    stale_body, stale_query = wecom_post(at=int(time.time()) - wecom.REPLAY_WINDOW_S - 60)
    with pytest.raises(VerificationError) as exc:
        wecom.parse(WECOM, request(stale_body, query=stale_query))  # validly signed, replayed two days late
    refused(exc, 401, "timestamp")
    other_body, other_query = wecom_post(corp="wwOtherCorp000001")
    with pytest.raises(VerificationError) as exc:
        wecom.parse(WECOM, request(other_body, query=other_query))
    refused(exc, 403, "corp_id")
    with pytest.raises(ChannelError) as err:
        wecom.parse(WECOM, request(b"<xml><Encrypt>", query=query))
    refused(err, 400, "xml")
    bomb = '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><xml><Encrypt>&a;</Encrypt></xml>'
    utf16 = bomb.replace('"1.0"', '"1.0" encoding="UTF-16"').encode("utf-16")  # no ASCII "<!DOCTYPE" bytes
    utf16_le = bomb.replace('"1.0"', '"1.0" encoding="UTF-16LE"').encode("utf-16-le")  # no BOM either
    for refused_body in (bomb.encode(), utf16, utf16_le):
        with pytest.raises(ChannelError) as err:
            wecom.parse(WECOM, request(refused_body, query=query))
        refused(err, 400, "xml")
        assert "DOCTYPE" in err.value.message, err.value.message


# -- DingTalk ------------------------------------------------------------------------------------


def ding_headers(*, at_ms: int | None = None, secret: str = DING_SECRET) -> dict[str, str]:
    """The documented algorithm: base64(HMAC-SHA256(app_secret, "{timestamp}\\n{app_secret}"))."""
    ts = str(at_ms if at_ms is not None else int(time.time() * 1000))
    sign = base64.b64encode(hmac.new(secret.encode(), f"{ts}\n{secret}".encode(), hashlib.sha256).digest()).decode()
    return {"timestamp": ts, "sign": sign}


DING_MESSAGE = {
    "conversationId": "cidPX8g==",
    "atUsers": [{"dingtalkId": "$:LWCP_v1:$bot"}],
    "chatbotUserId": "$:LWCP_v1:$bot",
    "msgId": "msgPZJz4jdbgTfdj4ALmzQjVw==",
    "senderNick": "Zhang San",
    "isAdmin": True,
    "senderStaffId": "manager123",
    "sessionWebhookExpiredTime": 1700003600000,
    "createAt": 1700000000000,
    "conversationType": "2",
    "senderId": "$:LWCP_v1:$sender",
    "conversationTitle": "Ops",
    "isInAtList": True,
    "sessionWebhook": "https://oapi.dingtalk.com/robot/sendBySession?session=abc",
    "text": {"content": " status of the release"},
    "robotCode": "dingbot",
    "msgtype": "text",
}


def test_dingtalk_signed_message_matches_the_sdk_parser() -> None:
    body = json.dumps(DING_MESSAGE).encode()
    m = dingtalk.parse(DINGTALK, request(body, ding_headers())).message
    sdk = ChatbotMessage.from_dict(json.loads(body))
    assert m is not None
    assert m.event_id == sdk.message_id and m.chat_id == sdk.conversation_id
    assert m.sender_id == sdk.sender_staff_id and m.sender_name == sdk.sender_nick
    assert m.text == sdk.text.content.strip() and m.mentioned_bot == sdk.is_in_at_list
    assert m.chat_type == "group" and sdk.conversation_type == "2"
    assert m.reply_context["session_webhook"] == sdk.session_webhook


def test_dingtalk_probes_are_refused() -> None:
    body = json.dumps(DING_MESSAGE).encode()
    with pytest.raises(VerificationError) as exc:
        dingtalk.parse(DINGTALK, request(body, ding_headers(secret="wrong")))
    refused(exc, 401, "signature")
    stale = int(time.time() * 1000) - 3601 * 1000
    with pytest.raises(VerificationError) as exc:
        dingtalk.parse(DINGTALK, request(body, ding_headers(at_ms=stale)))
    refused(exc, 401, "timestamp")
    with pytest.raises(VerificationError) as exc:
        dingtalk.parse(DINGTALK, request(body, {"timestamp": str(int(time.time() * 1000))}))
    refused(exc, 401, "missing_header")
    with pytest.raises(ChannelError) as err:
        dingtalk.parse(DINGTALK, request(b"\xff\xfe", ding_headers()))
    refused(err, 400, "json")


SAMPLE_ENCRYPT = (
    "RypEvHKD8QQKFhvQ6QleEB4J58tiPdvo+rtK1I9qca6aM/wvqnLSV5zEPeusUiX5L5X/0lWfrf0QADHHhGd3QczcdCUpj911L3vg3W/sYYvu"
    "JTs3TUUkSUXxaccAS0qhxchrRYt66wiSpGLYL42aM6A8dTT+6k4aSknmPj48kzJs8qLjvd4Xgpue06DOdnLxAUHzM6+kDZ+HMZfJYuR+Ltw"
    "Gc2hgf5gsijff0ekUNXZiqATP7PF5mZxZ3Izoun1s4zG4LUMnvw2r+KqCKIw+3IQH03v+BCA9nMELNqbSf6tiWSrXJB3LAVGUcallcrw8V"
    "2t9EL4EhzJWrQUax5wLVMNS0+rUPA3k22Ncx4XXZS9o0MBH27Bo6BpNelZpS+/uh9KsNlY6bHCmJU9p8g7m3fVKn28H3KDYA5Pl/T8Z1pt"
    "DAVe0lXdQ2YoyyH2uyPIGHBZZIs2pDBS8R07+qN+E7Q=="
)
