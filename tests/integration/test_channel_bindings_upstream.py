"""Channel bindings from a PERSONA.md written the upstream genworker way: the same platform twice,
long-connection modes (a binding that cannot connect says why), upstream's spellings."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from types import SimpleNamespace

import pytest

from genworker.channels.registry import ChannelRegistry
from genworker.dashboard.blocks_worker import channels as channels_block
from genworker.workspace.registry import WorkspaceRegistry

PERSONA = """---
identity: {worker_id: w}
channels:
  - {channel_type: Slack, connection_mode: Socket_Mode, chat_ids: [C1], reply_mode: Streaming}
  - {type: slack, connection_mode: webhook, chat_ids: [C2]}
  - {type: feishu, connection_mode: websocket, chat_ids: [oc_1]}
---
Be helpful.
"""
CREDENTIALS = '{"slack": {"bot_token": "xoxb-fixture-placeholder", "signing_secret": "placeholder-not-a-secret"}}'


@pytest.fixture
def registry(write_tree: Callable[[Mapping[str, str]], Path]) -> ChannelRegistry:
    root = write_tree(
        {
            "tenants/acme/TENANT.json": '{"tenant_id": "acme", "trust_level": 2}',
            "tenants/acme/workers/w/PERSONA.md": PERSONA,
            "tenants/acme/workers/w/CHANNEL_CREDENTIALS.json": CREDENTIALS,
        }
    )
    workspace = WorkspaceRegistry(root, product_skills=None)
    workspace.load_all()
    assert workspace.worker("acme", "w") is not None, workspace.issues()
    return ChannelRegistry(workspace)


def test_the_same_platform_twice_and_long_connection_modes(registry: ChannelRegistry) -> None:
    socket, webhook, feishu = registry.bindings("acme", "w")
    assert [b.adapter_id for b in (socket, webhook, feishu)] == ["acme~w~slack", "acme~w~slack-2", "acme~w~feishu"]
    assert registry.resolve("acme~w~slack-2") == webhook
    assert (socket.channel.connection_mode, socket.channel.reply_mode) == ("socket_mode", "streaming")
    assert socket.limitation.startswith("slack.app_token: not set: slack Socket Mode cannot connect without it")
    assert webhook.limitation == ""


async def _nothing_owed(tenant_id: str, worker_id: str) -> list[object]:
    return []


@pytest.mark.anyio
async def test_the_dashboard_shows_a_long_connection_binding_degraded(registry: ChannelRegistry) -> None:
    processor = SimpleNamespace(replier=None, undelivered=_nothing_owed, needs_attention=_nothing_owed)
    not_connected = SimpleNamespace(state=lambda adapter_id: None)
    channels = SimpleNamespace(registry=registry, processor=processor)
    services = SimpleNamespace(channels=channels, long_connections=not_connected)
    runtime = SimpleNamespace(services=services, components={})
    block = await channels_block(SimpleNamespace(runtime=runtime, tenant_id="acme", worker_id="w"))  # type: ignore[arg-type]
    listed = {c["adapter_id"]: (c["status"], c["note"]) for c in block["channels"]}
    assert listed["acme~w~slack"][0] == "degraded" and "slack.app_token" in listed["acme~w~slack"][1]
    assert listed["acme~w~slack-2"] == ("not_started", "")
    assert listed["acme~w~feishu"] == ("missing_credentials", listed["acme~w~feishu"][1])
