"""Who holds a binding's long connection: lock-file leases across real processes, Redis leases
across holders (real Redis), a supervisor that loses its lease disconnects at once; and a binding
whose long connection cannot run is an error in `genworker check` and `failed` at run time."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import redis.asyncio as aioredis

from genworker.channels.longconn import LongConnections, modes
from genworker.channels.longconn.check import longconn_issues
from genworker.channels.longconn.lease import FileBindingLease, RedisBindingLease
from genworker.channels.longconn.link import Backoff, Link
from genworker.channels.longconn.state import ConnectionState
from genworker.channels.longconn.supervisor import LongConnection
from genworker.channels.outbound.platform import VendorEndpoints
from genworker.channels.registry import ChannelBinding, ChannelRegistry
from genworker.cli import main
from genworker.observability.status import ComponentStatus
from genworker.testing.processes import release, start_ready
from genworker.workspace.models.credentials import SlackCredentials
from genworker.workspace.registry import WorkspaceRegistry

pytestmark = pytest.mark.anyio

PERSONA = """---
identity: {{name: Alice, worker_id: alice}}
channels:
{channels}
---
You are alice.
"""

HOLD = """
import sys
from pathlib import Path
from genworker.channels.longconn.lease import FileBindingLease
from genworker.channels.registry import ChannelRegistry
from genworker.workspace.registry import WorkspaceRegistry
import asyncio
workspace = WorkspaceRegistry(Path(sys.argv[1]), product_skills=None)
workspace.load_all()
[binding] = ChannelRegistry(workspace).bindings("acme", "alice")
lease = FileBindingLease(workspace.root, binding, "rt_child")
assert asyncio.run(lease.acquire())
print("ready", flush=True)
sys.stdin.readline()
print("{}")
"""


def registry_of(root: Path) -> ChannelRegistry:
    workspace = WorkspaceRegistry(root, product_skills=None)
    workspace.load_all()
    assert workspace.worker("acme", "alice") is not None, workspace.issues()
    return ChannelRegistry(workspace)


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Callable[[str, dict[str, Any]], Path]:
    def build(channels: str, credentials: dict[str, Any]) -> Path:
        return small_workspace(
            {"acme": ["alice"]},
            {
                "tenants/acme/workers/alice/PERSONA.md": PERSONA.format(channels=channels),
                "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json": json.dumps(credentials),
            },
        )

    return build


SLACK = {"slack": {"bot_token": "xoxb-1", "signing_secret": "s", "app_token": "xapp-1-A-1-x"}}


@pytest.fixture
def slack_workspace(workspace: Callable[[str, dict[str, Any]], Path]) -> Path:
    return workspace("  - {type: slack, connection_mode: socket_mode}", SLACK)


@pytest.fixture
def slack_binding(slack_workspace: Path) -> ChannelBinding:
    [binding] = registry_of(slack_workspace).bindings("acme", "alice")
    return binding


async def test_a_lock_file_lease_is_held_by_one_process_and_freed_when_it_exits(
    slack_workspace: Path, slack_binding: ChannelBinding
) -> None:
    workspace = slack_workspace
    child = await start_ready(HOLD, str(workspace))
    mine = FileBindingLease(workspace, slack_binding, "rt_parent", ttl_s=1)
    try:
        assert not await mine.acquire()
        assert await mine.holder() == "rt_child"
    finally:
        await release(child, 60)  # the child exits: the kernel drops its lock
    assert await mine.acquire()
    assert await mine.renew()
    other = FileBindingLease(workspace, slack_binding, "rt_other", ttl_s=1)  # another holder in this process
    assert not await other.acquire()
    await mine.release()
    assert await other.acquire()
    await other.release()


@pytest.fixture
def client(redis_url: str) -> Iterator[aioredis.Redis]:
    yield aioredis.Redis.from_url(redis_url)


async def test_redis_leases_one_holder_a_standby_takes_over_on_release(client: aioredis.Redis) -> None:
    adapter = f"t{uuid.uuid4().hex[:8]}~alice~slack"
    first = RedisBindingLease(client, adapter, "rt_first", ttl_s=5)
    second = RedisBindingLease(client, adapter, "rt_second", ttl_s=5)
    try:
        assert await first.acquire() and await first.acquire()  # taken, then already held
        assert not await second.acquire()
        assert await second.holder() == "rt_first"
        waiting = asyncio.create_task(second.wait(30))
        await first.release()  # publishes the release: the waiter returns before its timeout
        await asyncio.wait_for(waiting, 10)
        assert await second.acquire()
        assert not await first.renew()  # no longer its own
        assert await second.renew()
    finally:
        await second.release()
        await client.delete(first.key)
        await client.aclose()


async def test_a_supervisor_that_loses_its_lease_disconnects_at_once(
    client: aioredis.Redis, slack_binding: ChannelBinding
) -> None:
    adapter = slack_binding.adapter_id
    await client.delete(f"genworker:longconn:{adapter}")
    states: list[str] = []
    changed = asyncio.Event()
    state = ConnectionState(adapter, "slack", "socket_mode")

    def on_change(s: ConnectionState) -> None:
        states.append(s.status)
        changed.set()

    state.on_change = on_change
    sessions: list[asyncio.Event] = []

    async def session(link: Link) -> None:  # a connection that stays up until it is cancelled
        ended = asyncio.Event()
        sessions.append(ended)
        link.connected()
        try:
            await asyncio.Event().wait()
        finally:
            ended.set()

    supervisor = LongConnection(
        adapter,
        resolve=lambda: slack_binding,
        session=session,
        ingest=cast(Any, None),  # this session stores nothing
        lease=RedisBindingLease(client, adapter, "rt_me", ttl_s=0.3),
        state=state,
        backoff=Backoff(base_s=0.01, max_s=0.01),
        endpoints=VendorEndpoints(),
    )
    task = asyncio.create_task(supervisor.run())
    try:
        await _until(changed, lambda: state.status == "connected")
        thief = RedisBindingLease(client, adapter, "rt_thief", ttl_s=60)
        await client.delete(f"genworker:longconn:{adapter}")  # as if it expired during a pause ...
        assert await thief.acquire()  # ... and another process took the binding
        await asyncio.wait_for(sessions[0].wait(), 10)  # the connection is closed
        await _until(changed, lambda: state.status == "standby")
        assert state.holder == "rt_thief" and len(sessions) == 1
        await thief.release()
        await _until(changed, lambda: state.status == "connected" and len(sessions) == 2)
        assert state.reconnects == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.delete(f"genworker:longconn:{adapter}")
        await client.aclose()
    assert states[-1] == "stopped"


async def _until(changed: asyncio.Event, ok: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while not ok():
            changed.clear()
            await changed.wait()


BROKEN = """  - {type: slack, connection_mode: socket_mode}
  - {type: wecom, connection_mode: WebSocket}
  - {type: feishu, connection_mode: websocket}
  - {type: dingtalk, connection_mode: stream}"""
BROKEN_CREDENTIALS = {
    "slack": {"bot_token": "xoxb-1", "signing_secret": "s"},  # no app_token
    "wecom": {"corpid": "ww1", "corpsecret": "c"},
    "feishu": {"app_id": "cli_1", "app_secret": "x"},
    "dingtalk": {"client_id": "ding1", "client_secret": "y"},
}


def test_genworker_check_names_each_binding_that_cannot_connect(
    workspace: Callable[[str, dict[str, Any]], Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = workspace(BROKEN, BROKEN_CREDENTIALS)
    monkeypatch.setattr(modes, "_installed", lambda module: module != "dingtalk_stream")  # as if not installed
    found = {
        (i.file.rsplit("/", 1)[1], i.field, i.line): i.message for i in longconn_issues(registry_of(root).workspace)
    }
    assert set(found) == {
        ("CHANNEL_CREDENTIALS.json", "slack.app_token", None),
        ("PERSONA.md", "channels[1].connection_mode", 5),
        ("PERSONA.md", "channels[3].connection_mode", 7),
    }
    assert found[("CHANNEL_CREDENTIALS.json", "slack.app_token", None)].startswith(
        "not set: slack Socket Mode cannot connect without it (an app-level token xapp-"
    )
    assert "wecom has no long connection here" in found[("PERSONA.md", "channels[1].connection_mode", 5)]
    assert "pip install 'genworker[longconn]'" in found[("PERSONA.md", "channels[3].connection_mode", 7)]
    assert main(["check", "--workspace", str(root)]) == 1
    out = capsys.readouterr().out
    assert "error: slack.app_token: not set" in out and "error: line 5: channels[1].connection_mode: websocket" in out


async def test_a_binding_that_cannot_connect_is_failed_and_the_component_degraded(
    workspace: Callable[[str, dict[str, Any]], Path],
) -> None:
    no_dingtalk = {k: v for k, v in BROKEN_CREDENTIALS.items() if k != "dingtalk"}
    registry = registry_of(workspace(BROKEN, no_dingtalk))
    seen: list[Any] = []
    connections = LongConnections(
        registry,
        cast(Any, None),
        lease_for=lambda b: FileBindingLease(registry.workspace.root, b, "rt_me"),
        endpoints=VendorEndpoints(),
        on_change=seen.append,
        sessions=lambda platform: _never,
    )
    connections.sync()  # feishu can run: its supervisor starts (its session never connects)
    try:
        states = {s["adapter_id"]: (s["status"], s["error"].split(":")[0]) for s in connections.describe()}
        assert states == {
            "acme~alice~slack": ("failed", "slack.app_token"),
            "acme~alice~wecom": ("failed", "connection_mode"),
            "acme~alice~feishu": ("connecting", ""),
            "acme~alice~dingtalk": ("failed", "dingtalk.app_key"),  # no dingtalk credentials at all
        }
        component = seen[-1]
        assert component.status is ComponentStatus.DEGRADED
        assert component.reason.startswith("3 of 4 long connections down; acme~alice~dingtalk: ")
    finally:
        await connections.stop()


async def _never(link: Link) -> None:
    await asyncio.Event().wait()


async def test_a_reload_reconnects_a_changed_binding_and_stops_a_removed_one(
    workspace: Callable[[str, dict[str, Any]], Path],
) -> None:
    root = workspace("  - {type: slack, connection_mode: socket_mode}", SLACK)
    registry = registry_of(root)
    opened: list[str] = []

    async def session(link: Link) -> None:
        assert isinstance(link.binding.credentials, SlackCredentials) and link.binding.credentials.app_token
        opened.append(link.binding.credentials.app_token.get_secret_value())
        link.connected()
        await asyncio.Event().wait()

    seen: list[Any] = []
    connections = LongConnections(
        registry,
        cast(Any, None),
        lease_for=lambda b: FileBindingLease(root, b, "rt_me"),
        endpoints=VendorEndpoints(),
        on_change=seen.append,
        sessions=lambda platform: session,
    )
    changed = asyncio.Event()
    connections.listeners.append(lambda state: changed.set())
    adapter = "acme~alice~slack"
    connections.sync()
    try:
        await _until(changed, lambda: connections.states[adapter].status == "connected")
        credentials = root / "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json"
        rotated = {"slack": {**SLACK["slack"], "app_token": "xapp-1-A-2-rotated"}}
        credentials.write_text(json.dumps(rotated), encoding="utf-8")
        assert registry.workspace.reload_worker("acme", "alice").ok
        connections.sync()
        await _until(
            changed, lambda: adapter in connections.states and connections.states[adapter].status == "connected"
        )
        assert opened == ["xapp-1-A-1-x", "xapp-1-A-2-rotated"]
        persona = root / "tenants/acme/workers/alice/PERSONA.md"
        persona.write_text(PERSONA.format(channels="  - {type: slack}"), encoding="utf-8")
        assert registry.workspace.reload_worker("acme", "alice").ok
        connections.sync()
        assert connections.states == {}
        assert seen[-1].status is ComponentStatus.DISABLED
    finally:
        await connections.stop()
