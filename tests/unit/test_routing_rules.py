"""route_fact: rules in order, each match mode and its case rule, dotted fields, and the fallbacks."""

from __future__ import annotations

from typing import Any

import pytest

from genworker.autonomy.sensing.facts import Fact
from genworker.autonomy.sensing.routing import (
    GOAL_ROUTE,
    accepts,
    inbox_route,
    is_goal_worthy,
    lookup,
    route_fact,
    rule_matches,
)
from genworker.workspace.models.persona import RoutingRule, SensorConfig


def config(*rules: dict[str, str], **fields: Any) -> SensorConfig:
    return SensorConfig.model_validate({"source_type": "webhook", "routing_rules": list(rules), **fields})


def rule(field: str, pattern: str, match: str, route: str = "hit") -> dict[str, str]:
    return {"field": field, "pattern": pattern, "match": match, "route": route}


@pytest.mark.parametrize(
    ("match", "pattern", "value", "expected"),
    [
        ("exact", "Deploy", "Deploy", True),
        ("exact", "Deploy", "deploy", False),  # exact is case-sensitive
        ("exact", "Deploy", "Deploy now", False),
        ("contains", "INVOICE", "your invoice is due", True),  # contains ignores case
        ("contains", "invoice", "receipt", False),
        ("prefix", "urgent:", "URGENT: disk full", True),  # prefix ignores case
        ("prefix", "urgent:", "not urgent: later", False),
        ("regex", r"^PR-\d+$", "PR-42", True),
        ("regex", r"^PR-\d+$", "pr-42", False),  # regex is case-sensitive...
        ("regex", r"(?i)^PR-\d+$", "pr-42", True),  # ...unless it says (?i)
        ("regex", r"\d{3}", "error 503 upstream", True),  # search, not fullmatch
    ],
)
def test_each_match_mode(match: str, pattern: str, value: str, expected: bool) -> None:
    cfg = config(rule("title", pattern, match))
    assert (route_fact(cfg, {"title": value}) == "hit") is expected


def test_dotted_fields_walk_objects_and_lists() -> None:
    fact = {"sender": {"email": "ops@acme.example", "tags": ["vip", "pager"]}, "to": ["a@x", "b@x"]}
    assert lookup(fact, "sender.email") == "ops@acme.example"
    assert lookup(fact, "to.1") == "b@x"
    assert lookup(fact, "sender.missing") is None
    assert lookup(fact, "to.9") is None
    assert lookup({"a.b": 1, "a": {"b": 2}}, "a.b") == 1  # a key with a dot is found first
    assert route_fact(config(rule("sender.email", "@acme.example", "contains")), fact) == "hit"
    assert route_fact(config(rule("to.0", "a@x", "exact")), fact) == "hit"


def test_lists_match_any_item_and_scalars_are_text() -> None:
    assert route_fact(config(rule("labels", "bug", "exact")), {"labels": ["feature", "bug"]}) == "hit"
    assert route_fact(config(rule("count", "42", "exact")), {"count": 42}) == "hit"
    assert route_fact(config(rule("draft", "true", "exact")), {"draft": True}) == "hit"
    assert route_fact(config(rule("data", "x", "contains")), {"data": {"x": 1}}) is None  # objects never match
    assert route_fact(config(rule("data", "None", "contains")), {"data": None}) is None
    assert route_fact(config(rule("event_type", "git.", "prefix")), {"event_type": "git.commit"}) == "hit"


def test_first_matching_rule_wins() -> None:
    cfg = config(rule("subject", "invoice", "contains", "task"), rule("subject", "", "contains", "summary"))
    assert route_fact(cfg, {"subject": "Invoice 7"}) == "task"
    assert route_fact(cfg, {"subject": "hello"}) == "summary"  # the empty pattern matches any text


def test_override_then_rules_then_fallback_then_none() -> None:
    rules = [rule("subject", "invoice", "contains", "task")]
    invoice = {"subject": "invoice 7"}
    # upstream's meaning: cognition_route_override is the route of every fact of the sensor
    assert (
        route_fact(config(*rules, fallback_route="summary", cognition_route_override="isolated"), invoice) == "isolated"
    )
    assert route_fact(config(*rules, fallback_route="summary"), invoice) == "task"
    assert route_fact(config(*rules, fallback_route="summary"), {}) == "summary"
    assert route_fact(config(*rules), {}) is None


def test_upstream_routes_are_the_heartbeats_default() -> None:
    assert [inbox_route(r) for r in ("heartbeat", "reactive", "both", "task", None)] == [None, None, None, "task", None]


def test_upstream_regex_rules_ignore_case_and_empty_fields_never_match() -> None:
    upstream = RoutingRule.model_validate({"field": "subject", "pattern": "urgent|p0", "match_mode": "regex"})
    ours = RoutingRule(field="subject", pattern="urgent|p0", match="regex", route="r")
    assert rule_matches(upstream, {"subject": "URGENT: disk"}) and not rule_matches(ours, {"subject": "URGENT: disk"})
    assert not rule_matches(RoutingRule.model_validate({"pattern": "x"}), {"": "x"})


def test_a_payloads_own_event_type_is_what_rules_see() -> None:
    cfg = config(rule("event_type", "calendar.", "prefix", "calendar"))
    assert route_fact(cfg, Fact("webhook.fact", {"event_type": "calendar.invite"}, "k").fields()) == "calendar"
    assert route_fact(cfg, Fact("webhook.fact", {}, "k").fields()) is None
    assert Fact("webhook.fact", {}, "k").fields()["event_type"] == "webhook.fact"


def test_goal_worthy() -> None:
    assert is_goal_worthy(GOAL_ROUTE, {})
    assert is_goal_worthy("task", {"goal": "Ship v2"})
    assert not is_goal_worthy("task", {"goal": ""})
    assert not is_goal_worthy(None, {})


def test_accepts_applies_the_filter_of_the_sensor_type() -> None:
    files = SensorConfig(source_type="workspace_file", filter={"include": ["*.md"], "exclude": ["drafts/*"]})
    assert accepts(files, {"path": "notes/a.md"})
    assert not accepts(files, {"path": "drafts/a.md"})
    assert not accepts(files, {"path": "a.txt"})
