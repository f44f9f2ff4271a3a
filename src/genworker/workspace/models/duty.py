"""duties/*.md: a worker's responsibilities — triggers, execution policy, contract, action.

`duties/_defaults.md` is not a duty: its front matter is merged under every duty's own
`duty_defaults`, and the result fills any field the duty does not set itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, Field, PlainSerializer, field_validator, model_validator

from genworker.workspace.models.base import (
    Duration,
    JsonMap,
    Model,
    StrTuple,
    WorkspaceId,
    freeze,
    thaw,
    unique_ids,
)
from genworker.workspace.models.cron import cron_trigger

__all__ = [
    "DEFAULTABLE_FIELDS",
    "ConditionTrigger",
    "DutyContract",
    "DutySpec",
    "DutyStatus",
    "EventTrigger",
    "ExecutionDepth",
    "ExecutionPolicy",
    "ManualTrigger",
    "ProcessStep",
    "ScheduleTrigger",
    "Trigger",
    "apply_defaults",
    "parse_rule",
]


class DutyStatus(StrEnum):
    ACTIVE = "active"
    CLOSED = "closed"
    DEPRECATED = "deprecated"


ExecutionDepth = Literal["propose", "draft", "execute"]
MisfirePolicy = Literal["skip", "run_once", "catch_up_bounded"]

# A condition rule compares the metric's value with a constant: `> 10`, `value <= 0.5`, `== true`, `false`.
_RULE = re.compile(r"^\s*(?:value\s*)?(>=|<=|==|!=|>|<)?\s*(\S+)\s*$")


def parse_rule(rule: str) -> tuple[str, float]:
    """(operator, constant) of a condition rule: `[value] <op> <number | true | false>`, or a bare
    constant (`==`). ValueError says which forms are accepted."""
    match = _RULE.match(rule)
    if match is None or match.group(2).lower() in ("value", "nan", "inf", "-inf", "+inf", "infinity"):
        raise ValueError(f"rule {rule!r} must be '[value] <op> <number | true | false>' (ops: > >= < <= == !=)")
    operand = match.group(2).lower()
    if operand in ("true", "false"):
        return match.group(1) or "==", 1.0 if operand == "true" else 0.0
    try:
        return match.group(1) or "==", float(operand)
    except ValueError:
        raise ValueError(
            f"rule {rule!r} compares with {match.group(2)!r}, which is not a number or true/false"
            " (a rule compares the metric with a constant)"
        ) from None


def _check_timezone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: e.g. "America" is a tzdata folder
        raise ValueError(f"unknown IANA time zone {value!r}") from None
    return value


class _Trigger(Model):
    id: WorkspaceId


class ScheduleTrigger(_Trigger):
    type: Literal["schedule"]
    cron: str | None = None
    interval: Duration | None = None
    timezone: str = "UTC"
    misfire_policy: MisfirePolicy = "run_once"
    catch_up_max_runs: int = Field(default=3, ge=1)
    catch_up_window: Duration = 86400.0

    @field_validator("timezone")
    @classmethod
    def _tz(cls, value: str) -> str:
        return _check_timezone(value)

    @field_validator("cron")
    @classmethod
    def _cron_shape(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            cron_trigger(value, "UTC")  # what the duty scheduler will run, checked now
        except ValueError as exc:
            raise ValueError(f"cron {value!r}: {exc}") from None
        return value

    @model_validator(mode="after")
    def _cron_or_interval(self) -> ScheduleTrigger:
        if (self.cron is None) == (self.interval is None):
            raise ValueError("a schedule trigger needs exactly one of 'cron' or 'interval'")
        return self


class EventTrigger(_Trigger):
    type: Literal["event"]
    source: str
    event_type: str | None = None
    filter: JsonMap = Field(default_factory=dict)


class ConditionTrigger(_Trigger):
    type: Literal["condition"]
    metric: str
    rule: str
    check_interval: Duration = 300.0

    @field_validator("rule")
    @classmethod
    def _readable_rule(cls, value: str) -> str:
        parse_rule(value)  # refused when the duty loads, not at every check
        return value


class CollaborationTrigger(_Trigger):
    type: Literal["collaboration"]
    from_workers: StrTuple = ()
    request_type: str | None = None


class ManualTrigger(_Trigger):
    type: Literal["manual"]


Trigger = Annotated[
    ScheduleTrigger | EventTrigger | ConditionTrigger | CollaborationTrigger | ManualTrigger,
    Field(discriminator="type"),
]


class ExecutionPolicy(Model):
    default: ExecutionDepth = "execute"
    overrides: Annotated[
        Mapping[str, ExecutionDepth], AfterValidator(freeze), PlainSerializer(thaw, return_type=dict)
    ] = Field(default_factory=dict)  # trigger id -> depth

    def depth_for(self, trigger_id: str) -> ExecutionDepth:
        return self.overrides.get(trigger_id, self.default)


class Escalation(Model):
    condition: str
    target: str


class PreScript(Model):
    path: str | None = None
    inline: str | None = None
    language: Literal["python", "bash"] = "python"
    timeout: Duration = 60.0

    @model_validator(mode="after")
    def _one_source(self) -> PreScript:
        if (self.path is None) == (self.inline is None):
            raise ValueError("pre_script needs exactly one of 'path' or 'inline'")
        return self


class DutyContract(Model):
    version: str
    input_schema: JsonMap = Field(default_factory=dict)
    output_schema: JsonMap = Field(default_factory=dict)
    decision_scope: StrTuple = ()
    sla: JsonMap = Field(default_factory=dict)
    escalation: JsonMap = Field(default_factory=dict)
    approval: JsonMap = Field(default_factory=dict)
    audit: JsonMap = Field(default_factory=dict)


class ProcessStep(Model):
    process_id: WorkspaceId
    step_id: WorkspaceId
    step_name: str = ""


DEFAULTABLE_FIELDS = frozenset(
    {
        "status",
        "execution_policy",
        "quality_criteria",
        "skill_id",
        "skill_hint",
        "preferred_skill_ids",
        "pre_script",
        "escalation",
        "execution_log_retention",
        "contract",
        "process_step",
    }
)


class DutySpec(Model):
    duty_id: WorkspaceId
    title: str
    status: DutyStatus = DutyStatus.ACTIVE
    triggers: tuple[Trigger, ...] = ()
    execution_policy: ExecutionPolicy = ExecutionPolicy()
    action: str = ""
    quality_criteria: StrTuple = ()
    skill_id: str | None = None
    skill_hint: str | None = None
    preferred_skill_ids: StrTuple = ()
    pre_script: PreScript | None = None
    escalation: Escalation | None = None
    execution_log_retention: Duration = 30 * 86400.0
    duty_defaults: JsonMap = Field(default_factory=dict)
    contract: DutyContract | None = None
    process_step: ProcessStep | None = None

    @model_validator(mode="after")
    def _consistent(self) -> DutySpec:
        unique_ids("triggers", [t.id for t in self.triggers])
        unknown = set(self.execution_policy.overrides) - {t.id for t in self.triggers}
        if unknown:
            raise ValueError(f"execution_policy.overrides names unknown trigger ids {sorted(unknown)}")
        if not self.action.strip():
            raise ValueError("the duty has no action: write it as the Markdown body")
        return self


def apply_defaults(own: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """Fill the duty's unset fields from `defaults`, merging nested mappings key by key."""
    merged = dict(own)
    for key, value in defaults.items():
        if key not in DEFAULTABLE_FIELDS:
            continue
        if key not in merged:
            merged[key] = value
        elif isinstance(value, dict) and isinstance(merged[key], dict):
            merged[key] = apply_defaults_deep(merged[key], value)
    return merged


def apply_defaults_deep(own: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    merged = dict(defaults)
    for key, value in own.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = apply_defaults_deep(value, merged[key])
        else:
            merged[key] = value
    return merged
