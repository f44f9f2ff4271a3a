"""The one interface both inbox backends implement, and the rules they share.

Reads (`get`, `list`, `counts`) and `write` are for anyone. `claim` and `compare_and_set` change
item state and are called only by `InboxAggregate` (tests/structural/test_inbox_boundaries.py).
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Final, Protocol

from genworker.autonomy.inbox.errors import InvalidItemError
from genworker.autonomy.inbox.models import SCHEMA_VERSION, InboxItem, InboxState
from genworker.ids import InvalidIdError, validate_id

__all__ = [
    "DEFAULT_LIST_LIMIT",
    "EPOCH",
    "STATE_FIELDS",
    "InboxStore",
    "check_claim_args",
    "check_list_args",
    "check_new_item",
    "claimed",
    "due_at",
    "is_claimable",
    "iso",
    "micros",
    "with_state_of",
]

EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
DEFAULT_LIST_LIMIT: Final = 100
STATE_FIELDS: Final = ("state", "attempts", "lease_owner", "lease_expires_at", "last_error", "retry_at")
"""The fields `compare_and_set` takes from the new item; everything else stays as written."""


class InboxStore(Protocol):
    """Items keyed by (tenant_id, worker_id, item_id); a worker never sees another worker's inbox.

    Order is oldest first: by `created_at`, then `item_id`.
    """

    async def write(self, item: InboxItem) -> bool:
        """Store a new pending item; False (and nothing stored) when the worker already has an item
        with this `dedupe_key`, or this very item (a retried write). Publishes ``inbox.item_written``."""

    async def get(self, tenant_id: str, worker_id: str, item_id: str) -> InboxItem | None: ...

    async def list(
        self,
        tenant_id: str,
        worker_id: str,
        state: InboxState | None = None,
        *,
        limit: int = DEFAULT_LIST_LIMIT,
        offset: int = 0,
    ) -> tuple[InboxItem, ...]:
        """Oldest first; unreadable items are logged and skipped."""

    async def counts(self, tenant_id: str, worker_id: str) -> Mapping[InboxState, int]:
        """How many items are in each state (every state is present)."""

    # -- state primitives: InboxAggregate only ----------------------------------------

    async def claim(
        self, tenant_id: str, worker_id: str, owner: str, *, limit: int, lease_s: float
    ) -> tuple[InboxItem, ...]:
        """Atomically move up to `limit` claimable items, oldest first, to PROCESSING under a lease of
        `owner` until now + `lease_s`, adding one to `attempts`. Claimable: PENDING, PROCESSING whose
        lease has expired (a crashed runner's), FAILED whose `retry_at` has passed. No item is ever
        handed to two claimants whose leases overlap, across tasks and processes."""

    async def compare_and_set_many(self, changes: Sequence[tuple[InboxItem, int]]) -> builtins.list[InboxItem | None]:
        """`compare_and_set` for several items of one worker at once (one lock, the files flushed
        together); a result per change, in order. Item ids must be distinct."""

    async def delete_consumed(self, tenant_id: str, worker_id: str, *, before: datetime, limit: int = 1000) -> int:
        """Delete up to `limit` CONSUMED items created before `before`, oldest first, with their dedupe
        entries (a duplicate arriving after that is accepted again); how many were deleted. Items in
        any other state are never purged: dead letters wait for a person."""

    async def compare_and_set(self, item: InboxItem, expected_version: int) -> InboxItem | None:
        """Store the `STATE_FIELDS` of `item` with version `expected_version + 1` if the stored item
        still has `expected_version`; the stored item, or None when it changed or is gone."""


def micros(value: datetime) -> int:
    """Microseconds since the epoch: the sort key (a Redis score stays exact below 2**53)."""
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def iso(value: datetime) -> str:
    """The same text pydantic writes for a UTC datetime."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def check_new_item(item: InboxItem) -> InboxItem:
    """What `write` accepts, as stored (version 1)."""
    try:
        validate_id(item.tenant_id, "tenant id")
        validate_id(item.worker_id, "worker id")
        validate_id(item.item_id, "inbox item id")
    except InvalidIdError as exc:
        raise InvalidItemError(str(exc)) from None
    if item.schema_version != SCHEMA_VERSION:
        raise InvalidItemError(f"inbox item {item.item_id!r}: schema_version must be {SCHEMA_VERSION}")
    if item.state is not InboxState.PENDING or item.attempts or item.lease_owner or item.version:
        raise InvalidItemError(
            f"inbox item {item.item_id!r}: only a new item can be written "
            f"(pending, no attempts, no lease, version 0), got {item.state} with {item.attempts} attempts"
        )
    if item.created_at < EPOCH:
        raise InvalidItemError(f"inbox item {item.item_id!r}: created_at {item.created_at.isoformat()} is before 1970")
    if item.dedupe_key == "":
        raise InvalidItemError(f"inbox item {item.item_id!r}: dedupe_key must be None or a non-empty string")
    return replace(item, version=1, lease_expires_at=None, retry_at=None, last_error=None)


def check_list_args(limit: int, offset: int) -> None:
    if limit < 0 or offset < 0:
        raise ValueError(f"limit and offset must not be negative, got limit={limit}, offset={offset}")


def due_at(item: InboxItem) -> datetime | None:
    """When a PROCESSING or FAILED item becomes claimable again (None: it is not waiting on time)."""
    if item.state is InboxState.PROCESSING:
        return item.lease_expires_at or EPOCH
    if item.state is InboxState.FAILED:
        return item.retry_at or EPOCH
    return None


def is_claimable(item: InboxItem, now: datetime) -> bool:
    if item.state is InboxState.PENDING:
        return True
    due = due_at(item)
    return due is not None and due <= now


def claimed(item: InboxItem, owner: str, now: datetime, lease_s: float) -> InboxItem:
    """The claim transition, shared by the file backend and mirrored by the Redis Lua script."""
    last_error = item.last_error
    if item.state is InboxState.PROCESSING:
        expired = iso(item.lease_expires_at) if item.lease_expires_at else "?"
        last_error = f"lease of {item.lease_owner or '?'} expired at {expired}"
    return replace(
        item,
        state=InboxState.PROCESSING,
        lease_owner=owner,
        lease_expires_at=now + timedelta(seconds=lease_s),
        retry_at=None,
        attempts=item.attempts + 1,
        last_error=last_error,
        version=item.version + 1,
    )


def with_state_of(stored: InboxItem, new: InboxItem, version: int) -> InboxItem:
    """`stored` with the state fields of `new`: a compare-and-set never rewrites what was sensed."""
    changes = {name: getattr(new, name) for name in STATE_FIELDS}
    return replace(stored, **changes, version=version)


def check_batch(changes: Sequence[tuple[InboxItem, int]]) -> None:
    """A compare_and_set_many batch: items of one worker, each at most once."""
    first = changes[0][0]
    if any((i.tenant_id, i.worker_id) != (first.tenant_id, first.worker_id) for i, _ in changes):
        raise ValueError("compare_and_set_many takes items of one worker")
    if len({i.item_id for i, _ in changes}) != len(changes):
        raise ValueError("compare_and_set_many takes each item at most once")


def check_claim_args(owner: str, limit: int, lease_s: float) -> None:
    if not owner:
        raise ValueError("owner must be a non-empty string")
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    if lease_s <= 0:
        raise ValueError(f"lease_s must be positive, got {lease_s}")
