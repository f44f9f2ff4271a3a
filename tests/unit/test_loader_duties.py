"""duties/*.md as upstream genworker writes them, and our earlier spellings: what loads, and what warns where."""

from __future__ import annotations

from genworker.workspace.duties_loader import load_duties
from genworker.workspace.errors import Issue
from genworker.workspace.scan import Collector, Scope


def _warnings(warnings: list[Issue]) -> list[tuple[str, str, int | None]]:
    return [(i.file.rsplit("/", 1)[-1], i.field, i.line) for i in warnings if i.severity == "warning"]


def test_posture_values_in_execution_policy_load_with_a_warning_at_their_line(ws) -> None:
    ws.persona()
    ws.duty(
        "triage",
        """\
        triggers:
          - {id: sweep, type: manual}
        execution_policy:
          default: draft
          overrides:
            sweep: propose
        """,
    )
    worker, warnings = ws.load_worker()
    duty = worker.duties["triage"]
    assert (duty.posture.default, duty.posture.posture_for("sweep")) == ("draft", "propose")
    assert duty.execution_policy.depth_for("sweep") == "standard"
    assert _warnings(warnings) == [
        ("triage.md", "execution_policy.default", 7),
        ("triage.md", "execution_policy.overrides.sweep", 9),
    ]
    assert "write `posture: {default: draft}`" in warnings[0].message


def test_the_defaults_file_is_warned_about_too(ws) -> None:
    ws.persona()
    ws.write("tenants/acme/workers/w/duties/_defaults.md", "---\nexecution_policy:\n  default: propose\n---\n")
    ws.duty("brief", "triggers: [{id: m, type: manual}]\n")
    worker, warnings = ws.load_worker()
    assert worker.duties["brief"].posture.default == "propose"
    assert _warnings(warnings) == [("_defaults.md", "execution_policy.default", 3)]


def test_upstream_duty_loads_without_a_warning(ws) -> None:
    ws.persona()
    ws.duty(
        "watch",
        """\
        status: active
        triggers:
          - {id: morning, type: schedule, cron: "30 8 * * mon-fri", description: Weekday scan}
          - {id: alert, type: event, source: "external.*", filter: {table: "regex:^fin_", severity: ">= 3"}}
          - {id: errors, type: condition, metric: error_rate, rule: "> 10%", check_interval: 2h30m}
        execution_policy:
          default: standard
          overrides: {morning: deep, errors: quick}
        quality_criteria: [Name the tables]
        skills: [helper]
        pre_script: {kind: ref, tool_name: sql, tool_input: [[query, select 1]]}
        """,
    )
    ws.skill("tenants/acme/workers/w/skills/helper")
    worker, warnings = ws.load_worker()
    duty = worker.duties["watch"]
    assert warnings == []
    assert [duty.execution_policy.depth_for(t.id) for t in duty.triggers] == ["deep", "standard", "quick"]
    assert duty.triggers[2].check_interval == 9000.0
    assert duty.pre_script is not None and dict(duty.pre_script.tool_input) == {"query": "select 1"}


def test_numeric_weekdays_and_an_unknown_status_warn(ws) -> None:
    ws.persona()
    ws.duty("d", "status: Paused\ntriggers:\n  - {id: s, type: schedule, cron: '0 9 * * 1-5'}\n")
    worker, warnings = ws.load_worker()
    assert not worker.duties["d"].is_active
    assert _warnings(warnings) == [("d.md", "triggers[0].cron", 6), ("d.md", "status", 4)]


def test_an_invalid_filter_regex_is_an_error_naming_the_field(ws) -> None:
    ws.persona()
    ws.duty("d", "triggers:\n  - {id: e, type: event, source: x, filter: {table: 'regex:('}}\n")
    [error] = ws.worker_errors()
    assert error.field == "triggers[0].filter" and "invalid regular expression" in error.message


def test_upstream_spellings_are_noted_for_check_explain(ws) -> None:
    ws.persona()
    ws.duty(
        "d",
        """\
        execution_log_retention: a month
        pre_script: {source: "print(1)", timeout_seconds: 5}
        """,
    )
    scope = Scope(ws.root.resolve())
    issues = Collector()
    load_duties(scope, ws.worker_dir() / "duties", issues, {})
    notes = {(i.field, i.message) for i in issues.issues if i.severity == "note"}
    assert ("pre_script.source", "mapped: source -> inline") in notes
    assert ("pre_script.timeout_seconds", "mapped: timeout_seconds -> timeout") in notes
    assert ("execution_log_retention", "mapped: 'a month' -> 30 days (upstream's default)") in notes


def test_a_duty_s_own_old_spelling_wins_over_the_defaults_file(ws) -> None:
    """The posture written in a duty's own execution_policy beats `posture` from _defaults.md, and a
    defaults file in the old spelling still yields to the duty's own `posture`."""
    ws.persona()
    ws.write("tenants/acme/workers/w/duties/_defaults.md", "---\nposture: {default: draft}\n---\n")
    ws.duty("pay", "triggers: [{id: m, type: manual}]\nexecution_policy: {default: execute}\n")
    ws.duty("plain", "triggers: [{id: m2, type: manual}]\n")
    worker, _ = ws.load_worker()
    assert worker.duties["pay"].posture.default == "execute"
    assert worker.duties["plain"].posture.default == "draft"


def test_an_old_spelling_defaults_file_yields_to_the_duty_s_posture(ws) -> None:
    ws.persona()
    ws.write("tenants/acme/workers/w/duties/_defaults.md", "---\nexecution_policy: {default: propose}\n---\n")
    ws.duty(
        "pay", "triggers: [{id: m, type: manual}]\nposture: {default: execute}\nexecution_policy: {default: deep}\n"
    )
    worker, _ = ws.load_worker()
    duty = worker.duties["pay"]
    assert (duty.posture.default, duty.execution_policy.default) == ("execute", "deep")
