"""The shipped demo workspace loads cleanly and shows every file format it is meant to show."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from genworker.autonomy.duties.contract import duty_terms
from genworker.autonomy.duties.delivery import Unreachable, recipients_for
from genworker.delivery.recipients import find_contact, owner_of
from genworker.workspace.models import SkillLevel, StrategyMode, WorkerMode
from genworker.workspace.models.duty import CollaborationTrigger
from genworker.workspace.registry import WorkspaceRegistry
from genworker.workspace.snapshot import Worker

ROOT = Path(__file__).resolve().parents[2]

DAY = 86400.0

EXPECTED = {
    "assistant": {
        "mode": WorkerMode.PERSONAL,
        "duties": {"morning-brief", "inbox-triage"},
        "goals": {"inbox-under-control"},
        "own_skills": {"inbox-triage", "daily-brief", "reply_drafting"},
        "contacts": {"sam-ortiz", "dana-kim", "priya-nair"},
        "rules": {"drafts-need-approval", "brief-decisions-first"},
    },
    "analyst": {
        "mode": WorkerMode.TEAM_MEMBER,
        "duties": {"weekly-metrics-review", "metric-anomaly-watch", "data-request"},
        "goals": {"q1-kpi-baseline"},
        "own_skills": {"metrics-weekly-report", "anomaly-investigation", "metrics-deep-dive"},
        "contacts": {"sam-ortiz", "li-wei"},
        "rules": {"cite-every-number"},
    },
    "helpdesk": {
        "mode": WorkerMode.SERVICE,
        "duties": set(),
        "goals": set(),
        "own_skills": {"clinic-support"},
        "contacts": {"maya-chen"},
        "rules": {"no-patient-data"},
    },
}
WITH_DUTIES = sorted(w for w, expected in EXPECTED.items() if expected["duties"])
SYSTEM_SKILLS = {"general-chat", "summarize"}
TENANT_SKILLS = {"acme-handbook"}


@pytest.fixture(scope="module")
def workspace(demo_workspace_src: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(shutil.copytree(demo_workspace_src, tmp_path_factory.mktemp("demo") / "workspace"))


@pytest.fixture(scope="module")
def demo(workspace: Path) -> Path:
    return workspace / "tenants" / "demo"


@pytest.fixture(scope="module")
def registry(workspace: Path) -> WorkspaceRegistry:
    reg = WorkspaceRegistry(workspace, product_skills=ROOT / "skills")
    reg.load_all()
    return reg


def worker(registry: WorkspaceRegistry, worker_id: str) -> Worker:
    found = registry.worker("demo", worker_id)
    assert found is not None, f"worker demo/{worker_id} did not load"
    return found


def test_loads_without_errors_or_warnings(registry: WorkspaceRegistry) -> None:
    issues = registry.issues()
    assert issues == [], "\n".join(str(i) for i in issues)
    summary = registry.summary()
    assert (summary.tenants, summary.workers, summary.failed_workers) == (1, 3, 0)


def test_tenant_settings_and_default_worker(registry: WorkspaceRegistry) -> None:
    state = registry.tenant("demo")
    assert state is not None
    tenant = state.tenant
    assert tenant.trust_level == 2
    assert "shell_exec" in tenant.tool_policy.denied_tools
    assert tenant.mcp_remote_allowed is False
    assert tenant.default_worker == "assistant"
    assert tenant.default_worker in state.workers


@pytest.mark.parametrize("worker_id", sorted(EXPECTED))
def test_worker_contents(registry: WorkspaceRegistry, worker_id: str) -> None:
    expected = EXPECTED[worker_id]
    loaded = worker(registry, worker_id)
    assert loaded.persona.mode == expected["mode"]
    assert loaded.instructions.strip()
    assert set(loaded.duties) == expected["duties"]
    assert set(loaded.goals) == expected["goals"]
    assert set(loaded.contacts) == expected["contacts"]
    assert {r.rule_id for r in loaded.rules} == expected["rules"]
    own = {name for name, s in loaded.skills.items() if s.level == SkillLevel.WORKER}
    assert own == expected["own_skills"]
    assert set(loaded.skills) == expected["own_skills"] | SYSTEM_SKILLS | TENANT_SKILLS
    assert loaded.persona.default_skill in loaded.skills


@pytest.mark.parametrize("worker_id", sorted(EXPECTED))
def test_duty_skill_references_resolve(registry: WorkspaceRegistry, worker_id: str) -> None:
    loaded = worker(registry, worker_id)
    for duty in loaded.duties.values():
        named = [duty.skill_id, duty.skill_hint, *duty.preferred_skill_ids]
        assert all(n in loaded.skills for n in named if n), duty.duty_id


def test_defaults_file_is_not_a_duty(registry: WorkspaceRegistry, demo: Path) -> None:
    for worker_id in WITH_DUTIES:
        loaded = worker(registry, worker_id)
        assert (demo / "workers" / worker_id / "duties" / "_defaults.md").is_file()
        assert "_defaults" not in loaded.duties
        assert all(not path.endswith("_defaults.md") for path in loaded.files.values())


def test_defaults_reach_duties_that_do_not_set_them(registry: WorkspaceRegistry) -> None:
    assistant = worker(registry, "assistant")
    brief = assistant.duties["morning-brief"]
    triage = assistant.duties["inbox-triage"]
    # morning-brief sets neither retention nor escalation: both come from _defaults.md
    assert brief.execution_log_retention == 90 * DAY
    assert brief.escalation is not None
    assert brief.escalation.target == "dana-kim"
    # its own quality_criteria and posture win over _defaults.md
    assert brief.quality_criteria[0] == "Fits on one phone screen."
    assert brief.posture.default == "execute"
    # inbox-triage sets only posture.overrides: the default posture comes from _defaults.md
    assert triage.posture.default == "draft"
    assert triage.posture.posture_for("sweep") == "propose"
    assert "Nothing is sent outside Acme without Dana's approval." in triage.quality_criteria


def test_merge_order_defaults_file_then_duty_defaults_then_own(registry: WorkspaceRegistry) -> None:
    assistant = worker(registry, "assistant")
    analyst = worker(registry, "analyst")
    # duty_defaults beats _defaults.md
    assert assistant.duties["inbox-triage"].execution_log_retention == 30 * DAY
    assert analyst.duties["weekly-metrics-review"].execution_log_retention == 180 * DAY
    assert analyst.duties["data-request"].execution_log_retention == 60 * DAY
    # the duty's own field beats both
    watch = analyst.duties["metric-anomaly-watch"]
    assert watch.posture.default == "propose"
    assert (watch.execution_policy.default, watch.execution_policy.depth_for("load-failed")) == ("deep", "quick")
    assert watch.escalation is not None
    assert watch.escalation.target == "li-wei"


def test_every_trigger_kind_is_shown(registry: WorkspaceRegistry) -> None:
    triggers = [t for w in registry.workers() for d in w.duties.values() for t in d.triggers]
    kinds = {t.type for t in triggers}
    assert {"schedule", "event", "condition", "manual", "collaboration"} <= kinds
    schedules = [t for t in triggers if t.type == "schedule"]
    assert any(t.cron and t.timezone == "America/New_York" for t in schedules)
    assert any(t.interval == 30 * 60 for t in schedules)


def test_contract_and_process_step(registry: WorkspaceRegistry) -> None:
    triage = worker(registry, "assistant").duties["inbox-triage"]
    contract = triage.contract
    assert contract is not None
    assert contract.version == "2026.10"
    for part in ("input_schema", "output_schema", "sla", "escalation", "approval", "audit"):
        assert getattr(contract, part), part
    assert contract.decision_scope
    step = triage.process_step
    assert step is not None
    assert (step.process_id, step.step_id) == ("ceo-office-mail", "triage")


def test_goals_link_tasks_and_duties(registry: WorkspaceRegistry) -> None:
    for worker_id in EXPECTED:
        loaded = worker(registry, worker_id)
        for goal in loaded.goals.values():
            assert goal.deadline is not None
            assert goal.body.strip()
            assert goal.primary_duty_id in loaded.duties
            assert set(goal.referenced_duties()) <= set(loaded.duties)
            assert any(t.blocked_by for t in goal.tasks()), goal.goal_id


def test_all_strategy_modes_are_shown(registry: WorkspaceRegistry) -> None:
    skills = {s.file: s for w in registry.workers() for s in w.skills.values()}
    modes = {s.spec.settings.strategy.mode for s in skills.values()}
    assert {StrategyMode.AUTONOMOUS, StrategyMode.DETERMINISTIC, StrategyMode.HYBRID} <= modes
    hybrid_kinds = {
        step.kind
        for s in skills.values()
        if s.spec.settings.strategy.mode == StrategyMode.HYBRID
        for step in s.spec.settings.strategy.steps
    }
    assert {"tool", "llm", "autonomous"} <= hybrid_kinds


def test_product_system_skills(registry: WorkspaceRegistry, workspace: Path) -> None:
    skills = registry.skills_for("demo")
    for name in SYSTEM_SKILLS:
        assert skills[name].level == SkillLevel.SYSTEM
        assert skills[name].file == f"skills/{name}/SKILL.md"
    assert skills["general-chat"].spec.settings.default_skill is True
    assert skills["general-chat"].spec.settings.strategy.mode == StrategyMode.AUTONOMOUS
    assert skills["summarize"].spec.settings.strategy.mode == StrategyMode.DETERMINISTIC
    assert set(skills["summarize"].blocks) == {"general", "key_points", "action_items"}
    assert skills["acme-handbook"].level == SkillLevel.TENANT
    assert (workspace / "system" / "skills").is_dir()


def test_no_secrets_or_runtime_state_in_the_demo(demo_workspace_src: Path) -> None:
    """What the repository holds (`make run` adds runtime state beside it, which .gitignore keeps out)."""
    demo = demo_workspace_src / "tenants" / "demo"
    files = [p.relative_to(demo).as_posix() for p in demo.rglob("*") if p.is_file()]
    assert "workers/assistant/PERSONA.md" in files
    for path in files:
        parts = path.split("/")
        assert parts[-1] != "CHANNEL_CREDENTIALS.json", path
        assert parts[0] != "sessions", path
        if parts[0] == "workers":
            assert parts[2] not in ("runtime", "memory", "tasks", "runs", "sensor_snapshots", "archive"), path
    example = demo / "workers" / "assistant" / "CHANNEL_CREDENTIALS.json.example"
    assert '"cli_xxx"' in example.read_text(encoding="utf-8")


def test_credentials_example_is_not_loaded(registry: WorkspaceRegistry) -> None:
    assert worker(registry, "assistant").credentials is None


def test_duty_results_go_to_a_folder_and_to_people_declared_for_when_credentials_exist(
    registry: WorkspaceRegistry,
) -> None:
    brief = worker(registry, "assistant").duties["morning-brief"]
    assert [t.describe() for t in brief.delivery] == ["folder briefs"]  # seen without any set-up
    analyst = worker(registry, "analyst")
    review = analyst.duties["weekly-metrics-review"]
    assert [(t.describe(), t.format) for t in review.delivery] == [
        ("folder reports", "text"),
        ("chat slack:C0DEMOMETRICS", "card"),
        ("contact sam-ortiz (email)", "file"),
    ]
    # as shipped (no CHANNEL_CREDENTIALS.json) the two people's destinations say why they cannot go
    for target, why in zip(
        review.delivery[1:],
        ["chat 'slack:C0DEMOMETRICS' is not bound", "Sam Ortiz has no identity on email the worker can send to"],
        strict=True,
    ):
        with pytest.raises(Unreachable, match=re.escape(why)):
            recipients_for(analyst, [], target)


def test_contracts_state_schema_sla_escalation_and_quality(registry: WorkspaceRegistry) -> None:
    for worker_id, duty_id, target in (("assistant", "inbox-triage", "dana-kim"),
                                       ("analyst", "weekly-metrics-review", "sam-ortiz")):  # fmt: skip
        loaded = worker(registry, worker_id)
        terms = duty_terms(loaded.duties[duty_id])
        assert terms.output_schema["type"] == "string", duty_id
        assert terms.sla.completion_s is not None and terms.sla.on_timeout == "escalate", duty_id
        assert target in {r.target for r in terms.escalations} and target in loaded.contacts, duty_id
        assert terms.quality_criteria and terms.audit.evidence, duty_id


def test_open_goal_tasks_bound_to_a_duty_state_success_criteria(registry: WorkspaceRegistry) -> None:
    for worker_id in WITH_DUTIES:
        for goal in worker(registry, worker_id).goals.values():
            assert goal.success_criteria, goal.goal_id
            open_bound = [t for t in goal.tasks() if t.duty_id and t.status not in ("done", "cancelled")]
            assert open_bound, goal.goal_id
            assert all(t.success_criteria for t in open_bound), [t.id for t in open_bound if not t.success_criteria]


def test_each_worker_reports_to_a_contact_reachable_in_their_order(registry: WorkspaceRegistry) -> None:
    owners = {w: owner_of(worker(registry, w)) for w in EXPECTED}
    assert {w: o.person_id if o else None for w, o in owners.items()} == {
        "assistant": "dana-kim",
        "analyst": "sam-ortiz",
        "helpdesk": "maya-chen",
    }
    dana = owners["assistant"]
    assert dana is not None and [i.channel for i in dana.identities] == ["slack", "feishu", "email"]
    policy = worker(registry, "assistant").persona.policy
    assert policy.interruption_budget_per_day == 3
    assert policy.quiet_hours is not None and policy.quiet_hours.timezone == "America/New_York"


def test_the_helpdesk_is_a_public_service_that_hands_over_to_a_person(registry: WorkspaceRegistry, demo: Path) -> None:
    helpdesk = worker(registry, "helpdesk")
    service = helpdesk.persona.service
    assert (service.anonymous_allowed, service.session_ttl, service.max_concurrent_sessions) == (True, 1800, 20)
    [source] = service.knowledge_sources
    articles = sorted(p.name for p in (demo / "workers/helpdesk" / source["path"]).glob("*.md"))
    assert articles == ["account-and-billing.md", "booking-and-reminders.md"]
    escalation = service.escalation
    assert escalation.enabled and escalation.target_worker is None and escalation.triggers
    assert escalation.contact is not None and find_contact(helpdesk, escalation.contact) is not None
    # a public desk: it may hand a conversation over and nothing else, and its prompt lists no contacts
    policy = helpdesk.persona.tool_policy
    assert (policy.mode, policy.allowed_tools) == ("whitelist", ("escalate_conversation",))
    assert helpdesk.persona.contact_settings.context_limit == 0


def test_iris_may_delegate_to_milo_and_milo_may_delegate_to_nobody(registry: WorkspaceRegistry) -> None:
    delegate = {"delegate_to_worker", "spawn_task", "spawn_subagents"}
    iris = worker(registry, "assistant").persona.tool_policy
    assert iris.mode == "blacklist" and not delegate & set(iris.denied_tools)
    for worker_id in ("analyst", "helpdesk"):
        policy = worker(registry, worker_id).persona.tool_policy
        assert policy.mode == "whitelist" and not delegate & set(policy.allowed_tools), worker_id
    [accepts] = [t for t in worker(registry, "analyst").duties["data-request"].triggers if t.type == "collaboration"]
    assert isinstance(accepts, CollaborationTrigger)
    assert (accepts.from_workers, accepts.request_type) == (("assistant",), "data_request")
