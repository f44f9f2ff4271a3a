import textwrap
from pathlib import Path

import pytest

from genworker.workspace.documents import read_json, read_markdown, validate
from genworker.workspace.errors import Issue, WorkspaceError
from genworker.workspace.models import DutySpec, PersonaSpec, SkillSpec, Tenant


def write(tmp_path: Path, body: str, name: str = "doc.md") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body).lstrip("\n"), encoding="utf-8")
    return path


def error_of(call: object) -> Issue:
    with pytest.raises(WorkspaceError) as caught:
        call()  # type: ignore[operator]
    (issue,) = caught.value.issues
    assert issue.severity == "error"
    return issue


def test_front_matter_and_body(tmp_path: Path) -> None:
    doc = read_markdown(write(tmp_path, "---\na: 1\nb: [x, y]\n---\n\n# Title\nText.\n"), "doc.md")
    assert dict(doc.data) == {"a": 1, "b": ["x", "y"]}
    assert doc.body == "# Title\nText."
    assert doc.rel == "doc.md"


def test_empty_front_matter_is_an_empty_mapping(tmp_path: Path) -> None:
    doc = read_markdown(write(tmp_path, "---\n---\nBody"), "doc.md")
    assert dict(doc.data) == {}
    assert doc.body == "Body"


def test_missing_front_matter(tmp_path: Path) -> None:
    path = write(tmp_path, "Just text.\n")
    issue = error_of(lambda: read_markdown(path, "workers/w/PERSONA.md"))
    assert issue.file == "workers/w/PERSONA.md"
    assert "missing YAML front matter" in issue.message
    doc = read_markdown(path, "r.md", require_front_matter=False)
    assert (dict(doc.data), doc.body) == ({}, "Just text.")


@pytest.mark.parametrize(
    ("body", "line"),
    [
        ("---\na: 1\nb: : :\n---\n", 3),
        ("---\n\n\na: 1\nb: : :\n---\n", 5),
        ("---\na: 1\nlist:\n  - x\n - y\n---\n", 5),
        ("---\na: 'unclosed\nb: 2\n---\n", 2),  # where the quote opens, not the end of the front matter
        ("---\nidentity: !!python/object:os.system {}\n---\n", 2),
    ],
)
def test_malformed_yaml_names_file_and_line(tmp_path: Path, body: str, line: int) -> None:
    path = write(tmp_path, body)
    issue = error_of(lambda: read_markdown(path, "duties/bad.md"))
    assert issue.file == "duties/bad.md"
    assert issue.line == line
    assert issue.message.startswith("invalid YAML")
    assert str(issue).startswith(f"duties/bad.md:{line}: error:")


@pytest.mark.parametrize(("body", "kind"), [("---\n- a\n- b\n---\n", "list"), ("---\njust text\n---\n", "str")])
def test_front_matter_must_be_a_mapping(tmp_path: Path, body: str, kind: str) -> None:
    path = write(tmp_path, body)
    issue = error_of(lambda: read_markdown(path, "doc.md"))
    assert issue.message == f"front matter must be a mapping, got {kind}"


def test_recursive_yaml_anchors_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "---\nduty_id: d\ntitle: t\nduty_defaults: &a {x: *a}\n---\nBody\n")
    issue = error_of(lambda: read_markdown(path, "doc.md"))
    assert "recursive" in issue.message


def test_shared_yaml_anchors_are_fine(tmp_path: Path) -> None:
    doc = read_markdown(write(tmp_path, "---\nbase: &b {x: 1}\none: *b\ntwo: *b\n---\n"), "doc.md")
    assert doc.data["one"] == doc.data["two"] == {"x": 1}


def test_not_utf8_and_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "latin.md"
    path.write_bytes(b"---\nname: caf\xe9\n---\n")
    assert "not UTF-8" in error_of(lambda: read_markdown(path, "latin.md")).message
    missing = tmp_path / "gone.md"
    assert "cannot read" in error_of(lambda: read_markdown(missing, "gone.md")).message


def test_read_json(tmp_path: Path) -> None:
    doc = read_json(write(tmp_path, '{"tenant_id": "acme"}', "TENANT.json"), "TENANT.json")
    assert dict(doc.data) == {"tenant_id": "acme"}


