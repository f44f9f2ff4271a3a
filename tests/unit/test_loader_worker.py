import json

import pytest

from genworker.workspace.errors import WorkspaceError
from genworker.workspace.models import Goal, Tenant
from genworker.workspace.scan import Scope
from genworker.workspace.worker_loader import load_worker


def test_minimal_worker_loads(ws) -> None:
    ws.persona(body="# Iris\nBe brief.")
    worker, warnings = ws.load_worker()
    assert warnings == []
    assert worker.key == ("acme", "w")
    assert worker.persona.identity.name == "W"
    assert worker.instructions == "# Iris\nBe brief."
    assert dict(worker.files) == {"persona": "tenants/acme/workers/w/PERSONA.md"}
    assert worker.duties == worker.goals == worker.skills == worker.contacts == {}
    assert worker.rules == ()
    assert worker.credentials is None


def test_missing_persona(ws) -> None:
    ws.worker_dir().mkdir(parents=True)
    (issue,) = ws.worker_errors()
    assert issue.file == "tenants/acme/workers/w/PERSONA.md"
    assert issue.message == "missing PERSONA.md"


def test_persona_without_front_matter(ws) -> None:
    ws.write("tenants/acme/workers/w/PERSONA.md", "You are Iris.\n")
    (issue,) = ws.worker_errors()
    assert "missing YAML front matter" in issue.message


def test_worker_id_must_equal_folder(ws) -> None:
    ws.write("tenants/acme/workers/w/PERSONA.md", "---\nidentity:\n  name: X\n  worker_id: other\n---\nBody\n")
    (issue,) = ws.worker_errors()
    assert issue.file == "tenants/acme/workers/w/PERSONA.md"
    assert issue.field == "identity.worker_id"
    assert issue.line == 4
    assert "'other' must equal the folder name 'w'" in issue.message


def test_unknown_persona_fields_warn_and_the_worker_loads(ws) -> None:
    ws.persona(extra="favourite_colour: blue\n")
    worker, warnings = ws.load_worker()
    assert [(w.field, w.line, w.severity) for w in warnings] == [("favourite_colour", 5, "warning")]
    assert worker.warnings == tuple(warnings)


def test_all_errors_of_a_worker_are_reported_together(ws) -> None:
    ws.persona()
    ws.duty("one", "triggers:\n  - id: t\n    type: schedule\n")
    ws.duty("two", "status: [sleeping]\n")
    ws.write("tenants/acme/workers/w/goals/g.md", "---\ngoal_id: g\npriority: urgent\n---\n")
    errors = ws.worker_errors()
    assert {(e.file.rsplit("/", 1)[-1], e.field) for e in errors} == {
        ("one.md", "triggers[0]"),
        ("two.md", "status"),
        ("g.md", "priority"),
    }


# -- duties -----------------------------------------------------------------------


def test_duties_load_with_the_body_as_action(ws) -> None:
    ws.persona()
    ws.duty("triage", "triggers:\n  - id: every\n    type: schedule\n    interval: 30m\n", body="Sort the inbox.")
    worker, _ = ws.load_worker()
    duty = worker.duties["triage"]
    assert duty.action == "Sort the inbox."
    assert duty.triggers[0].interval == 1800
    assert worker.files["duty:triage"] == "tenants/acme/workers/w/duties/triage.md"


def test_duty_without_body_is_an_error(ws) -> None:
    ws.persona()
    ws.duty("idle", body="")
    (issue,) = ws.worker_errors()
    assert issue.file.endswith("duties/idle.md")
    assert "no action" in issue.message


def test_duplicate_duty_ids_across_files_name_both_files(ws) -> None:
    """The first file by name wins, as upstream loads them; the later one is a warning."""
    ws.persona()
    ws.duty("triage", file="a-triage.md")
    ws.duty("triage", "title: Second\n", file="b-triage.md")
    worker, warnings = ws.load_worker()
    assert worker.duties["triage"].title == "triage duty"
    assert worker.files["duty:triage"] == "tenants/acme/workers/w/duties/a-triage.md"
    (issue,) = warnings
    assert (issue.severity, issue.file, issue.field) == (
        "warning",
        "tenants/acme/workers/w/duties/b-triage.md",
        "duty_id",
    )
    assert "duplicate duty_id 'triage'" in issue.message
    assert "tenants/acme/workers/w/duties/a-triage.md" in issue.message


