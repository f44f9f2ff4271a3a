"""What context spaces put in the brief: the "New context spaces to confirm or re-file" section —
every space a low-confidence (or unusable) route created, in each brief until a person confirms it
or re-files it, with both options (the space the model leaned to first) — and, under "Done
automatically", each young duplicate merged into an older space since the last brief (low risk,
reversible, with the way back: unmerge)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Final

from genworker.autonomy.briefs.models import BriefItem, Option
from genworker.autonomy.spaces.errors import SpaceError
from genworker.autonomy.spaces.models import Change, ContextSpace
from genworker.autonomy.spaces.service import SpaceService

__all__ = ["pending_spaces"]

_SHOWN: Final = 20


def pending_spaces(service: SpaceService) -> Callable[[str, str, datetime | None], Awaitable[list[BriefItem]]]:
    """A brief source (`briefs.done.DoneSource`) of the worker's pending spaces and the automatic
    merges since `since`."""

    async def source(tenant_id: str, worker_id: str, since: datetime | None) -> list[BriefItem]:
        if not await asyncio.to_thread(service.has_spaces, tenant_id, worker_id):
            return []

        def read() -> tuple[list[dict[str, Any]], list[tuple[ContextSpace, Change]]]:
            index = service.index(tenant_id, worker_id)
            merged = []
            for card in index.cards(review="merged", limit=_SHOWN * 5):
                try:
                    space = service.store.load(tenant_id, worker_id, card["space_id"])
                except SpaceError:
                    continue
                change = space.changes[-1] if space.changes else None
                if change is not None and change.kind == "merged" and (since is None or change.at >= since):
                    merged.append((space, change))
            return index.pending_cards(), merged[:_SHOWN]

        cards, merged = await asyncio.to_thread(read)
        now = service.clock()
        return [_item(worker_id, card, now) for card in cards[:_SHOWN]] + [
            _merged(worker_id, space, change) for space, change in merged
        ]

    return source


def _merged(worker_id: str, space: ContextSpace, change: Change) -> BriefItem:
    command = f"POST /api/v1/workers/{worker_id}/spaces/{space.space_id}/unmerge"
    return BriefItem(
        item_id=f"space_merge_{space.space_id}_{change.other_space}",
        section="done",
        title=f"Context space {space.space_id} merged into {change.other_space} automatically (duplicate spaces)",
        created_at=change.at,
        risk="low",
        reversibility="reversible",
        priority="P3",
        detail=f"{space.title}: {change.detail}",
        ref=space.space_id,
        options=(Option(label=f"Take {space.space_id} back out", command=command),),
    )


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