def test_invalid_json_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, '{\n  "tenant_id": "acme",\n  "name": "Acme"\n  "trust_level": 2\n}\n', "TENANT.json")
    issue = error_of(lambda: read_json(path, "tenants/acme/TENANT.json"))
    assert issue.file == "tenants/acme/TENANT.json"
    assert issue.line == 4
    assert issue.message.startswith("invalid JSON")


def test_json_must_be_an_object(tmp_path: Path) -> None:
    path = write(tmp_path, "[1, 2]", "TENANT.json")
    assert error_of(lambda: read_json(path, "TENANT.json")).message == "must be a JSON object, got list"


def validation_errors(tmp_path: Path, model: type, body: str) -> list[Issue]:
    doc = read_markdown(write(tmp_path, body), "doc.md")
    with pytest.raises(WorkspaceError) as caught:
        validate(model, doc)
    return list(caught.value.issues)


PERSONA_BAD_ID = """\
---
identity:
  name: Iris
  worker_id: [1, 2]
---
"""


def test_wrong_type_reports_field_path_and_line(tmp_path: Path) -> None:
    (issue,) = validation_errors(tmp_path, PersonaSpec, PERSONA_BAD_ID)
    assert issue.field == "identity.worker_id"
    assert issue.line == 4
    assert "valid string" in issue.message
    assert str(issue) == "doc.md:4: error: identity.worker_id: Input should be a valid string"


DUTY_BAD_CRON = """\
---
duty_id: d
title: t
action: go
triggers:
  - id: ok
    type: manual
  - id: nightly
    type: schedule
    cron: every night
---
"""


def test_trigger_field_path_and_line(tmp_path: Path) -> None:
    (issue,) = validation_errors(tmp_path, DutySpec, DUTY_BAD_CRON)
    assert issue.field == "triggers[1].cron"
    assert issue.line == 10
    assert "needs 5 fields" in issue.message


def test_a_cron_value_out_of_range_is_reported_at_its_line(tmp_path: Path) -> None:
    body = DUTY_BAD_CRON.replace("cron: every night", 'cron: "30 25 * * 1-5"')
    (issue,) = validation_errors(tmp_path, DutySpec, body)
    assert (issue.field, issue.line) == ("triggers[1].cron", 10)
    assert "the last value (25) is higher than the maximum value (23)" in issue.message


def test_trigger_model_error_points_at_the_trigger_not_the_union_tag(tmp_path: Path) -> None:
    body = "---\nduty_id: d\ntitle: t\naction: go\ntriggers:\n  - id: s\n    type: schedule\n---\n"
    (issue,) = validation_errors(tmp_path, DutySpec, body)
    assert issue.field == "triggers[0]"
    assert issue.line == 6
    assert "exactly one of 'cron' or 'interval'" in issue.message


def test_missing_field_is_named(tmp_path: Path) -> None:
    issues = validation_errors(tmp_path, PersonaSpec, "---\nidentity:\n  name: Iris\n---\n")
    assert [(i.field, i.message, i.line) for i in issues] == [("identity.worker_id", "field required", 3)]


def test_every_invalid_field_is_reported(tmp_path: Path) -> None:
    body = "---\nidentity:\n  name: [x]\n  worker_id: ../w\nmode: boss\n---\n"
    fields = {i.field: i.line for i in validation_errors(tmp_path, PersonaSpec, body)}
    assert fields == {"identity.name": 3, "identity.worker_id": 4, "mode": 5}


def test_legacy_alias_field_path_uses_the_key_in_the_file(tmp_path: Path) -> None:
    body = "---\nidentity: {name: I, worker_id: i}\nmonitor_configs:\n  - {source_type: git, poll_interval: x}\n---\n"
    (issue,) = validation_errors(tmp_path, PersonaSpec, body)
    assert (issue.field, issue.line) == ("monitor_configs[0].poll_interval", 4)


PERSONA_WITH_TYPOS = """\
---
identity:
  name: Iris
  worker_id: iris
  nickname: Iri
favourite_colour: blue
monitor_configs:
  - source_type: webhook
    polll_interval: 5m
---
Body.
"""