def test_non_markdown_files_in_duties_are_ignored(ws) -> None:
    ws.persona()
    ws.duty("triage")
    ws.write("tenants/acme/workers/w/duties/notes.txt", "not a duty")
    ws.write("tenants/acme/workers/w/duties/.draft.md", "---\nbroken: [\n---\n")
    worker, _ = ws.load_worker()
    assert list(worker.duties) == ["triage"]


DEFAULTS = """\
---
status: deprecated
execution_log_retention: 7d
quality_criteria: [from-defaults-file]
execution_policy:
  default: quick
  overrides:
    manual: deep
posture:
  default: propose
  overrides:
    manual: draft
---
This body is ignored.
"""


def test_defaults_file_is_never_a_duty(ws) -> None:
    ws.persona()
    ws.write("tenants/acme/workers/w/duties/_defaults.md", DEFAULTS)
    worker, warnings = ws.load_worker()
    assert worker.duties == {}
    assert warnings == []


def test_defaults_merge_order(ws) -> None:
    """_defaults.md < the duty's own duty_defaults < the duty's own fields, nested maps merged."""
    ws.persona()
    ws.write("tenants/acme/workers/w/duties/_defaults.md", DEFAULTS)
    ws.duty(
        "plain",
        "triggers:\n  - id: manual\n    type: manual\n",
    )
    ws.duty(
        "custom",
        """\
        status: active
        triggers:
          - id: manual
            type: manual
          - id: nightly
            type: schedule
            cron: "0 2 * * *"
        duty_defaults:
          execution_log_retention: 14d
          quality_criteria: [from-duty-defaults]
          execution_policy:
            overrides:
              nightly: deep
          posture:
            overrides:
              nightly: propose
        execution_policy:
          default: standard
        posture:
          default: execute
        quality_criteria: [own]
        """,
    )
    worker, _ = ws.load_worker()
    plain = worker.duties["plain"]
    assert plain.status == "deprecated"
    assert plain.execution_log_retention == 7 * 86400
    assert plain.execution_policy.default == "quick"
    assert dict(plain.execution_policy.overrides) == {"manual": "deep"}
    assert plain.posture.default == "propose"
    assert dict(plain.posture.overrides) == {"manual": "draft"}

    custom = worker.duties["custom"]
    assert custom.status == "active"  # own field
    assert custom.execution_log_retention == 14 * 86400  # duty_defaults beats _defaults.md
    assert custom.quality_criteria == ("own",)  # own field beats both
    assert custom.execution_policy.default == "standard"  # own nested key
    assert dict(custom.execution_policy.overrides) == {"manual": "deep", "nightly": "deep"}  # merged
    assert custom.posture.default == "execute"
    assert dict(custom.posture.overrides) == {"manual": "draft", "nightly": "propose"}
    assert custom.duty_defaults["execution_log_retention"] == "14d"
    assert custom.duty_defaults["status"] == "deprecated"


def test_unknown_keys_in_defaults_file_warn(ws) -> None:
    ws.persona()
    ws.write("tenants/acme/workers/w/duties/_defaults.md", "---\nstatus: active\ntitle: Nope\ncolour: red\n---\n")
    ws.duty("triage")
    worker, warnings = ws.load_worker()
    assert worker.duties["triage"].title == "triage duty"
    assert sorted((w.field, w.line) for w in warnings) == [("colour", 4), ("title", 3)]
    assert all(w.file.endswith("duties/_defaults.md") and w.severity == "warning" for w in warnings)


