"""What one heartbeat did: the summary turn's outcome, each item's result, and the run's report."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, assert_never

__all__ = [
    "HeartbeatReport",
    "ItemAction",
    "ItemOutcome",
    "ItemResult",
    "Reported",
    "Silent",
    "SummaryFailed",
    "SummaryOutcome",
    "summary_json",
]

ItemAction = Literal["summary", "task", "isolated", "duplicate", "dismiss", "space"]
# gathered: filed into a context space whose evidence did not call for a task (docs/context-spaces.md)
ItemOutcome = Literal["reported", "silent", "submitted", "duplicate", "dismissed", "failed", "gathered"]


@dataclass(frozen=True, slots=True)
class Reported:
    """The turn found something that needs attention: `message` is now in the main session."""

    message: str
    run_id: str
    delivery: str | None = None  # how it reached the owner: "sent: …", "briefed: <reason>"; None: not taken


@dataclass(frozen=True, slots=True)
class Silent:
    """The turn answered "attention": false — nothing user-visible was produced."""

    run_id: str


@dataclass(frozen=True, slots=True)
class SummaryFailed:
    error: str
    retry: bool  # whether the items were failed for a later retry (else dead-lettered)
    run_id: str | None = None  # None: no run was started, so no model was called


SummaryOutcome = Reported | Silent | SummaryFailed


@dataclass(frozen=True, slots=True)
class ItemResult:
    item_id: str
    concern: str
    action: ItemAction
    outcome: ItemOutcome
    reason: str
    run_id: str | None = None
    error: str | None = None


def summary_json(summary: SummaryOutcome | None) -> dict[str, Any] | None:
    match summary:
        case None:
            return None
        case Reported(message=message, run_id=run_id, delivery=delivery):
            taken = {"delivery": delivery} if delivery is not None else {}
            return {"outcome": "reported", "message": message, "run_id": run_id, **taken}
        case Silent(run_id=run_id):
            return {"outcome": "silent", "run_id": run_id}
        case SummaryFailed(error=error, retry=retry, run_id=run_id):
            return {"outcome": "failed", "error": error, "retry": retry, "run_id": run_id}
        case _:
            assert_never(summary)


@dataclass(frozen=True, slots=True)
class HeartbeatReport:
    tenant_id: str
    worker_id: str
    started_at: datetime
    claimed: int = 0
    items: tuple[ItemResult, ...] = ()
    summary: SummaryOutcome | None = None
    skipped: str | None = None  # why nothing was attempted (e.g. the worker is not loaded)

    @property
    def model_turns(self) -> int:
        """Summary turns that reached the model (0 or 1); task and isolated runs are counted apart."""
        match self.summary:
            case Reported() | Silent():
                return 1
            case SummaryFailed(run_id=run_id):
                return 1 if run_id is not None else 0
            case None:
                return 0
            case _:
                assert_never(self.summary)

    @property
    def run_ids(self) -> tuple[str, ...]:
        """Task and isolated runs this heartbeat started (they go on in the background)."""
        return tuple(r.run_id for r in self.items if r.run_id and r.action in ("task", "isolated"))

    def as_json(self) -> dict[str, Any]:
        return {
            "tenant_id": self.tenant_id,
            "worker_id": self.worker_id,
            "started_at": self.started_at.isoformat(),
            "claimed": self.claimed,
            "skipped": self.skipped,
            "model_turns": self.model_turns,
            "summary": summary_json(self.summary),
            "items": [
                {
                    "item_id": r.item_id,
                    "concern": r.concern,
                    "action": r.action,
                    "outcome": r.outcome,
                    "reason": r.reason,
                    "run_id": r.run_id,
                    "error": r.error,
                }
                for r in self.items
            ],
        }
