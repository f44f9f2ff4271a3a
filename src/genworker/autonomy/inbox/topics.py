"""The events the inbox publishes, and how they are built and sent (best effort: the inbox is the truth)."""

from __future__ import annotations

import logging
from typing import Any, Final

from genworker.autonomy.inbox.models import InboxItem
from genworker.bus import Event, EventBus, EventBusError, new_event

__all__ = [
    "ITEM_CONSUMED",
    "ITEM_DEAD",
    "ITEM_FAILED",
    "ITEM_REQUEUED",
    "ITEM_WRITTEN",
    "SOURCE",
    "item_event",
    "publish_quietly",
    "written_event",
]

log = logging.getLogger(__name__)

SOURCE: Final = "inbox"
ITEM_WRITTEN: Final = "inbox.item_written"
# the payload fields genworker.worker.governance.evidence reads (an inferred action's evidence)
EVIDENCE_FIELDS: Final = (
    "confidence",
    "evidence_sources",
    "sources",
    "requested_actions",
    "requested_effects",
    "planned_effects",
)
ITEM_CONSUMED: Final = "inbox.item_consumed"
ITEM_FAILED: Final = "inbox.item_failed"
ITEM_DEAD: Final = "inbox.item_dead"
ITEM_REQUEUED: Final = "inbox.item_requeued"


def item_event(topic: str, item: InboxItem, **extra: Any) -> Event:
    """An inbox event about `item`; the payload says which item and where it stands now."""
    payload: dict[str, Any] = {
        "item_id": item.item_id,
        "state": item.state.value,
        "attempts": item.attempts,
        "source_type": item.source_type,
        "source_id": item.source_id,
        "event_type": item.event_type,
        "route": item.route,
        **extra,
    }
    return new_event(topic, source=SOURCE, tenant_id=item.tenant_id, worker_id=item.worker_id, payload=payload)


def written_event(item: InboxItem) -> Event:
    """`inbox.item_written` for a stored item. It also carries the payload's `match_key` (None: it has
    none), so a WAITING plan wakes without reading the item back from the store, and the payload's
    evidence fields (`confidence`, `evidence_sources` ...), so a duty it fires reaches the Policy Gate
    with them."""
    key = item.payload.get("match_key")
    evidence = {k: item.payload[k] for k in EVIDENCE_FIELDS if k in item.payload}
    match_key = key if isinstance(key, str) else None
    return item_event(ITEM_WRITTEN, item, dedupe_key=item.dedupe_key, match_key=match_key, **evidence)


async def publish_quietly(bus: EventBus | None, event: Event) -> None:
    """Publish; a bus failure is logged, never raised: the stored item already records the change."""
    if bus is None:
        return
    try:
        await bus.publish(event)
    except EventBusError as exc:
        log.warning("inbox event %s (%s) not published: %s", event.event_id, event.topic, exc)
