"""The default HeartbeatStrategy table, row by row, and the structured answer of a summary turn."""

from __future__ import annotations

from typing import Any

import pytest

from genworker.autonomy.heartbeat import (
    DefaultHeartbeatStrategy,
    NeedsAttention,
    NothingToReport,
    RunIsolated,
    SubmitTask,
    Summarize,
    Unreadable,
    parse_answer,
)
from genworker.autonomy.inbox import InboxItem, new_item
from genworker.workspace.models.persona import HeartbeatConfig

CONFIG = HeartbeatConfig(
    goal_task_actions=("open_ticket", "notify"),
    goal_isolated_actions=("investigate",),
    goal_isolated_deviation_threshold=0.5,
)


def item(event_type: str = "webhook.fact", route: str | None = None, **payload: Any) -> InboxItem:
    return new_item("acme", "alice", "webhook", "hooks", event_type, payload, route=route)


def decide(it: InboxItem, config: HeartbeatConfig = CONFIG) -> SubmitTask | RunIsolated | Summarize:
    return DefaultHeartbeatStrategy().decide_action(it, config)


@pytest.mark.parametrize(
    ("it", "kind"),
    [
        (item(route="task"), SubmitTask),  # row 1
        (item(route="isolated"), RunIsolated),  # row 2
        (item(route="summary"), Summarize),  # row 3
        (item("goal.check", goal_id="g", action="investigate", deviation=0.0), RunIsolated),  # row 4
        (item("goal.check", goal_id="g", action="open_ticket"), SubmitTask),  # row 5
        (item("goal.check", goal_id="g", recommended_action="notify"), SubmitTask),  # row 5, other field name
        (item("goal.check", goal_id="g", action="wait", deviation=0.51), RunIsolated),  # row 6
        (item("goal.check", goal_id="g", deviation=0.9), RunIsolated),  # row 6 without an action
        (item("goal.check", goal_id="g", action="wait", deviation=0.5), Summarize),  # at the threshold: row 7
        (item("goal.check", goal_id="g", deviation=True), Summarize),  # a boolean is not a deviation
        (item(), Summarize),  # row 7: no route
        (item(route="goal"), Summarize),  # row 7: a custom route
        (item("email.received", subject="hello"), Summarize),
    ],
)
def test_the_table(it: InboxItem, kind: type) -> None:
    assert isinstance(decide(it), kind)


def test_the_route_beats_the_goal_settings() -> None:
    goal = item("goal.check", route="summary", goal_id="g", action="investigate", deviation=0.9)
    assert isinstance(decide(goal), Summarize)
    assert isinstance(decide(item("goal.check", route="task", goal_id="g", action="investigate")), SubmitTask)


def test_the_action_lists_beat_the_deviation() -> None:
    assert isinstance(decide(item("goal.check", goal_id="g", action="open_ticket", deviation=0.99)), SubmitTask)


def test_without_goal_settings_upstreams_defaults_apply() -> None:
    empty = HeartbeatConfig()  # upstream's: task for escalate/recover/investigate, isolated for replan/deep_review, 0.9
    assert isinstance(decide(item("goal.check", goal_id="g", action="investigate"), empty), SubmitTask)
    assert isinstance(decide(item("goal.check", goal_id="g", action="replan"), empty), RunIsolated)
    assert isinstance(decide(item("goal.check", goal_id="g", action="celebrate"), empty), Summarize)
    assert isinstance(decide(item("goal.check", goal_id="g", deviation=0.91), empty), RunIsolated)
    assert isinstance(decide(item("goal.check", goal_id="g", deviation=0.5), empty), Summarize)


def test_every_decision_says_why() -> None:
    assert decide(item(route="task")).reason == "route: task"
    assert "goal_isolated_actions" in decide(item("goal.check", goal_id="g", action="investigate")).reason
    assert "exceeds 0.5" in decide(item("goal.check", goal_id="g", deviation=0.7)).reason
    assert decide(item()).reason == "no route: default"


def test_preferred_skills_come_from_the_item() -> None:
    listed = new_item(
        "acme",
        "alice",
        "git",
        "repo",
        "git.commit",
        {},
        route="task",
        metadata={"preferred_skill_ids": ["review", "review", "triage"]},
    )
    single = new_item("acme", "alice", "git", "repo", "git.commit", {"skill_id": "triage"}, route="isolated")
    assert decide(listed) == SubmitTask("route: task", ("review", "triage"))
    assert decide(single) == RunIsolated("route: isolated", ("triage",))


# -- the summary turn's answer -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"attention": false, "message": ""}', NothingToReport()),
        ('{"attention": false}', NothingToReport()),
        ('{"attention": false, "message": "all quiet, nothing new"}', NothingToReport()),  # the flag decides
        ('{"attention": true, "message": " Call facilities. "}', NeedsAttention("Call facilities.")),
        ('```json\n{"attention": true, "message": "x"}\n```', NeedsAttention("x")),
        ('{"attention": true, "message": "x", "confidence": 0.9}', NeedsAttention("x")),
    ],
)
def test_answers_that_parse(text: str, expected: object) -> None:
    assert parse_answer(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "Nothing to report.",  # prose is never read for meaning
        "",
        '{"attention": "false", "message": ""}',  # a string is not a boolean
        '{"attention": 0}',
        '{"attention": true, "message": "  "}',  # asking for attention with nothing to say
        '{"message": "hi"}',
        'Here you go: {"attention": false}',
        "[true]",
    ],
)
def test_answers_that_do_not(text: str) -> None:
    result = parse_answer(text)
    assert isinstance(result, Unreadable) and "attention" in result.error
