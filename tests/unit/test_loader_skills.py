from pathlib import Path

import pytest

from genworker.workspace.models import SkillLevel, StrategyMode
from genworker.workspace.scan import Collector, Scope
from genworker.workspace.skills import load_skills

LAYERS = {
    "product": "{product}/shared",
    "system": "system/skills/shared",
    "tenant": "tenants/acme/skills/shared",
    "worker": "tenants/acme/workers/w/skills/shared",
}


@pytest.fixture
def product(tmp_path: Path) -> Path:
    path = tmp_path / "product-skills"
    path.mkdir()
    return path


@pytest.mark.parametrize(
    ("present", "winner"),
    [
        (("product", "system", "tenant", "worker"), "worker"),
        (("product", "system", "tenant"), "tenant"),
        (("product", "system"), "system"),
        (("product",), "product"),
        (("product", "worker"), "worker"),
        (("system", "tenant"), "tenant"),
    ],
)
def test_skill_precedence_worker_tenant_system_product(
    ws, product: Path, present: tuple[str, ...], winner: str
) -> None:
    ws.tenant()
    ws.persona()
    for layer in present:
        ws.skill(LAYERS[layer].format(product=product), body=f"Instructions from {layer}.")
    registry = ws.registry(product_skills=product)
    worker = registry.worker("acme", "w")
    assert worker is not None, registry.issues()
    skill = worker.skills["shared"]
    assert skill.instructions == f"Instructions from {winner}."
    expected_level = {"product": "system", "system": "system"}.get(winner, winner)
    assert skill.level == SkillLevel(expected_level)


def test_each_level_contributes_its_own_skills(ws, product: Path) -> None:
    ws.tenant()
    ws.persona()
    ws.skill(str(product / "from-product"))
    ws.skill("system/skills/from-system")
    ws.skill("tenants/acme/skills/from-tenant")
    ws.skill("tenants/acme/workers/w/skills/from-worker")
    registry = ws.registry(product_skills=product)
    worker = registry.worker("acme", "w")
    assert worker is not None
    assert {name: s.level.value for name, s in worker.skills.items()} == {
        "from-product": "system",
        "from-system": "system",
        "from-tenant": "tenant",
        "from-worker": "worker",
    }
    assert worker.skills["from-system"].file == "system/skills/from-system/SKILL.md"
    assert worker.skills["from-product"].file == "product-skills/from-product/SKILL.md"
    assert sorted(registry.skills_for("acme")) == ["from-product", "from-system", "from-tenant"]


def test_tenant_skills_do_not_leak_to_other_tenants(ws) -> None:
    ws.tenant("acme")
    ws.tenant("globex")
    ws.persona("globex", "g")
    ws.skill("tenants/acme/skills/secret-sauce")
    registry = ws.registry()
    worker = registry.worker("globex", "g")
    assert worker is not None
    assert "secret-sauce" not in worker.skills
    assert "secret-sauce" in registry.skills_for("acme")


def load(ws, folder: str, level: SkillLevel = SkillLevel.WORKER) -> tuple[dict, Collector]:
    issues = Collector()
    scope = Scope(ws.root.resolve())
    return load_skills(scope, scope.root / folder, level, issues), issues


def test_skill_name_may_differ_from_its_folder(ws) -> None:
    # upstream keys a skill by its name (any text); the folder is what paths use
    ws.skill("skills/search", name="lookup")
    ws.skill("skills/data_cn", name="数据分析")
    skills, issues = load(ws, "skills")
    assert skills["lookup"].file == "skills/search/SKILL.md"
    assert skills["数据分析"].file == "skills/data_cn/SKILL.md"
    assert [(i.severity, i.file, i.field) for i in issues.issues] == [
        ("note", "skills/data_cn/SKILL.md", "name"),  # genworker check --explain says so
        ("note", "skills/search/SKILL.md", "name"),
    ]


def test_two_folders_with_one_skill_name_is_an_error_naming_both(ws) -> None:
    ws.skill("skills/a-search", name="lookup")
    ws.skill("skills/b-search", name="lookup")
    skills, issues = load(ws, "skills")
    assert list(skills) == ["lookup"] and skills["lookup"].file == "skills/a-search/SKILL.md"
    (issue,) = issues.errors
    assert (issue.file, issue.field) == ("skills/b-search/SKILL.md", "name")
    assert "skills/a-search/SKILL.md" in issue.message


def test_a_skill_name_that_could_be_a_path_is_refused(ws) -> None:
    ws.skill("skills/search", name="'../search'")
    _, issues = load(ws, "skills")
    (issue,) = issues.errors
    assert (issue.field, issue.line) == ("name", 2)
    assert "without '/'" in issue.message


def test_skill_folders_inside_group_folders_load(ws) -> None:
    ws.skill("skills/reports/weekly-digest")
    ws.skill("skills/reports/monthly/close")
    ws.skill("skills/top")
    (ws.root / "skills/top/scripts/helper").mkdir(parents=True)  # a skill's own resources are not skills
    ws.skill("skills/top/scripts/helper/inner")
    (ws.root / "skills/reports/assets").mkdir()
    skills, issues = load(ws, "skills")
    assert sorted(skills) == ["close", "top", "weekly-digest"]
    assert skills["close"].file == "skills/reports/monthly/close/SKILL.md"
    assert [(i.severity, i.file) for i in issues.issues] == [("warning", "skills/reports/assets")]


