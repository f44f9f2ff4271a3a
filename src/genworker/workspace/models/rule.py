"""rules/directives/*.md and rules/learned/*.md: rules the worker applies.

Front matter is optional; without it the file name is the rule id and the body the rule.
Upstream genworker's front matter loads too: `type` (the loader lets it decide the kind),
`category`, `scope: {skills: [...]}`, `source: {type, evidence, created_at}`, `last_applied`,
`apply_count`, and the statuses `suspended` / `archived` / `crystallized` (not applied).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from genworker.workspace.models.base import Model, StrTuple, WorkspaceId, note

__all__ = ["LEARNED_DEFAULT_CONFIDENCE", "Rule", "RuleKind", "RuleSource", "RuleStatus"]

RuleKind = Literal["directive", "learned"]
RuleStatus = Literal["active", "disabled", "superseded", "suspended", "archived", "crystallized"]
LEARNED_DEFAULT_CONFIDENCE = 0.5  # a new learned rule has not proven itself (upstream's initial value)


def _aware(value: Any) -> Any:
    """A timestamp written without a zone is read as UTC (naive datetimes do not compare)."""
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value


Timestamp = Annotated[dt.date | dt.datetime, AfterValidator(_aware)]


class RuleSource(Model):
    """Where a rule came from: `admin`, `self_reflection`, `feedback`... (a plain string is the type)."""

    type: str = ""
    evidence: str = ""
    created_at: Timestamp | None = None


class Rule(Model):
    compat_keys = frozenset({"type"})  # upstream's kind; the loader reads it

    rule_id: WorkspaceId
    kind: RuleKind
    title: str = ""
    status: RuleStatus = "active"  # only active rules are applied
    priority: int = 0
    category: str = "preference"  # upstream: preference / strategy / prohibition
    scope: StrTuple = ()  # skills a learned rule applies to; empty = every skill
    source: RuleSource = RuleSource()
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)  # learned rules default to 0.5
    created_at: Timestamp | None = None  # default: source.created_at
    last_applied: Timestamp | None = None
    apply_count: int = Field(default=0, ge=0)
    text: str = Field(default="", exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        if "confidence" not in data and data.get("kind") == "learned":
            data["confidence"] = LEARNED_DEFAULT_CONFIDENCE
        source = data.get("source")
        if "created_at" not in data and isinstance(source, Mapping) and source.get("created_at") is not None:
            data["created_at"] = source["created_at"]
        return data

    @field_validator("scope", mode="before")
    @classmethod
    def _skills_scope(cls, value: Any) -> Any:
        if isinstance(value, Mapping):  # upstream: {skills: [...]}; {} = every skill
            extra = sorted(str(k) for k in value if k != "skills")
            if extra:
                raise ValueError(f"scope may only name skills, got {extra}")
            skills = value.get("skills") or ()
            note("scope", "mapped", f"{dict(value)} -> {list(skills)}" + ("" if skills else ": every skill"))
            return skills
        return value

    @field_validator("source", mode="before")
    @classmethod
    def _source_text(cls, value: Any) -> Any:
        if value is None:
            return {}
        if isinstance(value, str):
            return {"type": value}
        return value
