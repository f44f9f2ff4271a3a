"""RedisEventBus: the in-process bus, plus Redis pub/sub so that events cross processes.

`publish` hands the event to this process's subscribers directly, then PUBLISHes it on one
channel, ``{prefix}:events``, wrapped as ``{"origin": <bus instance id>, "event": {...}}``. Every
bus listens on that channel and drops messages carrying its own origin, so a process sees each of
its own events once. Pub/sub is at-most-once: a process that is not connected misses events, which
is why durable facts live in the inbox and events only say "look now".
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from types import TracebackType
from typing import Any, Final, Self

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from genworker.bus.base import Handler, Subscription
from genworker.bus.codec import event_from_json, event_to_json
from genworker.bus.errors import BusClosedError, EventBusError, EventPublishError
from genworker.bus.local import DEFAULT_MAX_PENDING, InProcessEventBus
from genworker.bus.models import Event

__all__ = ["RedisEventBus"]

log = logging.getLogger(__name__)

_RETRY_MIN_S: Final = 0.1
_RETRY_MAX_S: Final = 5.0


class RedisEventBus:
    def __init__(
        self,
        client: Redis | str,
        *,
        prefix: str = "genworker",
        max_pending: int = DEFAULT_MAX_PENDING,
        close_timeout_s: float = 5.0,
    ) -> None:
        self._owns_client = isinstance(client, str)
        self._client: Redis = Redis.from_url(client) if isinstance(client, str) else client
        self.channel = f"{prefix}:events"
        self.instance_id = uuid.uuid4().hex
        self._local = InProcessEventBus(max_pending=max_pending, close_timeout_s=close_timeout_s)
        self._pubsub: PubSub | None = None
        self._listener: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self._closed = False

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Subscribe to the channel; returns once Redis has confirmed, so no later event is missed."""
        if self._closed:
            raise BusClosedError("start() on a closed bus")
        if self._listener is not None:
            return
        self._pubsub = self._client.pubsub()
        await self._subscribe(self._pubsub)
        self._listener = asyncio.create_task(self._listen(self._pubsub), name=f"redis-event-bus {self.channel}")

    async def publish(self, event: Event) -> None:
        await self._local.publish(event)
        message = json.dumps({"origin": self.instance_id, "event": event_to_json(event)})
        try:
            await self._client.publish(self.channel, message)
        except RedisError as exc:
            raise EventPublishError(event.event_id, str(exc)) from exc

    def subscribe(self, pattern: str, handler: Handler) -> Subscription:
        return self._local.subscribe(pattern, handler)

    async def drain(self) -> None:
        """Until this process's subscribers have handled every event received so far."""
        await self._local.drain()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        if self._listener is not None:
            self._listener.cancel()
            await asyncio.gather(self._listener, return_exceptions=True)
        if self._pubsub is not None:
            try:
                await self._pubsub.aclose()  # type: ignore[no-untyped-call]
            except RedisError as exc:
                log.warning("closing the event bus subscription failed: %s", exc)
        await self._local.close()
        if self._owns_client:
            await self._client.aclose()

    async def _subscribe(self, pubsub: PubSub) -> None:
        await pubsub.subscribe(self.channel)
        while True:  # the confirmation comes before any message on this connection
            message = await pubsub.get_message(timeout=None)
            if message is not None and message["type"] == "subscribe":
                return

    async def _listen(self, pubsub: PubSub) -> None:
        delay = _RETRY_MIN_S
        while not self._closing.is_set():
            try:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=None)
            except (RedisError, OSError) as exc:
                log.warning("event bus lost Redis (%s); retrying in %.1f s, events meanwhile are missed", exc, delay)
                if await self._wait_closing(delay):
                    return
                delay = min(delay * 2, _RETRY_MAX_S)
                continue
            delay = _RETRY_MIN_S
            if message is not None and message["type"] == "message":
                await self._receive(message["data"])

    async def _wait_closing(self, seconds: float) -> bool:
        try:
            async with asyncio.timeout(seconds):
                await self._closing.wait()
        except TimeoutError:
            return False
        return True

    async def _receive(self, raw: bytes | str) -> None:
        source = f"redis channel {self.channel}"
        try:
            wire: Any = json.loads(raw)
            if not isinstance(wire, dict) or not isinstance(wire.get("origin"), str):
                log.error("%s: dropped a message that is not an event envelope", source)
                return
            if wire["origin"] == self.instance_id:
                return  # our own event: local subscribers already have it
            event = event_from_json(wire.get("event"), source)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            log.error("%s: dropped a message that is not JSON (%s)", source, exc)
            return
        except EventBusError as exc:
            log.error("dropped: %s", exc)
            return
        try:
            await self._local.publish(event)
        except BusClosedError:
            return
