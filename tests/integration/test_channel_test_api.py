""" "Test connection" of a channel adapter (POST /api/v1/channel/{adapter_id}/test) on the real app over
HTTP, against the local stand-in of the Slack, Feishu, WeCom and DingTalk APIs (genworker.testing.vendors,
which accepts only the credentials it was given, as the vendors do), reached through the
GENWORKER_*_API_BASE settings. Also the platforms' credential fields the console's form is built from.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.settings import load_settings
from genworker.testing.live_server import LiveServer
from genworker.testing.vendors import Vendor

CREDENTIALS = {
    "slack": {"bot_token": "xoxb-test-connection", "signing_secret": "slack-signing-secret"},
    "feishu": {"app_id": "cli_test_connection", "app_secret": "feishu-app-secret"},
    "wecom": {"corpid": "ww-test-connection", "corpsecret": "wecom-corp-secret", "agent_id": "1000002"},
    "dingtalk": {"app_key": "ding-test-connection", "app_secret": "dingtalk-app-secret"},
    "email": {"worker_address": "alice@acme.example"},
}
SECRETS = [v for section in CREDENTIALS.values() for k, v in section.items() if k != "worker_address"]
CHANNELS = "".join(f"  - type: {p}\n" for p in CREDENTIALS)
TOKEN_PATHS = {
    "slack": "/auth.test",
    "feishu": "/open-apis/auth/v3/tenant_access_token/internal",
    "wecom": "/cgi-bin/gettoken",
    "dingtalk": "/v1.0/oauth2/accessToken",
}


def persona(worker: str, channels: str) -> str:
    return (
        f"---\nidentity:\n  name: {worker.title()}\n  worker_id: {worker}\n  role: assistant\nmode: personal\n"
        f"channels:\n{channels}---\nYou are {worker}.\n"
    )


@pytest.fixture
def workspace(write_tree: Callable[[Mapping[str, str]], Path]) -> Path:
    return write_tree(
        {
            "tenants/acme/TENANT.json": '{"tenant_id": "acme", "name": "Acme", "default_worker": "alice"}',
            "tenants/acme/workers/alice/PERSONA.md": persona("alice", CHANNELS),
            "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json": json.dumps(CREDENTIALS),
            "tenants/acme/workers/bob/PERSONA.md": persona("bob", "  - type: slack\n"),
            "tenants/globex/TENANT.json": '{"tenant_id": "globex", "name": "Globex"}',
            "tenants/globex/workers/gina/PERSONA.md": persona("gina", "  - type: slack\n"),
        }
    )


@dataclass
class Setup:
    url: str
    vendor: Vendor
    workspace: Path

    def key(self, tenant: str, workers: list[str] | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {ApiKeyStore(self.workspace).create(tenant, workers)[1]}"}

    def test(self, adapter_id: str, headers: dict[str, str]) -> httpx.Response:
        return httpx.post(f"{self.url}/api/v1/channel/{adapter_id}/test", headers=headers, timeout=60)


def app_server(tmp_path: Path, workspace: Path, base: str) -> LiveServer:
    configs = tmp_path / "configs"
    configs.mkdir(exist_ok=True)
    env = {"GENWORKER_HOT_RELOAD": "false", "GENWORKER_HEARTBEAT_ENABLED": "false"}
    env |= {f"GENWORKER_{p.upper()}_API_BASE": base for p in TOKEN_PATHS}
    return LiveServer(create_app(load_settings(configs, env, workspace=workspace)))


@pytest.fixture
def setup(tmp_path: Path, workspace: Path) -> Iterator[Setup]:
    vendor = Vendor(accounts={p: c for p, c in CREDENTIALS.items() if p in TOKEN_PATHS})
    with LiveServer(vendor.app()) as stand_in, app_server(tmp_path, workspace, stand_in.url) as app:
        yield Setup(app.url, vendor, workspace)


def answer(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    assert not [s for s in SECRETS if s in response.text], "a secret in the answer"
    body: dict[str, Any] = response.json()
    return body


@pytest.mark.parametrize("platform", list(TOKEN_PATHS))
def test_good_credentials_pass_with_one_vendor_call(setup: Setup, platform: str) -> None:
    body = answer(setup.test(f"acme~alice~{platform}", setup.key("acme")))
    assert (body["status"], body["failure"], body["error"]) == ("ok", None, None)
    assert body["platform"] == platform and body["adapter_id"] == f"acme~alice~{platform}"
    assert TOKEN_PATHS[platform].endswith(body["check"])
    assert [r.path for r in setup.vendor.requests] == [TOKEN_PATHS[platform]]  # one attempt, nothing else
    if platform == "slack":
        assert body["identity"] == {
            "team": "Acme",
            "team_id": "T0001",
            "user": "genworker",
            "user_id": "U0001",
            "bot_id": "B0001",
            "url": "https://acme.slack.com/",
        }


BAD = {
    "slack": ({"bot_token": "xoxb-revoked-token"}, "invalid_auth"),
    "feishu": ({"app_secret": "feishu-wrong-secret"}, "code 10014 app secret invalid"),
    "wecom": ({"corpsecret": "wecom-wrong-secret"}, "errcode 40001 invalid credential"),
    "dingtalk": ({"app_secret": "dingtalk-wrong-secret"}, "HTTP 400 invalidClientIdOrSecret invalid appSecret"),
}


@pytest.mark.parametrize("platform", list(BAD))
def test_bad_credentials_fail_with_the_vendors_error_and_no_secret(setup: Setup, platform: str) -> None:
    """Credentials entered through the IM config API, then tested: the vendor refuses them."""
    acme = setup.key("acme")
    update, vendor_says = BAD[platform]
    put = httpx.put(
        f"{setup.url}/api/v1/workers/alice/im-config",
        json={"credentials": {platform: update}},
        headers=acme,
        timeout=60,
    )
    assert put.status_code == 200, put.text
    response = setup.test(f"acme~alice~{platform}", acme)
    body = answer(response)
    assert (body["status"], body["failure"]) == ("failed", "refused")
    assert vendor_says in body["error"]
    assert next(iter(update.values())) not in response.text


def test_a_slack_token_of_another_team_than_the_stored_team_id_fails(setup: Setup) -> None:
    acme = setup.key("acme")
    put = httpx.put(
        f"{setup.url}/api/v1/workers/alice/im-config",
        json={"credentials": {"slack": {"team_id": "T0002"}}},
        headers=acme,
    )
    assert put.status_code == 200, put.text
    body = answer(setup.test("acme~alice~slack", acme))
    assert (body["status"], body["failure"]) == ("failed", "mismatch")
    assert body["error"] == "the bot token belongs to Slack team T0001; CHANNEL_CREDENTIALS.json says team_id T0002"


def test_a_secret_the_vendor_echoes_is_masked(setup: Setup) -> None:
    echoed = {"code": 10014, "msg": f"app secret {CREDENTIALS['feishu']['app_secret']} is invalid"}
    setup.vendor.script[TOKEN_PATHS["feishu"]] = [(400, echoed, {})]
    body = answer(setup.test("acme~alice~feishu", setup.key("acme")))
    assert body["status"] == "failed"
    assert body["error"] == "feishu tenant_access_token: code 10014 app secret [redacted] is invalid"


def test_a_vendor_answering_503_is_unavailable_after_one_attempt(setup: Setup) -> None:
    setup.vendor.down[TOKEN_PATHS["wecom"]] = 503
    body = answer(setup.test("acme~alice~wecom", setup.key("acme")))
    assert (body["status"], body["failure"]) == ("failed", "unavailable")
    assert "HTTP 503" in body["error"] and "/cgi-bin/gettoken" in body["error"]
    assert len(setup.vendor.calls(TOKEN_PATHS["wecom"])) == 1  # a diagnosis: no retries


def test_an_unreachable_vendor_says_so(tmp_path: Path, workspace: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    with app_server(tmp_path, workspace, closed) as app:
        setup = Setup(app.url, Vendor(), workspace)
        body = answer(setup.test("acme~alice~dingtalk", setup.key("acme")))
    assert (body["status"], body["failure"]) == ("failed", "unreachable")
    assert body["error"].startswith("dingtalk: ConnectError calling 127.0.0.1/v1.0/oauth2/accessToken")


def test_missing_credentials_and_platforms_without_a_test(setup: Setup) -> None:
    acme = setup.key("acme")
    body = answer(setup.test("acme~bob~slack", acme))
    assert (body["status"], body["failure"]) == ("failed", "unconfigured")
    assert "CHANNEL_CREDENTIALS.json of acme/bob has no slack section" in body["error"]
    body = answer(setup.test("acme~alice~email", acme))
    assert (body["status"], body["failure"], body["check"]) == ("failed", "unconfigured", "smtp + imap login")
    assert "CHANNEL_CREDENTIALS.json of acme/alice has no email.worker_smtp_host" in body["error"]
    assert setup.vendor.requests == []


def test_a_key_tests_only_its_own_tenants_adapters(setup: Setup) -> None:
    globex, bob_only = setup.key("globex"), setup.key("acme", ["bob"])
    for headers in (globex, bob_only):
        response = setup.test("acme~alice~slack", headers)
        assert response.status_code == 404, response.text
        assert response.json()["error"]["code"] == "adapter_not_found"
    assert setup.test("acme~alice~slack", {}).status_code == 401
    assert setup.test("globex~nobody~slack", globex).status_code == 404
    assert setup.test("not-an-adapter", globex).status_code == 422
    assert setup.vendor.requests == []  # nothing reached a vendor
    assert answer(setup.test("globex~gina~slack", globex))["failure"] == "unconfigured"


def test_platforms_name_each_credential_field(setup: Setup) -> None:
    response = httpx.get(f"{setup.url}/api/v1/channel/platforms", headers=setup.key("globex"), timeout=60)
    assert response.status_code == 200, response.text
    platforms = {p["platform"]: p for p in response.json()["platforms"]}
    assert list(platforms) == ["feishu", "wecom", "dingtalk", "slack", "email"]
    assert platforms["slack"]["check"] == "auth.test" and platforms["email"]["check"] == "smtp + imap login"
    slack = {f["name"]: (f["secret"], f["required"]) for f in platforms["slack"]["fields"]}
    assert slack == {
        "bot_token": (True, True),
        "signing_secret": (True, True),
        "app_token": (True, False),
        "team_id": (False, False),
    }
    port = next(f for f in platforms["email"]["fields"] if f["name"] == "worker_smtp_port")
    assert port == {"name": "worker_smtp_port", "type": "integer", "secret": False, "required": False}
    assert httpx.get(f"{setup.url}/api/v1/channel/platforms", timeout=60).status_code == 401