def test_broken_defaults_file_is_an_error(ws) -> None:
    ws.persona()
    ws.write("tenants/acme/workers/w/duties/_defaults.md", "---\nstatus: [\n---\n")
    ws.duty("triage")
    (issue,) = ws.worker_errors()
    assert issue.file.endswith("duties/_defaults.md")
    assert issue.line is not None


def test_duty_defaults_must_be_a_mapping(ws) -> None:
    ws.persona()
    ws.duty("triage", "duty_defaults: [a]\n")
    (issue,) = ws.worker_errors()
    assert (issue.field, issue.message, issue.line) == ("duty_defaults", "must be a mapping", 4)


def test_unknown_keys_in_a_duty_own_duty_defaults_warn_like_defaults_md(ws) -> None:
    ws.persona()
    ws.duty("triage", "duty_defaults:\n  execution_log_retention: 7d\n  colour: red\n")
    worker, warnings = ws.load_worker()
    assert worker.duties["triage"].execution_log_retention == 7 * 86400
    assert [(w.field, w.message, w.line) for w in warnings] == [
        ("duty_defaults.colour", "not a field duties can default (ignored)", 6)
    ]


# -- goals, skills references -------------------------------------------------------


GOAL = """\
---
goal_id: launch
title: Launch
primary_duty_id: triage
milestones:
  - id: m1
    title: Prepare
    tasks:
      - id: a
        title: A
      - id: b
        title: B
        blocked_by: [a]
---
Why we launch.
"""


def test_goals_load(ws) -> None:
    ws.persona()
    ws.duty("triage")
    ws.write("tenants/acme/workers/w/goals/launch.md", GOAL)
    worker, _ = ws.load_worker()
    goal = worker.goals["launch"]
    assert isinstance(goal, Goal)
    assert goal.body == "Why we launch."
    assert [t.id for t in goal.tasks()] == ["a", "b"]
    assert worker.files["goal:launch"] == "tenants/acme/workers/w/goals/launch.md"


def test_duplicate_goal_ids(ws) -> None:
    ws.persona()
    ws.duty("triage")
    ws.write("tenants/acme/workers/w/goals/launch.md", GOAL)
    ws.write("tenants/acme/workers/w/goals/launch-copy.md", GOAL)
    worker, (issue,) = ws.load_worker()
    assert list(worker.goals) == ["launch"]
    assert (issue.severity, issue.file) == ("warning", "tenants/acme/workers/w/goals/launch.md")  # name order
    assert issue.message == (
        "duplicate goal_id 'launch', already defined in tenants/acme/workers/w/goals/launch-copy.md "
        "(this file is ignored)"
    )


def test_goal_referencing_unknown_duty(ws) -> None:
    ws.persona()
    ws.write("tenants/acme/workers/w/goals/launch.md", GOAL)
    (issue,) = ws.worker_errors()
    assert issue.file.endswith("goals/launch.md")
    assert issue.message == "references unknown duties ['triage']"


def test_goal_with_bad_blocked_by_reports_the_goal_file(ws) -> None:
    ws.persona()
    ws.duty("triage")
    ws.write("tenants/acme/workers/w/goals/launch.md", GOAL.replace("blocked_by: [a]", "blocked_by: [zz]"))
    (issue,) = ws.worker_errors()
    assert issue.file.endswith("goals/launch.md")
    assert "unknown tasks ['zz']" in issue.message


def test_unknown_skill_references_are_warnings(ws) -> None:
    """Upstream looks skills up at run time; here an unknown name falls back to matching."""
    ws.persona(extra="default_skill: ghost\n")
    ws.duty("triage", "skill_id: nope\npreferred_skill_ids: [helper, missing]\n")
    ws.skill("tenants/acme/workers/w/skills/helper")
    _, issues = ws.load_worker()
    warnings = {(e.file.rsplit("/", 1)[-1], e.field): e.message for e in issues if e.severity == "warning"}
    assert warnings == {
        ("PERSONA.md", "default_skill"): (
            "default_skill 'ghost' is not a skill of this worker: requests that match no skill use no skill"
        ),
        ("triage.md", "skill_id"): "'nope' is not a skill of this worker: the duty runs with the skill that matches",
        ("triage.md", "preferred_skill_ids"): "['missing'] are not skills of this worker (ignored)",
    }


