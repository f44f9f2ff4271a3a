"""rules/directives/*.md and rules/learned/*.md: rules the worker applies.

Front matter is optional; without it the file name is the rule id and the body the rule.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from genworker.workspace.models.base import Model, StrTuple, WorkspaceId

__all__ = ["Rule", "RuleKind"]

RuleKind = Literal["directive", "learned"]


def _aware(value: Any) -> Any:
    """A timestamp written without a zone is read as UTC (naive datetimes do not compare)."""
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value


class Rule(Model):
    rule_id: WorkspaceId
    kind: RuleKind
    title: str = ""
    status: Literal["active", "disabled", "superseded"] = "active"
    priority: int = 0
    scope: StrTuple = ()
    source: str = ""
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)
    created_at: Annotated[dt.date | dt.datetime, AfterValidator(_aware)] | None = None
    text: str = Field(default="", exclude=True)
