"""Which route a sensed fact takes: a sensor's routing_rules, in order, then its fallbacks.

A rule looks up `field` in the fact's fields (`event_type` plus the payload, whose own `event_type`
wins: a webhook body's event type); a dotted field walks
into nested objects and lists (`sender.email`, `to.0`). A key that itself contains dots is found
first. How the pattern is compared with the value:

- exact: equal, case-sensitive (upstream's `match_mode: equals`)
- contains / prefix: substring / start of the value, case-insensitive (casefold; upstream's
  `contains` / `startswith`)
- regex: `re.search`, case-sensitive unless the pattern says `(?i)` or the rule was written with
  upstream's `match_mode: regex` (`ignore_case`)

Values: strings as they are, numbers as written in JSON, booleans as `true`/`false`; a list matches
when any of its items matches; missing fields, null and objects never match.

`cognition_route_override`, when set, is the route of every fact of the sensor (upstream's meaning).
Else the first matching rule; no rule matches: `fallback_route`, else None (the heartbeat's default).
Upstream's routes `heartbeat` / `reactive` / `both` are the heartbeat's default here (`inbox_route`):
every inbox item already reaches event-triggered duties as `inbox.item_written`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from genworker.autonomy.sensing.filters import parse_filter
from genworker.workspace.models.persona import UPSTREAM_ROUTES, RoutingRule, SensorConfig

__all__ = ["GOAL_ROUTE", "accepts", "inbox_route", "is_goal_worthy", "lookup", "route_fact", "rule_matches"]

GOAL_ROUTE = "goal"

_MISSING = object()


def lookup(fields: Mapping[str, Any], path: str) -> Any:
    """The value at dotted `path`, or None when any step is missing."""
    value = _walk(fields, path)
    return None if value is _MISSING else value


def _walk(value: Any, path: str) -> Any:
    if isinstance(value, Mapping):
        if path in value:
            return value[path]
        head, sep, rest = path.partition(".")
        if sep and head in value:
            return _walk(value[head], rest)
        return _MISSING
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        head, _, rest = path.partition(".")
        if not head.isdigit() or int(head) >= len(value):
            return _MISSING
        return value[int(head)] if not rest else _walk(value[int(head)], rest)
    return _MISSING


def _text(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    return None


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE if ignore_case else 0)


def _matches(rule: RoutingRule, value: Any) -> bool:
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return any(_matches(rule, item) for item in value)
    text = _text(value)
    if text is None:
        return False
    if rule.match == "exact":
        return text == rule.pattern
    if rule.match == "contains":
        return rule.pattern.casefold() in text.casefold()
    if rule.match == "prefix":
        return text.casefold().startswith(rule.pattern.casefold())
    return _compiled(rule.pattern, rule.ignore_case).search(text) is not None


def rule_matches(rule: RoutingRule, fields: Mapping[str, Any]) -> bool:
    return bool(rule.field) and _matches(rule, lookup(fields, rule.field))


def route_fact(config: SensorConfig, fact_fields: Mapping[str, Any]) -> str | None:
    """cognition_route_override, else the route of the first matching rule, else fallback_route, else None."""
    if config.cognition_route_override:
        return config.cognition_route_override
    for rule in config.routing_rules:
        if rule_matches(rule, fact_fields):
            return rule.route
    return config.fallback_route or None


def inbox_route(route: str | None) -> str | None:
    """The inbox item's route: upstream's heartbeat / reactive / both are the heartbeat's default (None)."""
    return None if route in UPSTREAM_ROUTES else route


def accepts(config: SensorConfig, fact_fields: Mapping[str, Any]) -> bool:
    """Whether the config's `filter` lets the fact through (checked before routing)."""
    return parse_filter(config).passes(fact_fields)


def is_goal_worthy(route: str | None, fact_fields: Mapping[str, Any]) -> bool:
    """A fact routed to "goal", or one that carries a non-empty `goal` field."""
    return route == GOAL_ROUTE or bool(fact_fields.get("goal"))
