"""The brief's "New context spaces to confirm or re-file" section: every space a low-confidence (or
unusable) route created, in each brief until a person confirms it or re-files it, with both
options (the space the model leaned to first)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Final

from genworker.autonomy.briefs.models import BriefItem, Option
from genworker.autonomy.spaces.service import SpaceService

__all__ = ["pending_spaces"]

_SHOWN: Final = 20


def pending_spaces(service: SpaceService) -> Callable[[str, str, datetime | None], Awaitable[list[BriefItem]]]:
    """A brief source (`briefs.done.DoneSource`) of the worker's pending spaces."""

    async def source(tenant_id: str, worker_id: str, since: datetime | None) -> list[BriefItem]:
        if not await asyncio.to_thread(service.has_spaces, tenant_id, worker_id):
            return []
        cards = await asyncio.to_thread(service.index(tenant_id, worker_id).pending_cards)
        now = service.clock()
        return [_item(worker_id, card, now) for card in cards[:_SHOWN]]

    return source


def _item(worker_id: str, card: dict[str, Any], now: datetime) -> BriefItem:
    space_id = card["space_id"]
    base = f"POST /api/v1/workers/{worker_id}/spaces/{space_id}"
    options = [Option(label="Confirm as a new space", command=f"{base}/confirm")]
    if card.get("suggested_space"):
        target = card["suggested_space"]
        options.append(Option(label=f"File into {target}", command=f'{base}/refile {{"target": "{target}"}}'))
    options.append(Option(label="File into another space", command=f'{base}/refile {{"target": "SPACE_…"}}'))
    confidence = card.get("route_confidence")
    sure = f"router confidence {confidence:.2f}" if isinstance(confidence, int | float) else "no usable route"
    return BriefItem(
        item_id=f"space_{space_id}",
        section="spaces",
        title=f"{space_id}: {card['title']} ({sure}, {card['evidence_count']} facts)",
        created_at=now,
        detail=str(card.get("route_reason") or ""),
        ref=space_id,
        options=tuple(options),
    )
