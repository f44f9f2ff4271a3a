import datetime as dt

import pytest
from pydantic import ValidationError

from genworker.workspace.models import Contact, Rule, Tenant


def test_tenant_defaults() -> None:
    tenant = Tenant(tenant_id="acme")
    assert tenant.name == "acme"  # the id when absent
    assert tenant.trust_level == 0  # BASIC when absent, as upstream (was 1)
    assert Tenant.model_validate({"tenant_id": "acme", "trust_level": "2"}).trust_level == 2
    assert tenant.tool_policy.denied_tools == ()
    assert tenant.mcp_remote_allowed is False
    assert tenant.default_worker is None
    assert dict(tenant.credentials) == {}


@pytest.mark.parametrize("level", [-1, 4, "high"])
def test_trust_level_range(level: object) -> None:
    with pytest.raises(ValidationError, match="trust_level"):
        Tenant.model_validate({"tenant_id": "acme", "trust_level": level})


@pytest.mark.parametrize("field", ["tenant_id", "default_worker"])
def test_tenant_ids_are_safe(field: str) -> None:
    with pytest.raises(ValidationError, match="not a valid id"):
        Tenant.model_validate({"tenant_id": "acme", field: "a/b"})


def test_tenant_credentials_are_never_printed() -> None:
    tenant = Tenant.model_validate(
        {"tenant_id": "acme", "credentials": {"openai": "sk-TOPSECRET", "nested": {"keys": ["sk-OTHER"]}}}
    )
    for shown in (repr(tenant), str(tenant), tenant.model_dump_json(), str(tenant.model_dump())):
        assert "TOPSECRET" not in shown
        assert "OTHER" not in shown
    assert tenant.credentials["openai"].get_secret_value() == "sk-TOPSECRET"
    assert tenant.credentials["nested"]["keys"][0].get_secret_value() == "sk-OTHER"


def test_contact_defaults_and_bounds() -> None:
    contact = Contact(person_id="sam", name="Sam", identities=[{"channel": "email", "handle": "s@x"}], tags="vip")
    assert contact.tags == ("vip",)
    assert contact.identities[0].display_name == ""
    assert contact.confidence == 1.0
    for bad in ({"confidence": 1.5}, {"service_count": -1}, {"person_id": "../sam"}):
        with pytest.raises(ValidationError):
            Contact.model_validate({"person_id": "sam", "name": "Sam", **bad})


def test_rule_defaults_and_dates() -> None:
    rule = Rule(rule_id="be-kind", kind="directive", text="Be kind.")
    assert (rule.status, rule.priority, rule.confidence) == ("active", 0, 1.0)
    assert "text" not in rule.model_dump()
    assert Rule(rule_id="r", kind="learned", created_at="2024-05-01").created_at == dt.date(2024, 5, 1)
    stamped = Rule(rule_id="r", kind="learned", created_at="2024-05-01T10:00:00+00:00").created_at
    assert isinstance(stamped, dt.datetime)
    with pytest.raises(ValidationError):
        Rule(rule_id="r", kind="rumour")
    with pytest.raises(ValidationError):
        Rule(rule_id="r", kind="learned", confidence=2)


def test_rule_timestamps_without_zone_are_utc() -> None:
    for value in ("2024-05-01T10:00:00", dt.datetime(2024, 5, 1, 10)):  # noqa: DTZ001 - a naive YAML timestamp
        stamped = Rule(rule_id="r", kind="learned", created_at=value).created_at
        assert stamped == dt.datetime(2024, 5, 1, 10, tzinfo=dt.UTC)
