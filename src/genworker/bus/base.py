"""The EventBus interface, topic patterns, and the per-subscriber mailbox both buses deliver through.

Delivery model (both implementations): `publish` never runs handlers itself. Each subscription
owns a FIFO mailbox and one task that awaits its handler on one event at a time, so a subscriber
sees events in publish order, subscribers run concurrently with each other, and a slow or failing
handler never delays the publisher or another subscriber. A handler that raises is logged with
the event id and the mailbox moves on.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

from genworker.bus.models import Event

__all__ = ["PATTERN_RE", "EventBus", "Handler", "Subscription", "topic_matches", "validate_pattern"]

log = logging.getLogger(__name__)

Handler = Callable[[Event], Awaitable[None]]

PATTERN_RE: Final = re.compile(r"^[a-z0-9_.*?\[\]!-]+$")


def validate_pattern(pattern: str) -> str:
    """An fnmatch-style topic pattern: ``inbox.*``, ``*.item_dead``, ``*``."""
    if not isinstance(pattern, str) or not PATTERN_RE.fullmatch(pattern):
        raise ValueError(
            f"topic pattern {pattern!r} is not valid: use lowercase topic words with the fnmatch "
            "wildcards '*', '?' and '[...]', e.g. 'inbox.*'"
        )
    return pattern


def topic_matches(pattern: str, topic: str) -> bool:
    """fnmatch semantics, case-sensitive; '*' also matches across dots (``inbox.*`` ⊇ ``inbox.a.b``)."""
    return fnmatch.fnmatchcase(topic, pattern)


class EventBus(Protocol):
    async def publish(self, event: Event) -> None:
        """Hand `event` to every matching subscription; returns before any handler runs.

        Raises `BusClosedError` after close(); a cross-process bus raises `EventPublishError`
        when local subscribers got the event but other processes could not be reached.
        """

    def subscribe(self, pattern: str, handler: Handler) -> Subscription:
        """Call `handler` for every later event whose topic matches `pattern`."""

    async def close(self) -> None:
        """Stop accepting events, let mailboxes drain (bounded), and release every task and connection."""


class Subscription:
    """One handler and its mailbox. `unsubscribe()` is immediate: no handler call starts afterwards."""

    def __init__(
        self, pattern: str, handler: Handler, *, max_pending: int, on_unsubscribe: Callable[[Subscription], None]
    ):
        self.pattern = validate_pattern(pattern)
        self.handler = handler
        self._max_pending = max_pending
        self._on_unsubscribe = on_unsubscribe
        self._queue: asyncio.Queue[Event | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._active = True
        self._unfinished = 0

    def __repr__(self) -> str:
        name = getattr(self.handler, "__qualname__", repr(self.handler))
        return f"<Subscription {self.pattern!r} -> {name}{'' if self._active else ' (unsubscribed)'}>"

    @property
    def active(self) -> bool:
        return self._active

    @property
    def idle(self) -> bool:
        """Nothing queued and no handler call in progress."""
        return self._unfinished == 0

    def matches(self, topic: str) -> bool:
        return self._active and topic_matches(self.pattern, topic)

    def unsubscribe(self) -> None:
        if not self._active:
            return
        self._active = False
        self._on_unsubscribe(self)
        if self._task is not None:
            self._queue.put_nowait(None)  # wakes the mailbox task so that it ends

    def offer(self, event: Event) -> None:
        """Queue `event` (must run on the bus's event loop)."""
        if not self._active:
            return
        if self._queue.qsize() >= self._max_pending:
            log.error(
                "event %s (%s) dropped for %r: %d events already waiting for this handler",
                event.event_id,
                event.topic,
                self,
                self._max_pending,
            )
            return
        self._queue.put_nowait(event)
        self._unfinished += 1
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"event-mailbox {self.pattern}")

    async def join(self) -> None:
        """Until every queued event has been handled (or skipped after unsubscribe)."""
        await self._queue.join()

    async def stop(self, grace_s: float) -> None:
        """Unsubscribe and wait for the mailbox task, cancelling it after `grace_s` seconds."""
        self.unsubscribe()
        task = self._task
        if task is None:
            return
        try:
            async with asyncio.timeout(grace_s):
                await asyncio.shield(task)
        except TimeoutError:
            log.warning("handler of %r still running after %.1f s at close: cancelled", self, grace_s)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            event = await self._queue.get()
            try:
                if event is None:
                    return
                if self._active:
                    await self._deliver(event)
            finally:
                if event is not None:
                    self._unfinished -= 1
                self._queue.task_done()

    async def _deliver(self, event: Event) -> None:
        try:
            await self.handler(event)
        except Exception:
            log.exception("event handler of %r failed on event %s (%s)", self, event.event_id, event.topic)
