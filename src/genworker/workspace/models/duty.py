"""duties/*.md: a worker's responsibilities — triggers, execution depth and posture, contract, action.

`duties/_defaults.md` is not a duty: its front matter is merged under every duty's own
`duty_defaults`, and the result fills any field the duty does not set itself.

Upstream genworker's spellings load as written: `execution_policy` is the execution depth
(quick/standard/deep); our earlier posture values (propose/draft/execute) there still load, moved
to `posture`, and `duty_warnings` says to rename them.
"""

from __future__ import annotations

import functools
import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Final, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    AfterValidator,
    AliasChoices,
    BeforeValidator,
    Field,
    PlainSerializer,
    field_validator,
    model_validator,
)

from genworker.workspace.models.base import (
    Duration,
    JsonMap,
    Model,
    StrTuple,
    WorkspaceId,
    freeze,
    note,
    parse_duration,
    thaw,
    unique_ids,
)
from genworker.workspace.models.cron import cron_trigger, numeric_weekdays
from genworker.workspace.models.depth import DEFAULT_DEPTH, DEPTHS, ExecutionDepth
from genworker.workspace.models.duty_terms import (
    DeliveryList,
    audit_terms,
    check_output_schema,
    contract_warnings,
    escalation_rule,
    escalation_rules,
    sla_terms,
)

__all__ = [
    "DEFAULTABLE_FIELDS",
    "POSTURES",
    "ConditionRule",
    "ConditionTrigger",
    "DutyContract",
    "DutyPosture",
    "DutySpec",
    "DutyStatus",
    "EventTrigger",
    "ExecutionDepth",
    "ExecutionPolicy",
    "ManualTrigger",
    "PosturePolicy",
    "PreScript",
    "ProcessStep",
    "ScheduleTrigger",
    "Trigger",
    "apply_defaults",
    "duty_warnings",
    "filter_value_matches",
    "parse_rule",
]


class DutyStatus(StrEnum):
    ACTIVE = "active"
    CLOSED = "closed"
    DEPRECATED = "deprecated"


DutyPosture = Literal["propose", "draft", "execute"]
POSTURES: tuple[DutyPosture, ...] = ("propose", "draft", "execute")
MisfirePolicy = Literal["skip", "run_once", "catch_up_bounded"]
DEFAULT_RETENTION: Final = 30 * 86400.0

_OPS: Final[Mapping[str, Callable[[float, float], bool]]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
}
_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"

# A condition rule compares the metric's value with a constant: `> 10`, `value <= 0.5`, `== true`,
# `false`, `> 10%`, `between 0.1 and 0.3`.
_RULE = re.compile(r"^\s*(?:value\s*)?(>=|<=|==|!=|>|<)?\s*(\S+?)\s*(%?)\s*$")
_BETWEEN = re.compile(rf"^\s*(?:value\s+)?between\s+({_NUMBER})\s*(%?)\s+and\s+({_NUMBER})\s*(%?)\s*$", re.I)


@dataclass(frozen=True, slots=True)
class ConditionRule:
    """A parsed condition rule. `percent` (a `%` after a number, as upstream genworker writes
    `> 10%`): when the metric is a fraction (at most 1), the constants are divided by 100."""

    op: Literal[">", ">=", "<", "<=", "==", "!=", "between"]
    operand: float
    upper: float | None = None  # `between`'s upper bound
    percent: bool = False

    def holds(self, value: float) -> bool:
        scale = 100.0 if self.percent and value <= 1.0 else 1.0
        if self.op == "between":
            assert self.upper is not None
            return self.operand / scale <= value <= self.upper / scale
        return _OPS[self.op](value, self.operand / scale)


