"""Condition triggers: where a metric's value comes from, and the rule it is compared against.

A rule is `<op> <value>` (`> 10`, `<= 0.5`, `== true`, `!= 0`) or a bare `true` / `false`.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from typing import Final, Protocol

__all__ = ["MetricSource", "MetricValue", "RuleError", "StaticMetrics", "evaluate_rule"]

MetricValue = float | bool | None

_RULE: Final = re.compile(r"^\s*(>=|<=|==|!=|>|<)?\s*(\S+)\s*$")
_OPS: Final[Mapping[str, Callable[[float, float], bool]]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
}


class RuleError(ValueError):
    """A condition rule that cannot be read."""


class MetricSource(Protocol):
    async def read(self, tenant_id: str, worker_id: str, metric: str) -> MetricValue:
        """The metric's current value; None when it is unknown (the condition then counts as false)."""


class StaticMetrics:
    """A MetricSource over a dict that callers change ({(tenant, worker, metric): value}); for tests and demos."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, str, str], MetricValue] = {}

    async def read(self, tenant_id: str, worker_id: str, metric: str) -> MetricValue:
        return self.values.get((tenant_id, worker_id, metric))


def _operand(text: str) -> float:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return 1.0 if lowered == "true" else 0.0
    try:
        return float(text)
    except ValueError:
        raise RuleError(f"rule operand {text!r} is not a number or true/false") from None


def evaluate_rule(rule: str, value: MetricValue) -> bool:
    """Whether `value` satisfies `rule`; an unknown value never does."""
    match = _RULE.match(rule)
    if match is None:
        raise RuleError(f"rule {rule!r} is not '<op> <value>' (ops: > >= < <= == !=)")
    op, operand = match.group(1) or "==", _operand(match.group(2))
    if value is None:
        return False
    return _OPS[op](float(value), operand)
