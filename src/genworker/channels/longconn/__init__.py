"""IM without a public URL: Slack Socket Mode, Feishu/Lark long connection, DingTalk Stream.

A channel whose `connection_mode` asks for a long connection (`modes.py`) is connected by the
vendor SDK's own client (`slack.py`, `feishu.py`, `dingtalk.py`), one connection per binding,
held by exactly one runtime process (`lease.py`) and reconnected with backoff (`supervisor.py`).
Its events enter the webhooks' ingest (`ChannelIngest.accept`: dedupe claim, journal, processor),
so replies, IM commands and threads work exactly as for webhooks; each event is acked to the
vendor only once stored. `build_long_connections` composes it for the runtime.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from genworker.channels.ingest import Channels
from genworker.channels.longconn.lease import BindingLease, FileBindingLease, RedisBindingLease
from genworker.channels.longconn.link import Backoff
from genworker.channels.longconn.manager import COMPONENT, LongConnections
from genworker.channels.longconn.modes import problem, uses_long_connection
from genworker.channels.outbound.platform import VendorEndpoints
from genworker.channels.registry import ChannelBinding
from genworker.observability.metrics import register_collector, unregister_collector
from genworker.observability.status import ComponentRuntimeStatus, ComponentStatus
from genworker.settings import Settings

__all__ = [
    "COMPONENT",
    "Backoff",
    "LongConnections",
    "build_long_connections",
    "problem",
    "settings_backoff",
    "stop_long_connections",
    "uses_long_connection",
]

_GAUGE = "channels.long_connections"


def settings_backoff(number: Any) -> Backoff:
    """The default backoff from settings (`Settings.number`); a binding's `features` may refine it."""
    default = Backoff()
    base = number("GENWORKER_LONGCONN_BACKOFF_BASE_S", default.base_s, 0.001, 3600)
    top = number("GENWORKER_LONGCONN_BACKOFF_MAX_S", default.max_s, 0.001, 86_400)
    return Backoff(base_s=base, max_s=max(top, base))


def build_long_connections(
    settings: Settings,
    components: dict[str, ComponentRuntimeStatus],
    channels: Channels,
    owner: str,
    aredis: aioredis.Redis | None,
) -> LongConnections:
    """Start the long connections of every binding that has one (after `build_channels`); the caller
    calls `sync()` after reloads and `stop_long_connections` at shutdown. Leases name `owner` (this
    process's instance) and live in Redis when the runtime shares one (`aredis`), else in lock files
    of the workspace. Their status is kept in `components` once a binding has a long connection."""
    ttl_s = settings.number("GENWORKER_LONGCONN_LEASE_S", 30, 0.03, 3600)
    root = channels.registry.workspace.root

    def lease_for(binding: ChannelBinding) -> BindingLease:
        if aredis is not None:
            return RedisBindingLease(aredis, binding.adapter_id, owner, ttl_s=ttl_s)
        return FileBindingLease(root, binding, owner, ttl_s=ttl_s)

    def on_change(status: ComponentRuntimeStatus) -> None:  # listed once a binding has a long connection
        if status.status is not ComponentStatus.DISABLED or COMPONENT in components:
            components[COMPONENT] = status

    connections = LongConnections(
        channels.registry,
        channels.ingest,
        lease_for=lease_for,
        endpoints=VendorEndpoints.from_settings(settings.get),
        backoff=settings_backoff(settings.number),
        on_change=on_change,
    )
    connections.sync()
    register_collector(_gauge(connections), connections.samples)
    return connections


def _gauge(connections: LongConnections) -> str:
    return f"{_GAUGE}:{id(connections)}"  # each runtime's own (tests run several in one process)


async def stop_long_connections(connections: LongConnections) -> None:
    unregister_collector(_gauge(connections))
    await connections.stop()