def parse_rule(rule: str) -> ConditionRule:
    """A condition rule: `[value] <op> <number[%] | true | false>`, a bare constant (`==`), or
    `between <a>[%] and <b>[%]`. ValueError says which forms are accepted."""
    between = _BETWEEN.match(rule)
    if between is not None:
        low, high = float(between.group(1)), float(between.group(3))
        if low > high:
            raise ValueError(f"rule {rule!r}: the lower bound {low:g} is above the upper bound {high:g}")
        return ConditionRule("between", low, high, bool(between.group(2) or between.group(4)))
    match = _RULE.match(rule)
    if match is None or match.group(2).lower() in ("value", "nan", "inf", "-inf", "+inf", "infinity"):
        raise ValueError(
            f"rule {rule!r} must be '[value] <op> <number | true | false>' (ops: > >= < <= == !=), "
            "a number may end with %, or 'between <a> and <b>'"
        )
    op: Any = match.group(1) or "=="
    operand, percent = match.group(2).lower(), bool(match.group(3))
    if operand in ("true", "false") and not percent:
        return ConditionRule(op, 1.0 if operand == "true" else 0.0)
    try:
        number = float(operand)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise ValueError(
            f"rule {rule!r} compares with {match.group(2)!r}, which is not a number or true/false"
            " (a rule compares the metric with a constant)"
        )
    return ConditionRule(op, number, percent=percent)


def _check_timezone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: e.g. "America" is a tzdata folder
        raise ValueError(f"unknown IANA time zone {value!r}") from None
    return value


class _Trigger(Model):
    id: WorkspaceId
    description: str = ""  # told the model when the trigger fires


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


# Event filter values: a string in one of upstream genworker's expression forms is an expression
# (text forms case-insensitive), anything else must equal the payload value.
_TEXT_TESTS: Final[Mapping[str, Callable[[str, str], bool]]] = {
    "contains:": lambda actual, needle: needle.lower() in actual.lower(),
    "startswith:": lambda actual, prefix: actual.lower().startswith(prefix.lower()),
    "endswith:": lambda actual, suffix: actual.lower().endswith(suffix.lower()),
}
_COMPARE = re.compile(rf"^\s*(>=|<=|==|!=|>|<)\s*({_NUMBER})\s*$")
_FILTER_BETWEEN = re.compile(rf"^\s*between\s+({_NUMBER})\s+and\s+({_NUMBER})\s*$", re.I)


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def filter_value_matches(expected: Any, actual: Any) -> bool:
    """Whether payload value `actual` passes filter value `expected`: `regex:<re>` (searched, case
    ignored), `contains:` / `startswith:` / `endswith:` (case ignored), `>= 3` and the other
    comparisons, `between a and b`, else equality. A list payload value passes when one item does."""
    if isinstance(actual, list | tuple) and not isinstance(expected, list | tuple):
        return any(filter_value_matches(expected, item) for item in actual)
    if not isinstance(expected, str):
        return bool(actual == expected)
    lowered = expected.lower()
    if lowered.startswith("regex:"):
        return actual is not None and _regex(expected[len("regex:") :]).search(str(actual)) is not None
    for prefix, test in _TEXT_TESTS.items():
        if lowered.startswith(prefix):
            return actual is not None and test(str(actual), expected[len(prefix) :])
    if (compare := _COMPARE.match(expected)) is not None:
        number = _number(actual)
        return number is not None and _OPS[compare.group(1)](number, float(compare.group(2)))
    if (between := _FILTER_BETWEEN.match(expected)) is not None:
        number = _number(actual)
        return number is not None and float(between.group(1)) <= number <= float(between.group(2))
    return bool(actual == expected)


def _check_filter(value: Mapping[str, Any]) -> Mapping[str, Any]:
    for key, expected in value.items():
        if isinstance(expected, str) and expected.lower().startswith("regex:"):
            try:
                _regex(expected[len("regex:") :])
            except re.error as exc:
                raise ValueError(f"filter.{key}: invalid regular expression {expected!r}: {exc}") from None
    return value


