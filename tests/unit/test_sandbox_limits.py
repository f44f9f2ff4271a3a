"""SandboxLimits per call and how a SandboxResult is reported (no processes)."""

from __future__ import annotations

import signal
from dataclasses import replace
from typing import Any

import pytest

from genworker.tools.sandbox import DEFAULT_LIMITS, SandboxLimits, SandboxResult


@pytest.mark.parametrize(
    ("requested", "budget", "expected"),
    [
        (None, None, 30.0),
        (5.0, None, 5.0),
        (500.0, None, 30.0),  # never above the configured limit
        (0.0, None, 30.0),  # nonsense is ignored
        (None, 10.0, 9.0),  # ends before the pipeline's own timeout
        (20.0, 1.5, 1.0),
    ],
)
def test_for_call_bounds_the_wall_timeout(requested: float | None, budget: float | None, expected: float) -> None:
    limits = SandboxLimits(wall_timeout_s=30.0).for_call(requested, budget)

    assert limits.wall_timeout_s == expected
    assert limits.cpu_s == DEFAULT_LIMITS.cpu_s


CLEAN = SandboxResult(exit_code=0, stdout="", stderr="", timed_out=False, truncated=False, killed_by_signal=None)


def result(**changes: Any) -> SandboxResult:
    return replace(CLEAN, **changes)


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({}, None),
        ({"exit_code": 2}, "exit code 2"),
        ({"exit_code": None, "killed_by_signal": int(signal.SIGXCPU)}, "killed by signal SIGXCPU"),
        ({"exit_code": None, "timed_out": True, "killed_by_signal": 9}, "timed out (wall clock)"),
        ({"truncated": True}, "output limit exceeded; the command was stopped"),
    ],
)
def test_problem_says_what_went_wrong(changes: dict[str, object], problem: str | None) -> None:
    outcome = result(**changes)

    assert outcome.problem() == problem
    assert outcome.ok is (problem is None)


def test_report_joins_output_and_problem() -> None:
    assert result(stdout="hi\n").report() == "hi"
    assert result().report() == "[no output]"
    assert result(stdout="a\n", stderr="oops\n", exit_code=1).report() == "a\n[stderr]\noops\n[exit code 1]"
    assert result(exit_code=None, timed_out=True).as_dict() == {
        "exit_code": None,
        "timed_out": True,
        "truncated": False,
        "killed_by_signal": None,
        "isolation": "rlimits",
    }
