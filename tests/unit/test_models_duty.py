import re
from typing import Any

import pytest
from pydantic import ValidationError

from genworker.workspace.models import DutySpec, DutyStatus
from genworker.workspace.models.duty import (
    DEFAULTABLE_FIELDS,
    CollaborationTrigger,
    ConditionRule,
    ConditionTrigger,
    EventTrigger,
    ManualTrigger,
    PreScript,
    ScheduleTrigger,
    apply_defaults,
    apply_defaults_deep,
    duty_warnings,
    filter_value_matches,
    parse_rule,
)


def duty(**fields: Any) -> DutySpec:
    return DutySpec.model_validate({"duty_id": "d", "title": "Daily", "action": "Do it.", **fields})


def schedule(**fields: Any) -> dict[str, Any]:
    return {"id": "s", "type": "schedule", **fields}


def test_minimal_duty_defaults() -> None:
    spec = duty()
    assert spec.status is DutyStatus.ACTIVE
    assert spec.triggers == ()
    assert spec.execution_policy.default == "standard"
    assert dict(spec.execution_policy.overrides) == {}
    assert spec.posture.default == "execute"
    assert spec.execution_log_retention == 30 * 86400
    assert dict(spec.duty_defaults) == {}
    assert spec.pre_script is spec.contract is spec.process_step is None
    assert spec.quality_criteria == spec.preferred_skill_ids == ()


@pytest.mark.parametrize("missing", ["duty_id", "title"])
def test_required_fields(missing: str) -> None:
    data = {"duty_id": "d", "title": "t", "action": "x"}
    del data[missing]
    with pytest.raises(ValidationError) as caught:
        DutySpec.model_validate(data)
    assert caught.value.errors()[0]["loc"] == (missing,)


@pytest.mark.parametrize("action", ["", "   \n  "])
def test_duty_needs_an_action_body(action: str) -> None:
    with pytest.raises(ValidationError, match="the duty has no action"):
        duty(action=action)


@pytest.mark.parametrize(
    ("data", "cls"),
    [
        (schedule(cron="0 9 * * MON-FRI"), ScheduleTrigger),
        ({"id": "e", "type": "event", "source": "mail", "event_type": "received"}, EventTrigger),
        ({"id": "c", "type": "condition", "metric": "queue", "rule": "> 10"}, ConditionTrigger),
        ({"id": "k", "type": "collaboration", "from_workers": "boss"}, CollaborationTrigger),
        ({"id": "m", "type": "manual"}, ManualTrigger),
    ],
)
def test_every_trigger_type_parses(data: dict[str, Any], cls: type) -> None:
    (trigger,) = duty(triggers=[data]).triggers
    assert type(trigger) is cls
    assert trigger.id == data["id"]


