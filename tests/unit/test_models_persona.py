from typing import Any

import pytest
from pydantic import ValidationError

from genworker.workspace.models import PersonaSpec, WorkerMode
from genworker.workspace.models.persona import ALIASES, Mount, RoutingRule, SensorConfig

IDENTITY = {"name": "Iris", "worker_id": "iris"}


def persona(**fields: Any) -> PersonaSpec:
    return PersonaSpec.model_validate({"identity": IDENTITY, **fields})


def test_minimal_persona_defaults() -> None:
    spec = persona()
    assert spec.identity.worker_id == "iris"
    assert spec.identity.version == "1.0"
    assert spec.identity.personality.traits == ()
    assert spec.mode is WorkerMode.PERSONAL
    assert spec.tool_policy.mode == "blacklist"
    assert spec.skills_dir == "skills"
    assert spec.default_skill is None
    assert spec.sensor_configs == spec.mounts == spec.channels == spec.contacts == ()
    settings = spec.contact_settings
    assert (settings.workspace_root, settings.configured_dir, settings.discovered_dir) == (
        "contacts",
        "configured",
        "discovered",
    )
    assert settings.index_file == "index.jsonl"
    assert settings.sync.enabled is False
    assert spec.service.session_ttl == 1800
    # upstream's defaults
    assert settings.context_limit == 8
    assert spec.service.max_concurrent_sessions == 50
    assert spec.heartbeat.goal_isolated_deviation_threshold == 0.9
    assert spec.heartbeat.goal_task_actions == ("escalate", "recover", "investigate")
    assert spec.heartbeat.goal_isolated_actions == ("replan", "deep_review")


def test_worker_id_is_required_and_name_falls_back_to_it() -> None:
    with pytest.raises(ValidationError) as caught:
        PersonaSpec.model_validate({"identity": {"name": "Iris"}})
    assert caught.value.errors()[0]["loc"] == ("identity", "worker_id")
    identity = PersonaSpec.model_validate({"identity": {"worker_id": "iris"}}).identity
    assert (identity.name, identity.display_name) == ("", "iris")


def test_identity_is_required() -> None:
    with pytest.raises(ValidationError, match="identity"):
        PersonaSpec.model_validate({})


def test_worker_id_must_be_a_safe_id() -> None:
    with pytest.raises(ValidationError, match="not a valid id"):
        PersonaSpec.model_validate({"identity": {"name": "x", "worker_id": "../x"}})


ALIAS_VALUES = {
    "monitor_configs": [{"source_type": "webhook"}],
    "configured_contacts": [{"person_id": "sam", "name": "Sam"}],
    "contacts_config": {"workspace_root": "people"},
}


@pytest.mark.parametrize(("alias", "canonical"), sorted(ALIASES.items()))
def test_legacy_alias_sets_the_canonical_field(alias: str, canonical: str) -> None:
    by_alias = persona(**{alias: ALIAS_VALUES[alias]})
    by_name = persona(**{canonical: ALIAS_VALUES[alias]})
    assert getattr(by_alias, canonical) == getattr(by_name, canonical)
    assert getattr(by_alias, canonical) != getattr(persona(), canonical)
    assert by_alias.model_extra == {}
    assert canonical in by_alias.model_dump()
    assert alias not in by_alias.model_dump()


@pytest.mark.parametrize(("alias", "canonical"), sorted(ALIASES.items()))
def test_alias_and_canonical_together_is_an_error(alias: str, canonical: str) -> None:
    value = ALIAS_VALUES[alias]
    with pytest.raises(ValidationError, match=f"both '{canonical}' and its alias '{alias}' are set"):
        persona(**{alias: value, canonical: value})


def test_aliases_cover_the_legacy_names() -> None:
    assert ALIASES == {
        "monitor_configs": "sensor_configs",
        "configured_contacts": "contacts",
        "contacts_config": "contact_settings",
    }


@pytest.mark.parametrize("field", ["skills_dir"])
@pytest.mark.parametrize("value", ["../other", "/abs", ""])
def test_skills_dir_must_stay_inside(field: str, value: str) -> None:
    with pytest.raises(ValidationError, match="relative path"):
        persona(**{field: value})


