from typing import Any

import pytest
from pydantic import SecretStr, ValidationError

from genworker.workspace.models import ChannelCredentials

ALL_PLATFORMS: dict[str, dict[str, Any]] = {
    "feishu": {"app_id": "cli_SECRET_1", "app_secret": "SECRET_2", "encrypt_key": "SECRET_3"},
    "wecom": {"corpid": "SECRET_4", "corpsecret": "SECRET_5", "agent_id": "SECRET_6"},
    "dingtalk": {"app_key": "SECRET_7", "app_secret": "SECRET_8"},
    "slack": {"bot_token": "xoxb-SECRET_9", "signing_secret": "SECRET_10"},
    "email": {"worker_address": "iris@acme.example", "worker_password": "SECRET_11", "owner_password": "SECRET_12"},
}


def test_every_platform_parses_into_secrets() -> None:
    creds = ChannelCredentials.model_validate(ALL_PLATFORMS)
    assert creds.platforms() == ["feishu", "wecom", "dingtalk", "slack", "email"]
    assert creds.feishu is not None
    assert isinstance(creds.feishu.app_secret, SecretStr)
    assert creds.feishu.app_secret.get_secret_value() == "SECRET_2"
    assert creds.email is not None
    assert creds.email.worker_imap_port == 993


def test_secrets_never_appear_in_repr_str_or_json() -> None:
    creds = ChannelCredentials.model_validate(ALL_PLATFORMS)
    for shown in (repr(creds), str(creds), creds.model_dump_json(), str(creds.model_dump()), repr(creds.slack)):
        assert "SECRET" not in shown
    assert str(creds) == "ChannelCredentials(platforms=['feishu', 'wecom', 'dingtalk', 'slack', 'email'])"


def test_empty_credentials() -> None:
    assert ChannelCredentials().platforms() == []


@pytest.mark.parametrize(
    "data",
    [
        {"slack": {"bot_token": "xoxb-SECRET", "signing_secret": ["SECRET"]}},
        {"slack": {"bot_token": 12345678}},  # a number is text (redacted); signing_secret is missing
        {"feishu": {"app_id": "SECRET"}},
        {"email": {"worker_address": "a@b", "worker_imap_port": "SECRET"}},
        {"wecom": "SECRET"},
    ],
)
def test_validation_errors_do_not_show_secret_input(data: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as caught:
        ChannelCredentials.model_validate(data)
    assert "SECRET" not in str(caught.value)
    assert "12345678" not in str(caught.value)
    assert all("SECRET" not in err["msg"] for err in caught.value.errors())


def test_unknown_keys_are_dropped() -> None:
    creds = ChannelCredentials.model_validate(
        {"slack": {"bot_token": "t", "signing_secret": "s", "stray": "SECRET"}, "pager": {"key": "SECRET"}}
    )
    assert creds.platforms() == ["slack"]
    assert "SECRET" not in repr(creds)
    assert creds.model_extra is None
    assert creds.slack is not None
    assert creds.slack.model_extra is None