def test_collaboration_from_workers_accepts_one_name() -> None:
    (trigger,) = duty(triggers=[{"id": "k", "type": "collaboration", "from_workers": "boss"}]).triggers
    assert isinstance(trigger, CollaborationTrigger)
    assert trigger.from_workers == ("boss",)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"id": "x", "type": "cosmic"}, "does not match any of the expected tags"),
        ({"id": "x"}, "Unable to extract tag"),
        ({"id": "../x", "type": "manual"}, "not a valid id"),
        ({"type": "manual"}, "Field required"),
        ({"id": "e", "type": "event"}, "source"),
    ],
)
def test_bad_triggers(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        duty(triggers=[data])


def test_schedule_defaults() -> None:
    trigger = ScheduleTrigger.model_validate(schedule(interval="5m"))
    assert trigger.interval == 300
    assert trigger.cron is None
    assert trigger.timezone == "UTC"
    assert trigger.misfire_policy == "run_once"
    assert trigger.catch_up_max_runs == 3
    assert trigger.catch_up_window == 86400


@pytest.mark.parametrize("fields", [{}, {"cron": "* * * * *", "interval": "5m"}])
def test_schedule_needs_exactly_one_of_cron_or_interval(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="exactly one of 'cron' or 'interval'"):
        ScheduleTrigger.model_validate(schedule(**fields))


@pytest.mark.parametrize(
    "cron",
    ["* * * * *", "*/5 * * * *", "0 9 * * MON-FRI", "0 0 9 1,15 * *", "0 0 last * *", "0 12 ? * 2", "0 7 * * sunday"],
)
def test_cron_shape_accepted(cron: str) -> None:
    assert ScheduleTrigger.model_validate(schedule(cron=cron)).cron == cron


@pytest.mark.parametrize("cron", ["", "* * * *", "* * * * * * *", "every day"])
def test_cron_shape_refused(cron: str) -> None:
    with pytest.raises(ValidationError, match="needs 5 fields"):
        ScheduleTrigger.model_validate(schedule(cron=cron))


@pytest.mark.parametrize(
    ("cron", "problem"),
    [
        ("30 25 * * 1-5", r"the last value \(25\) is higher than the maximum value \(23\)"),
        ("60 9 * * *", r"higher than the maximum value \(59\)"),
        ("0 9 32 * *", r"higher than the maximum value \(31\)"),
        ("0 9 * 13 *", r"higher than the maximum value \(12\)"),
        ("*/0 9 * * *", "Increment must be higher than 0"),
        ("0 9 * * 8", "'8' is not a weekday"),
        ("0 9 * * monkey", "'monkey' is not a weekday"),
        ("0 9 * * 1/0", "the step in '1/0' must be a whole number of at least 1"),
        ("* * * * $", r"'\$' is not a weekday"),
        ("0 9 * * MON;rm", "'mon;rm' is not a weekday"),
        ("0 0 L * *", 'Unrecognized expression "L" for field "day"'),  # Quartz, not cron
        ("0 12 * * 2#1", "'2#1' is not a weekday"),
    ],
)
def test_cron_values_the_scheduler_would_refuse_are_refused_when_loaded(cron: str, problem: str) -> None:
    """A duty whose cron the scheduler cannot run used to load, pass `genworker check` and stop
    `genworker run` at start-up with a traceback; now its file is the one rejected."""
    with pytest.raises(ValidationError, match=f"cron '{re.escape(cron)}': .*{problem}"):
        ScheduleTrigger.model_validate(schedule(cron=cron))


@pytest.mark.parametrize("tz", ["UTC", "America/New_York", "Europe/Berlin", "Asia/Shanghai"])
def test_iana_timezone_accepted(tz: str) -> None:
    assert ScheduleTrigger.model_validate(schedule(interval=60, timezone=tz)).timezone == tz


@pytest.mark.parametrize("tz", ["Mars/Olympus", "", "EST5EDT/Nope", "../../etc/passwd", "/etc/localtime", "America"])
def test_unknown_timezone_refused(tz: str) -> None:
    with pytest.raises(ValidationError, match="unknown IANA time zone"):
        ScheduleTrigger.model_validate(schedule(interval=60, timezone=tz))


def test_catch_up_max_runs_bound() -> None:
    with pytest.raises(ValidationError, match="catch_up_max_runs"):
        ScheduleTrigger.model_validate(schedule(interval=60, catch_up_max_runs=0))


def test_trigger_ids_are_unique() -> None:
    with pytest.raises(ValidationError, match="triggers: duplicate id 'a'"):
        duty(triggers=[{"id": "a", "type": "manual"}, {"id": "a", "type": "event", "source": "x"}])


def test_execution_policy_is_the_depth_per_trigger() -> None:
    spec = duty(
        triggers=[{"id": "m", "type": "manual"}, schedule(cron="0 9 * * *")],
        execution_policy={"default": "quick", "overrides": {"m": "deep"}},
    )
    assert spec.execution_policy.depth_for("m") == "deep"
    assert spec.execution_policy.depth_for("s") == "quick"
    assert spec.execution_policy.depth_for(None) == "quick"
    assert spec.posture.posture_for("m") == "execute"


def test_posture_is_its_own_field() -> None:
    spec = duty(triggers=[{"id": "m", "type": "manual"}], posture={"default": "propose", "overrides": {"m": "draft"}})
    assert (spec.posture.posture_for(None), spec.posture.posture_for("m")) == ("propose", "draft")
    assert spec.execution_policy.default == "standard"


def test_posture_values_in_execution_policy_still_load_as_the_posture() -> None:
    """Our earlier spelling: each entry goes where its value belongs, and the file gets a warning."""
    data = {
        "triggers": [{"id": "m", "type": "manual"}, schedule(cron="0 9 * * *")],
        "execution_policy": {"default": "draft", "overrides": {"m": "execute", "s": "deep"}},
    }
    spec = duty(**data)
    assert (spec.posture.default, dict(spec.posture.overrides)) == ("draft", {"m": "execute"})
    assert (spec.execution_policy.default, dict(spec.execution_policy.overrides)) == ("standard", {"s": "deep"})
    warned = duty_warnings(data)
    assert [loc for loc, _ in warned] == [("execution_policy", "default"), ("execution_policy", "overrides", "m")]
    assert "write `posture: {default: draft}`" in warned[0][1] and "quick/standard/deep" in warned[0][1]
    assert "`posture: {overrides: {m: execute}}`" in warned[1][1]


def test_an_explicit_posture_wins_over_the_old_spelling() -> None:
    spec = duty(execution_policy={"default": "propose"}, posture={"default": "execute"})
    assert spec.posture.default == "execute"


def test_overrides_refuse_unknown_trigger_ids() -> None:
    with pytest.raises(ValidationError, match=r"execution_policy.overrides names unknown trigger ids \['ghost'\]"):
        duty(triggers=[{"id": "m", "type": "manual"}], execution_policy={"overrides": {"ghost": "deep"}})
    with pytest.raises(ValidationError, match=r"posture.overrides names unknown trigger ids \['ghost'\]"):
        duty(triggers=[{"id": "m", "type": "manual"}], posture={"overrides": {"ghost": "draft"}})


def test_execution_depth_must_be_known() -> None:
    with pytest.raises(ValidationError):
        duty(execution_policy={"default": "yolo"})
    with pytest.raises(ValidationError):
        duty(triggers=[{"id": "m", "type": "manual"}], execution_policy={"overrides": {"m": "yolo"}})
    with pytest.raises(ValidationError):
        duty(posture={"default": "deep"})


@pytest.mark.parametrize("script", [{}, {"path": "a.py", "inline": "print(1)"}, {"source": "x", "tool_name": "t"}])
def test_pre_script_needs_exactly_one_source(script: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="exactly one of 'inline' \\(or 'source'\\), 'path' or 'tool_name'"):
        duty(pre_script=script)


def test_pre_script_and_contract() -> None:
    spec = duty(pre_script={"inline": "echo hi", "language": "bash", "timeout": "2m"}, contract={"version": "1"})
    assert spec.pre_script is not None
    assert (spec.pre_script.kind, spec.pre_script.timeout) == ("inline", 120)
    assert spec.contract is not None
    assert spec.contract.version == "1"
    with pytest.raises(ValidationError, match=r"contract\.version"):
        duty(contract={})


def test_upstream_pre_script_forms() -> None:
    inline = PreScript.model_validate(
        {"kind": "Inline", "source": "print(1)", "enabled_tools": ["sql"], "timeout_seconds": 120, "max_tool_calls": 5}
    )
    assert (inline.kind, inline.inline, inline.timeout) == ("inline", "print(1)", 120.0)
    assert (inline.enabled_tools, inline.max_tool_calls) == (("sql",), 5)
    ref = PreScript.model_validate({"kind": "ref", "tool_name": "sql", "tool_input": [["query", "select 1"]]})
    assert (ref.kind, ref.tool_name, dict(ref.tool_input)) == ("ref", "sql", {"query": "select 1"})
    assert PreScript.model_validate({"tool_name": "web_search"}).kind == "ref"
    assert PreScript.model_validate({"source": "x"}).timeout == 300.0  # upstream's default
    assert PreScript(path="a.sh", language="bash").kind == "path"


def test_pre_script_kind_must_agree_with_its_fields() -> None:
    with pytest.raises(ValidationError, match="of kind 'ref' needs 'tool_name'"):
        PreScript.model_validate({"kind": "ref", "source": "print(1)"})
    with pytest.raises(ValidationError, match="kind"):
        PreScript.model_validate({"kind": "shell", "source": "ls"})


def test_upstream_duty_spellings() -> None:
    spec = duty(
        triggers=[{"id": "t", "type": "manual", "description": "When asked"}],
        skill_hint="writer",
        skills="sql-report",
    )
    assert spec.triggers[0].description == "When asked"
    assert (spec.skill_id, spec.skill_hint) == (None, "writer")
    assert spec.preferred_skill_ids == ("sql-report",)


def test_status_values() -> None:
    assert duty(status="closed").status is DutyStatus.CLOSED
    assert duty(status="Closed").status is DutyStatus.CLOSED
    paused = duty(status="Paused")  # upstream genworker loads any word; only active runs
    assert paused.status == "paused" and not paused.is_active
    assert duty().is_active
    assert duty_warnings({"status": "Paused"}) == [
        (("status",), "status 'Paused' is not active/closed/deprecated: the duty will not run")
    ]
    assert duty_warnings({"status": "closed"}) == []


def test_unreadable_retention_keeps_30_days_with_a_warning() -> None:
    assert duty(execution_log_retention="90d").execution_log_retention == 90 * 86400
    assert duty(execution_log_retention="a month").execution_log_retention == 30 * 86400
    [(loc, message)] = duty_warnings({"execution_log_retention": "a month"})
    assert loc == ("execution_log_retention",) and "keeping 30 days" in message


@pytest.mark.parametrize(
    ("cron", "extra", "warned"),
    [("0 9 * * 1-5", {}, True), ("0 9 * * 0", {}, True), ("0 0 9 * * 1,3", {}, True), ("0 9 * * mon-fri", {}, False),
     ("*/5 * * * *", {}, False), ("0 9 * * */2", {}, False), ("0 9 * * 1-5", {"timezone": "UTC"}, False)],
)  # fmt: skip
def test_numeric_cron_weekdays_are_flagged_in_upstream_style_triggers(
    cron: str, extra: dict[str, Any], warned: bool
) -> None:
    """Standard cron meaning is kept (1-5 = Monday to Friday); a trigger without our `timezone`
    field may have been written for upstream genworker, which read numbers with Monday = 0."""
    found = duty_warnings({"triggers": [schedule(cron=cron, **extra)]})
    assert bool(found) is warned
    if warned:
        assert found[0][0] == ("triggers", 0, "cron") and "mon-fri" in found[0][1]


def test_apply_defaults_fills_only_unset_defaultable_fields() -> None:
    own = {"duty_id": "d", "status": "closed", "execution_policy": {"default": "deep"}}
    defaults = {
        "status": "active",
        "skill_hint": "writer",
        "execution_policy": {"default": "quick", "overrides": {"m": "standard"}},
        "posture": {"default": "draft"},
        "title": "not defaultable",
    }
    merged = apply_defaults(own, defaults)
    assert merged == {
        "duty_id": "d",
        "status": "closed",
        "skill_hint": "writer",
        "execution_policy": {"default": "deep", "overrides": {"m": "standard"}},
        "posture": {"default": "draft"},
    }
    assert own == {"duty_id": "d", "status": "closed", "execution_policy": {"default": "deep"}}


def test_apply_defaults_deep_prefers_own_values_at_every_level() -> None:
    merged = apply_defaults_deep({"a": {"b": 1}, "c": 2}, {"a": {"b": 0, "x": 9}, "c": 0, "d": 4})
    assert merged == {"a": {"b": 1, "x": 9}, "c": 2, "d": 4}


def test_defaultable_fields_are_duty_fields() -> None:
    assert set(DEFAULTABLE_FIELDS) <= set(DutySpec.model_fields)
    assert "duty_id" not in DEFAULTABLE_FIELDS
    assert "triggers" not in DEFAULTABLE_FIELDS


@pytest.mark.parametrize(
    ("rule", "parsed"),
    [("> 10", (">", 10.0)), ("value <= 0.5", ("<=", 0.5)), ("value > 0.03", (">", 0.03)), ("== TRUE", ("==", 1.0)),
     ("false", ("==", 0.0)), ("!= -2e3", ("!=", -2000.0))],
)  # fmt: skip
def test_condition_rules_accepted(rule: str, parsed: tuple[str, float]) -> None:
    trigger = ConditionTrigger.model_validate({"id": "c", "type": "condition", "metric": "m", "rule": rule})
    assert trigger.rule == rule and parse_rule(rule) == ConditionRule(*parsed)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("rule", "value", "holds"),
    [("> 10%", 0.2, True), ("> 10%", 0.05, False), ("> 10%", 12.0, True), ("> 10%", 8.0, False),
     ("between 0.1 and 0.3", 0.2, True), ("between 0.1 and 0.3", 0.31, False), ("BETWEEN 10% and 30%", 0.3, True),
     ("value between 1 and 5", 5.0, True), (">= 1", 1.0, True)],
)  # fmt: skip
def test_upstream_rule_forms(rule: str, value: float, holds: bool) -> None:
    """`%` compares a fraction (at most 1) with the percentage / 100, as upstream genworker does."""
    ConditionTrigger.model_validate({"id": "c", "type": "condition", "metric": "m", "rule": rule})
    assert parse_rule(rule).holds(value) is holds


