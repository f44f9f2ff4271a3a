"""IM without a public URL: each vendor SDK's real long-connection client (slack_sdk Socket Mode,
lark-oapi's ws client, dingtalk-stream) connects the real server (uvicorn, LiteLLM to the scripted
model, the real outbound delivery) to a local stand-in of the vendor, found through the SDK's own
endpoint setting (GENWORKER_*_API_BASE). The stand-ins are hand-written from the vendors'
published protocols (genworker.testing.longconn): no real vendor can be reached from here.

Each test: connect, receive a message, ack it only once stored, reply once; lose the connection
mid-stream (with an ack that never arrived) and reconnect; the event sent again is acked and not
answered twice. Waits are on conditions with timeouts, never sleeps.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from genworker.api.app import create_app
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, scripted_env
from genworker.testing.channels import Handled
from genworker.testing.live_server import LiveServer
from genworker.testing.longconn import DingTalkStream, FeishuLongConnection, SlackSocketMode, StandIn, Watch
from genworker.testing.longconn.dingtalk import bot_message
from genworker.testing.longconn.feishu import message_event as feishu_event
from genworker.testing.longconn.slack import message_event as slack_event

ADMIN = "admin-token-longconn"
APP_TOKEN = "xapp-1-A0STANDIN-1-secret"
FEISHU_APP = ("cli_standin_app", "feishu-app-secret")
DINGTALK_APP = ("dingstandinclient", "dingtalk-client-secret")


def persona(channel: str) -> str:
    return f"---\nidentity: {{name: Alice, worker_id: alice}}\nchannels:\n  - {channel}\n---\nYou are alice.\n"


class Server:
    """The real app on a workspace, with its processor's and long connections' listeners."""

    def __init__(self, app: Any, live: LiveServer) -> None:
        self.live = live
        runtime = app.state.runtime
        self.runtime = runtime
        self.handled = Handled()
        runtime.channels.processor.listeners.append(self.handled)
        self.watch = Watch(runtime.long_connections)
        self.client = httpx.Client(base_url=live.url, timeout=30, headers={"Authorization": f"Bearer {ADMIN}"})

    def debug_connection(self, adapter_id: str) -> dict[str, Any]:
        component = self.client.get("/api/v1/debug/runtime").json()["components"]["long_connections"]
        [found] = [c for c in component["details"]["connections"] if c["adapter_id"] == adapter_id]
        return {"component": component["status"], **found}

    def metric(self, name: str, **labels: str) -> float:
        wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
        for line in self.client.get("/metrics").text.splitlines():
            if line.startswith(f"{name}{{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"{name}{{{wanted}}} is not on /metrics")


@pytest.fixture
def serve(
    tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer
) -> Iterator[Callable[[StandIn, str, dict[str, Any]], Server]]:
    """`serve(stand_in, channel_yaml, credentials)`: the stand-in and the server, both running."""
    stack: list[Any] = []

    def start(stand_in: StandIn, channel: str, credentials: dict[str, Any]) -> Server:
        workspace = small_workspace(
            {"acme": ["alice"]},
            {
                "tenants/acme/workers/alice/PERSONA.md": persona(channel),
                "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json": json.dumps(credentials),
            },
        )
        served = stand_in.serve()
        url = served.__enter__()
        stack.append(served)
        env = scripted_env(
            model_server,
            GENWORKER_ADMIN_TOKEN=ADMIN,
            GENWORKER_HOT_RELOAD="false",
            GENWORKER_SLACK_API_BASE=url,
            GENWORKER_FEISHU_API_BASE=url,
            GENWORKER_DINGTALK_API_BASE=url,
            GENWORKER_DINGTALK_OAPI_API_BASE=url,
            GENWORKER_LONGCONN_BACKOFF_BASE_S="0.01",
            GENWORKER_LONGCONN_BACKOFF_MAX_S="0.05",
        )
        (tmp_path / "configs").mkdir(exist_ok=True)
        app = create_app(load_settings(tmp_path / "configs", env, workspace=workspace))
        live = LiveServer(app)
        live.__enter__()
        stack.append(live)
        server = Server(app, live)
        stack.append(server.client)
        return server

    yield start
    for item in reversed(stack):
        if isinstance(item, httpx.Client):
            item.close()
        else:
            item.__exit__(None, None, None)


def test_slack_socket_mode(serve: Callable[..., Server], model_server: ScriptedModelServer) -> None:
    standin = SlackSocketMode(APP_TOKEN)
    creds = {"slack": {"bot_token": "xoxb-standin", "signing_secret": "unused-here", "app_token": APP_TOKEN}}
    server = serve(standin, "{type: slack, connection_mode: Socket_Mode}", creds)
    adapter = "acme~alice~slack"
    standin.wait_connected()
    server.watch.status(adapter, "connected")
    assert standin.opened == [{"token": APP_TOKEN}]  # apps.connections.open with the app-level token

    # a message in a thread: stored, acked, answered once in that thread
    model_server.expect(Reply("pong"))
    first = standin.push(slack_event("ping", "1700000001.000100", thread_ts="1700000000.000001"))
    assert standin.wait_ack(first).body == {"envelope_id": first}
    server.handled.wait_for("D1:1700000001.000100")
    [reply] = standin.vendor.wait_for("/chat.postMessage", 1)
    assert reply.body["channel"] == "D1" and reply.body["text"] == "pong"
    assert reply.body["thread_ts"] == "1700000000.000001"

    # the connection drops with the next ack: Slack never saw it, so it sends the event again
    model_server.expect(Reply("second answer"))
    standin.lose_next_ack()
    second = slack_event("second", "1700000002.000200")
    lost = standin.push(second)
    assert standin.wait_ack(lost).lost
    standin.wait_connected(total=2)
    server.watch.until(adapter, lambda s: s.status == "connected" and s.reconnects == 1)
    again = standin.push(second, retry=1)
    standin.wait_ack(again)
    server.handled.wait_for("D1:1700000002.000200")
    replies = standin.vendor.wait_for("/chat.postMessage", 2)
    assert [r.body["text"] for r in replies] == ["pong", "second answer"]
    assert server.handled.history.count(("D1:1700000002.000200", "replied")) == 1

    # IM commands work over the connection as over webhooks
    help_ = standin.push(slack_event("/help", "1700000003.000300"))
    standin.wait_ack(help_)
    server.handled.wait_for("D1:1700000003.000300")
    assert "/status" in standin.vendor.wait_for("/chat.postMessage", 3)[2].body["text"]

    # Slack refreshes the connection: the SDK opens the new one itself
    standin.ask_to_reconnect()
    standin.wait_connected(total=3)
    state = server.watch.until(adapter, lambda s: s.reconnects == 2 and s.status == "connected")
    assert state.events == 4 and state.last_event_at is not None

    seen = server.debug_connection(adapter)
    assert seen["component"] == "ready"
    assert (seen["status"], seen["reconnects"], seen["connection_mode"]) == ("connected", 2, "socket_mode")
    assert server.metric("genworker_channel_long_connections", platform="slack", status="connected") == 1
    assert server.metric("genworker_channel_long_connection_reconnects_total", platform="slack") >= 2
    assert server.metric("genworker_channel_long_connection_last_event_timestamp_seconds", platform="slack") > 0
    model_server.assert_done()


def test_feishu_long_connection(serve: Callable[..., Server], model_server: ScriptedModelServer) -> None:
    standin = FeishuLongConnection(*FEISHU_APP)
    creds = {"feishu": {"app_id": FEISHU_APP[0], "app_secret": FEISHU_APP[1]}}
    server = serve(standin, "{type: feishu, connection_mode: WebSocket}", creds)
    adapter = "acme~alice~feishu"
    standin.wait_connected()
    server.watch.status(adapter, "connected")
    assert standin.opened == [{"AppID": FEISHU_APP[0], "AppSecret": FEISHU_APP[1]}]
    standin.wait(lambda: bool(standin.received), "ping")  # lark's client pings on connecting

    model_server.expect(Reply("pong"))
    first = standin.push(feishu_event("ping", "om_first"))
    assert standin.wait_ack(first).body["code"] == 200
    server.handled.wait_for("om_first")
    [reply] = standin.vendor.wait_for("/open-apis/im/v1/messages/om_first/reply", 1)
    assert json.loads(reply.body["content"]) == {"text": "pong"}

    model_server.expect(Reply("second answer"))
    standin.lose_next_ack()
    second = feishu_event("second", "om_second")
    assert standin.wait_ack(standin.push(second)).lost
    standin.wait_connected(total=2)
    server.watch.until(adapter, lambda s: s.status == "connected" and s.reconnects == 1)
    assert standin.wait_ack(standin.push(second)).body["code"] == 200  # Feishu resends the unacked event
    server.handled.wait_for("om_second")
    standin.vendor.wait_for("/open-apis/im/v1/messages/om_second/reply", 1)
    assert server.handled.history.count(("om_second", "replied")) == 1

    standin.drop()  # no ack pending: the connection just goes
    standin.wait_connected(total=3)
    state = server.watch.until(adapter, lambda s: s.status == "connected" and s.reconnects == 2)
    assert state.events == 3
    help_ = standin.push(feishu_event("/help", "om_help"))
    standin.wait_ack(help_)
    server.handled.wait_for("om_help")
    [answer] = standin.vendor.wait_for("/open-apis/im/v1/messages/om_help/reply", 1)
    assert "/status" in json.loads(answer.body["content"])["text"]
    assert len(standin.vendor.calls("/open-apis/im/v1/messages/om_second/reply")) == 1
    assert server.debug_connection(adapter)["status"] == "connected"
    model_server.assert_done()


def test_dingtalk_stream(serve: Callable[..., Server], model_server: ScriptedModelServer) -> None:
    standin = DingTalkStream(*DINGTALK_APP)
    creds = {"dingtalk": {"client_id": DINGTALK_APP[0], "client_secret": DINGTALK_APP[1]}}
    server = serve(standin, "{type: dingtalk, connection_mode: STREAM}", creds)
    adapter = "acme~alice~dingtalk"
    standin.wait_connected()
    server.watch.status(adapter, "connected")
    [opened] = standin.opened
    assert (opened["clientId"], opened["clientSecret"]) == DINGTALK_APP
    hook = f"{standin.url}/robot/sendBySession?session=s1"

    ping = standin.ping()  # a SYSTEM frame: the SDK answers it
    assert json.loads(standin.wait_ack(ping).body["data"]) == {"opaque": "ping-1"}

    model_server.expect(Reply("pong"))
    first = standin.push(bot_message("ping", "msg-first", hook))
    assert standin.wait_ack(first).body["code"] == 200
    server.handled.wait_for("msg-first")
    [reply] = standin.vendor.wait_for("/robot/sendBySession", 1)
    assert reply.query == {"session": "s1"} and reply.body["text"]["content"] == "pong"

    model_server.expect(Reply("second answer"))
    standin.lose_next_ack()
    second = bot_message("second", "msg-second", hook)
    assert standin.wait_ack(standin.push(second)).lost
    standin.wait_connected(total=2)
    server.watch.until(adapter, lambda s: s.status == "connected" and s.reconnects == 1)
    assert standin.wait_ack(standin.push(second)).body["code"] == 200
    server.handled.wait_for("msg-second")
    replies = standin.vendor.wait_for("/robot/sendBySession", 2)
    assert [r.body["text"]["content"] for r in replies] == ["pong", "second answer"]
    assert server.handled.history.count(("msg-second", "replied")) == 1
    assert all(used for used in standin.tickets.values()) and len(standin.tickets) == 2
    model_server.assert_done()
