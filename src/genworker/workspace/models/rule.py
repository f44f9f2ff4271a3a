"""rules/directives/*.md and rules/learned/*.md: rules the worker applies.

Front matter is optional; without it the file name is the rule id and the body the rule.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import Field

from genworker.workspace.models.base import Model, StrTuple, WorkspaceId

__all__ = ["Rule", "RuleKind"]

RuleKind = Literal["directive", "learned"]


class Rule(Model):
    rule_id: WorkspaceId
    kind: RuleKind
    title: str = ""
    status: Literal["active", "disabled", "superseded"] = "active"
    priority: int = 0
    scope: StrTuple = ()
    source: str = ""
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)
    created_at: dt.datetime | dt.date | None = None
    text: str = Field(default="", exclude=True)
