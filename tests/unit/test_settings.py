from __future__ import annotations

from pathlib import Path

import pytest

from genworker.settings import SettingsError, load_layered_env, load_settings, parse_env_file


def _configs(tmp_path: Path, **files: str) -> Path:
    configs = tmp_path / "configs"
    configs.mkdir()
    for name, text in files.items():
        (configs / name).write_text(text, encoding="utf-8")
    return configs


def test_layers_apply_in_seed_order(tmp_path: Path) -> None:
    configs = _configs(
        tmp_path,
        **{
            "config.env": "A=base\nB=base\nC=base\nD=base\n",
            "config_staging.env": "B=staging\nC=staging\nD=staging\n",
            "config_local.env": "C=local\nD=local\n",
        },
    )
    values, sources = load_layered_env(configs, {"ENVIRONMENT": "staging", "D": "process"})
    assert (values["A"], values["B"], values["C"], values["D"]) == ("base", "staging", "local", "process")
    assert sources["B"].endswith("config_staging.env")
    assert sources["C"].endswith("config_local.env")
    assert sources["D"] == "environment"


def test_env_alias_and_default_environment(tmp_path: Path) -> None:
    configs = _configs(tmp_path, **{"config_prod.env": "X=prod\n", "config_local.env": "Y=local\n"})
    values, _ = load_layered_env(configs, {"ENV": "prod"})
    assert values["ENVIRONMENT"] == "prod" and values["X"] == "prod" and values["Y"] == "local"
    values, _ = load_layered_env(configs, {})
    assert values["ENVIRONMENT"] == "local" and "X" not in values


def test_local_env_file_is_read_once_when_it_is_the_chosen_one(tmp_path: Path) -> None:
    configs = _configs(tmp_path, **{"config.env": "A=1\n", "config_local.env": "A=2\n"})
    values, sources = load_layered_env(configs, {})
    assert values["A"] == "2" and sources["A"].endswith("config_local.env")


def test_env_file_syntax(tmp_path: Path) -> None:
    path = tmp_path / "x.env"
    path.write_text('# c\nexport A="quoted # kept"\nB=plain # comment\nC=\n\n', encoding="utf-8")
    assert parse_env_file(path) == {"A": "quoted # kept", "B": "plain", "C": ""}
    path.write_text("A=1\nnot a pair\n", encoding="utf-8")
    with pytest.raises(SettingsError, match=r"x\.env:2: expected KEY=VALUE"):
        parse_env_file(path)


def test_typed_settings(tmp_path: Path) -> None:
    configs = _configs(tmp_path, **{"config.env": "HTTP_PORT=9000\nGENWORKER_WORKSPACE=ws\n"})
    settings = load_settings(configs, {"WORKER_GOVERNANCE_REQUIRED": "yes", "LOG_LEVEL": "debug"})
    assert settings.http_port == 9000
    assert settings.workspace == (tmp_path / "ws").resolve()
    assert settings.governance_required is True
    assert settings.log_level == "DEBUG"
    assert settings.profile == "local" and settings.redis_url is None


def test_bad_values_name_the_key_and_the_file(tmp_path: Path) -> None:
    configs = _configs(tmp_path, **{"config_local.env": "HTTP_PORT=eighty\n"})
    with pytest.raises(SettingsError, match=r"HTTP_PORT='eighty' \(from .*config_local\.env\): must be an integer"):
        load_settings(configs, {})
    with pytest.raises(SettingsError, match=r"WORKER_GOVERNANCE_REQUIRED='maybe' .*environment.*true or false"):
        load_settings(configs, {"HTTP_PORT": "1", "WORKER_GOVERNANCE_REQUIRED": "maybe"})
    with pytest.raises(SettingsError, match="between 1 and 65535"):
        load_settings(configs, {"HTTP_PORT": "70000"})


def test_profile_follows_redis_and_warns_on_disagreement(tmp_path: Path) -> None:
    configs = _configs(tmp_path)
    shared = load_settings(configs, {"REDIS_URL": "redis://x:6379/0"})
    assert shared.profile == "shared" and shared.redis_url == "redis://x:6379/0" and not shared.warnings
    local = load_settings(configs, {"REDIS_URL": "redis://x:6379/0", "GENWORKER_PROFILE": "local"})
    assert local.redis_url is None and "Redis is not used" in local.warnings[0]
    lonely = load_settings(configs, {"GENWORKER_PROFILE": "shared"})
    assert "REDIS_URL is not set" in lonely.warnings[0]


def test_secrets_stay_out_of_repr(tmp_path: Path) -> None:
    settings = load_settings(_configs(tmp_path), {"GENWORKER_ADMIN_TOKEN": "tok-123", "GENWORKER_LLM_API_KEY": "sk-9"})
    assert "tok-123" not in repr(settings) and "sk-9" not in repr(settings)
    assert settings.get("GENWORKER_LLM_API_KEY") == "sk-9"


def test_component_flags_and_numbers_name_the_key_when_wrong(tmp_path: Path) -> None:
    env = {"GENWORKER_WRITE_JOURNAL": "off", "GENWORKER_WRITE_JOURNAL_CHECKPOINT_S": "0", "BAD_FLAG": "maybe"}
    settings = load_settings(_configs(tmp_path), env)
    assert settings.flag("GENWORKER_WRITE_JOURNAL", True) is False
    assert settings.flag("UNSET_FLAG", True) is True
    with pytest.raises(SettingsError, match=r"BAD_FLAG='maybe' \(from .*\): must be true or false"):
        settings.flag("BAD_FLAG", True)
    with pytest.raises(SettingsError, match=r"GENWORKER_WRITE_JOURNAL_CHECKPOINT_S='0': must be between 0.01 and 3600"):
        settings.number("GENWORKER_WRITE_JOURNAL_CHECKPOINT_S", 0.5, 0.01, 3600)
