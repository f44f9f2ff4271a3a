"""Cron expressions of schedule triggers, read as standard cron and run by APScheduler.

`cron_trigger` is both the check a duty file gets when it is loaded (so `genworker check` and a
reload report a bad expression with its file, field and line) and the trigger the duty scheduler
runs: an expression that loads is one that schedules.
"""

from __future__ import annotations

from apscheduler.triggers.cron import CronTrigger

__all__ = ["cron_day_of_week", "cron_trigger", "numeric_weekdays"]

_WEEKDAYS = ("sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday")
_DAYS = tuple(name[:3] for name in _WEEKDAYS)


def cron_trigger(expression: str, timezone: str) -> CronTrigger:
    """`minute hour day month weekday` (or six fields, seconds first) in `timezone`.

    Raises ValueError naming the field and what is wrong with it (a value out of range, a step of
    zero, an unknown day name)."""
    fields = expression.split()
    if len(fields) not in (5, 6):
        raise ValueError("needs 5 fields (minute hour day month weekday), optionally 6 with seconds first")
    second, (minute, hour, day, month, weekday) = ("0", fields) if len(fields) == 5 else (fields[0], fields[1:])
    try:
        day_of_week = cron_day_of_week(weekday)
    except ValueError as exc:
        raise ValueError(f"weekday field {weekday!r}: {exc}") from None
    day = "*" if day == "?" else day  # Quartz's "no particular day", as for the weekday
    return CronTrigger(
        second=second, minute=minute, hour=hour, day=day, month=month, day_of_week=day_of_week, timezone=timezone
    )


def numeric_weekdays(expression: str) -> bool:
    """Whether the weekday field uses numbers, which APScheduler's crontab reading (Monday = 0, as
    upstream genworker runs duties) and standard cron (Sunday = 0) read a day apart."""
    fields = expression.split()
    if len(fields) not in (5, 6):
        return False
    return any(ch.isdigit() for part in fields[-1].split(",") for ch in part.partition("/")[0])


def cron_day_of_week(field: str) -> str:
    """Standard cron weekdays (0 or 7 = Sunday, 1 = Monday) as APScheduler day names.

    APScheduler numbers Monday 0, so a numeric crontab weekday handed to it as-is fires a day
    late. Names and explicit lists avoid the ambiguity. Quartz's `5L` and `1#2` are not cron and
    APScheduler has neither: they are refused as not a weekday.
    """
    if field in ("*", "?"):
        return "*"
    days: list[str] = []
    for part in field.split(","):
        span, _, step_text = part.partition("/")
        if step_text and (not step_text.isdigit() or int(step_text) == 0):
            raise ValueError(f"the step in {part!r} must be a whole number of at least 1")
        step = int(step_text) if step_text else 1
        if span in ("*", "?"):
            low, high = 0, 6
        elif "-" in span:
            first, last = span.split("-", 1)
            low, high = _day(first), _day(last)
        else:
            low = _day(span)
            high = 6 if step_text else low
        values = list(range(low, high + 1)) if low <= high else [*range(low, 7), *range(0, high + 1)]
        days.extend(_DAYS[v] for v in values[::step])
    return ",".join(dict.fromkeys(days))


def _day(token: str) -> int:
    token = token.strip().lower()
    if token.isdigit() and int(token) <= 7:
        return int(token) % 7
    for number, name in enumerate(_WEEKDAYS):
        if token in (name, name[:3]):
            return number
    raise ValueError(f"{token!r} is not a weekday (0-7, 0 and 7 being Sunday, or sun, mon, ... sat)")
