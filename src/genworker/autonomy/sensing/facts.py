"""A sensed fact and the one path it takes into the inbox: filter, route, write, propose a goal.

Every fact carries a `key` that is deterministic for what was observed (a commit sha, a file's path
plus mtime_ns and size, an IMAP UIDVALIDITY plus UID); its dedupe_key is
`{source_type}:{sensor_key}:{key}`, so writing the same observation twice (a crash between the inbox
write and the cursor move) is dropped by the inbox. Keys are unique within one worker's inbox.

With `auto_create_goal`, a goal-worthy fact (routed to "goal", or carrying a `goal` field) also gets a
`goal.proposed` inbox item whose `metadata.require_approval` is the config's `require_approval`. It is
only a proposal: a later Goal aggregate turns it into a goal, after a human approves it when
require_approval is true.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from genworker.autonomy.inbox import InboxItem, InboxWriter, new_item
from genworker.autonomy.sensing.filters import SensorFilter, parse_filter
from genworker.autonomy.sensing.routing import GOAL_ROUTE, inbox_route, is_goal_worthy, route_fact
from genworker.workspace.models.persona import SensorConfig

__all__ = ["GOAL_PROPOSED", "Emission", "Fact", "FactEmitter"]

GOAL_PROPOSED = "goal.proposed"


@dataclass(frozen=True, slots=True)
class Fact:
    event_type: str  # e.g. file.created, git.commit, email.received, webhook.fact
    payload: Mapping[str, Any]
    key: str  # deterministic identity of the observation within its sensor

    def fields(self) -> Mapping[str, Any]:
        """What filters and routing rules see: `event_type` plus the payload; a payload field of
        that name (a webhook sender's own event type) wins."""
        return MappingProxyType({"event_type": self.event_type, **self.payload})


@dataclass(frozen=True, slots=True)
class Emission:
    """What became of one fact."""

    item: InboxItem | None  # None: the filter dropped the fact
    written: bool = False  # False with an item: a duplicate, its dedupe_key was already in the inbox
    proposal: InboxItem | None = None
    proposal_written: bool = False

    def items_written(self) -> list[InboxItem]:
        written = [self.item] if self.item is not None and self.written else []
        if self.proposal is not None and self.proposal_written:
            written.append(self.proposal)
        return written


class FactEmitter:
    """Writes one sensor's facts for one worker."""

    def __init__(
        self,
        tenant_id: str,
        worker_id: str,
        config: SensorConfig,
        writer: InboxWriter,
        sensor_filter: SensorFilter | None = None,
    ) -> None:
        self.tenant_id = tenant_id
        self.worker_id = worker_id
        self.config = config
        self.writer = writer
        self.filter = sensor_filter if sensor_filter is not None else parse_filter(config)

    def dedupe_key(self, fact: Fact) -> str:
        return f"{self.config.source_type}:{self.config.key}:{fact.key}"

    async def emit(self, fact: Fact) -> Emission:
        """Write `fact` (and its goal proposal); returns only once the inbox has it durably."""
        fields = fact.fields()
        if not self.filter.passes(fields):
            return Emission(None)
        written_route = route_fact(self.config, fields)
        route = inbox_route(written_route)
        dedupe_key = self.dedupe_key(fact)
        metadata = {"sensor": self.config.key, "fact_key": fact.key}
        if written_route != route:  # upstream's route, kept for event matchers that care (reactive / both)
            metadata["cognition_route"] = str(written_route)
        item = new_item(
            self.tenant_id,
            self.worker_id,
            self.config.source_type,
            self.config.key,
            fact.event_type,
            fact.payload,
            route=route,
            dedupe_key=dedupe_key,
            metadata=metadata,
        )
        written = await self.writer.write(item)
        if not (self.config.auto_create_goal and is_goal_worthy(route, fields)):
            return Emission(item, written)
        # Written even when the fact was a duplicate: a crash may have come between the two writes.
        proposal = self._proposal(fact, route, dedupe_key)
        return Emission(item, written, proposal, await self.writer.write(proposal))

    def _proposal(self, fact: Fact, route: str | None, fact_dedupe_key: str) -> InboxItem:
        return new_item(
            self.tenant_id,
            self.worker_id,
            self.config.source_type,
            self.config.key,
            GOAL_PROPOSED,
            {
                "title": _title(fact),
                "fact_dedupe_key": fact_dedupe_key,
                "fact_event_type": fact.event_type,
                "fact_route": route,
                "fact": dict(fact.payload),
            },
            route=GOAL_ROUTE,
            dedupe_key=f"{fact_dedupe_key}:{GOAL_PROPOSED}",
            metadata={
                "sensor": self.config.key,
                "require_approval": self.config.require_approval,
                "fact_dedupe_key": fact_dedupe_key,
            },
        )


def _title(fact: Fact) -> str:
    goal = fact.payload.get("goal")
    if isinstance(goal, str) and goal.strip():
        return goal.strip()
    if isinstance(goal, Mapping) and isinstance(goal.get("title"), str):
        return str(goal["title"])
    for name in ("title", "subject", "path", "branch"):
        value = fact.payload.get(name)
        if isinstance(value, str) and value:
            return f"{fact.event_type}: {value}"
    return fact.event_type
