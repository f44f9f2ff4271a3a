"""InboxAggregate: the only code that changes the state of a stored inbox item.

::

    pending ──claim──▶ processing ──consume──▶ consumed
       ▲                 │  │ └─fail, attempts < max──▶ failed ──retry_at passed: claimable again
       │                 │  └──fail, attempts = max, or retry=False──▶ dead
       │                 └──lease expired: claimable again; delivered > max times ──▶ dead
       └──────requeue (failed | dead | processing with an expired lease)

`attempts` counts deliveries. Every transition is a compare-and-set on the item's `version`:
the aggregate checks the caller still holds the lease on the latest stored item, so a runner
whose lease expired and was taken over cannot consume or fail the item; after a lost race it
reloads and checks again. Each applied change publishes an ``inbox.*`` event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, Final

from genworker.autonomy.inbox.errors import (
    InboxConflictError,
    InboxError,
    InboxItemNotFoundError,
    InvalidTransitionError,
    StaleLeaseError,
)
from genworker.autonomy.inbox.models import InboxItem, InboxState
from genworker.autonomy.inbox.store import InboxStore, check_claim_args, iso
from genworker.autonomy.inbox.topics import (
    ITEM_CONSUMED,
    ITEM_DEAD,
    ITEM_FAILED,
    ITEM_REQUEUED,
    item_event,
    publish_quietly,
)
from genworker.bus import EventBus
from genworker.observability.logging import log_decision
from genworker.observability.metrics import record_dead_letter

__all__ = ["DEFAULT_LEASE_S", "DEFAULT_MAX_ATTEMPTS", "InboxAggregate", "RetryDelay", "exponential_backoff"]

log = logging.getLogger("genworker.inbox")


def _dead_lettered(item: InboxItem, error: str) -> None:
    record_dead_letter()
    log_decision(
        log, "inbox.dead_letter", "dead", tenant_id=item.tenant_id, worker_id=item.worker_id,
        item_id=item.item_id, attempts=item.attempts, error=error,
    )  # fmt: skip


DEFAULT_MAX_ATTEMPTS: Final = 5
DEFAULT_LEASE_S: Final = 300.0

RetryDelay = Callable[[int], timedelta]
"""How long a FAILED item waits before it is claimable again, given the attempts made so far."""

Step = Callable[[InboxItem], InboxItem | None]
"""A transition of the latest stored item: the new item, None when it already is the result, or raise."""


def exponential_backoff(base: timedelta = timedelta(seconds=10), cap: timedelta = timedelta(minutes=10)) -> RetryDelay:
    def delay(attempts: int) -> timedelta:
        return min(base * (1 << min(max(attempts - 1, 0), 32)), cap)

    return delay


def _utc_now() -> datetime:
    return datetime.now(UTC)


class InboxAggregate:
    def __init__(
        self,
        store: InboxStore,
        *,
        bus: EventBus | None = None,
        clock: Callable[[], datetime] = _utc_now,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        retry_delay: RetryDelay | None = None,
        max_conflicts: int = 16,
    ) -> None:
        if max_attempts < 1 or max_conflicts < 1:
            raise ValueError("max_attempts and max_conflicts must be at least 1")
        self._store = store
        self._bus = bus
        self._clock = clock
        self._max_attempts = max_attempts
        self._retry_delay = retry_delay or exponential_backoff()
        self._max_conflicts = max_conflicts

    @property
    def max_attempts(self) -> int:
        return self._max_attempts

    async def purge_consumed(self, tenant_id: str, worker_id: str, retention: timedelta, *, limit: int = 1000) -> int:
        """Delete consumed items created more than `retention` ago (with their dedupe entries), so
        an always-on inbox stays bounded; failed and dead items are kept for a person."""
        return await self._store.delete_consumed(tenant_id, worker_id, before=self._clock() - retention, limit=limit)

    async def claim(
        self,
        tenant_id: str,
        worker_id: str,
        owner: str,
        *,
        limit: int = 10,
        lease_s: float = DEFAULT_LEASE_S,
    ) -> tuple[InboxItem, ...]:
        """Up to `limit` items, oldest first, leased to `owner` for `lease_s` seconds.

        An item delivered more than `max_attempts` times without being consumed or failed (its
        runner kept crashing) is dead-lettered here instead of being handed out again.
        """
        check_claim_args(owner, limit, lease_s)
        ready = []
        for item in await self._store.claim(tenant_id, worker_id, owner, limit=limit, lease_s=lease_s):
            if item.attempts <= self._max_attempts:
                ready.append(item)
                continue
            error = f"delivered {item.attempts - 1} times without a result; {item.last_error or 'no error recorded'}"
            dead, changed = await self._apply(item, partial(self._dead_step, owner=owner, error=error))
            if changed:
                _dead_lettered(dead, error)
                await self._publish(ITEM_DEAD, dead, owner=owner)
        return tuple(ready)

    async def consume(self, item: InboxItem, owner: str) -> InboxItem:
        """Mark `item` done. Repeating it is harmless; StaleLeaseError when `owner` no longer holds it."""

        def step(current: InboxItem) -> InboxItem | None:
            if current.state is InboxState.CONSUMED and current.lease_owner == owner:
                return None
            self._check_holder(current, owner)
            return replace(current, state=InboxState.CONSUMED, lease_expires_at=None, retry_at=None)

        consumed, changed = await self._apply(item, step)
        if changed:
            await self._publish(ITEM_CONSUMED, consumed, owner=owner)
        return consumed

    async def consume_many(self, items: Sequence[InboxItem], owner: str) -> list[InboxItem | InboxError]:
        """`consume` for several items of one worker, written together (one lock and one flush on the
        file backend). A result per item, in order: the consumed item, or the error `consume` would
        have raised (StaleLeaseError when `owner` no longer holds it)."""
        results: list[InboxItem | InboxError | None] = [None] * len(items)
        batch: list[tuple[int, InboxItem]] = []
        for index, item in enumerate(items):
            if item.state is InboxState.CONSUMED and item.lease_owner == owner:
                results[index] = item
            elif item.state is InboxState.PROCESSING and item.lease_owner == owner:
                batch.append((index, replace(item, state=InboxState.CONSUMED, lease_expires_at=None, retry_at=None)))
        stored = await self._store.compare_and_set_many([(new, items[i].version) for i, new in batch]) if batch else []
        for (index, _), done in zip(batch, stored, strict=True):
            if done is not None:
                results[index] = done
                await self._publish(ITEM_CONSUMED, done, owner=owner)
        for index, item in enumerate(items):
            if results[index] is None:  # changed since the caller read it: the one-by-one path decides
                try:
                    results[index] = await self.consume(item, owner)
                except InboxError as exc:
                    results[index] = exc
        return [r for r in results if r is not None]

    async def fail(self, item: InboxItem, owner: str, error: str, *, retry: bool = True) -> InboxItem:
        """Record a failed attempt: FAILED until a retry delay has passed, or DEAD when the attempts
        are used up or `retry` is False. StaleLeaseError when `owner` no longer holds it."""

        def step(current: InboxItem) -> InboxItem | None:
            self._check_holder(current, owner)
            if not retry or current.attempts >= self._max_attempts:
                return self._dead_step(current, owner=owner, error=error)
            retry_at = self._clock() + self._retry_delay(current.attempts)
            return replace(
                current,
                state=InboxState.FAILED,
                lease_owner=None,
                lease_expires_at=None,
                retry_at=retry_at,
                last_error=error,
            )

        failed, changed = await self._apply(item, step)
        if failed.state is InboxState.DEAD:
            if changed:
                _dead_lettered(failed, error)
            await self._publish(ITEM_DEAD, failed, owner=owner, error=error)
        else:
            retry_at = iso(failed.retry_at) if failed.retry_at else None
            await self._publish(ITEM_FAILED, failed, owner=owner, error=error, retry_at=retry_at)
        return failed

    async def extend_lease(self, item: InboxItem, owner: str, lease_s: float) -> InboxItem:
        """Keep holding `item` for `lease_s` more seconds from now (for long work)."""
        if lease_s <= 0:
            raise ValueError(f"lease_s must be positive, got {lease_s}")

        def step(current: InboxItem) -> InboxItem:
            self._check_holder(current, owner)
            return replace(current, lease_expires_at=self._clock() + timedelta(seconds=lease_s))

        extended, _ = await self._apply(item, step)
        return extended

    async def requeue(self, tenant_id: str, worker_id: str, item_id: str) -> InboxItem:
        """Make a failed, dead or abandoned (expired lease) item pending again with its attempts reset.
        A pending item is returned as it is; a consumed item, or one under a live lease, is refused."""
        item = await self._store.get(tenant_id, worker_id, item_id)
        if item is None:
            raise InboxItemNotFoundError(tenant_id, worker_id, item_id)
        previous: list[InboxState] = []

        def step(current: InboxItem) -> InboxItem | None:
            if current.state is InboxState.PENDING:
                return None
            if current.state is InboxState.CONSUMED:
                raise InvalidTransitionError(current.item_id, "requeue", current.state)
            expires = current.lease_expires_at
            if current.state is InboxState.PROCESSING and (expires is None or expires > self._clock()):
                why = f"leased to {current.lease_owner!r} until {iso(expires) if expires else '?'}"
                raise InvalidTransitionError(current.item_id, "requeue", current.state, why)
            previous[:] = [current.state]
            return replace(
                current,
                state=InboxState.PENDING,
                attempts=0,
                lease_owner=None,
                lease_expires_at=None,
                retry_at=None,
            )

        requeued, changed = await self._apply(item, step, fresh=True)
        if changed:
            await self._publish(ITEM_REQUEUED, requeued, previous_state=previous[0].value)
        return requeued

    # -- internals ---------------------------------------------------------------------

    async def _apply(self, item: InboxItem, step: Step, *, fresh: bool = False) -> tuple[InboxItem, bool]:
        """Apply `step` with compare-and-set, reloading after a lost race; (result, whether it changed).

        A refusal judged on the caller's copy (`fresh` False) is checked again on the stored item.
        """
        current = item
        for _ in range(self._max_conflicts):
            try:
                new = step(current)
            except (StaleLeaseError, InvalidTransitionError):
                if fresh:
                    raise
            else:
                if new is None:
                    return current, False
                stored = await self._store.compare_and_set(new, current.version)
                if stored is not None:
                    return stored, True
            latest = await self._store.get(item.tenant_id, item.worker_id, item.item_id)
            if latest is None:
                raise InboxItemNotFoundError(item.tenant_id, item.worker_id, item.item_id)
            current, fresh = latest, True
        raise InboxConflictError(item.item_id, self._max_conflicts)

    def _check_holder(self, current: InboxItem, owner: str) -> None:
        if current.state is not InboxState.PROCESSING or current.lease_owner != owner:
            raise StaleLeaseError(current.item_id, owner, current.lease_owner, current.state.value)

    def _dead_step(self, current: InboxItem, *, owner: str, error: str) -> InboxItem:
        self._check_holder(current, owner)
        return replace(
            current,
            state=InboxState.DEAD,
            lease_owner=None,
            lease_expires_at=None,
            retry_at=None,
            last_error=error,
        )

    async def _publish(self, topic: str, item: InboxItem, **extra: Any) -> None:
        await publish_quietly(self._bus, item_event(topic, item, **extra))