class EventTrigger(_Trigger):
    type: Literal["event"]
    source: str  # the publisher, or (as upstream genworker means it) the event type: `*`, `x.*`, exact
    event_type: str | None = None
    filter: Annotated[JsonMap, AfterValidator(_check_filter)] = Field(default_factory=dict)

    def payload_matches(self, payload: Mapping[str, Any]) -> bool:
        return all(filter_value_matches(expected, payload.get(key)) for key, expected in self.filter.items())


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
    """The execution depth, by default and per trigger id (upstream genworker's `execution_policy`)."""

    default: ExecutionDepth = DEFAULT_DEPTH
    overrides: Annotated[
        Mapping[str, ExecutionDepth], AfterValidator(freeze), PlainSerializer(thaw, return_type=dict)
    ] = Field(default_factory=dict)  # trigger id -> depth

    def depth_for(self, trigger_id: str | None) -> ExecutionDepth:
        return self.default if trigger_id is None else self.overrides.get(trigger_id, self.default)


class PosturePolicy(Model):
    """How far a run may act (propose / draft / execute), by default and per trigger id."""

    default: DutyPosture = "execute"
    overrides: Annotated[Mapping[str, DutyPosture], AfterValidator(freeze), PlainSerializer(thaw, return_type=dict)] = (
        Field(default_factory=dict)
    )  # trigger id -> posture

    def posture_for(self, trigger_id: str | None) -> DutyPosture:
        return self.default if trigger_id is None else self.overrides.get(trigger_id, self.default)