@pytest.mark.parametrize(
    ("rule", "why"),
    [("value < 0.8 * avg_7d", "must be '\\[value\\] <op>"), ("> lots", "'lots', which is not a number"),
     ("", "must be"), ("value", "must be"), ("> nan", "must be"), ("=> 3", "must be"),
     ("between 3 and 1", "lower bound 3 is above the upper bound 1"), ("between a and b", "must be")],
)  # fmt: skip
def test_condition_rules_refused_when_the_duty_loads(rule: str, why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        ConditionTrigger.model_validate({"id": "c", "type": "condition", "metric": "m", "rule": rule})


@pytest.mark.parametrize(
    ("expected", "actual", "passes"),
    [("regex:^(fin|growth)_", "FIN_daily", True), ("regex:^(fin|growth)_", "ops_fin_", False),
     ("contains:customer", "Customer-facing", True), ("startswith:prod", "Production", True),
     ("endswith:.csv", "a.CSV", True), ("endswith:.csv", "a.xlsx", False), (">= 3", 3, True), (">= 3", "4", True),
     (">= 3", 2, False), (">= 3", "high", False), (">= 3", True, False), ("between 0.5 and 1", 0.7, True),
     ("between 0.5 and 1", 1.5, False), ("incident", "incident", True), ("incident", "Incident", False),
     ("contains:x", None, False), ("regex:.", None, False), (3, 3, True), ("a", ["b", "a"], True),
     (">= 3", [1, 5], True), (["a"], ["a"], True)],
)  # fmt: skip
def test_event_filter_values(expected: Any, actual: Any, passes: bool) -> None:
    assert filter_value_matches(expected, actual) is passes


def test_an_invalid_filter_regex_is_refused_when_the_duty_loads() -> None:
    with pytest.raises(ValidationError, match=r"filter.table: invalid regular expression 'regex:\('"):
        duty(triggers=[{"id": "e", "type": "event", "source": "x", "filter": {"table": "regex:("}}])


def test_event_trigger_payload_matches_every_filter_key() -> None:
    (trigger,) = duty(
        triggers=[{"id": "e", "type": "event", "source": "x", "filter": {"severity": ">= 3", "kind": "incident"}}]
    ).triggers
    assert isinstance(trigger, EventTrigger)
    assert trigger.payload_matches({"severity": 4, "kind": "incident"})
    assert not trigger.payload_matches({"severity": 4})
    assert not trigger.payload_matches({"severity": 2, "kind": "incident"})
