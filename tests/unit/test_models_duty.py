import re
from typing import Any

import pytest
from pydantic import ValidationError

from genworker.workspace.models import DutySpec, DutyStatus
from genworker.workspace.models.duty import (
    DEFAULTABLE_FIELDS,
    CollaborationTrigger,
    ConditionTrigger,
    EventTrigger,
    ManualTrigger,
    ScheduleTrigger,
    apply_defaults,
    apply_defaults_deep,
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
    assert spec.execution_policy.default == "execute"
    assert dict(spec.execution_policy.overrides) == {}
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


def test_execution_policy_overrides_name_known_triggers() -> None:
    spec = duty(
        triggers=[{"id": "m", "type": "manual"}, schedule(cron="0 9 * * *")],
        execution_policy={"default": "propose", "overrides": {"m": "execute"}},
    )
    assert spec.execution_policy.depth_for("m") == "execute"
    assert spec.execution_policy.depth_for("s") == "propose"


def test_execution_policy_overrides_refuse_unknown_trigger_ids() -> None:
    with pytest.raises(ValidationError, match=r"unknown trigger ids \['ghost'\]"):
        duty(triggers=[{"id": "m", "type": "manual"}], execution_policy={"overrides": {"ghost": "draft"}})


def test_execution_depth_must_be_known() -> None:
    with pytest.raises(ValidationError):
        duty(execution_policy={"default": "yolo"})
    with pytest.raises(ValidationError):
        duty(triggers=[{"id": "m", "type": "manual"}], execution_policy={"overrides": {"m": "yolo"}})


@pytest.mark.parametrize("script", [{}, {"path": "a.py", "inline": "print(1)"}])
def test_pre_script_needs_exactly_one_source(script: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="exactly one of 'path' or 'inline'"):
        duty(pre_script=script)


def test_pre_script_and_contract() -> None:
    spec = duty(pre_script={"inline": "echo hi", "language": "bash", "timeout": "2m"}, contract={"version": "1"})
    assert spec.pre_script is not None
    assert spec.pre_script.timeout == 120
    assert spec.contract is not None
    assert spec.contract.version == "1"
    with pytest.raises(ValidationError, match=r"contract\.version"):
        duty(contract={})


def test_status_values() -> None:
    assert duty(status="closed").status is DutyStatus.CLOSED
    with pytest.raises(ValidationError):
        duty(status="sleeping")


def test_apply_defaults_fills_only_unset_defaultable_fields() -> None:
    own = {"duty_id": "d", "status": "closed", "execution_policy": {"default": "draft"}}
    defaults = {
        "status": "active",
        "skill_hint": "writer",
        "execution_policy": {"default": "propose", "overrides": {"m": "execute"}},
        "title": "not defaultable",
    }
    merged = apply_defaults(own, defaults)
    assert merged == {
        "duty_id": "d",
        "status": "closed",
        "skill_hint": "writer",
        "execution_policy": {"default": "draft", "overrides": {"m": "execute"}},
    }
    assert own == {"duty_id": "d", "status": "closed", "execution_policy": {"default": "draft"}}


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
    assert trigger.rule == rule and parse_rule(rule) == parsed


@pytest.mark.parametrize(
    ("rule", "why"),
    [("value < 0.8 * avg_7d", "must be '\\[value\\] <op>"), ("> lots", "'lots', which is not a number"),
     ("", "must be"), ("value", "must be"), ("> nan", "must be"), ("=> 3", "must be")],
)  # fmt: skip
def test_condition_rules_refused_when_the_duty_loads(rule: str, why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        ConditionTrigger.model_validate({"id": "c", "type": "condition", "metric": "m", "rule": rule})
