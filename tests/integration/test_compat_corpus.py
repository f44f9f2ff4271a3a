"""Workspaces written in upstream genworker's format (tests/fixtures/compat/) load here unchanged.

Each corpus workspace was checked against upstream's own parsers (see the corpus README). This
module says what "loads" means: no errors, every worker loads, and the upstream spellings map to
the values our runtime uses (execution depth, workflow steps, goal statuses, connection modes...).
Target names follow the implementation plan of issue #22.
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pytest

from genworker.autonomy.sensing.filters import filter_issues, parse_filter
from genworker.workspace.errors import Issue
from genworker.workspace.models import GoalStatus, SkillLevel, StrategyMode, WorkerMode
from genworker.workspace.registry import WorkspaceRegistry
from genworker.workspace.snapshot import Worker

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fixtures" / "compat"
DAY = 86400.0

WORKERS = {
    "upstream_full": {"acme": {"analyst", "support-desk", "teammate"}},
    "seed_style": {"demo": {"assistant", "hr-service"}},
    "upstream_lenient": {"lenient": {"legacy"}},
}


def _load(name: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, WorkspaceRegistry]:
    root = Path(shutil.copytree(CORPUS / name, tmp_path_factory.mktemp(name) / "workspace"))
    registry = WorkspaceRegistry(root, product_skills=ROOT / "skills")
    registry.load_all()
    return root, registry


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, WorkspaceRegistry]:
    return _load("upstream_full", tmp_path_factory)


@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, WorkspaceRegistry]:
    return _load("seed_style", tmp_path_factory)


@pytest.fixture(scope="module")
def lenient(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, WorkspaceRegistry]:
    return _load("upstream_lenient", tmp_path_factory)


def _worker(registry: WorkspaceRegistry, tenant_id: str, worker_id: str) -> Worker:
    found = registry.worker(tenant_id, worker_id)
    assert found is not None, f"{tenant_id}/{worker_id} did not load: " + "; ".join(map(str, _errors(registry)))
    return found


def _errors(registry: WorkspaceRegistry) -> list[Issue]:
    return [i for i in registry.issues() if i.severity == "error"]


def _warnings(registry: WorkspaceRegistry, file_part: str = "") -> list[Issue]:
    return [i for i in registry.issues() if i.severity == "warning" and file_part in i.file]


# -- every corpus workspace --------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(WORKERS))
def test_loads_with_zero_errors_and_every_worker(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    root, registry = _load(name, tmp_path_factory)
    errors = _errors(registry)
    assert errors == [], "\n".join(str(i) for i in errors)
    assert registry.failures() == []
    for tenant_id, worker_ids in WORKERS[name].items():
        state = registry.tenant(tenant_id)
        assert state is not None, tenant_id
        assert set(state.workers) == worker_ids
        for worker in state.workers.values():
            assert filter_issues(root, worker) == [], f"a sensor of {worker.worker_id} would not run"


@pytest.mark.parametrize("name", ["upstream_full", "seed_style"])
def test_no_upstream_field_is_reported_unknown(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    _, registry = _load(name, tmp_path_factory)
    unknown = [i for i in registry.issues() if "unknown" in i.message]
    assert unknown == [], "\n".join(str(i) for i in unknown)


# -- upstream_full: TENANT.json, PERSONA.md, CHANNEL_CREDENTIALS.json ----------------------------


def test_tenant(full: tuple[Path, WorkspaceRegistry]) -> None:
    _, registry = full
    state = registry.tenant("acme")
    assert state is not None
    assert state.tenant.trust_level == 2
    assert state.tenant.default_worker == "analyst"
    assert set(state.tenant.tool_policy.denied_tools) == {"admin_console", "shell_exec"}


def test_persona_identity_and_modes(full: tuple[Path, WorkspaceRegistry]) -> None:
    _, registry = full
    analyst = _worker(registry, "acme", "analyst")
    assert analyst.persona.identity.version == "2.1"
    assert analyst.persona.identity.personality.traits == ("careful", "concise")
    assert analyst.persona.mode == WorkerMode.PERSONAL
    assert analyst.persona.tool_policy.mode == "whitelist"
    assert _worker(registry, "acme", "support-desk").persona.mode == WorkerMode.SERVICE
    assert _worker(registry, "acme", "teammate").persona.mode == WorkerMode.TEAM_MEMBER


def test_channels_keep_upstream_connection_modes(full: tuple[Path, WorkspaceRegistry]) -> None:
    _, registry = full
    channels = _worker(registry, "acme", "analyst").persona.channels
    assert [(c.type, c.connection_mode) for c in channels] == [
        ("feishu", "websocket"),
        ("slack", "socket_mode"),
        ("slack", "webhook"),  # the same type twice: upstream groups them into one adapter
        ("dingtalk", "stream"),
        ("wecom", "webhook"),
        ("email", "polling"),  # `poll`
    ]
    assert [c.reply_mode for c in channels][:4] == ["complete", "streaming", "complete", "card_update"]
    assert channels[0].chat_ids == ("oc_fixture_quality_group", "ou_fixture_owner_dm")


def test_sensors(full: tuple[Path, WorkspaceRegistry]) -> None:
    _, registry = full
    sensors = _worker(registry, "acme", "analyst").persona.sensor_configs
    assert [s.source_type for s in sensors] == ["email", "workspace_file", "git", "webhook", "feishu_folder"]
    email, files, git, webhook, _ = sensors
    assert [r.match for r in email.routing_rules] == ["regex", "exact", "prefix", "contains"]
    assert [r.route for r in email.routing_rules] == ["reactive", "both", "heartbeat", "heartbeat"]
    assert email.require_approval is True and email.auto_create_goal is True
    assert files.require_approval is False
    assert git.require_approval is True  # upstream's default
    assert email.poll_interval == 600.0 and files.poll_interval == 30.0 and git.poll_interval == 3600.0
    assert webhook.delivery_mode == "push"
    email_filter = parse_filter(email)
    assert email_filter.subject_contains == ("data quality", "SLA", "incident")
    git_filter = parse_filter(git)
    assert git_filter.repo == "repos/warehouse"
    assert git_filter.branches == ("main", "release/2026.04")
    assert parse_filter(files).include == ("*.csv", "*.xlsx")


def test_inline_contacts_heartbeat_and_service(full: tuple[Path, WorkspaceRegistry]) -> None:
    _, registry = full
    analyst = _worker(registry, "acme", "analyst")
    persona = analyst.persona
    assert [c.person_id for c in persona.contacts] == ["ops-lead", "configured-2"]
    assert persona.contacts[1].name == "Robin Chen"
    assert [i.channel for i in persona.contacts[0].identities] == ["feishu", "email"]
    assert persona.contact_settings.context_limit == 8
    assert persona.heartbeat.goal_isolated_deviation_threshold == 0.8
    service = _worker(registry, "acme", "support-desk").persona.service
    assert service.max_concurrent_sessions == 50
    assert service.anonymous_allowed is False
    assert service.escalation.target_worker == "analyst"
    assert len(service.knowledge_sources) == 2  # a plain string entry is kept too


def test_credentials_know_every_upstream_key(full: tuple[Path, WorkspaceRegistry]) -> None:
    _, registry = full
    analyst = _worker(registry, "acme", "analyst")
    assert analyst.credentials is not None
    assert set(analyst.credentials.platforms()) == {"feishu", "wecom", "dingtalk", "slack", "email"}
    assert _warnings(registry, "CHANNEL_CREDENTIALS.json") == []


# -- upstream_full: duties -----------------------------------------------------------------------


def test_duty_execution_depth(full: tuple[Path, WorkspaceRegistry]) -> None:
    _, registry = full
    duties = _worker(registry, "acme", "analyst").duties
    watch = duties["daily-quality-watch"]
    assert watch.execution_policy.default == "standard"
    assert watch.execution_policy.depth_for("morning-scan") == "deep"
    assert watch.execution_policy.depth_for("anomaly-threshold") == "quick"
    assert watch.execution_policy.depth_for("alert-event") == "standard"
    assert watch.posture.default == "execute"  # the posture is a separate field; upstream has none
    assert duties["incident-followup"].execution_policy.default == "standard"
    assert duties["incident-followup"].execution_policy.depth_for("any-external") == "deep"
    assert duties["weekly-report"].execution_policy.default == "quick"


def test_duty_triggers(full: tuple[Path, WorkspaceRegistry]) -> None:
    _, registry = full
    duties = _worker(registry, "acme", "analyst").duties
    triggers = {t.id: t for t in duties["daily-quality-watch"].triggers}
    kinds = ["schedule", "event", "condition", "condition", "manual", "collaboration"]
    assert [t.type for t in triggers.values()] == kinds
    assert triggers["morning-scan"].description == "Weekday morning scan of last night's loads"
    assert triggers["alert-event"].source == "external.data_quality_alert"
    assert triggers["anomaly-threshold"].check_interval == 1800.0
    assert triggers["error-rate"].check_interval == 9000.0  # 2h30m
    assert triggers["error-rate"].rule == "> 10%"
    followup = {t.id: t for t in duties["incident-followup"].triggers}
    assert followup["any-external"].source == "external.*"
    assert dict(followup["any-external"].filter)["table"] == "regex:^(fin|growth)_"
    assert followup["everything"].source == "*"


def test_duty_skills_escalation_retention_status(full: tuple[Path, WorkspaceRegistry]) -> None:
    _, registry = full
    duties = _worker(registry, "acme", "analyst").duties
    assert set(duties) == {"daily-quality-watch", "incident-followup", "weekly-report"}  # execution_log.jsonl ignored
    watch = duties["daily-quality-watch"]
    assert watch.skill_id == "data-analysis"
    assert watch.escalation is not None and watch.escalation.target == "ops-lead"
    assert watch.execution_log_retention == 90 * DAY
    assert duties["incident-followup"].preferred_skill_ids == ("data-analysis", "sql-report")
    assert duties["incident-followup"].skill_hint == "data-analysis"
    assert duties["weekly-report"].preferred_skill_ids == ("sql-report",)  # `skills`
    assert duties["weekly-report"].status == "closed"


def test_duty_pre_scripts(full: tuple[Path, WorkspaceRegistry]) -> None:
    _, registry = full
    duties = _worker(registry, "acme", "analyst").duties
    inline = duties["daily-quality-watch"].pre_script
    assert inline is not None
    assert inline.inline is not None and inline.inline.startswith("import json")
    assert inline.timeout == 120.0
    assert inline.enabled_tools == ("sql_executor",)
    assert inline.max_tool_calls == 10
    ref = duties["incident-followup"].pre_script
    assert ref is not None
    assert ref.tool_name == "sql_executor"
    assert dict(ref.tool_input) == {"query": "select count(*) from quality.open_incidents"}


# -- upstream_full: goals ------------------------------------------------------------------------


def test_goal_statuses_map(full: tuple[Path, WorkspaceRegistry]) -> None:
    _, registry = full
    goals = _worker(registry, "acme", "analyst").goals
    sla = goals["data-quality-sla"]
    assert {t.id: t.status for t in sla.tasks()} == {
        "ms-scope-t1": "done",  # `completed`
        "ms-scope-t2": "done",
        "ms-fix-t1": "in_progress",
        "ms-fix-t2": "blocked",
        "ms-fix-t3": "pending",
    }
    assert [m.status for m in sla.milestones] == ["done", "in_progress"]
    assert goals["legacy-dashboard-migration"].status == GoalStatus.ARCHIVED  # `abandoned`
    assert goals["finance-mart-audit"].status == GoalStatus.PENDING_APPROVAL


def test_goal_fields(full: tuple[Path, WorkspaceRegistry]) -> None:
    _, registry = full
    goals = _worker(registry, "acme", "analyst").goals
    sla = goals["data-quality-sla"]
    assert sla.deadline == dt.date(2026, 6, 30)
    assert sla.created_by == "head-of-data" and sla.approved_by == "ops-lead"
    assert sla.on_complete == "create_duty"
    assert sla.preferred_skill_ids == ("data-analysis",)
    assert sla.default_pre_script is not None and sla.default_pre_script.max_tool_calls == 5
    source = sla.external_source
    assert source is not None
    assert (source.type, source.sync_direction, source.sync_schedule) == ("email", "bidirectional", "30m")
    assert source.stakeholders == ("head-of-data@example.com", "ops-lead@example.com")
    assert sla.milestones[0].completed_at is not None
    assert sla.milestones[0].tasks[0].notes == "fin_daily and growth_funnel"
    audit = goals["finance-mart-audit"]
    assert audit.preferred_skill_ids == ("sql-report",)  # `skills`
    assert audit.default_pre_script is not None and audit.default_pre_script.tool_name == "sql_executor"


# -- upstream_full: skills -----------------------------------------------------------------------


def test_hybrid_workflow_steps(full: tuple[Path, WorkspaceRegistry]) -> None:
    _, registry = full
    skill = registry.skills_for("acme")["report-hybrid"]
    assert skill.level == SkillLevel.SYSTEM
    strategy = skill.spec.settings.strategy
    assert strategy.mode == StrategyMode.HYBRID
    steps = strategy.steps
    assert [s.id for s in steps] == ["planning", "execution", "summarization"]
    assert [s.kind for s in steps] == ["autonomous", "llm", "autonomous"]  # type deterministic -> llm step
    assert [s.instructions for s in steps] == ["planning", "execution", "summarization"]
    assert steps[0].max_rounds == 3
    assert steps[1].tools == ("sql_executor", "data_profiler")
    assert (steps[1].retry.max_attempts, steps[1].retry.backoff) == (2, "exponential")
    assert steps[2].tools == ("file_read",)
    assert strategy.fallback is not None
    assert (strategy.fallback.condition, strategy.fallback.mode) == ("no_workflow", StrategyMode.AUTONOMOUS)
    assert skill.spec.settings.recommended_tools == ("sql_executor", "data_profiler")


def test_deterministic_workflow_and_worker_skills(full: tuple[Path, WorkspaceRegistry]) -> None:
    _, registry = full
    analyst = _worker(registry, "acme", "analyst")
    report = analyst.skills["sql-report"]
    assert report.level == SkillLevel.WORKER
    strategy = report.spec.settings.strategy
    assert strategy.mode == StrategyMode.DETERMINISTIC
    assert [s.kind for s in strategy.steps] == ["llm", "llm", "llm"]
    assert strategy.steps[0].retry.max_attempts == 3
    assert report.spec.settings.gate_level == "gated"
    analysis = analyst.skills["data-analysis"]
    assert analysis.spec.settings.default_skill is True
    assert [(k.keyword, k.weight) for k in analysis.spec.settings.keywords][-1] == ("query", 1.0)
    assert "Notes kept inside the summary block" in analysis.blocks["report.summary"]
    assert analyst.persona.default_skill == "data-analysis"


def test_langgraph_and_planning_skills(full: tuple[Path, WorkspaceRegistry]) -> None:
    _, registry = full
    skills = registry.skills_for("acme")
    graph = skills["order-approval-graph"].spec.settings.strategy.graph
    assert graph is not None
    assert graph.entry == "fetch_order"
    assert len(graph.nodes) == 6 and len(graph.edges) == 7
    assert (graph.edges[3].from_, graph.edges[3].to) == ("need_human", "auto_approve")  # from_node / to_node
    assert graph.max_steps == 25
    python_graph = skills["triage-graph"]  # folder triage_graph: a Python module name
    assert python_graph.level == SkillLevel.TENANT
    pg = python_graph.spec.settings.strategy.graph
    assert pg is not None
    assert (pg.module, pg.factory, pg.state_schema_ref) == (
        "workspace.tenants.acme.skills.triage_graph.graph",
        "build_graph",
        "TriageState",
    )
    assert skills["incident-planner"].spec.settings.strategy.mode == StrategyMode.PLANNING


# -- upstream_full: rules, contacts --------------------------------------------------------------


def test_rules(full: tuple[Path, WorkspaceRegistry]) -> None:
    _, registry = full
    rules = {r.rule_id: r for r in _worker(registry, "acme", "analyst").rules}
    assert rules["no-pii-in-reports"].kind == "directive"
    assert {rid: r.status for rid, r in rules.items() if r.kind == "learned"} == {
        "rule-1a2b3c4d": "active",
        "rule-5e6f7a8b": "suspended",
        "rule-9c0d1e2f": "crystallized",
        "rule-3b4c5d6e": "archived",
    }
    learned = rules["rule-1a2b3c4d"]
    assert learned.scope == ("data-analysis",)  # scope.skills
    assert learned.source.type == "self_reflection"
    assert learned.created_at is not None  # source.created_at
    assert (learned.category, learned.confidence, learned.apply_count) == ("strategy", 0.55, 3)
    assert rules["no-pii-in-reports"].scope == ()


def test_contacts(full: tuple[Path, WorkspaceRegistry]) -> None:
    _, registry = full
    contacts = _worker(registry, "acme", "analyst").contacts
    # the PERSONA contacts and upstream's copies of them in contacts/configured/ are one contact each
    assert set(contacts) == {"ops-lead", "configured-2", "person-4f5e6d7c"}
    sam = contacts["person-4f5e6d7c"]
    assert sam.name == "Sam Ortiz"  # primary_name
    assert [i.channel for i in sam.identities] == ["slack", "email"]  # channel_type
    assert sam.source == "discovered"
    assert sam.is_same_org_as_owner is True
    assert sam.merge_history == ("person-0a0b0c0d",)
    assert contacts["ops-lead"].identities[1].handle == "morgan.lee@example.com"  # empty handle: the email


# -- seed_style -----------------------------------------------------------------------------------


def test_seed_duties_defaults_contract_and_depth(seed: tuple[Path, WorkspaceRegistry]) -> None:
    _, registry = seed
    duties = _worker(registry, "demo", "assistant").duties
    assert set(duties) == {"approval-reminder", "meeting-minutes"}
    reminder = duties["approval-reminder"]
    assert reminder.execution_policy.default == "standard"
    assert reminder.execution_policy.depth_for("approval-mail") == "quick"
    assert reminder.contract is not None and reminder.contract.sla["response_minutes"] == 30
    assert reminder.process_step is not None and reminder.process_step.step_id == "remind-approver"
    minutes = duties["meeting-minutes"]
    assert minutes.execution_policy.default == "deep"
    assert minutes.escalation is not None and minutes.escalation.target == "wang-manager"  # from _defaults.md
    assert minutes.contract is not None and minutes.contract.version == "2026.1"
    assert minutes.pre_script is not None and minutes.pre_script.timeout == 60.0


def test_seed_goal_links(seed: tuple[Path, WorkspaceRegistry]) -> None:
    _, registry = seed
    goal = _worker(registry, "demo", "assistant").goals["q2-expense-cycle"]
    assert goal.primary_duty_id == "approval-reminder"
    assert goal.duty_refs == ("approval-reminder", "meeting-minutes")
    tasks = {t.id: t for t in goal.tasks()}
    assert tasks["m1-t1"].status == "done"
    assert (tasks["m2-t2"].process_id, tasks["m2-t2"].step_id) == ("weekly-meeting", "write-minutes")
    assert goal.external_source is not None and goal.external_source.type == "feishu_doc"


def test_seed_persona(seed: tuple[Path, WorkspaceRegistry]) -> None:
    _, registry = seed
    assistant = _worker(registry, "demo", "assistant")
    persona = assistant.persona
    assert [m.type for m in persona.mounts] == ["feishu", "wecom", "dingtalk"]
    assert persona.mounts[1].mount_path == "mounts/hr-docs/"
    assert persona.contact_settings.sync.enabled is True
    assert [(c.type, c.connection_mode) for c in persona.channels] == [("feishu", "webhook"), ("email", "polling")]
    assert persona.contacts[0].aliases == ("老王",)
    assert set(assistant.contacts) == {"wang-manager", "person-7a8b9c0d"}
    triage = assistant.skills["inbox-triage"].spec.settings.strategy
    assert [(s.id, s.kind) for s in triage.steps] == [("classify", "llm"), ("follow-up", "autonomous")]
    assert triage.steps[1].max_rounds == 4
    hr = _worker(registry, "demo", "hr-service")
    assert hr.persona.mode == WorkerMode.SERVICE
    assert hr.persona.service.escalation.target_worker == "assistant"
    assert hr.persona.default_skill == "meeting-notes"


# -- upstream_lenient -----------------------------------------------------------------------------


def test_lenient_tenant(lenient: tuple[Path, WorkspaceRegistry]) -> None:
    _, registry = lenient
    state = registry.tenant("lenient")
    assert state is not None
    assert state.tenant.tenant_id == "lenient"  # from the folder
    assert state.tenant.trust_level == 2  # "2"
    assert any("default_worker" in i.field for i in _warnings(registry, "TENANT.json"))
    assert "notes" not in state.failures  # a folder without PERSONA.md is skipped


def test_lenient_persona(lenient: tuple[Path, WorkspaceRegistry]) -> None:
    _, registry = lenient
    legacy = _worker(registry, "lenient", "legacy")
    persona = legacy.persona
    assert persona.identity.name == ""
    assert persona.identity.version == "2"
    assert persona.mode == WorkerMode.TEAM_MEMBER
    assert persona.tool_policy.mode == "blacklist"  # Greylist, with a warning
    assert persona.constraints == ("42", "Reply in English.")
    assert [s.source_type for s in persona.sensor_configs] == ["feishu_folder", "email"]  # later email wins
    assert [(c.type, c.connection_mode, c.reply_mode) for c in persona.channels] == [
        ("feishu", "websocket", "streaming"),
        ("dingtalk", "stream", "complete"),
        ("slack", "socket_mode", "complete"),
    ]
    assert persona.channels[1].chat_ids == ("1234567890",)
    assert persona.service.escalation.target_worker is None
    assert set(legacy.contacts) == {"configured-1", "alex-kim"}
    assert legacy.contacts["alex-kim"].name == "Alex Kim"
    assert legacy.credentials is not None
    issues = "\n".join(str(i) for i in _warnings(registry, "legacy/PERSONA.md"))
    assert "tool_policy.mode" in issues and "monitor_configs" in issues  # the duplicate email sensor


def test_lenient_duties(lenient: tuple[Path, WorkspaceRegistry]) -> None:
    _, registry = lenient
    duties = _worker(registry, "lenient", "legacy").duties
    assert set(duties) == {"20260101", "unbound-skill"}
    numbered = duties["20260101"]
    assert numbered.status != "active"  # Paused: loads, never fires
    assert [t.id for t in numbered.triggers] == ["1", "2"]
    assert numbered.triggers[1].check_interval == 9000.0
    assert numbered.preferred_skill_ids == ("legacy-lookup",)
    assert numbered.execution_log_retention == 30 * DAY
    assert numbered.pre_script is not None and numbered.pre_script.inline == 'print("hello")\n'
    unbound = duties["unbound-skill"]
    assert unbound.title == "Duty bound to a skill this worker does not have"  # first file wins
    assert unbound.pre_script is not None and unbound.pre_script.tool_name == "web_search"
    warned = {(Path(i.file).name, i.field.split("[")[0]) for i in _warnings(registry, "/duties/")}
    assert ("20260101.md", "triggers") in warned  # numeric cron weekdays: APScheduler's numbering differs
    assert ("unbound-skill.md", "skill_id") in warned
    assert any(name == "zz-duplicate.md" for name, _ in warned)


def test_lenient_goal_rules_skills(lenient: tuple[Path, WorkspaceRegistry]) -> None:
    _, registry = lenient
    legacy = _worker(registry, "lenient", "legacy")
    goal = legacy.goals["loose-goal"]
    assert goal.title == "Goal without a title field"  # the first heading
    assert goal.deadline == dt.date(2026, 7, 1)
    assert [m.id for m in goal.milestones] == ["1", "2"]
    assert {t.id: (t.status, t.blocked_by) for t in goal.tasks()} == {"11": ("done", ()), "12": ("pending", ("11",))}
    rules = {r.rule_id: r for r in legacy.rules}
    assert rules["be-brief"].kind == "directive"  # no `type`: the folder decides
    assert rules["rule-minimal"].confidence == 0.5
    skills = legacy.skills
    assert {"legacy-lookup", "数据分析", "weekly-digest", "loose-hybrid", "odd-mode"} <= set(skills)
    lookup = skills["legacy-lookup"].spec.settings
    assert (lookup.default_skill, lookup.priority, lookup.recommended_tools) == (True, 3, ("web_search",))
    assert [(k.keyword, k.weight) for k in lookup.keywords] == [("lookup", 1.0), ("find", 1.0), ("search", 2.0)]
    assert skills["数据分析"].spec.version == "2"
    assert skills["odd-mode"].spec.settings.strategy.mode == StrategyMode.AUTONOMOUS
    hybrid = skills["loose-hybrid"]
    steps = hybrid.spec.settings.strategy.steps
    assert [(s.id, s.kind) for s in steps] == [("gather", "autonomous"), ("decide", "autonomous"), ("write", "llm")]
    assert [s.instructions for s in steps] == ["step.gather", "general", "step.write"]
    assert hybrid.blocks["general"].startswith("Before the first heading")
    assert "A heading inside a block" in hybrid.blocks["step.write"]
    fallback = hybrid.spec.settings.strategy.fallback
    assert fallback is not None and fallback.mode == StrategyMode.AUTONOMOUS and fallback.condition == ""
