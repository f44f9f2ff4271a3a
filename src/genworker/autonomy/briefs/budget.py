"""The interruption budget: how many real-time interruptions a worker may make per day, and
quiet hours / focus, when only P0 gets through. Everything refused goes into the next brief.

The day is the worker's local date in its quiet-hours time zone. P0 always interrupts and
still counts against the day's budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal
from zoneinfo import ZoneInfo

from genworker.worker.governance.policy_gate import Policy
from genworker.workspace.models.policy import QuietHours, parse_window

__all__ = ["Admission", "in_quiet_hours", "local_day"]


@dataclass(frozen=True, slots=True)
class Admission:
    interrupt: bool
    reason: Literal["p0", "within_budget", "budget_exhausted", "quiet_hours", "focus"]
    used: int
    limit: int


def local_day(policy: Policy, now: datetime) -> str:
    return now.astimezone(ZoneInfo(policy.quiet_hours.timezone)).date().isoformat()


def in_quiet_hours(quiet: QuietHours, now: datetime) -> bool:
    if not quiet.enabled:
        return False
    local = now.astimezone(ZoneInfo(quiet.timezone)).time().replace(tzinfo=None)
    for window in quiet.windows:
        start, end = parse_window(window)
        inside = start <= local < end if start <= end else local >= start or local < end
        if inside:
            return True
    return False
