"""InboxItem: one sensed fact addressed to one worker, and the narrow writer interface sensors use."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final, Protocol

from genworker.workspace.models.base import JsonMap, freeze

__all__ = ["SCHEMA_VERSION", "InboxFacts", "InboxItem", "InboxState", "InboxWriter", "new_item"]

SCHEMA_VERSION: Final = 1


class InboxState(StrEnum):
    PENDING = "pending"
    PROCESSING = "processing"  # claimed, under a lease
    CONSUMED = "consumed"
    FAILED = "failed"  # last attempt failed; claimable again once `retry_at` has passed
    DEAD = "dead"  # dead-lettered after too many failures; only a requeue revives it


@dataclass(frozen=True, slots=True)
class InboxItem:
    """A fact in a worker's inbox. Only `InboxAggregate` changes the state fields of a stored item.

    `attempts` counts deliveries (claims); `version` counts stored changes and is the
    compare-and-set token (0: never stored); `retry_at` is when a FAILED item may be claimed again.
    """

    item_id: str
    tenant_id: str
    worker_id: str
    source_type: str  # webhook | workspace_file | git | email | event | confirmation ...
    source_id: str  # the sensor key (sensor_id or source_type) or another origin id
    event_type: str  # e.g. "file.modified", "git.commit", "email.received", "webhook.fact"
    payload: JsonMap = field(default_factory=lambda: MappingProxyType({}))
    route: str | None = None  # what routing rules decided: summary | task | isolated | a custom route
    dedupe_key: str | None = None  # a second item with the same key is dropped
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    state: InboxState = InboxState.PENDING
    attempts: int = 0
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    last_error: str | None = None
    metadata: JsonMap = field(default_factory=lambda: MappingProxyType({}))
    retry_at: datetime | None = None
    version: int = 0
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        for name in ("created_at", "lease_expires_at", "retry_at"):
            value = getattr(self, name)
            if value is not None and (value.tzinfo is None or value.utcoffset() is None):
                raise ValueError(f"inbox item {self.item_id!r}: {name} must be timezone-aware, got {value.isoformat()}")
        if not isinstance(self.state, InboxState):
            object.__setattr__(self, "state", InboxState(self.state))
        for name in ("payload", "metadata"):
            value = getattr(self, name)
            if not isinstance(value, MappingProxyType):
                object.__setattr__(self, name, freeze(value))


def new_item(
    tenant_id: str,
    worker_id: str,
    source_type: str,
    source_id: str,
    event_type: str,
    payload: Mapping[str, Any],
    *,
    route: str | None = None,
    dedupe_key: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> InboxItem:
    return InboxItem(
        item_id=f"ibx_{uuid.uuid4().hex}",
        tenant_id=tenant_id,
        worker_id=worker_id,
        source_type=source_type,
        source_id=source_id,
        event_type=event_type,
        payload=freeze(dict(payload)),
        route=route,
        dedupe_key=dedupe_key,
        metadata=freeze(dict(metadata or {})),
    )


class InboxWriter(Protocol):
    """What a sensor needs: write one fact; False when its dedupe_key was already seen (dropped)."""

    async def write(self, item: InboxItem) -> bool: ...


@dataclass(frozen=True, slots=True)
class InboxFacts:
    """The channels' `InboxWriter` (`channels.base`) over an inbox store: each fact a new pending item."""

    store: InboxWriter

    async def write_fact(
        self,
        tenant_id: str,
        worker_id: str,
        source_type: str,
        source_id: str,
        event_type: str,
        payload: Mapping[str, Any],
        *,
        dedupe_key: str,
        metadata: Mapping[str, Any],
    ) -> bool:
        item = new_item(
            tenant_id, worker_id, source_type, source_id, event_type, payload, dedupe_key=dedupe_key, metadata=metadata
        )
        return await self.store.write(item)