@pytest.mark.parametrize("trust_level", [0, 1, 2])
def test_code_pre_scripts_below_trust_2_warn_that_every_run_fails(ws, trust_level: int) -> None:
    """Inline and path pre_scripts run code (trust 2, as bash); a tool call follows the tool's own rule.
    The run would fail with pre_script_failed: `genworker check` says so before the first run."""
    ws.persona()
    ws.duty("inline", "pre_script: {source: 'print(1)'}\n")
    ws.duty("script", "pre_script: {path: scripts/collect.sh, language: bash}\n")
    ws.duty("lookup", "pre_script: {tool_name: web_search}\n")
    ws.write("tenants/acme/workers/w/goals/g.md", "---\ngoal_id: g\ndefault_pre_script: {source: 'print(2)'}\n---\n")
    scope = Scope(ws.root.resolve())
    tenant = Tenant(tenant_id="acme", trust_level=trust_level)
    _, issues = load_worker(scope, tenant, ws.worker_dir(), {})
    warned = {(e.file.rsplit("/", 1)[-1], e.field): e.message for e in issues if "trust" in e.message}
    if trust_level == 2:
        assert warned == {}
        return
    run_fails = (
        f"{{kind}} pre-scripts run code, which needs trust level 2 (tenant 'acme' has {trust_level}): every run "
        "{whose} fails with pre_script_failed until TENANT.json sets trust_level 2"
    )
    assert warned == {
        ("inline.md", "pre_script"): run_fails.format(kind="inline", whose="of this duty"),
        ("script.md", "pre_script"): run_fails.format(kind="path", whose="of this duty"),
        ("g.md", "default_pre_script"): run_fails.format(kind="inline", whose="this goal starts"),
    }


def test_custom_skills_dir(ws) -> None:
    ws.persona(extra="skills_dir: abilities\ndefault_skill: helper\n")
    ws.skill("tenants/acme/workers/w/abilities/helper")
    worker, _ = ws.load_worker()
    assert list(worker.skills) == ["helper"]


# -- rules ------------------------------------------------------------------------


def test_rules_with_and_without_front_matter(ws) -> None:
    ws.persona()
    ws.write("tenants/acme/workers/w/rules/directives/be-brief.md", "Keep replies short.\n")
    ws.write("tenants/acme/workers/w/rules/directives/escalate.md", "---\npriority: 5\ntitle: Escalate\n---\nAsk.\n")
    ws.write("tenants/acme/workers/w/rules/learned/dana-mornings.md", "---\nconfidence: 0.7\n---\nNo calls before 9.\n")
    worker, _ = ws.load_worker()
    assert [(r.rule_id, r.kind, r.priority) for r in worker.rules] == [
        ("escalate", "directive", 5),
        ("be-brief", "directive", 0),
        ("dana-mornings", "learned", 0),
    ]
    assert worker.rules[1].text == "Keep replies short."


def test_duplicate_rule_ids_across_kinds(ws) -> None:
    ws.persona()
    ws.write("tenants/acme/workers/w/rules/directives/a.md", "A\n")
    ws.write("tenants/acme/workers/w/rules/learned/b.md", "---\nrule_id: a\n---\nB\n")
    (issue,) = ws.worker_errors()
    assert "duplicate rule_id 'a'" in issue.message
    assert "rules/directives/a.md" in issue.message


def test_rule_file_name_must_be_a_valid_id(ws) -> None:
    ws.persona()
    ws.write("tenants/acme/workers/w/rules/directives/-bad.md", "A\n")
    (issue,) = ws.worker_errors()
    assert issue.field == "rule_id"


# -- contacts ---------------------------------------------------------------------


