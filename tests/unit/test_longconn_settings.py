"""Long connections' settings: the reconnect backoff (with upstream's `features` keys) and the
credentials as the vendors name them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from genworker.channels.longconn import settings_backoff
from genworker.channels.longconn.link import Backoff
from genworker.workspace.models.credentials import DingTalkCredentials, SlackCredentials


def test_the_delay_doubles_with_each_failure_up_to_the_cap() -> None:
    steady = Backoff(base_s=1, max_s=10, max_exponent=10, jitter=0)
    assert [steady.delay(n) for n in range(6)] == [1, 2, 4, 8, 10, 10]
    assert Backoff(base_s=1, max_s=100, max_exponent=2, jitter=0).delay(5) == 4
    jittered = Backoff(base_s=10, max_s=10, jitter=0.2)
    assert all(8 <= jittered.delay(3) <= 12 for _ in range(50))


def test_a_binding_sets_its_own_backoff_as_upstream_reads_it() -> None:
    default = Backoff(base_s=1, max_s=60, max_exponent=10, jitter=0.2)
    features = {
        "reconnect_backoff_base_seconds": "2",
        "reconnect_max_delay": 30,
        "reconnect_max_retries": 3,
        "reconnect_jitter_ratio": 0,
    }
    assert default.with_features(features) == Backoff(base_s=2, max_s=30, max_exponent=3, jitter=0)
    assert default.with_features({"reconnect_base_delay": 90}).max_s == 90  # never below the base
    ignored = {
        "reconnect_backoff_base_seconds": "soon",
        "reconnect_backoff_max_seconds": -1,
        "reconnect_max_retries": True,
    }
    assert default.with_features(ignored) == default


def test_settings_give_the_default_backoff() -> None:
    values = {"GENWORKER_LONGCONN_BACKOFF_BASE_S": 0.5, "GENWORKER_LONGCONN_BACKOFF_MAX_S": 0.1}
    backoff = settings_backoff(lambda key, default, low, high: values.get(key, default))
    assert (backoff.base_s, backoff.max_s) == (0.5, 0.5)


def test_dingtalk_client_id_and_secret_as_the_console_names_them() -> None:
    creds = DingTalkCredentials.model_validate({"client_id": "dingabc", "client_secret": "s3"})
    assert (creds.app_key.get_secret_value(), creds.app_secret.get_secret_value()) == ("dingabc", "s3")
    assert {"app_key", "client_id", "app_secret", "client_secret", "robot_code"} == DingTalkCredentials.accepted_keys()


def test_a_slack_app_token_must_be_an_app_level_token() -> None:
    base = {"bot_token": "xoxb-1", "signing_secret": "s"}
    assert SlackCredentials.model_validate({**base, "app_token": "xapp-1-A1-2-x"}).app_token is not None
    with pytest.raises(ValidationError, match="an app-level token starts with xapp-") as caught:
        SlackCredentials.model_validate({**base, "app_token": "xoxb-wrong-place"})
    assert "xoxb-wrong-place" not in str(caught.value)  # the secret is never echoed
