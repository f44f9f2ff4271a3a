"""The `policy:` block of TENANT.json and PERSONA.md: Steward's Policy Gate, interruption budget and
WAITING settings, overridable per tenant, then per worker.

Every field is optional: a missing one inherits (Steward default <- tenant <- worker). Lists of
irreversible and always-confirm actions only grow along that chain, and the two irreversible
switches accept nothing but `true`: no setting can make an irreversible action silent.
"""

from __future__ import annotations

import re
from datetime import time
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator

from genworker.workspace.models.base import Model, StrTuple

__all__ = ["PolicyOverrides", "QuietHours", "WaitingTimeoutAction", "parse_window"]

WaitingTimeoutAction = Literal["remind", "escalate", "remind_then_escalate", "close"]
_WINDOW = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\s*$")


def parse_window(text: str) -> tuple[time, time]:
    """'22:00-08:00' -> (22:00, 08:00); a window may cross midnight."""
    match = _WINDOW.match(text)
    if match is None:
        raise ValueError(f"quiet hours window {text!r} is not 'HH:MM-HH:MM'")
    h1, m1, h2, m2 = (int(g) for g in match.groups())
    try:
        return time(h1, m1), time(h2, m2)
    except ValueError:
        raise ValueError(f"quiet hours window {text!r} has an hour above 23 or a minute above 59") from None


class QuietHours(Model):
    """Times when only P0 interrupts; `focus: true` is a manual focus switch with the same rule."""

    enabled: bool = True
    windows: StrTuple = ()
    timezone: str = "UTC"
    focus: bool = False
    rule: Literal["meeting_or_focus_only_p0"] = "meeting_or_focus_only_p0"

    @field_validator("windows")
    @classmethod
    def _windows(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for window in value:
            parse_window(window)
        return value

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{value!r} is not an IANA time zone such as 'Asia/Shanghai'") from None
        return value


class PolicyOverrides(Model):
    interruption_budget_per_day: int | None = Field(default=None, ge=0, le=1000)
    brief_window_hours: float | None = Field(default=None, gt=0, le=168)
    waiting_default_timeout_hours: float | None = Field(default=None, gt=0)
    waiting_timeout_action: WaitingTimeoutAction | None = None
    quiet_hours: QuietHours | None = None
    high_risk_auto_enabled: bool | None = None
    high_risk_confidence_threshold: float | None = Field(default=None, ge=0.5, le=1.0)
    require_multi_source_count: int | None = Field(default=None, ge=2, le=10)
    undo_window_seconds: int | None = Field(default=None, ge=1, le=3600)
    high_risk_whitelist: StrTuple | None = None
    irreversible_actions: StrTuple = ()  # added to the defaults, never replacing them
    always_require_confirmation: StrTuple = ()  # added to the defaults, never replacing them
    forbid_silent_execution_for_irreversible: Literal[True] = True
    require_manual_click_for_irreversible: Literal[True] = True

    @field_validator("forbid_silent_execution_for_irreversible", "require_manual_click_for_irreversible", mode="before")
    @classmethod
    def _cannot_be_off(cls, value: object) -> object:
        if value is not True:
            raise ValueError("irreversible actions always need a person's confirmation; this cannot be turned off")
        return value
