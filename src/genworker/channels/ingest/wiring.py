"""The channel ingress composed: the route's side (`accept.py`), the journal and the processor,
with dedupe and replay stores chosen by backend (Redis when the runtime has one, else files), and
the re-send schedule from settings.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from genworker.channels import commands
from genworker.channels.base import ChannelReplier, InboxWriter
from genworker.channels.dedupe import DedupeStore, FileDedupeStore, RedisDedupeStore
from genworker.channels.ingest.accept import ChannelIngest
from genworker.channels.ingest.journal import EventJournal
from genworker.channels.ingest.processor import ChannelProcessor
from genworker.channels.registry import ChannelRegistry
from genworker.channels.replay import FileReplayGuard, RedisReplayGuard, ReplayGuard
from genworker.delivery.redelivery import RedeliveryPolicy
from genworker.observability.metrics import register_collector, unregister_collector
from genworker.worker.router import WorkerRouter
from genworker.workspace.registry import WorkspaceRegistry

log = logging.getLogger("genworker.channels")

__all__ = ["Channels", "build_channels", "create_channels", "redelivery_policy", "stop_with"]

_GAUGE = "channels.undelivered"


@dataclass
class Channels:
    """What the webhook routes use; built once by `build_channels`."""

    registry: ChannelRegistry
    ingest: ChannelIngest
    processor: ChannelProcessor
    replayed: int = 0  # journal entries a previous process left, replayed at start

    async def start(self, alive: Callable[[str], bool] | None = None) -> int:
        replayed = await self.processor.start(alive)
        register_collector(_GAUGE, self.processor.undelivered_counts)
        return replayed

    def describe(self) -> dict[str, Any]:
        """For a status / debug view: bindings, backends, what was replayed."""
        return {
            "bindings": len(self.registry.all()),
            "dedupe": "redis" if not isinstance(self.ingest.dedupe, FileDedupeStore) else "files",
            "replayed": self.replayed,
            "replier": self.processor.replier is not None,
            "commands": self.processor.commands_backend is not None,
        }

    async def stop(self) -> None:
        unregister_collector(_GAUGE)
        await self.processor.stop()


def create_channels(
    registry: ChannelRegistry,
    *,
    dedupe: DedupeStore,
    router: WorkerRouter | None = None,
    replier: ChannelReplier | None = None,
    inbox: InboxWriter | None = None,
    commands_backend: commands.CommandBackend | None = None,
    replay: ReplayGuard | None = None,
    policy: RedeliveryPolicy | None = None,
    owner: str | None = None,
) -> Channels:
    journal = EventJournal(registry.workspace.root, owner)
    processor = ChannelProcessor(
        registry,
        journal,
        router=router,
        replier=replier,
        inbox=inbox,
        commands_backend=commands_backend,
        policy=policy,
    )
    return Channels(registry, ChannelIngest(dedupe, journal, processor, replay), processor)


async def build_channels(
    workspace: WorkspaceRegistry,
    router: WorkerRouter,
    *,
    aredis: Any | None,
    replier: ChannelReplier | None,
    inbox: InboxWriter | None,
    commands_backend: commands.CommandBackend | None,
    policy: RedeliveryPolicy,
    owner: str | None = None,
    alive: Callable[[str], bool] | None = None,
) -> Channels:
    """Build and start the channel ingress; after the router. Watched group messages go to `inbox`
    (the composition root adapts the inbox store to it), answers through `replier` (the outbound
    `ChannelDelivery`; it can also be set later on `channels.processor.replier`). `owner` (this
    runtime instance) owns the messages it accepts; at start it takes over those of instances that
    are not `alive` (the instance leases), and leaves the live ones' alone.

    Dedupe claims and seen DingTalk signs go to Redis when the runtime has a shared async client
    (`aredis`), else to files. Undelivered answers are re-sent as `policy` says (`redelivery_policy`).
    """
    registry = ChannelRegistry(workspace)
    root = registry.workspace.root
    dedupe: DedupeStore = RedisDedupeStore(aredis) if aredis is not None else FileDedupeStore(root)
    replay: ReplayGuard = RedisReplayGuard(aredis) if aredis is not None else FileReplayGuard(root)
    channels = create_channels(
        registry,
        dedupe=dedupe,
        replay=replay,
        router=router,
        replier=replier,
        inbox=inbox,
        commands_backend=commands_backend,
        policy=policy,
        owner=owner,
    )
    channels.replayed = await channels.start(alive)
    for binding in registry.all():
        if binding.limitation:
            log.warning("[Channels] %s: %s", binding.adapter_id, binding.limitation)
    return channels


def redelivery_policy(number: Callable[[str, float, float, float], float]) -> RedeliveryPolicy:
    """The re-send schedule from settings (`Settings.number`: a bad value names its key)."""
    default = RedeliveryPolicy()
    return RedeliveryPolicy(
        base_s=number("GENWORKER_CHANNEL_RETRY_BASE_S", default.base_s, 0.001, 86_400),
        max_s=number("GENWORKER_CHANNEL_RETRY_MAX_S", default.max_s, 0.001, 7 * 86_400),
        horizon_s=number("GENWORKER_CHANNEL_RETRY_HORIZON_S", default.horizon_s, 1, 90 * 86_400),
    )


async def stop_with(stop: asyncio.Event, channels: Channels) -> None:
    """Stop `channels` once `stop` is set (the runtime awaits this task at shutdown)."""
    await stop.wait()
    await channels.stop()