def test_unknown_fields_are_warnings_with_path_and_line(tmp_path: Path) -> None:
    doc = read_markdown(write(tmp_path, PERSONA_WITH_TYPOS), "PERSONA.md")
    spec, warnings = validate(PersonaSpec, doc)
    assert spec.identity.worker_id == "iris"
    assert {(w.field, w.line) for w in warnings} == {
        ("favourite_colour", 6),
        ("identity.nickname", 5),
        ("monitor_configs[0].polll_interval", 9),
    }
    assert all(w.severity == "warning" and w.message == "unknown field (ignored)" for w in warnings)


def test_open_extras_are_not_warned_about(tmp_path: Path) -> None:
    body = """\
    ---
    name: planner
    description: Plans.
    metadata:
      author: someone
      genworker:
        strategy:
          mode: langgraph
          graph:
            entry: plan
            nodes:
              - name: plan
                kind: llm
                instructions: plan
                temperature: 0.2
    ---
    """
    doc = read_markdown(write(tmp_path, body), "SKILL.md")
    _, warnings = validate(SkillSpec, doc)
    assert warnings == []


def test_json_field_errors_have_lines(tmp_path: Path) -> None:
    path = write(tmp_path, '{\n  "tenant_id": "acme",\n  "trust_level": "high",\n  "extra": 1\n}', "TENANT.json")
    doc = read_json(path, "TENANT.json")
    with pytest.raises(WorkspaceError) as caught:
        validate(Tenant, doc)
    error, unknown = caught.value.issues  # unknown fields are reported even when the file has errors
    assert (error.severity, error.field, error.line) == ("error", "trust_level", 3)
    assert (unknown.severity, unknown.field, unknown.line) == ("warning", "extra", 4)
    path.write_text('{\n  "tenant_id": "acme",\n  "extra": 1\n}', encoding="utf-8")
    _, warnings = validate(Tenant, read_json(path, "TENANT.json"))
    assert [(w.field, w.line) for w in warnings] == [("extra", 3)]


def test_workspace_error_message_lists_every_issue() -> None:
    error = WorkspaceError([Issue("error", "a.md", "bad", "x", 3), Issue("warning", "b.md", "odd")])
    assert str(error) == "a.md:3: error: x: bad; b.md: warning: odd"
    assert Issue("error", "a.md", "bad").as_dict() == {
        "severity": "error",
        "file": "a.md",
        "field": "",
        "line": None,
        "message": "bad",
    }


def test_byte_order_mark_and_crlf_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "PERSONA.md"
    path.write_bytes("\ufeff---\r\nidentity:\r\n  name: Iris\r\n  worker_id: [1]\r\n---\r\nBody\r\n".encode())
    doc = read_markdown(path, "PERSONA.md")
    assert doc.body == "Body"
    with pytest.raises(WorkspaceError) as caught:
        validate(PersonaSpec, doc)
    assert [(i.field, i.line) for i in caught.value.issues] == [("identity.worker_id", 4)]
    json_path = tmp_path / "TENANT.json"
    json_path.write_bytes('\ufeff{"tenant_id": "acme"}'.encode())
    assert read_json(json_path, "TENANT.json").data["tenant_id"] == "acme"


def test_unclosed_front_matter(tmp_path: Path) -> None:
    path = write(tmp_path, "---\nname: x\nBody without a closing line.\n")
    issue = error_of(lambda: read_markdown(path, "doc.md"))
    assert (issue.message, issue.line) == ("front matter is not closed: end it with a '---' line", 1)


def test_absurdly_nested_yaml_is_an_error_not_a_crash(tmp_path: Path) -> None:
    path = write(tmp_path, "---\na: " + "[" * 5000 + "]" * 5000 + "\n---\n")
    issue = error_of(lambda: read_markdown(path, "doc.md"))
    assert "nest" in issue.message  # the C loader says "exceeded maximum nesting depth"


def test_a_condition_rule_that_does_not_read_names_its_field_and_line(tmp_path: Path) -> None:
    body = (
        "---\nduty_id: d\ntitle: t\naction: go\ntriggers:\n  - id: drop\n    type: condition\n"
        "    metric: signups.daily\n    rule: value < 0.8 * avg_7d\n---\n"
    )
    (issue,) = validation_errors(tmp_path, DutySpec, body)
    assert issue.field == "triggers[0].rule" and issue.line == 9
    assert "'[value] <op> <number | true | false>'" in issue.message
