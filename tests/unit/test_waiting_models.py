"""WaitingPlan values: match_key validation, timezone-aware times, JSON round trip with
schema_version, and errors that name the file."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from genworker.autonomy.waiting import WaitingPlan, WaitingSchemaError, plan_from_json, plan_to_json
from genworker.ids import validate_match_key

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def plan(**fields: object) -> WaitingPlan:
    values: dict[str, object] = {
        "plan_id": "p1", "tenant_id": "acme", "worker_id": "w", "match_key": "github:issue:42:updated",
        "created_at": T0, "expires_at": T0 + timedelta(hours=1), **fields,
    }  # fmt: skip
    return WaitingPlan(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize("key", ["github:issue:42:updated", "mail:thread:a@b.example:replied", "a:b"])
def test_valid_match_keys(key: str) -> None:
    assert validate_match_key(key) == key


@pytest.mark.parametrize("key", ["", "github", "github issue:42", "a::b", ":a", "a:" + "x" * 300, 42])
def test_invalid_match_keys_say_what_a_key_looks_like(key: object) -> None:
    with pytest.raises(ValueError, match="github:issue:42:updated"):
        validate_match_key(key)


def test_plan_values_are_checked() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        plan(expires_at=datetime(2026, 3, 1, 10, 0))  # noqa: DTZ001 - the naive time under test
    with pytest.raises(ValueError, match="plan id"):
        plan(plan_id="../x")
    with pytest.raises(ValueError, match="state"):
        plan(state="sleeping")
    shifted = plan(expires_at=datetime(2026, 3, 1, 18, 0, tzinfo=timezone(timedelta(hours=8))))
    assert shifted.expires_at == T0 + timedelta(hours=1) and shifted.expires_at.tzinfo is UTC


def test_json_round_trip_and_moves() -> None:
    original = plan(resume={"text": "go", "duty_id": "ops"}, title="PR")
    data = plan_to_json(original)
    assert data["schema_version"] == 1
    assert plan_from_json(data, "x") == original
    moved = original.moved("gated", T0, gated_by="event", event_id="e1")
    assert (moved.state, moved.version, moved.updated_at, moved.event_id) == ("gated", 2, T0, "e1")
    assert plan_from_json(plan_to_json(moved), "x") == moved


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b"{nope", "invalid JSON"),
        (b"[]", "must be a JSON object"),
        (b'{"schema_version": 2}', "schema_version 2 is unknown"),
        (b'{"schema_version": 1, "plan_id": "p"}', "missing"),
    ],
)
def test_bad_files_are_named(raw: bytes, problem: str) -> None:
    with pytest.raises(WaitingSchemaError, match=rf"^plans/p\.json: .*{problem}"):
        plan_from_json(raw, "plans/p.json")


def test_the_scan_interval_setting() -> None:
    from pathlib import Path

    from genworker.autonomy.waiting.resume import scan_interval
    from genworker.settings import SettingsError, load_settings

    def settings(value: str | None) -> object:
        env = {} if value is None else {"GENWORKER_WAITING_SCAN_S": value}
        return load_settings(Path("/nonexistent-configs"), env)

    assert scan_interval(settings(None)) == 60.0  # type: ignore[arg-type]
    assert scan_interval(settings("5")) == 5.0  # type: ignore[arg-type]
    for bad, why in (("soon", "must be a number"), ("0", "must be between 1 and 86400")):
        with pytest.raises(SettingsError, match=f"GENWORKER_WAITING_SCAN_S='{bad}': {why}"):
            scan_interval(settings(bad))  # type: ignore[arg-type]
