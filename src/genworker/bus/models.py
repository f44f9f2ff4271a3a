"""Event: the one format every in-process and cross-process notification takes."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Final

from genworker.workspace.models.base import JsonMap, freeze

__all__ = ["SCHEMA_VERSION", "TOPIC_PATTERN", "Event", "new_event"]

SCHEMA_VERSION: Final = 1
TOPIC_PATTERN: Final = re.compile(r"^[a-z0-9_-]+(\.[a-z0-9_-]+)*$")


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Something that happened, addressed by a dotted `topic` such as ``inbox.item_written``.

    `tenant_id` / `worker_id` are None for events that concern no tenant or no single worker;
    `source` names the component that published it (``inbox``, ``sensor.webhook`` ...).
    """

    event_id: str
    topic: str
    tenant_id: str | None
    worker_id: str | None
    payload: JsonMap = field(default_factory=lambda: MappingProxyType({}))
    occurred_at: datetime
    source: str
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if not TOPIC_PATTERN.fullmatch(self.topic):
            raise ValueError(
                f"event topic {self.topic!r} is not valid: use dot-separated lowercase words "
                "(letters, digits, '_' or '-'), e.g. 'inbox.item_written'"
            )
        if self.occurred_at.tzinfo is None or self.occurred_at.utcoffset() is None:
            raise ValueError(f"event {self.event_id}: occurred_at must be timezone-aware")
        if not isinstance(self.payload, MappingProxyType):
            object.__setattr__(self, "payload", freeze(self.payload))


def new_event(
    topic: str,
    *,
    source: str,
    tenant_id: str | None = None,
    worker_id: str | None = None,
    payload: Mapping[str, Any] | None = None,
    occurred_at: datetime | None = None,
) -> Event:
    return Event(
        event_id=f"evt_{uuid.uuid4().hex}",
        topic=topic,
        tenant_id=tenant_id,
        worker_id=worker_id,
        payload=freeze(dict(payload or {})),
        occurred_at=occurred_at or datetime.now(UTC),
        source=source,
    )
