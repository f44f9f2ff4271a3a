"""Brief items and briefs: what a person reads every few hours instead of being interrupted.

Sections follow Steward: done automatically, waiting, conflicts and risks, needs your
confirmation (with options), new context spaces the router was not sure of, capability
suggestions, feedback. Every item carries options a person can act on. Files carry
`schema_version`; unknown versions are rejected.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from genworker.autonomy.records import VersionedRecord

__all__ = [
    "SCHEMA_VERSION",
    "SECTIONS",
    "SECTION_TITLES",
    "Brief",
    "BriefError",
    "BriefItem",
    "BriefNotFound",
    "BudgetDay",
    "Option",
    "Section",
    "load_model",
]

SCHEMA_VERSION: Final = VersionedRecord.SCHEMA_VERSION
M = TypeVar("M", bound=BaseModel)
Section = Literal["done", "waiting", "conflicts", "confirm", "spaces", "suggestions", "feedback"]
SECTIONS: Final[tuple[Section, ...]] = (
    "done", "waiting", "conflicts", "confirm", "spaces", "suggestions", "feedback",
)  # fmt: skip
SECTION_TITLES: Final[dict[Section, str]] = {
    "done": "Done automatically",
    "waiting": "Waiting",
    "conflicts": "Conflicts and risks",
    "confirm": "Needs your confirmation",
    "spaces": "New context spaces to confirm or re-file",
    "suggestions": "Capability suggestions (never interrupt)",
    "feedback": "Feedback",
}


class BriefError(Exception):
    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where


class BriefNotFound(BriefError, LookupError):
    pass


class Option(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    label: str
    command: str | None = None  # the IM command or API call that carries it out


class BriefItem(VersionedRecord):
    item_id: str
    section: Section
    title: str
    created_at: datetime
    risk: Literal["low", "medium", "high"] | None = None
    reversibility: Literal["reversible", "undo_window", "irreversible"] | None = None
    priority: Literal["P0", "P1", "P2", "P3"] = "P2"
    detail: str = ""
    ref: str | None = None  # run id, plan id, confirmation id ...
    options: tuple[Option, ...] = ()
    reason: str | None = None  # why it is here rather than an interruption (budget, quiet hours)


class Brief(VersionedRecord):
    brief_id: str
    tenant_id: str
    worker_id: str
    created_at: datetime
    period_start: datetime | None
    period_end: datetime
    timezone: str
    budget_used: int
    budget_limit: int
    sections: dict[Section, tuple[BriefItem, ...]]
    text: str
    delivered: bool | None = None  # None: no sink configured
    delivery_error: str | None = None


class BudgetDay(VersionedRecord):
    day: str  # the worker's local date, YYYY-MM-DD
    used: int = 0
    interruptions: tuple[str, ...] = ()  # item ids that interrupted


def load_model(model: type[M], data: bytes, where: str) -> M:
    try:
        return model.model_validate_json(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(file)'}: {e['msg']}" for e in exc.errors())
        raise BriefError(where, problems) from None
