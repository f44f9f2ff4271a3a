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
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
import redis

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

    def __init__(self, app: Any, live: LiveServer, workspace: Path) -> None:
        self.live, self.workspace, self.stopped = live, workspace, False
        runtime = app.state.runtime
        self.runtime = runtime
        self.handled = Handled()
        runtime.services.channels.processor.listeners.append(self.handled)
        self.watch = Watch(runtime.services.long_connections)
        self.client = httpx.Client(base_url=live.url, timeout=30, headers={"Authorization": f"Bearer {ADMIN}"})

    def stop(self) -> None:
        """Stop this server (it releases its leases)."""
        self.client.close()
        self.live.__exit__(None, None, None)
        self.stopped = True

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
    """`serve(stand_in, channel_yaml, credentials)`: the stand-in (started once) and a server on a new
    workspace, both running; `workspace=` starts another server on that one; `env` adds settings."""
    stack: list[Any] = []

    def start(
        stand_in: StandIn, channel: str, credentials: dict[str, Any], *, workspace: Path | None = None, **extra: str
    ) -> Server:
        if workspace is None:
            workspace = small_workspace(
                {"acme": ["alice"]},
                {
                    "tenants/acme/workers/alice/PERSONA.md": persona(channel),
                    "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json": json.dumps(credentials),
                },
            )
        if not stand_in.url:
            served = stand_in.serve()
            served.__enter__()
            stack.append(served)
        url = stand_in.url
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
            **extra,
        )
        (tmp_path / "configs").mkdir(exist_ok=True)
        app = create_app(load_settings(tmp_path / "configs", env, workspace=workspace))
        live = LiveServer(app)
        live.__enter__()
        server = Server(app, live, workspace)
        stack.append(server)
        return server

    yield start
    for item in reversed(stack):
        if isinstance(item, Server):
            if not item.stopped:
                item.stop()
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


def test_two_runtimes_on_one_redis_hold_one_connection_per_binding(
    serve: Callable[..., Server], model_server: ScriptedModelServer, redis_url: str
) -> None:
    adapter = "acme~alice~slack"
    with redis.Redis.from_url(redis_url) as client:
        client.delete(f"genworker:longconn:{adapter}")  # one a killed run of this test may have left
    standin = SlackSocketMode(APP_TOKEN)
    creds = {"slack": {"bot_token": "xoxb-standin", "signing_secret": "unused-here", "app_token": APP_TOKEN}}
    shared = {"REDIS_URL": redis_url, "GENWORKER_LONGCONN_LEASE_S": "3"}
    first = serve(standin, "{type: slack, connection_mode: socket_mode}", creds, **shared)
    standin.wait_connected()
    first.watch.status(adapter, "connected")
    second = serve(standin, "", creds, workspace=first.workspace, **shared)
    holder = first.runtime.services.leases.instance_id
    assert second.watch.status(adapter, "standby").holder == holder
    assert second.debug_connection(adapter)["holder"] == holder
    assert len(standin.connections) == 1  # the second runtime never connected

    ts = f"17{uuid.uuid4().int % 10**8:08d}.000100"  # ids no earlier run has claimed in the shared dedupe store
    model_server.expect(Reply("from the first"))
    standin.wait_ack(standin.push(slack_event("hello", ts)))
    first.handled.wait_for(f"D1:{ts}")

    first.stop()  # releases its lease: the standby takes the binding over at once
    standin.wait_connected(total=2)
    second.watch.status(adapter, "connected")
    ts2 = ts.replace(".000100", ".000200")
    model_server.expect(Reply("from the second"))
    standin.wait_ack(standin.push(slack_event("hello again", ts2)))
    second.handled.wait_for(f"D1:{ts2}")
    replies = standin.vendor.wait_for("/chat.postMessage", 2)
    assert [r.body["text"] for r in replies] == ["from the first", "from the second"]
    assert [c.number for c in standin.open_connections()] == [2]
    assert f"D1:{ts}" not in second.handled.outcomes  # nothing was answered twice
    assert second.debug_connection(adapter)["status"] == "connected"
    assert second.metric("genworker_channel_long_connections", platform="slack", status="connected") == 1
    model_server.assert_done()


def test_an_event_that_could_not_be_stored_is_not_acked_and_its_resend_is_answered(
    serve: Callable[..., Server], model_server: ScriptedModelServer
) -> None:
    standin = SlackSocketMode(APP_TOKEN)
    creds = {"slack": {"bot_token": "xoxb-standin", "signing_secret": "unused-here", "app_token": APP_TOKEN}}
    server = serve(standin, "{type: slack, connection_mode: socket_mode}", creds)
    standin.wait_connected()
    journal = server.runtime.services.channels.ingest.journal
    append, failed = journal.append, threading.Event()

    def full_disk_once(message: Any) -> Any:
        if not failed.is_set():
            failed.set()
            raise OSError(28, "No space left on device")
        return append(message)

    journal.append = full_disk_once
    event = slack_event("are you there?", "1700000009.000900")
    lost = standin.push(event)
    assert failed.wait(30)
    model_server.expect(Reply("yes"))
    resent = standin.push(event, retry=1)  # Slack resends what it never saw acked
    standin.wait_ack(resent)
    server.handled.wait_for("D1:1700000009.000900")
    [reply] = standin.vendor.wait_for("/chat.postMessage", 1)
    assert reply.body["text"] == "yes"
    assert standin.acks_for(lost) == []
    model_server.assert_done()