def test_contacts_from_persona_and_folders(ws) -> None:
    ws.persona(extra="configured_contacts:\n  - person_id: sam\n    name: Sam\n")
    ws.write("tenants/acme/workers/w/contacts/configured/dana.md", "---\nperson_id: dana\nname: Dana\n---\nCEO.\n")
    ws.write("tenants/acme/workers/w/contacts/discovered/lee.md", "---\nperson_id: lee\nname: Lee\n---\n")
    ws.write("tenants/acme/workers/w/contacts/index.jsonl", '{"person_id": "dana"}\n\n{"person_id": "lee"}\n')
    worker, _ = ws.load_worker()
    assert sorted(worker.contacts) == ["dana", "lee", "sam"]
    assert worker.contacts["dana"].notes == "CEO."


def test_contacts_config_alias_moves_the_folder(ws) -> None:
    ws.persona(extra="contacts_config:\n  workspace_root: people\n")
    ws.write("tenants/acme/workers/w/people/configured/dana.md", "---\nperson_id: dana\nname: Dana\n---\n")
    worker, _ = ws.load_worker()
    assert list(worker.contacts) == ["dana"]


def test_a_persona_contact_and_its_copy_in_configured_are_one_contact(ws) -> None:
    """Upstream writes each PERSONA.md contact to contacts/configured/ at every start: PERSONA.md wins."""
    ws.persona(extra="contacts:\n  - person_id: dana\n    name: Dana\n")
    ws.write("tenants/acme/workers/w/contacts/configured/dana.md", "---\nperson_id: dana\nname: Dana Old\n---\n")
    worker, warnings = ws.load_worker()
    assert warnings == []
    assert worker.contacts["dana"].name == "Dana"
    assert worker.files["person:dana"] == "tenants/acme/workers/w/PERSONA.md"
    (note,) = [n for n in worker.notes if n.file.endswith("dana.md")]
    assert (note.field, note.message) == ("person_id", "ignored: the same contact is in PERSONA.md, which is used")


def test_duplicate_contact_between_configured_and_discovered(ws) -> None:
    ws.persona(extra="contacts:\n  - person_id: dana\n    name: Dana\n")
    ws.write("tenants/acme/workers/w/contacts/discovered/dana.md", "---\nperson_id: dana\nname: Dana\n---\n")
    (issue,) = ws.worker_errors()
    assert "duplicate person_id 'dana'" in issue.message
    assert "PERSONA.md" in issue.message


def test_bad_contact_index_lines(ws) -> None:
    ws.persona()
    ws.write("tenants/acme/workers/w/contacts/index.jsonl", '{"person_id": "a"}\nnot json\n{"name": "x"}\n')
    errors = ws.worker_errors()
    assert [(e.line, e.field) for e in errors] == [(2, ""), (3, "person_id")]
    assert errors[0].message.startswith("invalid JSON line")


def test_contact_index_that_is_not_utf8_is_an_error_not_a_crash(ws) -> None:
    ws.persona()
    index = ws.worker_dir() / "contacts" / "index.jsonl"
    index.parent.mkdir(parents=True)
    index.write_bytes(b'{"person_id": "caf\xe9"}\n')
    (issue,) = ws.worker_errors()
    assert issue.file.endswith("contacts/index.jsonl")
    assert issue.line == 1
    assert issue.message == "not UTF-8 text: byte 0xe9 at line 1, column 19 (invalid continuation byte)"


# -- channel credentials ------------------------------------------------------------


CREDENTIALS = {
    "slack": {"bot_token": "xoxb-TOPSECRET-1", "signing_secret": "TOPSECRET-2", "stray_key": "TOPSECRET-3"},
    "feishu": {"app_id": "cli_TOPSECRET-4", "app_secret": "TOPSECRET-5"},
    "carrier_pigeon": {"coop": "TOPSECRET-6"},
}


def write_credentials(ws, data: object) -> None:
    ws.write("tenants/acme/workers/w/CHANNEL_CREDENTIALS.json", json.dumps(data, indent=2))