@pytest.mark.parametrize("field", ["workspace_root", "configured_dir", "discovered_dir", "index_file"])
def test_contact_settings_paths_must_stay_inside(field: str) -> None:
    with pytest.raises(ValidationError, match="relative path"):
        persona(contact_settings={field: "../../etc"})


def test_mode_must_be_known() -> None:
    assert persona(mode="service").mode is WorkerMode.SERVICE
    assert persona(mode="Team_Member").mode is WorkerMode.TEAM_MEMBER  # upstream lower-cases it
    with pytest.raises(ValidationError, match="mode"):
        persona(mode="boss")


def test_tool_policy_mode_any_case_and_unknown_reads_as_blacklist() -> None:
    assert persona(tool_policy={"mode": "WhiteList"}).tool_policy.mode == "whitelist"
    assert persona(tool_policy={"mode": "Greylist"}).tool_policy.mode == "blacklist"  # a warning in check


def test_sensor_config_key_and_poll_interval() -> None:
    sensor = SensorConfig(source_type="email", poll_interval="2m")
    assert sensor.key == "email"
    assert sensor.poll_interval == 120
    assert sensor.require_approval is True  # upstream's default
    assert SensorConfig(source_type="email", sensor_id="inbox").key == "inbox"
    assert SensorConfig(source_type="Feishu_Doc").source_type == "feishu_folder"
    assert SensorConfig(source_type="fax").source_type == "fax"  # loads; check warns it will not run
    assert SensorConfig(source_type="webhook", delivery_mode="").delivery_mode is None
    assert SensorConfig(source_type="webhook", delivery_mode="Push").delivery_mode == "push"


def test_two_sensors_of_one_type_without_ids_the_later_wins() -> None:
    spec = persona(sensor_configs=[{"source_type": "email", "poll_interval": 60}, {"source_type": "email"}])
    assert [(s.key, s.poll_interval) for s in spec.sensor_configs] == [("email", None)]


def test_routing_rule_in_upstream_spelling() -> None:
    rules = [
        RoutingRule.model_validate({"field": "f", "pattern": "p", "match_mode": m})
        for m in ("contains", "Regex", "equals", "startswith")
    ]
    assert [(r.match, r.ignore_case, r.route) for r in rules] == [
        ("contains", False, "reactive"),
        ("regex", True, "reactive"),  # upstream compares regexes without case
        ("exact", False, "reactive"),
        ("prefix", False, "reactive"),
    ]
    assert RoutingRule.model_validate({}).field == ""  # never matches
    with pytest.raises(ValidationError, match="match_mode 'fuzzy' must be one of"):
        RoutingRule.model_validate({"field": "f", "pattern": "p", "match_mode": "fuzzy"})
    with pytest.raises(ValidationError, match="not both"):
        RoutingRule.model_validate({"field": "f", "pattern": "p", "match_mode": "regex", "match": "exact"})
    with pytest.raises(ValidationError, match="not a valid regular expression"):
        RoutingRule.model_validate({"field": "f", "pattern": "(", "match_mode": "regex"})


def test_routing_rule_regex_must_compile() -> None:
    assert RoutingRule(field="subject", pattern=r"(?i)urgent", match="regex", route="u").pattern
    # a non-regex rule may contain any text
    assert RoutingRule(field="subject", pattern="(", match="contains", route="u").pattern == "("
    with pytest.raises(ValidationError, match="not a valid regular expression"):
        RoutingRule(field="subject", pattern="(", match="regex", route="u")


def test_mount_path_is_derived_from_mount_id() -> None:
    mount = Mount(mount_id="docs", type="feishu", mount_path="../../elsewhere")
    assert mount.mount_path == "mounts/docs/"
    assert mount.permissions == ("read",)
    with pytest.raises(ValidationError):
        Mount(mount_id="docs", type="feishu", permissions=["execute"])


