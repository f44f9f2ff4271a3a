"""mcp_servers and tool_effect_overrides in PERSONA.md and TENANT.json."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from genworker.workspace.models import PersonaSpec, Tenant

IDENTITY = {"name": "W", "worker_id": "w"}


def test_persona_mcp_servers_and_effect_overrides() -> None:
    persona = PersonaSpec.model_validate(
        {
            "identity": IDENTITY,
            "mcp_servers": [
                {"name": "time", "command": "mcp-server-time", "tool_effects": {"get_*": {"effect": "read"}}}
            ],
            "tool_effect_overrides": {"time__get_current_time": {"effect": "read", "risk_level": "low"}},
        }
    )
    assert persona.mcp_servers[0].name == "time" and persona.mcp_servers[0].transport == "stdio"
    assert persona.tool_effect_overrides["time__get_current_time"]["effect"] == "read"


def test_bad_mcp_server_names_the_field() -> None:
    with pytest.raises(ValidationError) as caught:
        PersonaSpec.model_validate({"identity": IDENTITY, "mcp_servers": [{"name": "x", "comand": "oops"}]})
    assert any(e["loc"][:2] == ("mcp_servers", 0) for e in caught.value.errors())


def test_bad_effect_override_names_the_tool_and_field() -> None:
    with pytest.raises(ValidationError, match=r"tool_effect_overrides\n.*shell\.effect: Input should be .read."):
        Tenant.model_validate({"tenant_id": "t", "tool_effect_overrides": {"shell": {"effect": "destroy"}}})
