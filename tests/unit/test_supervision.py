"""Deterministic supervision checks, the supervisor state machine and policy files (issue #33)."""

from __future__ import annotations

from pathlib import Path

import pytest

from genworker.supervision import PolicyError, SupervisorPolicy, SupervisorState, advance, load_policies
from genworker.supervision.checks import Counters, check_answer, check_call, check_limits, check_result
from genworker.supervision.reviewer import parse_comments

S = SupervisorState


def P(**fields: object) -> SupervisorPolicy:
    return SupervisorPolicy.model_validate({"name": "p", **fields})


def test_state_machine_only_rises_and_never_leaves_resolved() -> None:
    s = advance(S.INACTIVE, "start")
    assert s is S.OBSERVING and advance(s, "comment") is S.OBSERVING
    s = advance(s, "warn")
    assert s is S.ATTENTION_REQUIRED and advance(s, "comment") is S.ATTENTION_REQUIRED
    s = advance(s, "pause")
    assert s is S.PAUSED and advance(s, "warn") is S.PAUSED
    assert advance(advance(s, "resolve"), "stop") is S.RESOLVED
    with pytest.raises(ValueError):
        advance(S.INACTIVE, "warn")


def test_allow_lists_transitions_partitions_and_stop_tools() -> None:
    c = Counters(started=0.0)
    assert check_call(P(tools=["file_*"]), c, "c1", "file_read", {}) is None
    d = check_call(P(tools=["file_*"]), c, "c1", "shell", {})
    assert d is not None and (d.action, d.check, d.cites) == ("stop", "tool_allow_list", ("c1",))
    dirs = P(directories=["files/"], on_violation="warn")
    assert check_call(dirs, c, "c", "file_read", {"path": "files/a.md"}) is None
    d = check_call(dirs, c, "c", "file_read", {"path": "files/../secrets"})
    assert d is not None and d.check == "directory_allow_list" and d.action == "warn"
    seq = P(transitions={"start": ["plan"], "plan": ["file_read"]})
    assert check_call(seq, c, "c", "file_read", {}) is not None
    assert check_call(seq, c, "c", "plan", {}) is None
    mem = P(memory_partitions=["run"])
    assert check_call(mem, c, "c", "memory_search", {"partition": "tenant"}) is not None
    assert check_call(mem, c, "c", "memory_search", {"partition": "run"}) is None
    d = check_call(P(stop_on_tools=["send_mail"]), c, "c", "send_mail", {})
    assert d is not None and d.action == "stop"


def test_budgets_and_thresholds_are_budget_decisions() -> None:
    p = P(budgets={"tool_calls": 1, "concurrent_tools": 1, "tokens": 100, "seconds": 5, "output_chars": 10},
          max_tool_failures=2)  # fmt: skip
    c = Counters(started=0.0, tool_calls=1)
    d = check_call(p, c, "c", "x", {})
    assert d is not None and d.budget and d.action == "pause" and d.check == "tool_call_budget"
    c = Counters(started=0.0, in_flight=1)
    assert (d := check_call(p, c, "c", "x", {})) is not None and d.check == "concurrency_budget"
    assert check_limits(p, Counters(started=0.0), 4.0, 100) is None
    assert (d := check_limits(p, Counters(started=0.0), 6.0, None)) is not None and d.check == "time_budget"
    assert (d := check_limits(p, Counters(started=0.0), 1.0, 101)) is not None and d.check == "token_budget"
    assert (d := check_limits(p, Counters(started=0.0, output_chars=11), 1.0, 0)) is not None
    assert check_result(p, Counters(started=0.0, failures=1), "c") is None
    assert (d := check_result(p, Counters(started=0.0, failures=2), "c")) is not None and d.check == "tool_failures"


def test_answer_schema_and_stop_text() -> None:
    p = P(output_schema={"type": "object", "required": ["total"]}, stop_on_text=["DROP TABLE"])
    assert check_answer(p, '{"total": 3}') is None
    assert (d := check_answer(p, '{"sum": 3}')) is not None and d.action == "warn" and "total" in d.reason
    assert (d := check_answer(p, "no json")) is not None and d.check == "output_schema"
    assert (d := check_answer(p, "DROP TABLE x")) is not None and d.action == "stop"


def test_comments_must_cite_what_the_reviewer_was_shown() -> None:
    text = (
        '{"comments": [{"concern": "goal_drift", "text": "off task", "cites": ["c9", "c1"]},'
        ' {"concern": "no_evidence", "text": "t", "cites": ["c9"]},'
        ' {"concern": "approve", "text": "t", "cites": ["c1"]}]}'
    )
    (only,) = parse_comments(text, {"c1", "task"}, "p")
    assert only.cites == ("c1",) and only.action == "comment" and only.check == "model:goal_drift"


def test_policy_files_name_the_file_and_field(tmp_path: Path) -> None:
    folder = tmp_path / "supervisors"
    folder.mkdir()
    (folder / "a.md").write_text("---\ntools: [file_read]\nbudgets: {tool_calls: 3}\n---\nWhy.\n", encoding="utf-8")
    (policy,) = load_policies(tmp_path)
    assert policy.name == "a" and policy.tools == ("file_read",) and policy.budgets.tool_calls == 3
    (folder / "b.json").write_text('{"budgets": {"tool_calls": -1}}', encoding="utf-8")
    with pytest.raises(PolicyError, match=r"b\.json: budgets\.tool_calls: "):
        load_policies(tmp_path)
    (folder / "b.json").write_text('{"schema_version": 9}', encoding="utf-8")
    with pytest.raises(PolicyError, match=r"b\.json: schema_version"):
        load_policies(tmp_path)
    errors: list[PolicyError] = []
    assert [p.name for p in load_policies(tmp_path, errors.append)] == ["a"]  # the good one still applies
    assert len(errors) == 1 and "b.json" in str(errors[0])
