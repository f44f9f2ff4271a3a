"""Lifecycle job settings come from GENWORKER_* keys with defaults and clear errors."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from genworker.autonomy.goals.jobs import confirmation_policy_of, lifecycle_settings
from genworker.settings import SettingsError, load_settings
from genworker.worker.governance.policy_gate import resolve_policy
from genworker.workspace.models.policy import PolicyOverrides


def test_defaults_and_overrides(tmp_path: Path) -> None:
    defaults = lifecycle_settings(load_settings(tmp_path, {}, workspace=tmp_path))
    assert (defaults.goal_check_s, defaults.confirmation_scan_s, defaults.deviation_threshold) == (3600, 60, 0.25)
    env = {"GENWORKER_CONFIRMATION_SCAN_S": "30", "GENWORKER_GOAL_CHECK_INTERVAL_S": "600"}
    custom = lifecycle_settings(load_settings(tmp_path, env, workspace=tmp_path))
    assert (custom.confirmation_scan_s, custom.goal_check_s) == (30, 600)


def test_confirmation_policy_follows_the_steward_policy_of_tenant_then_worker() -> None:
    tenant = PolicyOverrides(brief_window_hours=2)
    worker = PolicyOverrides(waiting_default_timeout_hours=8, waiting_timeout_action="close")
    policy = confirmation_policy_of(lambda t, w: resolve_policy(tenant, worker))("acme", "alice")
    assert (policy.remind_every, policy.escalate_after, policy.action) == (
        timedelta(hours=2),
        timedelta(hours=8),
        "close",
    )
    default = confirmation_policy_of(lambda t, w: resolve_policy(PolicyOverrides()))("acme", "alice")
    assert (default.remind_every, default.escalate_after) == (timedelta(hours=4), timedelta(hours=24))
    assert default.action == "remind_then_escalate"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("GENWORKER_CONFIRMATION_SCAN_S", "soon", "must be a number"),
        ("GENWORKER_GOAL_DEVIATION_THRESHOLD", "2", "between 0 and 1"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, key: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError, match=f"{key}.*{message}"):
        lifecycle_settings(load_settings(tmp_path, {key: value}, workspace=tmp_path))
