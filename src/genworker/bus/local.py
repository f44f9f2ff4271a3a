"""InProcessEventBus: subscribers in this process only (see `bus` for the delivery model)."""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from genworker.bus.base import Handler, Subscription
from genworker.bus.errors import BusClosedError
from genworker.bus.models import Event

__all__ = ["DEFAULT_MAX_PENDING", "InProcessEventBus"]

log = logging.getLogger(__name__)

DEFAULT_MAX_PENDING: Final = 10_000


class InProcessEventBus:
    def __init__(self, *, max_pending: int = DEFAULT_MAX_PENDING, close_timeout_s: float = 5.0) -> None:
        if max_pending < 1:
            raise ValueError("max_pending must be at least 1")
        self._max_pending = max_pending
        self._close_timeout_s = close_timeout_s
        self._subscriptions: list[Subscription] = []
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def subscriptions(self) -> tuple[Subscription, ...]:
        return tuple(self._subscriptions)

    async def publish(self, event: Event) -> None:
        if self._closed:
            raise BusClosedError(f"event {event.event_id} ({event.topic}) published on a closed bus")
        for subscription in tuple(self._subscriptions):
            if subscription.matches(event.topic):
                subscription.offer(event)

    def subscribe(self, pattern: str, handler: Handler) -> Subscription:
        if self._closed:
            raise BusClosedError(f"subscribe({pattern!r}) on a closed bus")
        subscription = Subscription(pattern, handler, max_pending=self._max_pending, on_unsubscribe=self._forget)
        self._subscriptions.append(subscription)
        return subscription

    async def drain(self) -> None:
        """Until every event published so far (and any they led to) has been handled."""
        while pending := [s for s in self._subscriptions if s.active]:
            await asyncio.gather(*(s.join() for s in pending))
            if all(s.idle for s in self._subscriptions):
                return

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            async with asyncio.timeout(self._close_timeout_s):
                await self.drain()
        except TimeoutError:
            log.warning("event handlers still busy %.1f s after close(): stopping them", self._close_timeout_s)
        subscriptions = tuple(self._subscriptions)
        await asyncio.gather(*(s.stop(self._close_timeout_s) for s in subscriptions))

    def _forget(self, subscription: Subscription) -> None:
        if subscription in self._subscriptions:
            self._subscriptions.remove(subscription)
