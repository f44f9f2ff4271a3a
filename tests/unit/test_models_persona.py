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
    assert spec.heartbeat.goal_isolated_deviation_threshold == 0.3


@pytest.mark.parametrize("missing", ["name", "worker_id"])
def test_identity_fields_are_required(missing: str) -> None:
    identity = {k: v for k, v in IDENTITY.items() if k != missing}
    with pytest.raises(ValidationError) as caught:
        PersonaSpec.model_validate({"identity": identity})
    assert caught.value.errors()[0]["loc"] == ("identity", missing)


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
    with pytest.raises(ValidationError, match="mode"):
        persona(mode="boss")


def test_sensor_config_key_and_poll_interval() -> None:
    sensor = SensorConfig(source_type="email", poll_interval="2m")
    assert sensor.key == "email"
    assert sensor.poll_interval == 120
    assert SensorConfig(source_type="email", sensor_id="inbox").key == "inbox"
    with pytest.raises(ValidationError):
        SensorConfig(source_type="fax")


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
        ("sensor_configs", [{"source_type": "webhook"}] * 2, "sensor_configs: duplicate id 'webhook'"),
        ("channels", [{"type": "slack"}, {"type": "slack"}], "channels: duplicate id 'slack'"),
    ],
)
def test_ids_within_persona_are_unique(field: str, items: list[Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        persona(**{field: items})


def test_channels_with_distinct_adapter_ids_may_share_a_type() -> None:
    spec = persona(channels=[{"type": "slack", "adapter_id": "a"}, {"type": "slack", "adapter_id": "b"}])
    assert [c.adapter_id for c in spec.channels] == ["a", "b"]


def test_contact_sync_bounds() -> None:
    sync = {"sources": [{"platform": "slack", "page_size": 0}]}
    with pytest.raises(ValidationError, match="page_size"):
        persona(contact_settings={"sync": sync})


def test_unknown_keys_are_kept_as_extras_not_errors() -> None:
    spec = persona(favourite_colour="blue", identity={**IDENTITY, "shoe_size": 42})
    assert spec.model_extra == {"favourite_colour": "blue"}
    assert spec.identity.model_extra == {"shoe_size": 42}
