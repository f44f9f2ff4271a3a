"""`mcp_servers` entries: transports, names, secrets, timeouts and the errors for bad ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from genworker.tools.base import Effect, RiskLevel
from genworker.workspace.errors import MCPConfigError
from genworker.workspace.models.mcp import MCPServerConfig, parse_mcp_servers

STDIO = {"name": "time", "command": "mcp-server-time", "args": ["--local-timezone", "UTC"]}
HTTP = {"name": "search", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer s3cret"}}


def errors(raw: list[Any], base_dir: Path | None = None) -> list[str]:
    with pytest.raises(MCPConfigError) as caught:
        parse_mcp_servers(raw, "PERSONA.md", base_dir=base_dir)
    assert caught.value.source == "PERSONA.md"
    assert str(caught.value).startswith("PERSONA.md: invalid mcp_servers: ")
    return caught.value.issues


def test_transport_is_inferred_from_command_or_url() -> None:
    stdio, http = parse_mcp_servers([STDIO, HTTP], "PERSONA.md")
    assert (stdio.transport, stdio.remote, stdio.args) == ("stdio", False, ("--local-timezone", "UTC"))
    assert (http.transport, http.remote) == ("http", True)
    assert (stdio.start_timeout, stdio.call_timeout, stdio.enabled, stdio.trust_annotations) == (30, 60, True, False)


def test_missing_or_empty_list_means_no_servers() -> None:
    assert parse_mcp_servers(None, "PERSONA.md") == ()
    assert parse_mcp_servers([], "PERSONA.md") == ()


def test_header_and_env_values_are_secrets() -> None:
    config = MCPServerConfig.model_validate({**STDIO, "env": {"API_KEY": "k-123"}})
    http = MCPServerConfig.model_validate(HTTP)
    assert http.headers["Authorization"].get_secret_value() == "Bearer s3cret"
    assert config.env["API_KEY"].get_secret_value() == "k-123"
    for shown in (repr(http), str(http), repr(config), http.model_dump_json(), config.model_dump_json()):
        assert "s3cret" not in shown and "k-123" not in shown


def test_validation_errors_never_echo_secret_values() -> None:
    issues = errors([{**HTTP, "headers": {"Bad Header": "Bearer s3cret"}}])
    assert issues == ["mcp_servers[0] ('search'): invalid header name(s): 'Bad Header'"]
    assert "s3cret" not in " ".join(issues)


@pytest.mark.parametrize("name", ["a b", "x.y", "double__under", "trailing_", "-lead", "", "n" * 33])
def test_server_names_are_letters_digits_dash_underscore(name: str) -> None:
    (issue,) = errors([{**STDIO, "name": name}])
    assert "field 'name'" in issue and "letters, digits" in issue


def test_transport_fields_must_match() -> None:
    assert errors([{"name": "x"}]) == ["mcp_servers[0] ('x'): field 'transport': Field required"]
    assert errors([{"name": "x", "transport": "stdio"}]) == ["mcp_servers[0] ('x'): a stdio server needs a 'command'"]
    assert errors([{"name": "x", "url": "ftp://host/mcp"}]) == [
        "mcp_servers[0] ('x'): an http server needs a 'url' starting with http:// or https://"
    ]
    assert errors([{**STDIO, "transport": "stdio", "url": "https://h/mcp"}]) == [
        "mcp_servers[0] ('time'): url not allowed with transport 'stdio'"
    ]
    assert errors([{**HTTP, "transport": "http", "command": "x", "env": {"A": "1"}}]) == [
        "mcp_servers[0] ('search'): command, env not allowed with transport 'http'"
    ]


def test_unknown_keys_and_bad_values_are_named() -> None:
    issues = errors([{**STDIO, "comand": "typo"}, {**HTTP, "call_timeout": 0}, "not a mapping"])
    assert issues == [
        "mcp_servers[0] ('time'): field 'comand': Extra inputs are not permitted",
        "mcp_servers[1] ('search'): field 'call_timeout': Input should be greater than 0",
        "mcp_servers[2]: Input should be a valid dictionary or instance of MCPServerConfig",
    ]


def test_not_a_list_and_duplicate_names() -> None:
    assert errors({"name": "x"}) == ["mcp_servers must be a list of server entries"]  # type: ignore[arg-type]
    assert errors([STDIO, STDIO]) == ["mcp_servers[1] ('time'): duplicate server name 'time'"]


def test_timeouts_accept_seconds_or_short_durations() -> None:
    config = MCPServerConfig.model_validate({**STDIO, "start_timeout": "500ms", "call_timeout": "2m"})
    assert (config.start_timeout, config.call_timeout) == (0.5, 120.0)


def test_relative_cwd_resolves_against_the_base_folder(tmp_path: Path) -> None:
    (config,) = parse_mcp_servers([{**STDIO, "cwd": "tools"}], "PERSONA.md", base_dir=tmp_path)
    assert config.cwd == str(tmp_path / "tools")
    assert errors([{**STDIO, "cwd": "tools"}]) == [
        "mcp_servers[0] ('time'): field 'cwd': must be absolute here, got 'tools'"
    ]


def test_tool_effects_declare_effect_with_a_default_risk() -> None:
    config = MCPServerConfig.model_validate(
        {
            **STDIO,
            "tool_effects": {
                "get_current_time": {"effect": "read"},
                "convert_*": {"effect": "external", "risk_level": "medium", "requires_approval": True},
            },
        }
    )
    read, external = config.tool_effects["get_current_time"], config.tool_effects["convert_*"]
    assert (read.effect, read.risk, read.requires_approval) == (Effect.READ, RiskLevel.LOW, False)
    assert (external.effect, external.risk, external.requires_approval) == (Effect.EXTERNAL, RiskLevel.MEDIUM, True)


def test_tool_effects_need_an_effect() -> None:
    issues = errors([{**STDIO, "tool_effects": {"get_current_time": {"risk_level": "low"}}}])
    assert issues == ["mcp_servers[0] ('time'): field 'tool_effects.get_current_time.effect': Field required"]


def test_configs_are_immutable_values() -> None:
    config = MCPServerConfig.model_validate({**HTTP, "tool_effects": {"search": {"effect": "external"}}})
    with pytest.raises(TypeError):
        config.headers["X-Other"] = "x"  # type: ignore[index]
    with pytest.raises(TypeError):
        config.tool_effects["other"] = config.tool_effects["search"]  # type: ignore[index]
    assert MCPServerConfig.model_validate(config.model_dump()) == config