def test_credentials_load_and_never_print(ws) -> None:
    ws.persona()
    write_credentials(ws, CREDENTIALS)
    worker, warnings = ws.load_worker()
    creds = worker.credentials
    assert creds is not None
    assert creds.platforms() == ["feishu", "slack"]
    assert creds.slack is not None
    assert creds.slack.bot_token.get_secret_value() == "xoxb-TOPSECRET-1"
    shown = [repr(worker), str(worker), repr(creds), str(creds), creds.model_dump_json(), str(creds.model_dump())]
    shown += [str(w) for w in warnings] + [repr(w) for w in warnings]
    for text in shown:
        assert "TOPSECRET" not in text


def test_unknown_credential_keys_warn_by_name_only(ws) -> None:
    ws.persona()
    write_credentials(ws, CREDENTIALS)
    _, warnings = ws.load_worker()
    assert sorted((w.field, w.message) for w in warnings) == [
        ("carrier_pigeon", "unknown platform (ignored)"),
        ("slack.stray_key", "unknown credential key (ignored)"),
    ]


@pytest.mark.parametrize(
    "data",
    [
        {"slack": {"bot_token": ["TOPSECRET-1"], "signing_secret": "TOPSECRET-2"}},
        {"slack": {"bot_token": 987654321}},  # a number is text; the missing signing_secret is the error
        {"slack": "TOPSECRET-1"},
        {"email": {"worker_address": "a@b", "worker_smtp_port": "TOPSECRET-7"}},
    ],
)
def test_credential_errors_never_contain_secrets(ws, data: dict) -> None:
    ws.persona()
    write_credentials(ws, data)
    with pytest.raises(WorkspaceError) as caught:
        ws.load_worker()
    assert caught.value.issues
    for text in (str(caught.value), repr(caught.value.issues)):
        assert "TOPSECRET" not in text
        assert "987654321" not in text
    assert all(i.file.endswith("CHANNEL_CREDENTIALS.json") for i in caught.value.issues)


def test_credentials_schema_version_is_checked_not_warned(ws) -> None:
    ws.persona()
    write_credentials(ws, {"schema_version": 1, **CREDENTIALS})
    worker, warnings = ws.load_worker()
    assert worker.credentials is not None and worker.credentials.platforms() == ["feishu", "slack"]
    assert not [w for w in warnings if w.field == "schema_version"]
    write_credentials(ws, {"schema_version": 7, **CREDENTIALS})
    (issue,) = ws.worker_errors()
    assert issue.field == "schema_version" and "7" in issue.message


def test_invalid_credentials_json_names_the_line(ws) -> None:
    ws.persona()
    ws.write("tenants/acme/workers/w/CHANNEL_CREDENTIALS.json", '{\n  "slack": {\n    "bot_token": "TOPSECRET"\n  \n')
    (issue,) = ws.worker_errors()
    assert issue.line is not None
    assert issue.message.startswith("invalid JSON")
    assert "TOPSECRET" not in str(issue)


def test_unknown_fields_in_duties_and_goals_warn_and_load(ws) -> None:
    ws.persona()
    ws.duty("triage", "tittle: typo\ntriggers:\n  - id: m\n    type: manual\n    colour: red\n")
    ws.write("tenants/acme/workers/w/goals/g.md", "---\ngoal_id: g\ntitle: G\nowner: dana\n---\n")
    worker, warnings = ws.load_worker()
    assert list(worker.duties) == ["triage"]
    assert list(worker.goals) == ["g"]
    assert sorted((w.file.rsplit("/", 1)[-1], w.field, w.line) for w in warnings) == [
        ("g.md", "owner", 4),
        ("triage.md", "tittle", 4),
        ("triage.md", "triggers[0].colour", 8),
    ]


def test_bad_timezone_in_a_duty_is_an_error_not_a_crash(ws) -> None:
    ws.persona()
    ws.duty("triage", "triggers:\n  - id: s\n    type: schedule\n    interval: 1h\n    timezone: America\n")
    (issue,) = ws.worker_errors()
    assert (issue.field, issue.line) == ("triggers[0].timezone", 8)
    assert "unknown IANA time zone 'America'" in issue.message