@pytest.mark.parametrize(
    ("field", "items", "message"),
    [
        ("mounts", [{"mount_id": "m", "type": "feishu"}] * 2, "mounts: duplicate id 'm'"),
        ("contacts", [{"person_id": "p", "name": "P"}] * 2, "contacts: duplicate id 'p'"),
        ("sensor_configs", [{"source_type": "webhook", "sensor_id": "w"}] * 2, "sensor_configs: duplicate id 'w'"),
        ("channels", [{"type": "slack", "adapter_id": "s"}] * 2, "channels: duplicate id 's'"),
    ],
)
def test_ids_within_persona_are_unique(field: str, items: list[Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        persona(**{field: items})


def test_channels_with_distinct_adapter_ids_may_share_a_type() -> None:
    spec = persona(channels=[{"type": "slack", "adapter_id": "a"}, {"type": "slack", "adapter_id": "b"}])
    assert [c.adapter_id for c in spec.channels] == ["a", "b"]


def test_the_same_channel_type_twice_gets_numbered_keys() -> None:
    spec = persona(channels=[{"type": "slack"}, {"type": "feishu"}, {"type": "slack"}, {"type": "slack"}])
    assert [c.adapter_id for c in spec.channels] == [None, None, "slack-2", "slack-3"]


def test_channel_in_upstream_spelling() -> None:
    spec = persona(
        channels=[
            {
                "channel_type": "Feishu",
                "connection_mode": "WebSocket",
                "reply_mode": "Streaming",
                "chat_ids": [" oc_1 ", ""],
            },
            {"type": "dingtalk", "connection_mode": "stream", "chat_ids": [1234567890]},
            {"type": "slack", "connection_mode": "socket"},
            {"type": "email", "connection_mode": "poll", "features": {"folders": "INBOX, Reports"}},
        ]
    )
    assert [(c.type, c.connection_mode, c.reply_mode) for c in spec.channels] == [
        ("feishu", "websocket", "streaming"),
        ("dingtalk", "stream", "complete"),
        ("slack", "socket_mode", "complete"),
        ("email", "polling", "complete"),
    ]
    assert spec.channels[0].chat_ids == ("oc_1",)
    assert spec.channels[1].chat_ids == ("1234567890",)
    assert spec.channels[3].features["folders"] == ("INBOX", "Reports")
    with pytest.raises(ValidationError, match="connection_mode"):
        persona(channels=[{"type": "slack", "connection_mode": "carrier_pigeon"}])


def test_callback_secrets_in_features_are_dropped() -> None:
    features = {"encrypt_key": "k", "verificationToken": "t", "mention_required": True}
    (channel,) = persona(channels=[{"type": "feishu", "chat_ids": ["oc_1"], "features": features}]).channels
    assert dict(channel.features) == {"mention_required": True}  # the check warns where they belong


def test_contacts_without_person_id_are_numbered_as_upstream() -> None:
    spec = persona(contacts=[{"person_id": "ops", "name": "O"}, {"name": "Robin"}])
    assert [c.person_id for c in spec.contacts] == ["ops", "configured-2"]


def test_service_and_heartbeat_in_upstream_spelling() -> None:
    spec = persona(
        service={"knowledge_sources": [{"type": "folder"}, "wiki://faq"], "escalation": {"target_worker": ""}},
        heartbeat={"goal_task_actions": ["Escalate"], "goal_isolated_actions": []},
        contact_settings={"workspace_root": "workspace"},
        triggers=["daily digest", {"action": "x"}],
    )
    assert [dict(k) for k in spec.service.knowledge_sources] == [{"type": "folder"}, {"value": "wiki://faq"}]
    assert spec.service.escalation.target_worker is None
    assert spec.heartbeat.goal_task_actions == ("escalate",)
    assert spec.heartbeat.goal_isolated_actions == ("replan", "deep_review")
    assert spec.contact_settings.workspace_root == "contacts"
    assert len(spec.triggers) == 2  # kept, never used (as upstream)


def test_contact_sync_bounds() -> None:
    sync = {"sources": [{"platform": "slack", "page_size": 0}]}
    with pytest.raises(ValidationError, match="page_size"):
        persona(contact_settings={"sync": sync})


def test_unknown_keys_are_kept_as_extras_not_errors() -> None:
    spec = persona(favourite_colour="blue", identity={**IDENTITY, "shoe_size": 42})
    assert spec.model_extra == {"favourite_colour": "blue"}
    assert spec.identity.model_extra == {"shoe_size": 42}
