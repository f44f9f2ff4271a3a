"""What upstream genworker accepts but we keep refusing (or flag), because it is unsafe or wrong.

The list is "Keep refused" in the workspace-compatibility notes of issue #22: accepting upstream's
format must not bring these in. Each case starts from a small workspace that loads cleanly and
changes one thing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from genworker.workspace.errors import Issue
from genworker.workspace.registry import WorkspaceRegistry

ROOT = Path(__file__).resolve().parents[2]

PERSONA = """---
identity:
  worker_id: {worker_id}
  name: Test worker
{extra}---
You help.
"""


def _workspace(tmp_path: Path, *, worker_id: str = "w", persona_extra: str = "") -> Path:
    root = tmp_path / "workspace"
    worker = root / "tenants" / "t" / "workers" / "w"
    worker.mkdir(parents=True)
    (root / "tenants" / "t" / "TENANT.json").write_text(
        json.dumps({"tenant_id": "t", "trust_level": 2}), encoding="utf-8"
    )
    (worker / "PERSONA.md").write_text(PERSONA.format(worker_id=worker_id, extra=persona_extra), encoding="utf-8")
    return root


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _issues(root: Path) -> list[Issue]:
    registry = WorkspaceRegistry(root, product_skills=ROOT / "skills")
    registry.load_all()
    return registry.issues()


def _errors(root: Path, file_part: str) -> list[Issue]:
    return [i for i in _issues(root) if i.severity == "error" and file_part in i.file]


def test_the_base_workspace_loads_cleanly(tmp_path: Path) -> None:
    assert _issues(_workspace(tmp_path)) == []


def test_skills_dir_outside_the_worker_folder(tmp_path: Path) -> None:
    root = _workspace(tmp_path, persona_extra="skills_dir: ../../elsewhere\n")
    assert any(i.field == "skills_dir" for i in _errors(root, "PERSONA.md"))


@pytest.mark.parametrize(
    ("rel", "text", "field"),
    [
        ("duties/x.md", "---\nduty_id: ../../tmp/x\ntitle: X\n---\nDo it.\n", "duty_id"),
        ("rules/learned/x.md", "---\nrule_id: ../x\n---\n# A rule\n", "rule_id"),
        ("contacts/configured/x.md", "---\nperson_id: ../x\nname: X\n---\n", "person_id"),
    ],
)
def test_ids_that_would_be_paths(tmp_path: Path, rel: str, text: str, field: str) -> None:
    root = _workspace(tmp_path)
    _write(root / "tenants" / "t" / "workers" / "w" / rel, text)
    assert any(i.field == field for i in _errors(root, rel)), rel


def test_langgraph_module_outside_the_skill_folder(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    _write(
        root / "tenants" / "t" / "skills" / "graph-skill" / "SKILL.md",
        "---\nname: graph-skill\ndescription: A graph.\nmetadata:\n  genworker:\n    strategy:\n"
        "      mode: langgraph\n      graph:\n        module: workspace.tenants.other.skills.x.graph\n"
        "        factory: build_graph\n---\n## instructions.general\nGo.\n",
    )
    errors = _errors(root, "graph-skill/SKILL.md")
    assert any(i.field.startswith("metadata.genworker.strategy.graph") for i in errors), errors


def test_numeric_cron_weekdays_load_with_a_warning(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    _write(
        root / "tenants" / "t" / "workers" / "w" / "duties" / "d.md",
        "---\nduty_id: d\ntitle: D\ntriggers:\n  - {id: s, type: schedule, cron: '0 9 * * 1-5'}\n---\nDo it.\n",
    )
    issues = [i for i in _issues(root) if i.file.endswith("duties/d.md")]
    assert [i.severity for i in issues] == ["warning"]
    assert "cron" in issues[0].field


def test_callback_secrets_in_persona_features_are_flagged(tmp_path: Path) -> None:
    root = _workspace(
        tmp_path,
        persona_extra="channels:\n  - type: feishu\n    chat_ids: [oc_x]\n    features:\n"
        "      encrypt_key: not-a-real-key\n",
    )
    flagged = [i for i in _issues(root) if i.file.endswith("PERSONA.md") and "CHANNEL_CREDENTIALS.json" in i.message]
    assert flagged and "features.encrypt_key" in flagged[0].field


def test_slack_without_signing_secret(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    _write(
        root / "tenants" / "t" / "workers" / "w" / "CHANNEL_CREDENTIALS.json",
        json.dumps({"slack": {"bot_token": "xoxb-fixture-placeholder"}}),
    )
    assert any(i.field == "slack.signing_secret" for i in _errors(root, "CHANNEL_CREDENTIALS.json"))


def test_service_is_not_anonymous_by_default(tmp_path: Path) -> None:
    root = _workspace(tmp_path, persona_extra="mode: service\nservice:\n  session_ttl: 600\n")
    registry = WorkspaceRegistry(root, product_skills=ROOT / "skills")
    registry.load_all()
    worker = registry.worker("t", "w")
    assert worker is not None
    assert worker.persona.service.anonymous_allowed is False


def test_worker_id_must_equal_its_folder(tmp_path: Path) -> None:
    root = _workspace(tmp_path, worker_id="someone-else")
    assert any(i.field == "identity.worker_id" for i in _errors(root, "PERSONA.md"))


def test_invalid_routing_regex_is_refused_at_load(tmp_path: Path) -> None:
    root = _workspace(
        tmp_path,
        persona_extra="sensor_configs:\n  - source_type: webhook\n    routing_rules:\n"
        "      - {field: subject, pattern: '(', match: regex, route: task}\n",
    )
    assert any("routing_rules" in i.field for i in _errors(root, "PERSONA.md"))


def test_invalid_routing_regex_in_upstream_spelling_is_refused_at_load(tmp_path: Path) -> None:
    root = _workspace(
        tmp_path,
        persona_extra="sensor_configs:\n  - source_type: webhook\n    routing_rules:\n"
        "      - {field: subject, pattern: '(', match_mode: regex, route: reactive}\n",
    )
    assert any("routing_rules" in i.field for i in _errors(root, "PERSONA.md"))