def test_folder_without_skill_md_warns(ws) -> None:
    (ws.root / "skills/empty").mkdir(parents=True)
    ws.skill("skills/real")
    skills, issues = load(ws, "skills")
    assert list(skills) == ["real"]
    assert [(i.severity, i.file) for i in issues.issues] == [("warning", "skills/empty")]


PLANNER = """\
metadata:
  genworker:
    strategy:
      mode: deterministic
      steps:
        - id: plan
          kind: llm
          instructions: plan
        - id: reply
          kind: llm
          instructions: reply
"""


def test_instruction_blocks_are_parsed(ws) -> None:
    body = "Intro.\n\n## instructions.plan\nPlan it.\n\n## instructions.reply\nSay it."
    ws.skill("skills/planner", extra=PLANNER, body=body)
    skills, issues = load(ws, "skills")
    assert issues.issues == []
    planner = skills["planner"]
    assert dict(planner.blocks) == {"general": "Intro.", "plan": "Plan it.", "reply": "Say it."}
    assert planner.spec.settings.strategy.mode is StrategyMode.DETERMINISTIC


def test_missing_instruction_block_is_an_error(ws) -> None:
    ws.skill("skills/planner", extra=PLANNER, body="## instructions.plan\nPlan it.\n")
    skills, issues = load(ws, "skills")
    assert skills == {}
    (issue,) = issues.errors
    assert "['reply'] are referenced but not defined" in issue.message
    assert "## instructions.<key>" in issue.message


def test_missing_instruction_block_uses_the_general_block_with_a_warning(ws) -> None:
    ws.skill("skills/planner", extra=PLANNER, body="Be brief.\n\n## instructions.plan\nPlan it.\n")
    skills, issues = load(ws, "skills")
    assert list(skills) == ["planner"]
    (warning,) = issues.issues
    assert (warning.severity, warning.field, warning.line) == ("warning", "metadata.genworker.strategy", 7)
    assert "no '## instructions.reply' block: the general block is used" in warning.message


UPSTREAM_LEGACY = """---
skill_id: lookup
scope: Worker
priority: 3
gate_level: auto
default_skill: true
strategy: {mode: Hybrid, workflow: [{step: find, type: manual}]}
keywords: [find, {keyword: search, weight: 0}]
recommended_tools: [web_search]
---
Look things up.
"""


def test_upstream_legacy_skill_loads_with_warnings_for_what_it_reads_loosely(ws) -> None:
    (ws.root / "skills/lookup").mkdir(parents=True)
    (ws.root / "skills/lookup/SKILL.md").write_text(UPSTREAM_LEGACY, encoding="utf-8")
    skills, issues = load(ws, "skills")
    settings = skills["lookup"].spec.settings
    assert (settings.scope, settings.priority, settings.gate_level, settings.default_skill) == (
        SkillLevel.WORKER,
        3,
        "auto",
        True,
    )
    assert settings.strategy.mode is StrategyMode.HYBRID
    assert [(s.id, s.kind, s.instructions) for s in settings.strategy.steps] == [("find", "autonomous", "general")]
    assert settings.recommended_tools == ("web_search",)
    assert dict(skills["lookup"].blocks) == {"general": "Look things up."}
    assert [(i.severity, i.field, i.line) for i in issues.issues if i.severity != "note"] == [
        ("warning", "description", 2),
        ("warning", "strategy.workflow[0].type", 7),
        ("warning", "keywords[1]", 8),
    ]


def test_declared_scope_mismatch_warns(ws) -> None:
    ws.skill("skills/helper", extra="metadata:\n  genworker:\n    scope: system\n")
    skills, issues = load(ws, "skills", SkillLevel.TENANT)
    assert list(skills) == ["helper"]
    (warning,) = issues.warnings
    assert warning.field == "metadata.genworker.scope"
    assert "declares scope 'system' but lives at 'tenant' level" in warning.message


def test_broken_system_skill_is_reported_and_others_still_load(ws) -> None:
    ws.tenant()
    ws.persona()
    ws.skill("system/skills/good")
    ws.skill("system/skills/bad", name="'bad/name'")
    registry = ws.registry()
    worker = registry.worker("acme", "w")
    assert worker is not None
    assert list(worker.skills) == ["good"]
    assert [i.file for i in registry.issues() if i.severity == "error"] == ["system/skills/bad/SKILL.md"]


def test_broken_worker_skill_fails_only_that_worker(ws) -> None:
    ws.tenant()
    ws.persona(worker_id="w")
    ws.persona(worker_id="other")
    ws.skill("tenants/acme/workers/w/skills/bad", name="'no/pe'")
    registry = ws.registry()
    assert [w.worker_id for w in registry.workers()] == ["other"]
    assert [f.worker_id for f in registry.failures()] == ["w"]
