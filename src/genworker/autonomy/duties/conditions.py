"""Condition triggers: where a metric's value comes from, and the rule it is compared against.

A rule is `[value] <op> <constant>` (`> 10`, `value <= 0.5`, `== true`, `!= 0`), a bare `true` /
`false`, or upstream genworker's `> 10%` and `between 0.1 and 0.3`
(`genworker.workspace.models.duty.parse_rule`, which also checks it when the duty loads).
"""

from __future__ import annotations

from typing import Protocol

from genworker.workspace.models.duty import parse_rule

__all__ = ["MetricSource", "MetricValue", "RuleError", "StaticMetrics", "evaluate_rule"]

MetricValue = float | bool | None


class RuleError(ValueError):
    """A condition rule that cannot be read."""


class MetricSource(Protocol):
    async def read(self, tenant_id: str, worker_id: str, metric: str, duty_id: str | None = None) -> MetricValue:
        """The metric's current value (for a condition trigger of duty `duty_id`, which metrics of
        the duty's own history need); None when it is unknown (the condition then counts as false)."""


class StaticMetrics:
    """A MetricSource over a dict that callers change ({(tenant, worker, metric): value}); for tests and demos."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, str, str], MetricValue] = {}

    async def read(self, tenant_id: str, worker_id: str, metric: str, duty_id: str | None = None) -> MetricValue:
        return self.values.get((tenant_id, worker_id, metric))


def evaluate_rule(rule: str, value: MetricValue) -> bool:
    """Whether `value` satisfies `rule` (`parse_rule`); an unknown value never does."""
    try:
        parsed = parse_rule(rule)
    except ValueError as exc:
        raise RuleError(str(exc)) from None
    if value is None:
        return False
    return parsed.holds(float(value))
