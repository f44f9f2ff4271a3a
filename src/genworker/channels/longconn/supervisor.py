"""One binding's long connection: held by one process, reconnected with backoff.

The supervisor takes the binding's lease (`lease.py`); without it the binding is on `standby`
and the lease is looked at again when its holder releases it (or every third of its ttl). While
it holds the lease it renews it and runs sessions one after another: a session that ends or
fails is followed by another after the backoff (`Backoff`, the binding's `features` may set it).
A lease that is lost (not renewed within its ttl: another process may hold it now) ends the
session at once. Every event a session receives is stored through the channel ingest — the
webhooks' dedupe claim and journal — before the session acks it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from redis.exceptions import RedisError

from genworker.channels.base import InboundAck
from genworker.channels.ingest import ChannelIngest
from genworker.channels.longconn.lease import BindingLease
from genworker.channels.longconn.link import Backoff, Link, Session
from genworker.channels.longconn.state import ConnectionState
from genworker.channels.outbound.platform import VendorEndpoints
from genworker.channels.registry import ChannelBinding
from genworker.observability.metrics import record_long_connection_reconnect

__all__ = ["LongConnection"]

log = logging.getLogger("genworker.channels.longconn")


class LongConnection:
    def __init__(
        self,
        adapter_id: str,
        *,
        resolve: Callable[[], ChannelBinding | None],
        session: Session,
        ingest: ChannelIngest,
        lease: BindingLease,
        state: ConnectionState,
        backoff: Backoff,
        endpoints: VendorEndpoints,
    ) -> None:
        self.adapter_id = adapter_id
        self.resolve = resolve
        self.session = session
        self.ingest = ingest
        self.lease = lease
        self.state = state
        self.backoff = backoff
        self.endpoints = endpoints

    async def run(self) -> None:
        """Until cancelled."""
        try:
            while True:
                if not await self._acquire():
                    continue
                try:
                    await self._while_held()
                finally:
                    await self.lease.release()
        finally:
            self.state.stopped()

    async def _acquire(self) -> bool:
        try:
            if await self.lease.acquire():
                return True
            self.state.standby(await self.lease.holder())
        except (RedisError, OSError) as exc:  # nobody can tell who holds it: do not connect
            self.state.lost(f"lease unavailable: {exc}", self.lease.ttl_s / 3, was_up=False)
            await asyncio.sleep(self.lease.ttl_s / 3)
            return False
        await self.lease.wait(self.lease.ttl_s / 3)
        return False

    async def _while_held(self) -> None:
        sessions = asyncio.create_task(self._sessions(), name=f"longconn:{self.adapter_id}")
        keep = asyncio.create_task(self._keep_lease(), name=f"longconn-lease:{self.adapter_id}")
        try:
            await asyncio.wait({sessions, keep}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sessions.cancel()
            keep.cancel()
            await asyncio.gather(sessions, keep, return_exceptions=True)

    async def _keep_lease(self) -> None:
        """Returns once the lease is lost."""
        every = self.lease.ttl_s / 3
        renewed = time.monotonic()
        while True:
            await asyncio.sleep(every)
            try:
                if not await self.lease.renew():
                    log.warning("[Channels] %s: long-connection lease lost; disconnecting", self.adapter_id)
                    return
                renewed = time.monotonic()
            except (RedisError, OSError) as exc:
                if time.monotonic() - renewed >= self.lease.ttl_s:
                    log.warning(
                        "[Channels] %s: lease not renewed within its ttl (%s); disconnecting", self.adapter_id, exc
                    )
                    return

    async def _sessions(self) -> None:
        while (binding := self.resolve()) is not None:
            up = False

            def connected(binding: ChannelBinding = binding) -> None:
                nonlocal up
                up = True
                if self.state.connected():
                    record_long_connection_reconnect(binding.platform)
                    log.info("[Channels] %s: long connection re-established", binding.adapter_id)
                else:
                    log.info("[Channels] %s: long connection established", binding.adapter_id)

            self.state.connecting()
            try:
                await self.session(Link(binding, self.endpoints, connected, self._taker(binding)))
                error = "the connection closed"
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
            delay = self.backoff.delay(0 if up else self.state.failures + 1)
            self.state.lost(error, delay, was_up=up)
            log.warning("[Channels] %s: long connection %s (%s); next attempt in %.1f s",
                        binding.adapter_id, "lost" if up else "failed", error, delay)  # fmt: skip
            await asyncio.sleep(delay)

    def _taker(self, binding: ChannelBinding) -> Callable[[InboundAck], Coroutine[Any, Any, None]]:
        async def take(ack: InboundAck) -> None:
            if ack.message is None:
                log.debug("[Channels] %s: %s", binding.adapter_id, ack.note)
                return
            accepted = await self.ingest.accept(binding, ack.message)
            self.state.event()
            if not accepted:
                log.info("[Channels] %s: event %s already accepted; acked without reprocessing",
                         binding.adapter_id, ack.message.event_id)  # fmt: skip

        return take
