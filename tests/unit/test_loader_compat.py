"""The loader reads workspaces written for upstream genworker (issue #22): TENANT.json defaults,
folders that are not workers, every error reported at once, credentials as upstream writes them,
runtime state left in definition folders, and the notes `genworker check --explain` shows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from genworker.channels.outbound.http import DeliveryError
from genworker.channels.outbound.wecom import WeComClient
from genworker.delivery.messages import OutboundMessage, Target
from genworker.workspace.models.credentials import WeComCredentials
from genworker.workspace.registry import WorkspaceRegistry
from genworker.workspace.watcher import ReloadTarget, classify


def registry_of(ws) -> WorkspaceRegistry:
    registry = WorkspaceRegistry(ws.root, product_skills=None)
    registry.load_all()
    return registry


# -- TENANT.json ---------------------------------------------------------------------------------


def test_tenant_id_defaults_to_the_folder_and_is_noted(ws) -> None:
    ws.write("tenants/acme/TENANT.json", '{"trust_level": "2"}')
    ws.persona()
    registry = registry_of(ws)
    state = registry.tenant("acme")
    assert state is not None
    assert (state.tenant.tenant_id, state.tenant.name, state.tenant.trust_level) == ("acme", "acme", 2)
    assert registry.issues() == []
    (note,) = [n for n in registry.notes() if n.file == "tenants/acme/TENANT.json"]
    assert (note.severity, note.field, note.message) == (
        "note",
        "tenant_id",
        "mapped: (absent) -> 'acme', the folder name",
    )


def test_a_tenant_id_that_is_set_must_still_equal_the_folder(ws) -> None:
    ws.write("tenants/acme/TENANT.json", '{"tenant_id": "globex"}')
    registry = registry_of(ws)
    assert [(i.field, i.severity) for i in registry.issues()] == [("tenant_id", "error")]


def test_trust_level_defaults_to_basic(ws) -> None:
    ws.tenant()
    ws.persona()
    state = registry_of(ws).tenant("acme")
    assert state is not None and state.tenant.trust_level == 0


def test_a_default_worker_without_a_folder_is_ignored_with_a_warning(ws) -> None:
    ws.tenant(default_worker="retired-bot")
    ws.persona()
    registry = registry_of(ws)
    assert [(i.severity, i.field) for i in registry.issues()] == [("warning", "default_worker")]
    assert registry.failures() == []
    worker = registry.default_worker("acme")  # as if unset: the tenant's only worker
    assert worker is not None and worker.worker_id == "w"
    assert registry.reload_tenant("acme").ok


# -- worker folders -------------------------------------------------------------------------------


def test_a_folder_without_persona_is_skipped_with_a_warning(ws) -> None:
    ws.tenant()
    ws.persona()
    ws.write("tenants/acme/workers/notes/README.md", "Not a worker.\n")
    registry = registry_of(ws)
    state = registry.tenant("acme")
    assert state is not None
    assert list(state.workers) == ["w"] and dict(state.failures) == {}
    assert [(i.severity, i.file, i.message) for i in registry.issues()] == [
        ("warning", "tenants/acme/workers/notes", "no PERSONA.md: not a worker (skipped)")
    ]
    outcome = registry.reload_worker("acme", "notes")
    assert outcome.ok and registry.failures() == []
    ws.persona(worker_id="notes")  # it becomes a worker
    assert registry.reload_worker("acme", "notes").ok
    assert registry.worker("acme", "notes") is not None


def test_a_loaded_worker_whose_persona_disappears_keeps_its_last_good_version(ws) -> None:
    ws.tenant()
    persona = ws.persona()
    registry = registry_of(ws)
    persona.unlink()
    outcome = registry.reload_worker("acme", "w")
    assert not outcome.ok and outcome.kept_last_good
    assert registry.worker("acme", "w") is not None


def test_an_invalid_persona_does_not_hide_the_errors_of_other_files(ws) -> None:
    ws.tenant()
    ws.persona(extra="mode: nonsense\ncolour: red\n")
    ws.duty("triage", "escalation: nope\n")
    ws.write("tenants/acme/workers/w/goals/g.md", "---\ngoal_id: g\ntitle: G\npriority: urgent\n---\n")
    ws.write("tenants/acme/workers/w/contacts/configured/x.md", "---\nperson_id: ../x\nname: X\n---\n")
    ws.write("tenants/acme/workers/w/CHANNEL_CREDENTIALS.json", '{"slack": {"bot_token": "xoxb-1"}}')
    registry = registry_of(ws)
    found = {(i.file.split("/w/")[-1], i.severity, i.field) for i in registry.issues()}
    assert found == {
        ("PERSONA.md", "error", "mode"),
        ("PERSONA.md", "warning", "colour"),  # reported although the file has errors
        ("duties/triage.md", "error", "escalation"),
        ("goals/g.md", "error", "priority"),
        ("contacts/configured/x.md", "error", "person_id"),
        ("CHANNEL_CREDENTIALS.json", "error", "slack.signing_secret"),
    }


def test_a_persona_that_does_not_parse_still_lets_the_other_files_be_checked(ws) -> None:
    ws.tenant()
    ws.write("tenants/acme/workers/w/PERSONA.md", "---\nidentity: [\n---\n")
    ws.duty("triage", "escalation: nope\n")
    files = {i.file.split("/w/")[-1] for i in registry_of(ws).issues() if i.severity == "error"}
    assert files == {"PERSONA.md", "duties/triage.md"}


def test_goal_links_to_unknown_duties_stay_errors(ws) -> None:
    ws.tenant()
    ws.persona()
    ws.write("tenants/acme/workers/w/goals/g.md", "---\ngoal_id: g\ntitle: G\nduty_refs: [ghost]\n---\n")
    (issue,) = registry_of(ws).issues()
    assert (issue.severity, issue.field) == ("error", "duty_refs")


def test_a_dangling_default_skill_names_the_fallback(ws) -> None:
    ws.tenant()
    ws.persona(extra="default_skill: general-query\n")
    registry = WorkspaceRegistry(ws.root, product_skills=Path(__file__).resolve().parents[2] / "skills")
    registry.load_all()
    (issue,) = registry.issues()
    assert (issue.severity, issue.field, issue.line) == ("warning", "default_skill", 5)
    assert issue.message == (
        "default_skill 'general-query' is not a skill of this worker: "
        "requests that match no skill use skills marked default_skill (general-chat)"
    )


# -- CHANNEL_CREDENTIALS.json ---------------------------------------------------------------------

UPSTREAM_CREDENTIALS = {
    "wecom": {"corpid": "ww-corp", "corpsecret": "s", "agent_id": 1000002},
    "dingtalk": {"app_key": "k", "app_secret": "s", "robot_code": 42},
    "slack": {"bot_token": "xoxb-1", "signing_secret": "s", "team_id": "T0123"},
}


def test_credentials_as_upstream_writes_them(ws) -> None:
    ws.tenant()
    ws.persona()
    ws.write("tenants/acme/workers/w/CHANNEL_CREDENTIALS.json", json.dumps(UPSTREAM_CREDENTIALS))
    registry = registry_of(ws)
    assert registry.issues() == []
    creds = registry.worker("acme", "w").credentials  # type: ignore[union-attr]
    assert creds is not None and creds.wecom is not None and creds.dingtalk is not None and creds.slack is not None
    assert creds.wecom.agent_id is not None and creds.wecom.agent_id.get_secret_value() == "1000002"
    assert creds.dingtalk.robot_code is not None and creds.dingtalk.robot_code.get_secret_value() == "42"
    assert creds.slack.team_id == "T0123"


def test_a_wecom_channel_without_agent_id_loads_with_a_warning(ws) -> None:
    ws.tenant()
    ws.persona(extra="channels:\n  - type: wecom\n    chat_ids: [zhangsan]\n")
    ws.write(
        "tenants/acme/workers/w/CHANNEL_CREDENTIALS.json",
        json.dumps({"wecom": {"corpid": "ww-corp", "corpsecret": "s"}}),
    )
    (issue,) = registry_of(ws).issues()
    assert (issue.severity, issue.field) == ("warning", "wecom.agent_id")
    assert "not direct messages" in issue.message


def test_slack_without_signing_secret_says_why(ws) -> None:
    ws.tenant()
    ws.persona()
    ws.write("tenants/acme/workers/w/CHANNEL_CREDENTIALS.json", json.dumps({"slack": {"bot_token": "xoxb-1"}}))
    (issue,) = registry_of(ws).issues()
    assert (issue.severity, issue.field) == ("error", "slack.signing_secret")
    assert issue.message.startswith("field required: Slack's webhooks cannot be verified without it")


@pytest.mark.anyio
async def test_a_wecom_direct_message_without_agent_id_fails_before_any_request() -> None:
    client = WeComClient(WeComCredentials(corpid="c", corpsecret="s"), http=None, base_url="http://127.0.0.1:9")  # type: ignore[arg-type]
    with pytest.raises(DeliveryError, match="no agent_id") as caught:
        await client.send(Target(chat_id="zhangsan"), OutboundMessage("hi"))
    assert caught.value.attempts == 0


# -- hot reload ignores upstream's runtime state ----------------------------------------------------


def test_upstream_execution_logs_under_duties_do_not_reload(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    w = root / "tenants" / "t" / "workers" / "w"
    assert classify(root, w / "duties" / "daily" / "execution_log.jsonl") is None
    assert classify(root, w / "duties" / "daily") is None
    assert classify(root, w / "duties" / "daily.md") == ReloadTarget("worker", "t", "w")
    assert classify(root, w / "duties") == ReloadTarget("worker", "t", "w")
