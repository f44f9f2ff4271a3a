import copy
import math
from types import MappingProxyType
from typing import Any

import pytest
from pydantic import ValidationError

from genworker.workspace.models.base import freeze, parse_duration, relative_path, thaw, unique_ids
from genworker.workspace.models.duty import ConditionTrigger, DutySpec, ScheduleTrigger
from genworker.workspace.models.persona import Personality
from genworker.workspace.models.tenant import Tenant


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("30s", 30),
        ("5m", 300),
        ("2h", 7200),
        ("7d", 7 * 86400),
        ("1w", 7 * 86400),
        ("1.5h", 5400),
        ("250ms", 0.25),
        (" 5 m ", 300),
        ("10", 10),
        ("2h30m", 9000),
        ("1h 15m 30s", 4530),
        ("30 days", 30 * 86400),
        ("5 minutes", 300),
        (45, 45),
        (2.5, 2.5),
    ],
)
def test_parse_duration(value: Any, seconds: float) -> None:
    assert parse_duration(value) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "value",
    ["", "abc", "5 parsecs", "2h30", "5y", "5M", "-5m", "1e3", "0s", "0", 0, -1, True, None, [], math.nan, math.inf],
)
def test_parse_duration_refuses_bad_values(value: Any) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(value)


def test_duration_fields_parse_and_report_bad_values() -> None:
    trigger = ConditionTrigger(id="c", type="condition", metric="m", rule="> 1", check_interval="2m")
    assert trigger.check_interval == 120
    assert ScheduleTrigger(id="s", type="schedule", interval="1w").interval == 604800
    with pytest.raises(ValidationError, match="expected a duration like"):
        ScheduleTrigger(id="s", type="schedule", interval="soon")
    with pytest.raises(ValidationError, match="greater than zero"):
        ScheduleTrigger(id="s", type="schedule", interval=0)


def test_duration_default_is_in_seconds() -> None:
    trigger = ConditionTrigger(id="c", type="condition", metric="m", rule="> 1")
    assert trigger.check_interval == 300
    assert not math.isnan(trigger.check_interval)


def test_freeze_and_thaw_round_trip() -> None:
    data = {"a": [1, {"b": [2, 3]}], "c": {"d": "e"}}
    frozen = freeze(data)
    assert isinstance(frozen, MappingProxyType)
    assert frozen["a"] == (1, MappingProxyType({"b": (2, 3)}))
    with pytest.raises(TypeError):
        frozen["x"] = 1  # type: ignore[index]
    assert thaw(frozen) == data


@pytest.mark.parametrize("value", ["contacts", "a/b", "index.jsonl", "./x"])
def test_relative_path_accepts(value: str) -> None:
    assert relative_path(value) == value


@pytest.mark.parametrize("value", ["", "/abs", "\\abs", "../x", "a/../../b", "a\\..\\b", "a\x00"])
def test_relative_path_refuses(value: str) -> None:
    with pytest.raises(ValueError, match="relative path inside the worker folder"):
        relative_path(value)


def test_unique_ids() -> None:
    unique_ids("things", ["a", "b"])
    with pytest.raises(ValueError, match="things: duplicate id 'a'"):
        unique_ids("things", ["a", "b", "a"])


def test_str_tuple_accepts_a_single_string() -> None:
    assert Personality(traits="calm").traits == ("calm",)
    assert Personality(traits=["calm", "kind"]).traits == ("calm", "kind")


def test_workspace_id_fields_refuse_unsafe_ids() -> None:
    with pytest.raises(ValidationError, match="is not a valid id"):
        Tenant(tenant_id="../etc")


def test_defaults_are_immutable_not_shared_dicts() -> None:
    duty = DutySpec(duty_id="d", title="t", action="x")
    assert isinstance(duty.duty_defaults, MappingProxyType)
    assert isinstance(duty.execution_policy.overrides, MappingProxyType)
    assert isinstance(Tenant(tenant_id="t").credentials, MappingProxyType)


def test_models_deep_copy_and_dump() -> None:
    duty = DutySpec.model_validate(
        {
            "duty_id": "d",
            "title": "t",
            "action": "x",
            "triggers": [{"id": "e", "type": "event", "source": "mail", "filter": {"from": ["a"]}}],
            "execution_policy": {"overrides": {"e": "deep"}},
            "posture": {"overrides": {"e": "draft"}},
        }
    )
    clone = copy.deepcopy(duty)
    assert clone == duty
    assert duty.model_copy(deep=True) == duty
    dumped = duty.model_dump(mode="json")
    assert dumped["triggers"][0]["filter"] == {"from": ["a"]}
    assert dumped["execution_policy"]["overrides"] == {"e": "deep"}
    assert dumped["posture"]["overrides"] == {"e": "draft"}
    assert DutySpec.model_validate_json(duty.model_dump_json()) == duty