def _split_policy(policy: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """`execution_policy` as written -> (depth part, posture part): posture values written there
    (our earlier spelling) move to the posture, entry by entry."""
    depth: dict[str, Any] = {k: v for k, v in policy.items() if k not in ("default", "overrides")}
    posture: dict[str, Any] = {}
    if "default" in policy:
        (posture if policy["default"] in POSTURES else depth)["default"] = policy["default"]
    overrides = policy.get("overrides")
    if isinstance(overrides, Mapping):
        moved = {k: v for k, v in overrides.items() if v in POSTURES}
        if moved:
            posture["overrides"] = moved
        depth["overrides"] = {k: v for k, v in overrides.items() if k not in moved}
    elif "overrides" in policy:
        depth["overrides"] = overrides
    return depth, posture


class Escalation(Model):
    condition: str
    target: str

    @model_validator(mode="after")
    def _readable(self) -> Escalation:
        escalation_rule(self.condition, self.target, "escalation")
        return self


def _tool_input(value: Any) -> Any:
    """Upstream genworker writes a ref's input as [[key, value], ...] pairs; a mapping is kept."""
    if isinstance(value, list | tuple) and all(isinstance(p, list | tuple) and len(p) == 2 for p in value):
        note("tool_input", "mapped", "[[key, value], ...] -> a map")
        return {str(k): v for k, v in value}
    return value


def _lower(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


class PreScript(Model):
    """A duty's `pre_script` (and a goal's `default_pre_script`), run once before the task; its
    output joins the task text. One of:

    - inline code: `inline` (upstream: `source`), `language`, `enabled_tools` (the tools its code
      may call; empty = every tool of the run), `max_tool_calls`;
    - a script file of the worker: `path`, `language`;
    - one tool call (upstream's `{kind: ref, tool_name, tool_input}`).

    `kind` (inline / path / ref) is inferred from the fields; when written, it must agree.
    `timeout` (upstream: `timeout_seconds`) bounds the script or the call.
    """

    kind: Annotated[Literal["inline", "path", "ref"], BeforeValidator(_lower)]
    inline: str | None = Field(default=None, validation_alias=AliasChoices("inline", "source"))
    path: str | None = None
    tool_name: str | None = None
    tool_input: Annotated[JsonMap, BeforeValidator(_tool_input)] = Field(default_factory=dict)
    language: Literal["python", "bash"] = "python"
    timeout: Duration = Field(default=300.0, validation_alias=AliasChoices("timeout", "timeout_seconds"))
    enabled_tools: StrTuple = ()
    max_tool_calls: int = Field(default=50, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _infer_kind(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        for upstream, ours in (("source", "inline"), ("timeout_seconds", "timeout")):
            if upstream in data:
                note(upstream, "mapped", f"{upstream} -> {ours}")
        if data.get("kind") not in (None, ""):
            return data
        present = [k for k, key in (("inline", "inline"), ("inline", "source"), ("path", "path"), ("ref", "tool_name"))
                   if data.get(key) is not None]  # fmt: skip
        if len(set(present)) != 1:
            raise ValueError("pre_script needs exactly one of 'inline' (or 'source'), 'path' or 'tool_name'")
        return {**data, "kind": present[0]}

    @model_validator(mode="after")
    def _one_source(self) -> PreScript:
        given = {"inline": self.inline is not None, "path": self.path is not None, "ref": self.tool_name is not None}
        if [k for k, v in given.items() if v] != [self.kind]:
            need = {"inline": "'inline' (or 'source')", "path": "'path'", "ref": "'tool_name'"}[self.kind]
            raise ValueError(f"a pre_script of kind {self.kind!r} needs {need} and none of the other sources")
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

    @model_validator(mode="after")
    def _enforced_terms(self) -> DutyContract:
        """The parts the runtime enforces must read (duty_terms.py); the maps stay as written."""
        check_output_schema(self.output_schema)
        sla_terms(self.sla)
        escalation_rules(self.escalation)
        audit_terms(self.audit, self.output_schema)
        return self


class ProcessStep(Model):
    process_id: WorkspaceId
    step_id: WorkspaceId
    step_name: str = ""


DEFAULTABLE_FIELDS = frozenset(
    {
        "status",
        "execution_policy",
        "posture",
        "quality_criteria",
        "skill_id",
        "skill_hint",
        "preferred_skill_ids",
        "pre_script",
        "escalation",
        "execution_log_retention",
        "contract",
        "process_step",
        "delivery",
    }
)


def _status(value: Any) -> Any:
    value = _lower(value)
    return DutyStatus(value) if value in DutyStatus.__members__.values() else value


def _retention(value: Any) -> Any:
    """Upstream genworker keeps 30 days when it cannot read the value; `duty_warnings` says so."""
    try:
        return parse_duration(value)
    except ValueError:
        note("execution_log_retention", "mapped", f"{value!r} -> 30 days (upstream's default)")
        return DEFAULT_RETENTION


class DutySpec(Model):
    duty_id: WorkspaceId
    title: str
    # Known: active / closed / deprecated. Any other word loads (as upstream genworker) and never runs.
    status: Annotated[DutyStatus | str, BeforeValidator(_status)] = DutyStatus.ACTIVE
    triggers: tuple[Trigger, ...] = ()
    execution_policy: ExecutionPolicy = ExecutionPolicy()
    posture: PosturePolicy = PosturePolicy()
    action: str = ""
    quality_criteria: StrTuple = ()
    skill_id: str | None = None
    skill_hint: str | None = None  # the router prefers skill_id, then skill_hint (as upstream, either alone counts)
    preferred_skill_ids: StrTuple = Field(default=(), validation_alias=AliasChoices("preferred_skill_ids", "skills"))
    pre_script: PreScript | None = None
    escalation: Escalation | None = None
    execution_log_retention: Annotated[float, BeforeValidator(_retention)] = DEFAULT_RETENTION
    duty_defaults: JsonMap = Field(default_factory=dict)
    contract: DutyContract | None = None
    process_step: ProcessStep | None = None
    delivery: DeliveryList = ()  # where the result of a completed run goes (duty_terms.DeliveryTarget)

    @property
    def is_active(self) -> bool:
        return self.status == DutyStatus.ACTIVE

    @model_validator(mode="before")
    @classmethod
    def _upstream_spellings(cls, data: Any) -> Any:
        return move_postures(data, noted=True) if isinstance(data, Mapping) else data

    @model_validator(mode="after")
    def _consistent(self) -> DutySpec:
        unique_ids("triggers", [t.id for t in self.triggers])
        ids = {t.id for t in self.triggers}
        for name, policy in (("execution_policy", self.execution_policy), ("posture", self.posture)):
            unknown = set(policy.overrides) - ids
            if unknown:
                raise ValueError(f"{name}.overrides names unknown trigger ids {sorted(unknown)}")
        if not self.action.strip():
            raise ValueError("the duty has no action: write it as the Markdown body")
        return self


Loc = tuple[str | int, ...]


def duty_warnings(data: Mapping[str, Any]) -> list[tuple[Loc, str]]:
    """(location, message) of what in a duty's front matter loads but deserves a warning: posture
    values in `execution_policy`, numeric cron weekdays in an upstream-style schedule trigger, an
    unknown status, a retention that cannot be read."""
    found: list[tuple[Loc, str]] = []
    policy = data.get("execution_policy")
    if isinstance(policy, Mapping):
        entries: list[tuple[Loc, Any]] = [(("execution_policy", "default"), policy.get("default"))]
        overrides = policy.get("overrides")
        if isinstance(overrides, Mapping):
            entries += [(("execution_policy", "overrides", k), v) for k, v in overrides.items()]
        found += [(loc, _posture_message(loc, value)) for loc, value in entries if value in POSTURES]
    triggers = data.get("triggers")
    for index, trigger in enumerate(triggers if isinstance(triggers, list) else ()):
        if not isinstance(trigger, Mapping) or trigger.get("type") != "schedule" or "timezone" in trigger:
            continue
        cron = trigger.get("cron")
        if isinstance(cron, str) and numeric_weekdays(cron):
            found.append(
                (
                    ("triggers", index, "cron"),
                    f"numeric weekdays in {cron!r}: upstream genworker's scheduler read them with Monday = 0 "
                    "(1-5 = Tuesday to Saturday); this server reads standard cron (0 = Sunday, 1-5 = Monday to "
                    "Friday). Write day names (mon-fri) to be unambiguous",
                )
            )
    status = data.get("status")
    if isinstance(status, str) and status.strip().lower() not in {s.value for s in DutyStatus}:
        found.append((("status",), f"status {status!r} is not active/closed/deprecated: the duty will not run"))
    if "execution_log_retention" in data:
        try:
            parse_duration(data["execution_log_retention"])
        except ValueError:
            found.append(
                (
                    ("execution_log_retention",),
                    f"cannot read {data['execution_log_retention']!r} as a duration (like '30d'): keeping 30 days",
                )
            )
    return found + contract_warnings(data)


def _posture_message(loc: Loc, value: str) -> str:
    written = f"{{default: {value}}}" if loc[-1] == "default" else f"{{overrides: {{{loc[-1]}: {value}}}}}"
    return (
        f"{value!r} is a posture: write `posture: {written}`; execution_policy is the execution depth "
        f"({'/'.join(DEPTHS)})"
    )


def move_postures(data: Mapping[str, Any], *, noted: bool = False) -> dict[str, Any]:
    """`data` with posture values written in `execution_policy` (our earlier spelling) moved to
    `posture`; a `posture` the same data writes wins over them."""
    moved = dict(data)
    policy = moved.get("execution_policy")
    if not isinstance(policy, Mapping):
        return moved
    depth, posture = _split_policy(policy)
    moved["execution_policy"] = depth
    if posture:
        if noted:
            note("execution_policy", "mapped", f"posture values {posture} -> posture")
        given = moved.get("posture")
        written: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
        overrides = {**posture.get("overrides", {}), **(written.get("overrides") or {})}
        moved["posture"] = {**posture, **written, **({"overrides": overrides} if overrides else {})}
    return moved


def apply_defaults(own: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """Fill the duty's unset fields from `defaults`, merging nested mappings key by key. Posture
    values in `execution_policy` are moved first on both sides, so the duty's own still wins."""
    own, defaults = move_postures(own), move_postures(defaults)
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
